"""System packages that headless rendering needs, checked and (as root) installed.

MuJoCo (LIBERO) renders through EGL; SAPIEN (ManiSkill3) needs a Vulkan device even for state-only
observations, and Debian 12's own lavapipe is too old, so Mesa comes from bookworm-backports.
This file is stdlib-only so that ``scripts/setup.sh`` can run it before anything is installed::

    python3 vla_gym/runtime/system.py --check      # exit 1 and print the commands if something is missing
    python3 vla_gym/runtime/system.py --install    # install what is missing (root, Debian/Ubuntu)
"""
from __future__ import annotations

import ctypes.util
import glob
import os
import shutil
import subprocess
import sys

#: the one place the apt commands are written down; error messages print them verbatim
ENABLE_BACKPORTS = (
    "sed -i 's/^Suites: bookworm bookworm-updates$/Suites: bookworm bookworm-updates bookworm-backports/' "
    "/etc/apt/sources.list.d/debian.sources"
)
APT_PACKAGES = ["mesa-vulkan-drivers", "libvulkan1", "libegl1", "libegl-mesa0", "libgl1-mesa-dri", "libosmesa6"]
INSTALL_COMMANDS = [
    ENABLE_BACKPORTS,
    "apt-get update",
    "DEBIAN_FRONTEND=noninteractive apt-get install -y -t bookworm-backports " + " ".join(APT_PACKAGES),
]
MIN_MESA_MAJOR = 23  # lavapipe older than this is rejected by SAPIEN


def install_hint() -> str:
    return "Install the rendering packages (as root, Debian 12) with:\n    " + " && \\\n    ".join(INSTALL_COMMANDS)


def _mesa_major() -> int | None:
    if not shutil.which("dpkg-query"):
        return None
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "mesa-vulkan-drivers"], capture_output=True, text=True
    )
    if out.returncode != 0 or not out.stdout:
        return None
    version = out.stdout.split(":")[-1]
    try:
        return int(version.split(".")[0])
    except ValueError:
        return None


def _has_nvidia_vulkan() -> bool:
    patterns = ["/usr/share/vulkan/icd.d/nvidia*.json", "/etc/vulkan/icd.d/nvidia*.json",
                "/usr/local/nvidia/share/vulkan/icd.d/*.json"]
    return any(glob.glob(p) for p in patterns)


def missing_rendering_pieces() -> list[str]:
    """What is missing for EGL (MuJoCo) and Vulkan (SAPIEN) rendering; empty when all is there."""
    missing = []
    if ctypes.util.find_library("EGL") is None:
        missing.append("EGL (libegl1, libegl-mesa0) for MuJoCo's MUJOCO_GL=egl")
    if ctypes.util.find_library("vulkan") is None:
        missing.append("the Vulkan loader (libvulkan1) for SAPIEN")
    if not _has_nvidia_vulkan():
        major = _mesa_major()
        if major is None or major < MIN_MESA_MAJOR:
            found = "none" if major is None else f"Mesa {major}"
            missing.append(f"a Vulkan driver: lavapipe from Mesa >= {MIN_MESA_MAJOR} (found {found}) or NVIDIA's")
    return missing


def install_rendering_packages() -> None:
    """Run INSTALL_COMMANDS (root on Debian 12); raise with the commands otherwise."""
    if os.geteuid() != 0:
        raise PermissionError("not root: run these commands with sudo\n" + install_hint())
    if not os.path.exists("/etc/apt/sources.list.d/debian.sources"):
        raise RuntimeError("not a Debian 12 apt layout; install Mesa >= 23 Vulkan/EGL drivers yourself.\n" + install_hint())
    for command in INSTALL_COMMANDS:
        print("+", command, flush=True)
        subprocess.run(command, shell=True, check=True)


def configure_mujoco_gl() -> None:
    """Default MuJoCo to headless EGL unless the user chose a backend."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    if os.environ["MUJOCO_GL"] in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])


def main(argv: list[str]) -> int:
    missing = missing_rendering_pieces()
    if not missing:
        print("rendering packages: ok")
        return 0
    print("missing for headless rendering:\n  - " + "\n  - ".join(missing))
    if "--install" in argv:
        install_rendering_packages()
        still = missing_rendering_pieces()
        if still:
            print("still missing after install: " + "; ".join(still))
            return 1
        print("rendering packages: installed")
        return 0
    print(install_hint())
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
