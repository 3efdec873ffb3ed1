"""Which episodes to play: :class:`EpisodeSpec` (seed / task / initial state), :func:`suite_specs` (every task x
initial state of a suite, or seeds), :func:`draw_start` (one random training start) and :class:`EpisodeResult` (a
played spec).

    specs = suite_specs(envs, episodes_per_task=5)                   # tasks x init states, or seeds
    results = EpisodeRunner(envs, policy).run(specs)                 # vla_gym.trainers.rollout.episode_runner

An :class:`EpisodeResult` is the :class:`~vla_gym.core.episodes.Episode` that
:class:`~vla_gym.core.episodes.EpisodeCounter` counted (return, length in env steps, success at any step, task: the
rules are :mod:`vla_gym.core.episodes`') plus the spec it was played from and its video.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium.vector import VectorEnv

from vla_gym.core.episodes import Episode
from vla_gym.trainers.runtime.envs import env_attr


@dataclass(frozen=True)
class EpisodeSpec:
    """How one episode starts: ``reset(seed=seed, options={task_id, init_state_id})`` (None: not passed).

        >>> EpisodeSpec(seed=3, task_id=1).options()
        {'task_id': 1}
    """

    seed: int | None = None
    task_id: int | None = None
    init_state_id: int | None = None

    def options(self) -> dict[str, int]:
        return {k: v for k, v in (("task_id", self.task_id), ("init_state_id", self.init_state_id)) if v is not None}


def draw_start(rng: np.random.Generator, tasks: Sequence, train_init_states: int | None = None,
               task_id: int | None = None) -> EpisodeSpec:
    """One training episode's start drawn from ``rng``, in this order: a task (``task_id`` when the env is fixed to
    one, else uniform over ``tasks``), an initial state below ``train_init_states`` (all of the task's when None) and
    a seed. An env without tasks (``tasks`` empty) gets only the seed. GRPO draws its groups' starts and residual RL
    its rounds' episodes with it.

        >>> draw_start(np.random.default_rng(0), tasks=[])
        EpisodeSpec(seed=1826701614, task_id=None, init_state_id=None)
    """
    init_state_id = None
    if tasks:
        task_id = task_id if task_id is not None else int(rng.integers(len(tasks)))
        count = tasks[task_id].num_init_states
        if count:
            init_state_id = int(rng.integers(min(count, train_init_states or count)))
    else:
        task_id = None
    return EpisodeSpec(seed=int(rng.integers(2**31 - 1)), task_id=task_id, init_state_id=init_state_id)


@dataclass(frozen=True)
class EpisodeResult(Episode):
    """A played :class:`EpisodeSpec`: the :class:`~vla_gym.core.episodes.Episode` (``success`` None: the env does not
    report ``info["success"]``), the spec's position ``index`` in the list given to ``run``, its video, the
    instruction its policy read (None: the observation has none) and ``replays``: how many earlier plays of the
    spec were cut by a failed env worker and played again (``env_failure`` set: this play was cut too)."""

    index: int = -1
    spec: EpisodeSpec = EpisodeSpec()
    video: str | None = None
    instruction: str | None = None
    replays: int = 0


def suite_specs(
    envs: VectorEnv, episodes_per_task: int | None = None, task_ids: Sequence[int] | None = None,
    seed: int = 0, episodes: int | None = None, first_init_state: int = 0, repeats: int = 1,
) -> list[EpisodeSpec]:
    """Every (task, init state) of a vla_gym env, or ``episodes`` seeds for envs without a task list.

    ``episodes_per_task`` caps the init states per task (tasks whose initial state comes from the seed get
    that many seeds; default 10). ``episodes`` (envs without tasks) defaults to ``episodes_per_task`` or 10.
    ``first_init_state`` K starts each task's fixed initial states at K (``K .. K+episodes_per_task-1``, e.g.
    held-out states that no demonstration used). ``repeats`` N plays each start N times in a row, the same spec
    each time: sampled, the episodes differ by the policy's noise only, so a start's successes out of N estimate
    its success probability.
    """
    if repeats < 1:
        raise ValueError(f"repeats={repeats}: play each start at least once")
    return [spec for spec in _starts(envs, episodes_per_task, task_ids, seed, episodes, first_init_state)
            for _ in range(repeats)]


def _starts(envs: VectorEnv, episodes_per_task: int | None, task_ids: Sequence[int] | None, seed: int,
            episodes: int | None, first_init_state: int) -> list[EpisodeSpec]:
    tasks = env_attr(envs, "tasks")
    if not tasks:
        return [EpisodeSpec(seed=seed + k) for k in range(episodes or episodes_per_task or 10)]
    specs = []
    for task in tasks:
        if task_ids is not None and task.index not in task_ids:
            continue
        count = task.num_init_states or episodes_per_task or 10
        if task.num_init_states and not 0 <= first_init_state < task.num_init_states:
            raise ValueError(f"first_init_state={first_init_state}: task {task.name!r} has initial states "
                             f"0..{task.num_init_states - 1}")
        start = first_init_state if task.num_init_states else 0
        count = min(count - start, episodes_per_task or count)
        for k in range(start, start + count):
            init = k if task.num_init_states else None
            specs.append(EpisodeSpec(seed=seed + len(specs), task_id=task.index, init_state_id=init))
    return specs
