"""BEHAVIOR-1K's 1,016 activities and the 50 tasks of the 2025 BEHAVIOR challenge.

Read from ``assets/behavior_tasks.json`` (generated from bddl 3.6.0 by
``scripts/gen_behavior_tasks.py``): nothing here imports OmniGibson or bddl.

    >>> from vla_gym.tasks.behavior import activities, activity_tasks
    >>> len(activities()), len(activity_tasks("challenge"))
    (1016, 50)
    >>> task = activity_tasks("can_meat")[0]
    >>> task.max_episode_steps, task.extra["challenge_id"]
    (23700, 4)

Registered ids: ``VLA/Behavior-<activity>-v0`` for each challenge task, ``VLA/Behavior50-v0``
(all 50, one drawn per reset) and ``VLA/Behavior-v0``, which serves any activity by keyword:
``gym.make("VLA/Behavior-v0", activity="make_pizza")`` (also a list of names, or ``"challenge"``).
"""
from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Sequence
from importlib import resources

from vla_gym.backends.base import TaskSpec
from vla_gym.core.env_entry import EnvEntry

SUITE = "behavior"
#: ``activity`` alias for the 50 challenge tasks in challenge order
CHALLENGE = "challenge"
KEYWORD_ENV_ID = "VLA/Behavior-v0"
CHALLENGE_ENV_ID = "VLA/Behavior50-v0"
ENTRY_POINT = "vla_gym.backends.behavior.env:BehaviorEnv"


def env_id(activity: str) -> str:
    """The registered id of one challenge task, e.g. ``VLA/Behavior-can_meat-v0``."""
    return f"VLA/Behavior-{activity}-v0"


@functools.cache
def _rows() -> dict[str, dict]:
    text = resources.files("vla_gym.assets").joinpath("behavior_tasks.json").read_text()
    return {row["name"]: row for row in json.loads(text)["activities"]}


def activities() -> tuple[str, ...]:
    """All activity names, sorted."""
    return tuple(sorted(_rows()))


def challenge_activities() -> tuple[str, ...]:
    """The 50 challenge tasks in challenge order (task id 0..49)."""
    challenge = [row for row in _rows().values() if row["challenge_id"] is not None]
    return tuple(row["name"] for row in sorted(challenge, key=lambda row: row["challenge_id"]))


class UnknownActivityError(ValueError):
    """An activity name that bddl 3.6.0 does not define; the message lists the closest names."""


def _check(name: str) -> dict:
    if name in _rows():
        return _rows()[name]
    close = difflib.get_close_matches(name, list(_rows()), n=5, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise UnknownActivityError(
        f"unknown BEHAVIOR activity {name!r}.{hint} `vla_gym.tasks.behavior.activities()` lists all "
        f"{len(_rows())}; activity={CHALLENGE!r} selects the 50 challenge tasks."
    )


def activity_tasks(activity: str | Sequence[str]) -> tuple[TaskSpec, ...]:
    """Task specs for one activity name, a list of names, or ``"challenge"`` (the 50), indexed from 0."""
    if isinstance(activity, str):
        names = challenge_activities() if activity == CHALLENGE else (activity,)
    else:
        names = tuple(activity)
        if not names:
            raise ValueError("activity must name at least one BEHAVIOR activity")
    return tuple(_spec(index, _check(name)) for index, name in enumerate(names))


def _spec(index: int, row: dict) -> TaskSpec:
    paraphrases = (row["goal_text"],) if row["goal_text"] != row["instruction"] else ()
    return TaskSpec(
        index=index, suite=SUITE, name=row["name"], instruction=row["instruction"],
        max_episode_steps=row["max_episode_steps"], num_init_states=None, paraphrases=paraphrases,
        extra={"challenge_id": row["challenge_id"], "rooms": tuple(row["rooms"])},
    )


def env_entries() -> list[EnvEntry]:
    """Rows for vla_gym.core.registry: one id per challenge task, the 50-task id, the keyword id."""
    def entry(env_id_: str, num_tasks: int, kwargs: dict) -> EnvEntry:
        return EnvEntry(env_id_, "behavior", ENTRY_POINT, num_tasks, requires="omnigibson", extra="behavior",
                        kwargs=kwargs)

    challenge = challenge_activities()
    return [
        *(entry(env_id(name), 1, {"activity": name}) for name in challenge),
        entry(CHALLENGE_ENV_ID, len(challenge), {"activity": CHALLENGE}),
        entry(KEYWORD_ENV_ID, len(_rows()), {}),
    ]
