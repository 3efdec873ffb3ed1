"""``vla_gym.make``: ``gymnasium.make`` with an error that lists the closest ids.

    >>> import vla_gym
    >>> vla_gym.make("VLA/LiberoObjct-v0")
    Traceback (most recent call last):
    ...
    vla_gym.core.registry.UnknownEnvError: unknown vla_gym env id 'VLA/LiberoObjct-v0'. Did you mean: ...
"""
from __future__ import annotations

import gymnasium as gym

from vla_gym.core.registry import check_env_id


def make(env_id: str, max_episode_steps: int | None = None, **kwargs):
    """``gymnasium.make`` with a vla_gym error (closest ids) for unknown ids.

    ``max_episode_steps`` goes to the env's own per-task limit (``gymnasium.make`` would wrap a
    ``TimeLimit`` around the env instead; below an ActionChunk wrapper that counts env steps too).
    """
    check_env_id(env_id)
    env = gym.make(env_id, **kwargs)
    if max_episode_steps is not None:
        env.unwrapped.max_episode_steps_override = int(max_episode_steps)
    return env
