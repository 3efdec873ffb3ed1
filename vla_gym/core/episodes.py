"""The episode contract, written once: the info keys a step carries, finished-episode records and their statistics.

Every place that counts episodes uses this module: the :class:`~vla_gym.wrappers.EpisodeMetrics` and
:class:`~vla_gym.wrappers.RecordEpisodeVideo` wrappers, PPO's rollout collector, the evaluation / GRPO
episode runner and GRPO's metrics. Numpy only (no torch; torch tensors from a GPU-batched env are read too).

:class:`EpisodeCounter` keeps a running return, length and success per sub-env. Give it each vector step as
the vector env returned it, in either gymnasium autoreset mode, and it hands back an :class:`Episode` for
every episode that ended::

    >>> import numpy as np
    >>> from vla_gym.core.episodes import EpisodeCounter, summarize
    >>> counter = EpisodeCounter(num_envs=2)                   # SAME_STEP autoreset (vla_gym.make_vec's)
    >>> infos = {"success": np.array([False, True]), "_success": np.array([True, True]),
    ...          "chunk_steps": np.array([4, 4]), "_chunk_steps": np.array([True, True])}
    >>> counter.step([0.0, 1.0], [False, False], [False, False], infos)
    []
    >>> final = {"success": np.array([False, False]), "_success": np.array([False, True]),
    ...          "task_name": np.array(["", "PushCube"], dtype=object), "_task_name": np.array([False, True]),
    ...          "chunk_steps": np.array([0, 2]), "_chunk_steps": np.array([False, True])}
    >>> episodes = counter.step([0.0, 0.5], [False, True], [False, False],
    ...                         {**infos, "final_info": final, "_final_info": np.array([False, True])})
    >>> episodes
    [Episode(episode_return=1.5, length=6, success=True, task_id=None, task_name='PushCube', env_index=1, env_failure=None)]
    >>> episodes[0].metrics()["env/success_once"], summarize(episodes)["env/success_once/PushCube"]
    (1.0, 1.0)

The rules (the contract):

- **Where a step's info is.** SAME_STEP: a sub-env that ended was reset inside the same ``step``; its last
  info is ``infos["final_info"]`` (rows ``infos["_final_info"]``), the top level holds the new episode's reset
  info. NEXT_STEP: the info of the last step is at the top level, and the following ``step`` of that sub-env
  only resets it (action ignored, reward 0): that step belongs to no episode. A single (unbatched) env's
  ``info`` works with ``num_envs=1``.
- **Length** counts env steps: a step adds ``info["chunk_steps"]`` (the sub-steps an
  :class:`~vla_gym.wrappers.ActionChunk` ran) or 1.
- **Return** is the sum of the step rewards; ``env/reward`` the mean reward per env step.
- **Success** (``env/success_once``) is true if ``info["success"]`` was true at any step of the episode,
  and None when the env never reported ``info["success"]`` (CartPole): such episodes are left out of success
  means instead of counting as failures.
- **Task**: ``info["task_id"]`` / ``info["task_name"]`` of the episode's last step.
- **Faults**: an episode whose last step's info has ``env_failure`` (its worker hung, died or raised and was
  restarted: :mod:`vla_gym.vector.respawn`) was cut short by the simulator, not ended by the policy: its
  :class:`Episode` keeps the text in ``env_failure`` and the statistics below leave it out.

Statistics: :func:`summarize` (one process: means, ``env/episodes``, ``env/success_once/<task>``) and
:func:`episode_sums` (sums and counts, for pooled means over torchrun ranks; every rank passes the same
``tasks`` so that they report the same keys). :func:`finished_episodes` reads the
``info["episode_metrics"]`` that the :class:`~vla_gym.wrappers.EpisodeMetrics` wrapper writes, out of a
vector env's batched info.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

# ------------------------------------------------------------------------------------------- info keys
SUCCESS = "success"              #: bool: the task is solved at this step (VLAEnv)
CHUNK_STEPS = "chunk_steps"      #: int: env steps this step ran (ActionChunk); 1 when absent
TASK_ID = "task_id"              #: int: index into the env's task list
TASK_NAME = "task_name"          #: str
FINAL_INFO = "final_info"        #: SAME_STEP autoreset: the info of the step that ended the episode
FINAL_OBS = "final_obs"          #: SAME_STEP autoreset: the observation of the step that ended the episode
METRICS_KEY = "episode_metrics"  #: EpisodeMetrics wrapper: Episode.metrics() at the last step of an episode
ENV_FAILURE = "env_failure"      #: str: the sub-env's worker failed and was restarted (vla_gym.vector.respawn)

# ---------------------------------------------------------------------------------------- metric names
RETURN = "env/return"
LENGTH = "env/episode_len"
SUCCESS_ONCE = "env/success_once"
REWARD = "env/reward"
EPISODES = "env/episodes"
METRIC_NAMES = (RETURN, LENGTH, SUCCESS_ONCE, REWARD)


@dataclass(frozen=True)
class Episode:
    """One finished episode: return, length in env steps, success at any step (None: not reported), task;
    ``env_failure``: why the episode was cut short by a failed worker (None: it was not)."""

    episode_return: float
    length: int
    success: bool | None = None
    task_id: int | None = None
    task_name: str = ""
    env_index: int = 0
    env_failure: str | None = None

    @property
    def mean_reward(self) -> float:
        return self.episode_return / max(1, self.length)

    def metrics(self) -> dict[str, Any]:
        """The episode in the names trainers log (``env/success_once`` only when success was reported)."""
        metrics: dict[str, Any] = {RETURN: self.episode_return, LENGTH: self.length}
        if self.success is not None:
            metrics[SUCCESS_ONCE] = float(self.success)
        metrics.update({REWARD: self.mean_reward, TASK_NAME: self.task_name,
                        TASK_ID: -1 if self.task_id is None else self.task_id})
        return metrics

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any]) -> Episode:
        """The inverse of :meth:`metrics` (also reads the ``env_index`` that :func:`finished_episodes` adds)."""
        task_id = metrics.get(TASK_ID)
        success = metrics.get(SUCCESS_ONCE)
        return cls(episode_return=float(metrics[RETURN]), length=int(metrics[LENGTH]),
                   success=None if success is None else bool(success),
                   task_id=None if task_id is None or task_id < 0 else int(task_id),
                   task_name=str(metrics.get(TASK_NAME) or ""), env_index=int(metrics.get("env_index", 0)))


class EpisodeCounter:
    """Running return / length / success of the episode in each sub-env; finished episodes come out of ``step``.

    ``counter.returns``, ``counter.lengths`` and ``counter.success`` hold the running figures as of the last
    step (the finished totals right after an episode ended; they restart at the next step of that sub-env).
    ``counter.chunk_steps`` holds the env steps each sub-env ran in the last step (``info["chunk_steps"]``), -1
    where it was not reported or the step belonged to no episode.
    Call :meth:`restart` after resetting sub-envs by hand (``envs.reset``), not after auto-resets.
    """

    def __init__(self, num_envs: int = 1, autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP):
        self.num_envs = int(num_envs)
        self.next_step = AutoresetMode(autoreset_mode) == AutoresetMode.NEXT_STEP
        self.returns = np.zeros(self.num_envs)
        self.lengths = np.zeros(self.num_envs, dtype=np.int64)
        self.success = np.zeros(self.num_envs, dtype=bool)
        self.reports_success = np.zeros(self.num_envs, dtype=bool)
        self.counted = np.zeros(self.num_envs, dtype=bool)  #: sub-envs whose last step belonged to an episode
        self.chunk_steps = np.full(self.num_envs, -1, dtype=np.int64)  #: info["chunk_steps"] of the last step
        self._ended = np.zeros(self.num_envs, dtype=bool)

    def restart(self, envs: Iterable[int] | None = None) -> None:
        """Start new episodes in ``envs`` (default all): after ``reset()`` of those sub-envs."""
        rows = slice(None) if envs is None else list(envs)
        self.returns[rows], self.lengths[rows], self.success[rows], self.reports_success[rows] = 0.0, 0, False, False
        self._ended[rows] = False

    def step(self, rewards, terminated, truncated, infos: Mapping[str, Any], active=None) -> list[Episode]:
        """Account one vector step (as the vector env returned it); returns the episodes that ended in it.

        ``active`` (bool per sub-env, default all) leaves out sub-envs whose steps are not wanted (idle envs of
        an evaluation). Scalars and an unbatched ``info`` are accepted with ``num_envs=1``.
        """
        n = self.num_envs
        rewards = self._batch(rewards, "rewards").astype(np.float64)
        dones = self._batch(terminated, "terminated").astype(bool) | self._batch(truncated, "truncated").astype(bool)
        counted = np.ones(n, dtype=bool) if active is None else self._batch(active, "active").astype(bool)
        if self.next_step:
            counted &= ~self._ended  # the reset-only step after an episode end
        self.restart(np.flatnonzero(self._ended))
        self._ended = dones.copy()
        self.counted = counted

        final = _final_rows(infos, dones)
        chunk_steps, has_steps = _step_column(infos, CHUNK_STEPS, final, n)
        success, has_success = _step_column(infos, SUCCESS, final, n)
        self.returns += np.where(counted, rewards, 0.0)
        self.lengths += np.where(counted, np.where(has_steps, chunk_steps, 1), 0).astype(np.int64)
        self.chunk_steps = np.where(counted & has_steps, chunk_steps, -1).astype(np.int64)
        self.reports_success |= counted & has_success
        self.success |= counted & has_success & (success != 0)

        episodes = []
        for i in np.flatnonzero(counted & dones):
            source = infos[FINAL_INFO] if final[i] else infos
            task_id = masked(source, TASK_ID, i)
            failure = masked(source, ENV_FAILURE, i)
            episodes.append(Episode(
                episode_return=float(self.returns[i]), length=int(self.lengths[i]),
                success=bool(self.success[i]) if self.reports_success[i] else None,
                task_id=None if task_id is None else int(task_id), task_name=str(masked(source, TASK_NAME, i) or ""),
                env_index=int(i), env_failure=None if failure is None else str(failure),
            ))
        return episodes

    def _batch(self, values, name: str) -> np.ndarray:
        array = _numpy(values)
        if array.ndim == 0:
            array = array.reshape(1)
        if array.shape != (self.num_envs,):
            raise ValueError(f"EpisodeCounter(num_envs={self.num_envs}).step got {name} of shape {array.shape}; "
                             f"pass one value per sub-env (num_envs must match the vector env)")
        return array


# -------------------------------------------------------------------------------------- reading infos
def masked(infos: Mapping[str, Any] | None, key: str, i: int) -> Any:
    """``infos[key][i]`` of a vector env's info dict as a Python value, None when sub-env ``i`` did not report
    it. An unbatched (single env) info gives ``infos[key]`` itself."""
    if not infos or key not in infos:
        return None
    mask = infos.get("_" + key)
    if mask is not None and not mask[i]:
        return None
    value = infos[key]
    if mask is None and np.ndim(value) == 0:
        return _plain(value)
    return _plain(value[i])


def _final_rows(infos: Mapping[str, Any], dones: np.ndarray) -> np.ndarray:
    """Sub-envs whose step info is in ``infos["final_info"]`` (SAME_STEP: ended and auto-reset)."""
    final = infos.get(FINAL_INFO) if isinstance(infos, Mapping) else None
    if not isinstance(final, Mapping) or not final:
        return np.zeros(len(dones), dtype=bool)
    mask = infos.get("_" + FINAL_INFO)
    return dones & (np.ones(len(dones), dtype=bool) if mask is None else _numpy(mask).astype(bool))


def _step_column(infos: Mapping[str, Any], key: str, final: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, reported) of ``key`` per sub-env for the step just taken: from ``final_info`` where ``final``."""
    values, reported = _column(infos, key, n)
    if final.any():
        final_values, final_reported = _column(infos[FINAL_INFO], key, n)
        values, reported = np.where(final, final_values, values), np.where(final, final_reported, reported)
    return values, reported


