"""ManiSkill3's single-arm Panda table-top tasks, with instructions from ``assets/`` (no mani_skill import).

    >>> from vla_gym.tasks.maniskill import task_specs, TABLETOP
    >>> spec = task_specs(["PickCube"])[0]
    >>> spec.instruction, spec.max_episode_steps, spec.extra["maniskill_id"]
    ('pick up the red cube and move it to the green sphere', 50, 'PickCube-v1')
    >>> len(TABLETOP)
    12

Ids: ``VLA/ManiSkill-<Task>-v0`` for every task below, and ``VLA/ManiSkillTabletop-v0`` with the
twelve tasks that need no download (a task is drawn per reset unless ``task_id`` is given).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources

import yaml

from vla_gym.backends.base import TaskSpec
from vla_gym.core.env_entry import EnvEntry

SUITE = "maniskill"
#: task name -> (ManiSkill env id, ManiSkill's episode limit, asset download ids it needs)
TASKS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "PickCube": ("PickCube-v1", 50, ()),
    "PushCube": ("PushCube-v1", 50, ()),
    "PullCube": ("PullCube-v1", 50, ()),
    "StackCube": ("StackCube-v1", 50, ()),
    "PokeCube": ("PokeCube-v1", 50, ()),
    "PlaceSphere": ("PlaceSphere-v1", 50, ()),
    "LiftPegUpright": ("LiftPegUpright-v1", 50, ()),
    "PegInsertionSide": ("PegInsertionSide-v1", 100, ()),
    "PullCubeTool": ("PullCubeTool-v1", 100, ()),
    "PlugCharger": ("PlugCharger-v1", 200, ()),
    "StackPyramid": ("StackPyramid-v1", 250, ()),
    "RollBall": ("RollBall-v1", 80, ()),
    # these need `python -m mani_skill.utils.download_asset <ManiSkill id>` first
    "PickSingleYCB": ("PickSingleYCB-v1", 50, ("ycb",)),
    "PickClutterYCB": ("PickClutterYCB-v1", 100, ("ycb", "pick_clutter_ycb_configs")),
    "TurnFaucet": ("TurnFaucet-v1", 200, ("partnet_mobility_faucet",)),
    "AssemblingKits": ("AssemblingKits-v1", 200, ("assembling_kits",)),
}
#: the tasks that run offline, in the order of the multi-task id
TABLETOP: tuple[str, ...] = tuple(name for name, (_, _, downloads) in TASKS.items() if not downloads)
MULTI_TASK_ID = "VLA/ManiSkillTabletop-v0"
ENTRY_POINT = "vla_gym.backends.maniskill.env:ManiSkillEnv"


def env_id(name: str) -> str:
    return f"VLA/ManiSkill-{name}-v0"


@functools.cache
def _instructions() -> dict:
    text = resources.files("vla_gym.assets").joinpath("maniskill_instructions.yaml").read_text()
    return yaml.safe_load(text)


def task_specs(names: Sequence[str]) -> tuple[TaskSpec, ...]:
    """TaskSpecs for ``names`` (keys of :data:`TASKS`), indexed from 0 in the given order."""
    unknown = [name for name in names if name not in TASKS]
    if unknown or not names:
        raise ValueError(f"unknown ManiSkill tasks {unknown}; choose from {list(TASKS)}")
    specs = []
    for index, name in enumerate(names):
        maniskill_id, max_steps, downloads = TASKS[name]
        text = _instructions()[maniskill_id]
        specs.append(TaskSpec(
            index=index, suite=SUITE, name=name, instruction=text["instruction"],
            max_episode_steps=max_steps, paraphrases=tuple(text.get("paraphrases", ())),
            extra={"maniskill_id": maniskill_id, "downloads": downloads},
        ))
    return tuple(specs)


def env_entries() -> list[EnvEntry]:
    """Registry rows: one id per task plus the multi-task id (called by :mod:`vla_gym.core.registry`)."""
    rows = [(env_id(name), (name,)) for name in TASKS] + [(MULTI_TASK_ID, TABLETOP)]
    return [
        EnvEntry(row_id, "maniskill", ENTRY_POINT, len(names), requires="mani_skill", extra="maniskill",
                 kwargs={"tasks": names})
        for row_id, names in rows
    ]
