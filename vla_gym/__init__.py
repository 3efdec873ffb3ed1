"""vla_gym: one Gymnasium front door to LIBERO, ManiSkill3 and BEHAVIOR-1K for VLA fine-tuning.

    >>> import gymnasium as gym, vla_gym
    >>> env = gym.make("VLA/Libero130-v0")            # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)                  # doctest: +SKIP

Importing vla_gym registers every ``VLA/...`` id; no simulator is imported until an env is made.
"""
from __future__ import annotations

from vla_gym.core.make import make
from vla_gym.core.registry import ENTRIES, register_all

__version__ = "0.1.0"

register_all()


def __getattr__(name):  # lazy: make_vec pulls in the wrappers only when used
    if name == "make_vec":
        from vla_gym.vector.envs import make_vec

        return make_vec
    raise AttributeError(f"module 'vla_gym' has no attribute {name!r}")


__all__ = ["ENTRIES", "make", "make_vec", "register_all", "__version__"]
