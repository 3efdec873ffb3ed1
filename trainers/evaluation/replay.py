"""Playing a report's episodes again: ``trainers/eval.py --replay A/eval.json`` reads what :func:`load_replay` returns
(the receipt's env, the settings and every episode's spec), plays the same episodes and prints
:func:`replay_differences`: the software that changed (:func:`~vla_gym.runtime.receipt.version_differences`) and
each episode whose outcome differs.

    >>> plan = load_replay("runs/eval_sft/eval.json")                                # doctest: +SKIP
    >>> plan.env_id, len(plan.specs), plan.settings["deterministic"]                 # doctest: +SKIP
    ('VLA/LiberoObject-v0', 40, True)

A replay on the same software and machine gives the same outcomes (seeded resets are bit-identical,
tests/test_libero.py; greedy actions are deterministic, sampled ones come from one generator per episode);
another MuJoCo or torch may not, and the printed lines say which episodes moved.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from vla_gym.runtime.receipt import version_differences
from vla_gym.trainers.rollout.episode_plan import EpisodeSpec


class ReplayError(ValueError):
    """A report that cannot be replayed; the message says why and what to pass instead."""


@dataclass(frozen=True)
class ReplayPlan:
    """What a report played: its receipt, settings, env and episodes (in the report's order)."""

    receipt: dict[str, Any]
    settings: dict[str, Any]
    episodes: list[dict[str, Any]]

    @property
    def env_id(self) -> str:
        return self.receipt["env"]["id"]

    @property
    def env_kwargs(self) -> dict[str, Any]:
        return dict(self.receipt["env"].get("kwargs") or {})

    @property
    def env_wrappers(self) -> list[Any] | None:
        return self.receipt["env"].get("wrappers")

    @property
    def checkpoint(self) -> str | None:
        return (self.receipt.get("checkpoint") or {}).get("path")

    @property
    def specs(self) -> list[EpisodeSpec]:
        return [EpisodeSpec(**episode["spec"]) for episode in self.episodes]


def load_replay(path: str | os.PathLike) -> ReplayPlan:
    """The plan of an ``eval.json`` written with a receipt (ReplayError for other files, naming the fix)."""
    try:
        with open(path) as handle:
            report = json.load(handle)
    except FileNotFoundError as exc:
        raise ReplayError(f"no report {path}: pass an eval.json that trainers/eval.py wrote") from exc
    except json.JSONDecodeError as exc:
        raise ReplayError(f"{path} is not JSON ({exc})") from exc
    if "rows" in report and "episodes" not in report:
        raise ReplayError(f"{path} is an OOD report: replay one of its rows, <report dir>/<row>/eval.json")
    if "receipt" not in report or "episodes" not in report:
        raise ReplayError(f"{path} has no receipt (written before reports carried one): evaluate the checkpoint "
                          "again with trainers/eval.py, then replay that report")
    return ReplayPlan(report["receipt"], report.get("settings") or {}, report["episodes"])


def failed_starts(path: str | os.PathLike) -> set[tuple[int | None, int | None]]:
    """The (task id, init state id) pairs whose episodes all failed in a report (``eval.py --only-failed-in``: play
    where the policy fails, skip what it solved; RIPT-VLA's filter of solved starts). ReplayError for a file that is
    not a per-episode report.

        >>> failed_starts("runs/eval_sft/eval.json")                                    # doctest: +SKIP
        {(0, 3), (2, 0), ...}
    """
    try:
        with open(path) as handle:
            episodes = json.load(handle).get("episodes")
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        raise ReplayError(f"cannot read {path} ({exc}): pass an eval.json that trainers/eval.py wrote") from exc
    if not episodes:
        raise ReplayError(f"{path} lists no episodes: pass an eval.json that trainers/eval.py wrote")
    outcomes: dict[tuple[int | None, int | None], bool] = {}
    for episode in episodes:
        key = (episode["spec"].get("task_id"), episode["spec"].get("init_state_id"))
        outcomes[key] = outcomes.get(key, False) or bool(episode.get("success"))
    return {key for key, solved in outcomes.items() if not solved}


def replay_differences(plan: ReplayPlan, receipt: dict[str, Any], episodes: list[dict[str, Any]]) -> list[str]:
    """Lines for the software that changed and for each episode whose success, length or return differs (same
    position in both reports: the replay plays the report's specs in order)."""
    lines = [f"changed: {line}" for line in version_differences(plan.receipt, receipt)]
    for index, (before, after) in enumerate(zip(plan.episodes, episodes)):
        changes = [f"{key} {before.get(key)} -> {after.get(key)}" for key in ("success", "length", "episode_return")
                   if not _same(before.get(key), after.get(key))]
        if before.get("instruction") != after.get("instruction"):
            changes.append(f"instruction {before.get('instruction')!r} -> {after.get('instruction')!r}")
        if changes:
            spec = before["spec"]
            where = ", ".join(f"{k}={v}" for k, v in spec.items() if v is not None)
            lines.append(f"episode {index} ({before.get('task_name') or 'task ' + str(spec.get('task_id'))}, "
                         f"{where}): {'; '.join(changes)}")
    return lines


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-6 * max(1.0, abs(a))
    return a == b
