"""Measured results as data: a study's ``results.json`` written atomically, each row stamped with the commit, and
the Markdown tables rendered from it into marked blocks of a README.

    >>> path = write_results(tmp_path / "x.json", {"runs": [{"seed": 0, "commit": git_commit()}]})  # doctest: +SKIP
    >>> render_block("experiments/main_job_seeds/README.md", "results", table_text)   # doctest: +SKIP

Used by the studies in ``experiments/`` (each one's table script), so a README table and its JSON come from one
writer, and a test can check that they still agree (``render_block(..., check=True)``).
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

    >>> repo_relative(ROOT / "experiments" / "main_job_seeds" / "results.json")
    'experiments/main_job_seeds/results.json'
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


def render_block(path: str | os.PathLike, name: str, text: str, check: bool = False) -> bool:
    """Put ``text`` between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in the Markdown file at ``path``.

    Returns whether the block already held ``text``; with ``check`` nothing is written (a test's way to keep a
    README equal to its JSON). A file without the markers is an error that names them.

        render_block("experiments/x/README.md", "results", table_text)              # rewrite the block
        same = render_block("experiments/x/README.md", "results", table_text, check=True)  # or only compare
    """
    path = pathlib.Path(path)
    page = path.read_text()
    begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"
    if begin not in page or end not in page:
        raise ValueError(f"{path} has no block {begin.strip()} ... {end}: add both markers where the table goes")
    head, rest = page.split(begin, 1)
    old, tail = rest.split(end, 1)
    text = text if text.endswith("\n") else text + "\n"
    if old == text:
        return True
    if not check:
        atomic_write_text(path, head + begin + text + end + tail)
    return False
