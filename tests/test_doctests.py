"""The ``>>>`` examples in vla_gym's docstrings run, so that the usage a docstring shows stays true.

One test per module of ``vla_gym`` (namespace folders such as ``vla_gym/backends`` included),
``vla_gym.wrappers`` and ``vla_gym.trainers``. Examples that need a simulator scene, a download or a long
run are marked ``# doctest: +SKIP`` in the docstring; everything else runs here, in a fraction of a second
each. A module whose import needs a package that is not installed is skipped, naming the package.

    python3 -m pytest tests/test_doctests.py -q
"""
from __future__ import annotations

import doctest
import importlib
import pathlib

import pytest

ROOTS = ("vla_gym", "vla_gym.wrappers", "vla_gym.trainers")


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
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    failed = attempted = 0
    for test in finder.find(module, name):
        result = runner.run(test, out=report.append)
        failed, attempted = failed + result.failed, attempted + result.attempted
    assert failed == 0, f"{failed} of {attempted} examples failed in {name}:\n" + "".join(report)
