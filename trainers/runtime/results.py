"""Measured results as data: ``docs/results/*.json`` files written atomically, each row stamped with the commit.

    >>> path = write_results(tmp_path / "x.json", {"runs": [{"seed": 0, "commit": git_commit()}]})  # doctest: +SKIP

Used by the scripts that measure a table (``scripts/libero_rl_table.py``, ``scripts/main_job_runs.py``,
``scripts/noise_sweep.py``), so a README/docs table and its JSON come from one writer.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
from typing import Any

from vla_gym.trainers.runtime.checkpoint import atomic_write_text

ROOT = pathlib.Path(__file__).resolve().parents[2]


def git_commit(root: str | os.PathLike = ROOT) -> str:
    """The short hash of ``root``'s checked-out commit.

    Outside a git checkout (a copy of the tree sent to another machine) it is ``$VLA_GYM_COMMIT`` when set, else
    "unknown".
    """
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=False).stdout.strip()
    except FileNotFoundError:  # no git on this machine
        out = ""
    return out or os.environ.get("VLA_GYM_COMMIT", "unknown")


def repo_relative(path: str | os.PathLike | None) -> str | None:
    """``path`` relative to the repository when it lies inside it (as results name their files), else as given.

    >>> repo_relative(ROOT / "docs" / "results" / "x.json")
    'docs/results/x.json'
    """
    if path is None:
        return None
    resolved = pathlib.Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


def write_results(path: str | os.PathLike, data: dict[str, Any]) -> pathlib.Path:
    """``data`` as indented JSON at ``path`` (parents created), through a temporary file and a rename."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, json.dumps(data, indent=1) + "\n")
