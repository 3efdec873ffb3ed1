"""``EpisodeMetrics``: return, length and success of each finished episode, in the names trainers log.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.wrappers import EpisodeMetrics
    >>> env = EpisodeMetrics(gym.make("VLA/ManiSkill-PickCube-v0"))        # doctest: +SKIP

At the step that ends an episode (terminated or truncated)::

    info["episode_metrics"] == {"env/return": 0.0, "env/episode_len": 50, "env/success_once": 0.0,
                                "env/reward": 0.0, "task_name": "PickCube", "task_id": 0}

and, as gymnasium's ``RecordEpisodeStatistics`` writes it (so CleanRL- and SB3-style code reads it)::

    info["episode"] == {"r": 0.0, "l": 50, "t": 1.234}     # return, length in env steps, seconds since reset

In a vector env the batched form is gymnasium's: ``infos["episode"]["r"][infos["_episode"]]`` (SAME_STEP
autoreset, vla_gym's default: under ``infos["final_info"]``).

The counting rules are :mod:`vla_gym.core.episodes`' (this wrapper is a thin shell over its
:class:`~vla_gym.core.episodes.EpisodeCounter`): ``env/success_once`` is 1.0 if ``info["success"]`` was true at
any step (left out for envs that never report ``info["success"]``); ``env/episode_len`` counts env steps,
adding ``info["chunk_steps"]`` per step above :class:`~vla_gym.wrappers.ActionChunk`, so put EpisodeMetrics
on top of ActionChunk; ``env/reward`` is the mean reward per env step. Stable-Baselines3's ``Monitor`` on top writes the same
``r``/``l``/``t`` shape into ``info["episode"]``.

In a vector env, :func:`finished_episodes` pulls the finished episodes out of the batched ``info``
(either autoreset mode), and :func:`summarize_episodes` averages them with per-task success (both are
:mod:`vla_gym.core.episodes`' functions, re-exported here)::

    obs, rewards, terminated, truncated, infos = envs.step(actions)
    for episode in finished_episodes(infos):    # dicts as above plus "env_index"
        ...
"""
from __future__ import annotations

import time

import gymnasium as gym

from vla_gym.core.episodes import METRIC_NAMES, METRICS_KEY, EpisodeCounter, finished_episodes
from vla_gym.core.episodes import summarize as summarize_episodes

KEY = METRICS_KEY
#: gymnasium RecordEpisodeStatistics' key: {"r": return, "l": length, "t": seconds}
STATISTICS_KEY = "episode"

__all__ = ["KEY", "STATISTICS_KEY", "METRIC_NAMES", "EpisodeMetrics", "finished_episodes", "summarize_episodes"]


class EpisodeMetrics(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Add ``info["episode_metrics"]`` at the last step of every episode (see the module docstring)."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)
        self.counter = EpisodeCounter(num_envs=1)
        self.episode_start = time.perf_counter()

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.counter.restart()
        self.episode_start = time.perf_counter()
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        for episode in self.counter.step(reward, terminated, truncated, info):
            info[KEY] = episode.metrics()
            info[STATISTICS_KEY] = {"r": episode.episode_return, "l": episode.length,
                                    "t": round(time.perf_counter() - self.episode_start, 6)}
        return obs, reward, terminated, truncated, info
