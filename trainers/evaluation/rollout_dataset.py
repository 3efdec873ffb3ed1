"""Evaluated episodes as a dataset: ``trainers/eval.py --record-dataset DIR [--successes-only]``.

    wrappers = recording_wrappers(staging, cfg.env.wrappers)   # RecordEpisodes innermost, then the run's own
    ...                                                        # evaluate with env.wrappers = wrappers
    write_rollout_dataset(staging, out, results, successes_only=True, receipt=stamp, settings=settings)

The evaluation's envs stage every episode they finish (:class:`~vla_gym.wrappers.RecordEpisodes`);
:func:`write_rollout_dataset` keeps the ones the evaluation played (an idle env's extra episodes are left out),
optionally only the successes, and writes them in the LeRobot v3 layout of ``vla-gym demos`` (policy actions as
the labels) with ``meta/vla_gym_rollouts.json``: the receipt, the settings and every played episode's start and
outcome. ``trainers/sft.py`` reads it as ``sft.dataset`` (filtered behaviour cloning, distillation).
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
from collections.abc import Sequence
from typing import Any

from vla_gym.data.lerobot import write_dataset
from vla_gym.trainers.rollout.episode_plan import EpisodeResult
from vla_gym.trainers.runtime.checkpoint import atomic_write_text
from vla_gym.wrappers.record_episodes import staged_episodes

#: the summary next to the dataset's meta/info.json
ROLLOUTS_PATH = "meta/vla_gym_rollouts.json"
RECORDER = "vla_gym.wrappers.record_episodes:RecordEpisodes"


class EmptyDatasetError(ValueError):
    """No evaluated episode qualifies for the dataset (``--successes-only`` and none succeeded)."""


def recording_wrappers(staging: str | os.PathLike, wrappers: Sequence[Any], successes_only: bool = False) -> list[Any]:
    """``wrappers`` with :class:`~vla_gym.wrappers.RecordEpisodes` innermost, staging into ``staging`` (with
    ``successes_only``, failures as markers alone and skipped frames rendered for successes only)."""
    return [{"name": RECORDER, "kwargs": {"directory": str(staging), "successes_only": successes_only}}, *wrappers]


def played_markers(markers: Sequence[dict[str, Any]], results: Sequence[EpisodeResult]) -> list[dict[str, Any]]:
    """The staged episode of each evaluated result, in the results' order (same task and seed, and the same init
    state when the spec fixed one); None for a result with no staged episode."""
    chosen = []
    for result in results:
        spec = result.spec
        match = next((m for m in markers if m["seed"] == spec.seed and m["task_id"] == result.task_id
                      and (spec.init_state_id is None or m["init_state_id"] == spec.init_state_id)), None)
        chosen.append(match)
    return chosen


def write_rollout_dataset(staging: str | os.PathLike, out: str | os.PathLike, results: Sequence[EpisodeResult],
                          successes_only: bool = False, receipt: dict | None = None, settings: dict | None = None,
                          robot_type: str | None = None) -> dict[str, Any]:
    """Write the evaluated episodes staged in ``staging`` as a dataset at ``out``; returns the summary."""
    staging, out = pathlib.Path(staging), pathlib.Path(out)
    markers = played_markers(staged_episodes(staging), results)
    missing = [r.index for r, m in zip(results, markers) if m is None]
    if missing:
        raise RuntimeError(f"episodes {missing[:5]} were played but not staged in {staging}")
    kept = [m for m in markers if m["success"] or not successes_only]
    unstaged = [m for m in kept if m.get("file") is None]
    if unstaged:
        raise RuntimeError(f"{len(unstaged)} kept episodes were staged as markers alone (recorded with "
                           "successes_only=True): record again without it to keep the failures")
    if not kept:
        raise EmptyDatasetError(f"no dataset written to {out}: none of the {len(results)} episodes succeeded "
                                "(--successes-only); evaluate more episodes or keep the failures too")
    info = write_dataset(out, [staging / m["file"] for m in kept], fps=kept[0]["fps"], robot_type=robot_type)
    summary = {"episodes": info["total_episodes"], "frames": info["total_frames"], "played": len(results),
               "successes_only": successes_only, "receipt": receipt, "settings": settings,
               "episodes_played": [{key: m[key] for key in ("task_id", "task_name", "init_state_id", "seed", "success",
                                                             "length")} | {"kept": m in kept} for m in markers]}
    atomic_write_text(out / ROLLOUTS_PATH, json.dumps(summary, indent=1))
    shutil.rmtree(staging)
    return summary
