"""``EpisodeMetrics``: return, length and success of each finished episode, in the names trainers log.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.wrappers import EpisodeMetrics
    >>> env = EpisodeMetrics(gym.make("VLA/ManiSkill-PickCube-v0"))        # doctest: +SKIP

At the step that ends an episode (terminated or truncated)::

    info["episode_metrics"] == {"env/return": 0.0, "env/episode_len": 50, "env/success_once": 0.0,
                                "env/reward": 0.0, "task_name": "PickCube", "task_id": 0}

``env/success_once`` is 1.0 if ``info["success"]`` was true at any step. ``env/episode_len`` counts
env steps: above :class:`~vla_gym.wrappers.ActionChunk` it adds ``info["chunk_steps"]`` per step, so
put EpisodeMetrics on top of ActionChunk. ``env/reward`` is the mean reward per env step. The key is
``episode_metrics``, not ``episode``, so it never clashes with Stable-Baselines3's ``Monitor``.

In a vector env, :func:`finished_episodes` pulls the finished episodes out of the batched ``info``
(either autoreset mode), and :func:`summarize_episodes` averages them with per-task success::

    obs, rewards, terminated, truncated, infos = envs.step(actions)
    for episode in finished_episodes(infos):    # dicts as above plus "env_index"
        ...
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

KEY = "episode_metrics"
METRIC_NAMES = ("env/return", "env/episode_len", "env/success_once", "env/reward")


class EpisodeMetrics(gym.Wrapper):
    """Add ``info["episode_metrics"]`` at the last step of every episode (see the module docstring)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._start_episode()

    def _start_episode(self) -> None:
        self._return, self._length, self._success = 0.0, 0, False

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._start_episode()
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._return += float(reward)
        self._length += int(info.get("chunk_steps", 1))
        self._success = self._success or bool(info.get("success", False))
        if terminated or truncated:
            info[KEY] = {
                "env/return": self._return,
                "env/episode_len": self._length,
                "env/success_once": float(self._success),
                "env/reward": self._return / max(self._length, 1),
                "task_name": str(info.get("task_name", "")),
                "task_id": int(info.get("task_id", -1)),
            }
        return obs, reward, terminated, truncated, info


def finished_episodes(infos: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The metrics of every episode that ended in this vector-env step, each with its ``env_index``.

    Works with both gymnasium autoreset modes: ``SAME_STEP`` (vla_gym's default) keeps the final
    step's info under ``infos["final_info"]``, ``NEXT_STEP`` leaves it at the top level.
    A single env's ``info`` dict works too (``env_index`` 0).
    """
    found = []
    for source in (infos.get("final_info"), infos):
        if not source or KEY not in source:
            continue
        metrics, mask = source[KEY], source.get("_" + KEY)
        if mask is None:  # a single (unbatched) env
            found.append(dict(metrics, env_index=0))
            continue
        for index in np.flatnonzero(mask):
            episode = {name: _scalar(values[index]) for name, values in metrics.items() if not name.startswith("_")}
            found.append(dict(episode, env_index=int(index)))
    return found


def _scalar(value):
    return value.item() if isinstance(value, np.generic) else value


def summarize_episodes(episodes: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean of each ``env/...`` metric plus ``env/success_once/<task_name>`` per task and ``env/episodes``."""
    if not episodes:
        return {}
    summary = {name: float(np.mean([episode[name] for episode in episodes])) for name in METRIC_NAMES}
    summary["env/episodes"] = float(len(episodes))
    for task in sorted({episode["task_name"] for episode in episodes}):
        summary[f"env/success_once/{task}"] = float(
            np.mean([episode["env/success_once"] for episode in episodes if episode["task_name"] == task])
        )
    return summary
