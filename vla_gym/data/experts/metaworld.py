"""Meta-World's own scripted policies (``metaworld.policies``, one per task) as vla_gym experts.

Each policy reads Meta-World's 39-D observation, goal included (privileged state: the backend's
``raw_observation``), and returns Meta-World's 4-D action, which is the Meta-World env's action unchanged.

    >>> import gymnasium as gym, vla_gym
    >>> env = gym.make("VLA/MetaWorld-push-v0")                                  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)                                            # doctest: +SKIP
    >>> expert = metaworld_expert(env)                                           # doctest: +SKIP
    >>> expert().shape                                                           # doctest: +SKIP
    (4,)
"""
from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from vla_gym.backends.base import TaskSpec
from vla_gym.tasks.metaworld import SUITE


def has_metaworld_expert(task: TaskSpec) -> bool:
    """Every Meta-World task has a scripted policy (no simulator needed)."""
    return task.suite == SUITE and "metaworld_name" in task.extra


def metaworld_expert(env) -> Callable[[], np.ndarray]:
    """After ``env.reset()``: Meta-World's scripted policy for the current task, called once per step."""
    backend = getattr(env.unwrapped, "backend", None)
    if getattr(backend, "raw_observation", None) is None:
        raise TypeError(f"{env} is not a vla_gym Meta-World env (VLA/MetaWorld...) that has been reset")
    from metaworld.policies import ENV_POLICY_MAP

    policy = ENV_POLICY_MAP[env.unwrapped.task.extra["metaworld_name"]]()

    def act() -> np.ndarray:
        with warnings.catch_warnings():  # "Constant(s) may be too high": Meta-World clips, as vla_gym does
            warnings.simplefilter("ignore", UserWarning)
            return np.asarray(policy.get_action(backend.raw_observation), dtype=np.float64)

    return act
