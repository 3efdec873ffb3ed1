"""LIBERO's five suites (no LIBERO import needed): their ids, step limits and tasks, from
``assets/libero_tasks.json``. :mod:`vla_gym.tasks.libero` adds LIBERO-PRO's perturbed suites on top.

    >>> from vla_gym.tasks.libero_suites import base_suite_tasks
    >>> len(base_suite_tasks("libero_130")), base_suite_tasks("libero_10")[0].max_episode_steps
    (130, 520)
"""
from __future__ import annotations

import functools
import json
from importlib import resources

from vla_gym.backends.base import TaskSpec

#: the five LIBERO suites in the order LIBERO-130 concatenates them, with the episode limits the
#: standard evaluation (OpenVLA, openpi) uses; inside LIBERO-130 every task keeps its suite's limit
SUITE_MAX_STEPS = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}
LIBERO_130 = "libero_130"

#: registered id -> suite
ENV_IDS = {
    "VLA/Libero130-v0": LIBERO_130,
    "VLA/LiberoSpatial-v0": "libero_spatial",
    "VLA/LiberoObject-v0": "libero_object",
    "VLA/LiberoGoal-v0": "libero_goal",
    "VLA/Libero10-v0": "libero_10",
    "VLA/Libero90-v0": "libero_90",
}


@functools.cache
def _table() -> dict:
    return json.loads(resources.files("vla_gym.assets").joinpath("libero_tasks.json").read_text())


def is_base_suite(suite: str) -> bool:
    return suite == LIBERO_130 or suite in SUITE_MAX_STEPS


def base_suite_tasks(suite: str) -> tuple[TaskSpec, ...]:
    """The tasks of one of LIBERO's own suites (or all 130 for ``libero_130``), indexed from 0.

    Each task's ``max_episode_steps`` is its own suite's limit (:data:`SUITE_MAX_STEPS`), also
    inside ``libero_130``: a LIBERO-Long task gets 520 steps there, a LIBERO-Spatial task 220.
    """
    members = list(SUITE_MAX_STEPS) if suite == LIBERO_130 else [suite]
    tasks = []
    for member in members:
        for local_index, row in enumerate(_table()[member]):
            tasks.append(TaskSpec(
                index=len(tasks), suite=member, name=row["name"], instruction=row["instruction"],
                max_episode_steps=SUITE_MAX_STEPS[member], num_init_states=row["num_init_states"],
                extra={"suite_task_index": local_index},
            ))
    return tuple(tasks)
