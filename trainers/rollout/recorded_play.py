"""Episodes played with every step recorded, for a trainer that learns from whole episodes (GRPO).

    results, steps = play_recorded(EpisodeRunner(envs, policy), specs, act_kwargs={"per_dim": True})
    for step in steps:      # one per vector step: what the policy saw and did, which episode each row belongs to
        step.obs, step.actions, step.log_probs, step.jobs, step.sub_steps

``jobs[i]`` is the index (plus ``offset``) into ``results`` of the episode row ``i`` played (-1: the env was idle);
``sub_steps[i]`` is how many env steps row ``i``'s action ran: an action chunk cut by the episode's end ran fewer
than its K steps (-1: all of them, or not reported), so a loss can leave the unexecuted ones out.
"""
from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vla_gym.trainers.rollout.episode_plan import EpisodeResult, EpisodeSpec
from vla_gym.trainers.rollout.episode_runner import EpisodeRunner


@dataclass
class RecordedStep:
    """One vector step of :func:`play_recorded` (module docstring)."""

    obs: Any
    actions: Any
    log_probs: Any
    jobs: np.ndarray
    sub_steps: np.ndarray


def play_recorded(runner: EpisodeRunner, specs: Sequence[EpisodeSpec], act_kwargs: dict[str, Any] | None = None,
                  offset: int = 0) -> tuple[list[EpisodeResult], list[RecordedStep]]:
    """Play ``specs`` (sampled actions) and record every step; episode indices in ``jobs`` shifted by ``offset``."""
    steps: list[tuple] = []
    ran: dict[int, list[int]] = collections.defaultdict(list)  # episode -> env steps each of its actions ran

    def on_step(jobs: np.ndarray, chunk_steps: np.ndarray) -> None:
        for i in np.flatnonzero(jobs >= 0):
            ran[int(jobs[i])].append(int(chunk_steps[i]))

    results = runner.run(specs, deterministic=False, recorder=lambda *step: steps.append(step), on_step=on_step,
                         act_kwargs=act_kwargs)
    records, seen = [], collections.Counter()
    for obs, actions, log_probs, jobs in steps:
        jobs = np.asarray(jobs)
        sub_steps = np.full(len(jobs), -1, dtype=np.int64)
        for row in np.flatnonzero(jobs >= 0):
            job = int(jobs[row])
            if seen[job] < len(ran[job]):
                sub_steps[row] = ran[job][seen[job]]
            seen[job] += 1
        records.append(RecordedStep(obs, actions, log_probs, np.where(jobs >= 0, jobs + offset, -1), sub_steps))
    return results, records
