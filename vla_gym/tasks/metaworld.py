"""Meta-World's 50 Sawyer tasks and its benchmark sets, with instructions from ``assets/`` (no metaworld import).

    >>> from vla_gym.tasks.metaworld import task_specs, BENCHMARKS
    >>> spec = task_specs(["push"])[0]
    >>> spec.instruction, spec.max_episode_steps, spec.extra["metaworld_name"]
    ('push the puck to the green goal', 500, 'push-v3')
    >>> {name: len(tasks) for name, tasks in BENCHMARKS.items()}
    {'MT10': 10, 'MT50': 50, 'ML10-train': 10, 'ML10-test': 5, 'ML45-train': 45, 'ML45-test': 5}

Ids: ``VLA/MetaWorld-<task>-v0`` for each task, ``<task>`` being Meta-World's own name without its ``-v3``
suffix (``VLA/MetaWorld-button-press-topdown-v0`` runs Meta-World's ``button-press-topdown-v3``), and one
multi-task id per benchmark set: ``VLA/MetaWorldMT10-v0``, ``VLA/MetaWorldMT50-v0``,
``VLA/MetaWorldML10-train-v0``, ``VLA/MetaWorldML10-test-v0``, ``VLA/MetaWorldML45-train-v0``,
``VLA/MetaWorldML45-test-v0`` (a task is drawn per reset unless ``task_id`` is given). The ML ids hide the goal
position from ``obs_mode="state"`` observations, as Meta-World's ML benchmarks do.

The task lists below are Meta-World 3.1.1's (``metaworld.env_dict``: ``MT10_V3``, ``MT50_V3``, ``ML10_V3``,
``ML45_V3``), in its order; ``tests/test_metaworld.py`` checks them against the installed package.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources

import yaml

from vla_gym.backends.base import TaskSpec
from vla_gym.core.env_entry import EnvEntry

SUITE = "metaworld"
#: the metaworld release vla_gym runs (it pins mujoco==3.3.0, the MuJoCo LIBERO runs on too; docs/metaworld.md)
REQUIREMENT = "metaworld==3.1.1"
#: how to install it (the pip extra brings it with its MuJoCo)
INSTALL_COMMAND = 'pip install "vla-gym[metaworld]"'
#: Meta-World's episode limit (``SawyerXYZEnv.max_path_length``, the same for every task)
MAX_EPISODE_STEPS = 500
SUFFIX = "-v3"

#: every task, in Meta-World's MT50 order (``metaworld.env_dict.ALL_V3_ENVIRONMENTS``), without ``-v3``
TASKS: tuple[str, ...] = (
    "assembly", "basketball", "bin-picking", "box-close", "button-press-topdown", "button-press-topdown-wall",
    "button-press", "button-press-wall", "coffee-button", "coffee-pull", "coffee-push", "dial-turn", "disassemble",
    "door-close", "door-lock", "door-open", "door-unlock", "hand-insert", "drawer-close", "drawer-open",
    "faucet-open", "faucet-close", "hammer", "handle-press-side", "handle-press", "handle-pull-side", "handle-pull",
    "lever-pull", "pick-place-wall", "pick-out-of-hole", "pick-place", "plate-slide", "plate-slide-side",
    "plate-slide-back", "plate-slide-back-side", "peg-insert-side", "peg-unplug-side", "soccer", "stick-push",
    "stick-pull", "push", "push-wall", "push-back", "reach", "reach-wall", "shelf-place", "sweep-into", "sweep",
    "window-open", "window-close",
)
MT10: tuple[str, ...] = (
    "reach", "push", "pick-place", "door-open", "drawer-open", "drawer-close", "button-press-topdown",
    "peg-insert-side", "window-open", "window-close",
)
ML10_TRAIN: tuple[str, ...] = (
    "reach", "push", "pick-place", "door-open", "drawer-close", "button-press-topdown", "peg-insert-side",
    "window-open", "sweep", "basketball",
)
ML10_TEST: tuple[str, ...] = ("drawer-open", "door-close", "shelf-place", "sweep-into", "lever-pull")
ML45_TEST: tuple[str, ...] = ("bin-picking", "box-close", "hand-insert", "door-lock", "door-unlock")
#: Meta-World's ML45 train order (not MT50's)
ML45_TRAIN: tuple[str, ...] = (
    "assembly", "basketball", "button-press-topdown", "button-press-topdown-wall", "button-press",
    "button-press-wall", "coffee-button", "coffee-pull", "coffee-push", "dial-turn", "disassemble", "door-close",
    "door-open", "drawer-close", "drawer-open", "faucet-open", "faucet-close", "hammer", "handle-press-side",
    "handle-press", "handle-pull-side", "handle-pull", "lever-pull", "pick-place-wall", "pick-out-of-hole",
    "push-back", "pick-place", "plate-slide", "plate-slide-side", "plate-slide-back", "plate-slide-back-side",
    "peg-insert-side", "peg-unplug-side", "soccer", "stick-push", "stick-pull", "push-wall", "push", "reach-wall",
    "reach", "shelf-place", "sweep-into", "sweep", "window-open", "window-close",
)
#: benchmark set -> its tasks (the multi-task ids)
BENCHMARKS: dict[str, tuple[str, ...]] = {
    "MT10": MT10, "MT50": TASKS, "ML10-train": ML10_TRAIN, "ML10-test": ML10_TEST,
    "ML45-train": ML45_TRAIN, "ML45-test": ML45_TEST,
}
ENTRY_POINT = "vla_gym.backends.metaworld.env:MetaWorldEnv"


def env_id(name: str) -> str:
    return f"VLA/MetaWorld-{name}-v0"


def benchmark_id(benchmark: str) -> str:
    return f"VLA/MetaWorld{benchmark}-v0"


def metaworld_name(name: str) -> str:
    """Meta-World's env name of a task (``push`` -> ``push-v3``)."""
    return name + SUFFIX


@functools.cache
def _instructions() -> dict:
    text = resources.files("vla_gym.assets").joinpath("metaworld_instructions.yaml").read_text()
    return yaml.safe_load(text)


def task_specs(names: Sequence[str]) -> tuple[TaskSpec, ...]:
    """TaskSpecs for ``names`` (entries of :data:`TASKS`), indexed from 0 in the given order."""
    unknown = [name for name in names if name not in TASKS]
    if unknown or not names:
        hint = [n.removesuffix(SUFFIX) for n in unknown if n.removesuffix(SUFFIX) in TASKS]
        fix = f" (without the -v3 suffix: {hint})" if hint else ""
        raise ValueError(f"unknown Meta-World tasks {unknown}{fix}; choose from {list(TASKS)}")
    return tuple(
        TaskSpec(index=index, suite=SUITE, name=name, instruction=_instructions()[metaworld_name(name)],
                 max_episode_steps=MAX_EPISODE_STEPS, extra={"metaworld_name": metaworld_name(name)})
        for index, name in enumerate(names)
    )


def env_entries() -> list[EnvEntry]:
    """Registry rows: one id per task plus one per benchmark set (called by :mod:`vla_gym.core.registry`)."""
    rows = [(env_id(name), (name,), {}) for name in TASKS]
    rows += [(benchmark_id(bench), names, {"goal_observable": False} if bench.startswith("ML") else {})
             for bench, names in BENCHMARKS.items()]
    return [
        EnvEntry(row_id, "metaworld", ENTRY_POINT, len(names), requires="metaworld", extra="metaworld",
                 kwargs={"tasks": names, **extra})
        for row_id, names, extra in rows
    ]
