"""The repository is the product, with its studies beside it: what git tracks, the README as a product page, and
the results tables equal to their JSON.

- the tracked tree stays under 40 MB, and a tracked file over 5 MB is one of the models the README names;
- README.md is at most 250 lines; its results table has at most 10 rows of cells of at most 250 characters, and is
  what ``scripts/render_results.py`` renders from the results JSON (so is docs/benchmarks.md's headline table);
- every study in ``experiments/`` has a README and a results JSON; the product (``vla_gym/``, ``trainers/``,
  ``wrappers/``) imports nothing from ``experiments/`` and names no study script on its import path;
- docs/ and README.md carry no work log (numbered sessions).
"""
from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_TREE_MB = 40
MAX_FILE_MB = 5

pytestmark = pytest.mark.quick


def tracked_files() -> list[pathlib.Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.stdout.split("\0") if name and (ROOT / name).is_file()]


def test_the_tracked_tree_is_small():
    sizes = {path: path.stat().st_size for path in tracked_files()}
    total = sum(sizes.values()) / 2**20
    assert total <= MAX_TREE_MB, (f"the tracked tree is {total:.1f} MB (at most {MAX_TREE_MB}): run output belongs "
                                  "in runs/ (git-ignored), models only when the README names them")
    named = README.read_text()
    big = [path for path, size in sizes.items() if size > MAX_FILE_MB * 2**20]
    unnamed = [str(path.relative_to(ROOT)) for path in big if path.suffix != ".pt" or path.name not in named]
    assert not unnamed, f"tracked files over {MAX_FILE_MB} MB that are not models the README names: {unnamed}"


def results_table() -> list[str]:
    text = README.read_text()
    block = text.split("<!-- results:begin -->\n", 1)[1].split("<!-- results:end -->", 1)[0]
    return [line for line in block.splitlines() if line.startswith("|")][2:]  # header and rule dropped


def test_the_readme_is_a_product_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines (at most 250): details go to docs/ or experiments/"
    rows = results_table()
    assert 0 < len(rows) <= 10, f"the README's results table has {len(rows)} rows (at most 10)"
    for row in rows:
        for cell in row.strip("|").split(" | "):
            assert len(cell) <= 250, f"a README results cell of {len(cell)} characters (at most 250): {cell[:80]}..."
    first_screen = "\n".join(lines[:40])
    for command in ("torchrun --nproc_per_node=2 trainers/ppo.py --config examples/configs/maniskill_pushcube_ppo.yaml",
                    "python3 -m pytest"):
        assert command in first_screen, f"the README's first screen lacks {command!r}"


def test_the_results_tables_equal_their_json():
    result = subprocess.run([sys.executable, "scripts/render_results.py", "--check"], cwd=ROOT, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, f"{result.stdout}{result.stderr}\nrun: python scripts/render_results.py"


def test_every_study_has_a_readme_and_results():
    studies = [path for path in (ROOT / "experiments").iterdir() if path.is_dir() and not path.name.startswith(("_", "."))]
    assert studies
    for study in studies:
        assert (study / "README.md").is_file(), f"{study.name}: a study needs its README.md"
        assert list(study.rglob("*.json")) or list(study.rglob("*.jsonl")), f"{study.name}: no results JSON"


def test_the_product_imports_no_study():
    for folder in ("vla_gym", "trainers", "wrappers"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                assert not any(name.split(".")[0] in ("experiments", "benchmarks", "scripts") for name in names), (
                    f"{path.relative_to(ROOT)} imports {names}: the product never imports a study or a script")
            text = path.read_text()
            assert "sys.path" not in text or "experiments" not in text, f"{path.relative_to(ROOT)} reaches a study"


def test_docs_carry_no_work_log():
    pages = [README, *(ROOT / "docs").glob("*.md")]
    for page in pages:
        hits = re.findall(r"\bsessions? \d+|\bSession \d+", page.read_text())
        assert not hits, f"{page.relative_to(ROOT)} names work sessions {hits[:3]}: docs say what is true now"