def _column(infos: Mapping[str, Any], key: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    if not infos or key not in infos:
        return np.zeros(n), np.zeros(n, dtype=bool)
    mask = infos.get("_" + key)
    reported = np.ones(n, dtype=bool) if mask is None else _numpy(mask).astype(bool).reshape(n)
    values = np.broadcast_to(_numpy(infos[key]), (n,))
    return np.where(reported, values, 0).astype(np.float64), reported


def _numpy(values) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor (GPU-batched envs), without importing torch
        values = values.detach().cpu().numpy()
    return np.asarray(values)


def _plain(value: Any) -> Any:
    """numpy / torch scalars -> Python values (JSON-serialisable)."""
    if isinstance(value, np.generic) or (getattr(value, "ndim", None) == 0 and hasattr(value, "item")):
        return value.item()
    return value


def finished_episodes(infos: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``info["episode_metrics"]`` (EpisodeMetrics wrapper) of every episode that ended in this step,
    each with its ``env_index``.

    Works with both gymnasium autoreset modes: ``SAME_STEP`` keeps the final step's info under
    ``infos["final_info"]``, ``NEXT_STEP`` leaves it at the top level. A single env's ``info`` works too
    (``env_index`` 0).
    """
    found = []
    for source in (infos.get(FINAL_INFO), infos):
        if not source or METRICS_KEY not in source:
            continue
        metrics, mask = source[METRICS_KEY], source.get("_" + METRICS_KEY)
        if mask is None:  # a single (unbatched) env
            found.append(dict(metrics, env_index=0))
            continue
        for index in np.flatnonzero(mask):
            episode = {name: _plain(values[index]) for name, values in metrics.items() if not name.startswith("_")}
            found.append(dict(episode, env_index=int(index)))
    return found


# ----------------------------------------------------------------------------------------- statistics
def episode_sums(episodes: Iterable[Episode | Mapping[str, Any]], tasks: Sequence[str] = ()
                 ) -> tuple[dict[str, float], dict[str, float]]:
    """(sums, counts) of each ``env/...`` metric over ``episodes``, plus ``env/success_once/<task>`` for each
    name in ``tasks``; a mean is ``sums[k] / counts[k]`` (keys with count 0 have no mean).

    Every key is present even with count 0, so processes that pool them (``Distributed.weighted_mean``) agree
    on the keys when they pass the same ``tasks``. Episodes may be :class:`Episode` records (or subclasses
    such as the runner's ``EpisodeResult``) or :meth:`Episode.metrics` dicts. Episodes cut by a failed worker
    (``env_failure``) are left out: the policy did not end them.
    """
    per_task = {name: f"{SUCCESS_ONCE}/{name}" for name in tasks}
    sums = dict.fromkeys((*METRIC_NAMES, *per_task.values()), 0.0)
    counts = dict.fromkeys(sums, 0.0)

    def add(key: str, value: float) -> None:
        sums[key] += value
        counts[key] += 1

    for episode in map(as_episode, episodes):
        if episode.env_failure is not None:
            continue
        add(RETURN, episode.episode_return)
        add(LENGTH, episode.length)
        add(REWARD, episode.mean_reward)
        if episode.success is not None:
            add(SUCCESS_ONCE, float(episode.success))
            if episode.task_name in per_task:
                add(per_task[episode.task_name], float(episode.success))
    return sums, counts


def summarize(episodes: Iterable[Episode | Mapping[str, Any]]) -> dict[str, float]:
    """Means of the ``env/...`` metrics, ``env/episodes`` and ``env/success_once/<task_name>`` per named task
    (episodes cut by a failed worker left out).

    ``{}`` for no episodes; ``env/success_once`` is missing when no episode reported success.
    """
    episodes = [episode for episode in map(as_episode, episodes) if episode.env_failure is None]
    if not episodes:
        return {}
    sums, counts = episode_sums(episodes, sorted({e.task_name for e in episodes if e.task_name}))
    summary = {key: sums[key] / counts[key] for key in sums if counts[key]}
    summary[EPISODES] = float(len(episodes))
    return summary


def as_episode(episode: Episode | Mapping[str, Any]) -> Episode:
    """An :class:`Episode` from a record or from an ``info["episode_metrics"]`` dict."""
    if isinstance(episode, Episode):
        return episode
    if isinstance(episode, Mapping):
        return Episode.from_metrics(episode)
    raise TypeError(f"expected an Episode or an info['episode_metrics'] dict, got {type(episode).__name__}")
