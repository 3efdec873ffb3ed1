"""vla_gym: one Gymnasium front door to LIBERO, ManiSkill3 and BEHAVIOR-1K for VLA fine-tuning.

    >>> import gymnasium as gym, vla_gym
    >>> env = gym.make("VLA/Libero130-v0")            # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)                  # doctest: +SKIP

Importing vla_gym registers every ``VLA/...`` id; no simulator is imported until an env is made.
"""
from __future__ import annotations

from vla_gym.registry import ENTRIES, check_env_id, register_all

__version__ = "0.1.0"

register_all()


def make(env_id: str, max_episode_steps: int | None = None, **kwargs):
    """``gymnasium.make`` with a vla_gym error (closest ids) for unknown ids.

    ``max_episode_steps`` goes to the env's own per-task limit (``gymnasium.make`` would wrap a
    ``TimeLimit`` around the env instead; below an ActionChunk wrapper that counts env steps too).
    """
    import gymnasium as gym

    check_env_id(env_id)
    env = gym.make(env_id, **kwargs)
    if max_episode_steps is not None:
        env.unwrapped.max_episode_steps_override = int(max_episode_steps)
    return env


def __getattr__(name):  # lazy: make_vec pulls in the wrappers only when used
    if name == "make_vec":
        from vla_gym.vector import make_vec

        return make_vec
    raise AttributeError(f"module 'vla_gym' has no attribute {name!r}")


__all__ = ["ENTRIES", "make", "make_vec", "register_all", "__version__"]
