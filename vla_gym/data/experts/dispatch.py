"""Which scripted expert plays a task: :func:`expert_for` (after ``env.reset()``) and :func:`has_expert` (no simulator).

An expert is a per-episode callable returning the next 7-D action (vla_gym's convention, gripper +1 closed) from
the simulator's true object and goal poses; the policy it teaches only sees the cameras, its proprioception and
the instruction. ManiSkill ``PushCube``: :mod:`vla_gym.data.experts.maniskill`; LIBERO:
:func:`vla_gym.data.experts.libero.libero_expert` (pick-and-place and knob state machines on the BDDL goal);
Meta-World: its own scripted policy for each of the 50 tasks (:mod:`vla_gym.data.experts.metaworld`; 4-D actions,
Meta-World's convention).

    >>> import gymnasium as gym, vla_gym
    >>> env = gym.make("VLA/ManiSkill-PushCube-v0", obs_mode="state")          # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)                                          # doctest: +SKIP
    >>> action = expert_for(env)()                                             # doctest: +SKIP
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vla_gym.backends.base import TaskSpec
from vla_gym.data.experts.libero import libero_expert
from vla_gym.data.experts.libero_tasks import SUPPORTED as LIBERO_SUPPORTED
from vla_gym.data.experts.maniskill import MANISKILL_EXPERTS, maniskill_env
from vla_gym.data.experts.metaworld import has_metaworld_expert, metaworld_expert


def has_expert(task: TaskSpec) -> bool:
    """Whether :func:`expert_for` has an expert for ``task`` (no simulator needed)."""
    if task.name in MANISKILL_EXPERTS and "maniskill_id" in task.extra:
        return True
    return has_metaworld_expert(task) or (task.suite, task.name) in LIBERO_SUPPORTED


def expert_for(env) -> Callable[[], np.ndarray]:
    """After ``env.reset()``: the scripted expert of the env's current task for this episode.

    Each call returns the next action (7-D; Meta-World: 4-D). Raises KeyError naming the tasks that have an expert.
    """
    task = env.unwrapped.task
    if task is None:
        raise RuntimeError("call env.reset() before expert_for(env)")
    if getattr(getattr(env.unwrapped, "backend", None), "maniskill_env", None) is not None:
        if task.name not in MANISKILL_EXPERTS:
            raise KeyError(f"no scripted expert for ManiSkill task {task.name!r}; experts exist for "
                           f"{sorted(MANISKILL_EXPERTS)}")
        ms_env, expert = maniskill_env(env), MANISKILL_EXPERTS[task.name]
        return lambda: expert(ms_env)
    if task.suite.startswith("libero"):
        return libero_expert(env)
    if has_metaworld_expert(task):
        return metaworld_expert(env)
    raise KeyError(f"no scripted expert for {task.suite}/{task.name}: experts exist for ManiSkill "
                   f"{sorted(MANISKILL_EXPERTS)}, every Meta-World task and the LIBERO tasks in "
                   "vla_gym.data.experts.libero_tasks.SUPPORTED")
