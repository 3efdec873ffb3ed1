"""The ``>>>`` examples in vla_gym's docstrings run, so that the usage a docstring shows stays true.

One test per module of ``vla_gym`` (namespace folders such as ``vla_gym/backends`` included),
``vla_gym.wrappers`` and ``vla_gym.trainers``, and per script of ``scripts/``, ``benchmarks/`` and ``experiments/<study>/`` that has examples
(loaded from its file, ``__main__`` not run). Examples that need a simulator scene, a download or a long
run are marked ``# doctest: +SKIP`` in the docstring; everything else runs here, in a fraction of a second
each. A module whose import needs a package that is not installed is skipped, naming the package.

    python3 -m pytest tests/test_doctests.py -q
"""
from __future__ import annotations

import doctest
import importlib
import importlib.util
import pathlib
import sys

import pytest

ROOTS = ("vla_gym", "vla_gym.wrappers", "vla_gym.trainers")
REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPTS = sorted(str(path.relative_to(REPO)) for pattern in ("scripts/*.py", "benchmarks/*.py", "experiments/*/*.py")
                 for path in REPO.glob(pattern) if ">>>" in path.read_text())


def module_names() -> list[str]:
    """Every module under the roots, found from the files (pkgutil skips folders without ``__init__.py``)."""
    names = set()
    for root in ROOTS:
        for directory in importlib.import_module(root).__path__:
            base = pathlib.Path(directory)
            for path in base.rglob("*.py"):
                parts = path.relative_to(base).with_suffix("").parts
                if "__pycache__" in parts:
                    continue
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                names.add(".".join((root, *parts)))
    return sorted(names)


@pytest.mark.parametrize("name", module_names())
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        pytest.skip(f"{name} needs {exc.name}, which is not installed")
    run_examples(module, name)


@pytest.mark.parametrize("path", SCRIPTS)
def test_script_docstring_examples_run(path, monkeypatch):
    monkeypatch.syspath_prepend(str((REPO / path).parent))  # a script imports its folder's helpers by name
    name = pathlib.Path(path).stem
    spec = importlib.util.spec_from_file_location(f"_doctest_{name}", REPO / path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        pytest.skip(f"{path} needs {exc.name}, which is not installed")
    run_examples(module, name)


def run_examples(module, name: str) -> None:
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    failed = attempted = 0
    for test in finder.find(module, name):
        result = runner.run(test, out=report.append)
        failed, attempted = failed + result.failed, attempted + result.attempted
    assert failed == 0, f"{failed} of {attempted} examples failed in {name}:\n" + "".join(report)
