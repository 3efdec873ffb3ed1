"""The package's import graph: no circles, not even ones closed by an import inside a function.

A module may import another inside a function only to defer an optional simulator or a heavy library
(torch, pyarrow, ...); such an import must never close a loop. Each module also imports on its own in a
fresh interpreter, in an order where nothing it needs was imported first.
"""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: source folder -> the package name it installs as (setup.py's package_dir)
FOLDERS = {"vla_gym": "vla_gym", "wrappers": "vla_gym.wrappers", "trainers": "vla_gym.trainers"}




def _modules() -> dict[str, pathlib.Path]:
    modules = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


def _targets(node: ast.AST, modules: dict[str, pathlib.Path]) -> set[str]:
    """Internal modules an import statement loads (``from a import b`` is ``a.b`` where that is a module)."""
    names = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return {name for name in names if name in modules}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        edges = set()
        for node in ast.walk(tree):
            edges |= _targets(node, modules)
        # a package's __init__ runs before any of its modules: an edge to each parent package
        graph[name] = {t for t in edges if t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles_even_through_function_level_imports():
    graph = import_graph()
    # a package importing its own submodules (re-exports) is not a loop unless a submodule imports it back
    assert _cycles(graph) == []


def test_every_module_imports_fresh_in_reverse_dependency_order():
    modules = sorted(_modules(), reverse=True)
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.quick
def test_every_trainer_shares_one_base():
    """PPO, GRPO, SFT and residual RL run the loop, the checkpoint format, resume and evaluation of one base
    (trainers/runtime/trainer.py) and supply only what is theirs."""
    from vla_gym.trainers.grpo import GRPO
    from vla_gym.trainers.ppo import PPO
    from vla_gym.trainers.residual import ResidualRL
    from vla_gym.trainers.runtime.trainer import Trainer
    from vla_gym.trainers.sft import SFT

    shared = ("learn", "state_dict", "load_state", "save_checkpoint", "evaluate", "record_videos", "close")
    for cls in (PPO, GRPO, SFT, ResidualRL):
        assert issubclass(cls, Trainer)
        for klass in cls.__mro__[:cls.__mro__.index(Trainer)]:
            # OnPolicyAlgorithm.learn only takes SB3's total_timesteps argument before the base's loop
            own = [name for name in shared if name in vars(klass) and (klass.__name__, name) != ("OnPolicyAlgorithm",
                                                                                                "learn")]
            assert not own, f"{klass.__name__} writes its own {own}: the base's are shared"
