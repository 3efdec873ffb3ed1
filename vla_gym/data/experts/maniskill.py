"""ManiSkill's scripted expert: ``PushCube`` from privileged state (go behind the cube, lower, push it to the goal).

ManiSkill's own motion-planning solutions need ``mplib``, which crashes with numpy 2, hence this expert. It is
memoryless: each call reads the true cube, goal and gripper poses of the unwrapped ManiSkill env.

    >>> sorted(MANISKILL_EXPERTS)
    ['PushCube']
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: pd_ee_delta_pose maps action 1.0 to this many metres of end-effector motion per step
EE_DELTA_SCALE = 0.1


def maniskill_env(env) -> Any:
    """The ManiSkill env (unwrapped) behind a vla_gym ManiSkill env, for privileged state."""
    inner = getattr(getattr(env.unwrapped, "backend", None), "maniskill_env", None)
    if inner is None:
        raise TypeError(f"{env} is not a vla_gym ManiSkill env (VLA/ManiSkill-...) that has been reset")
    return inner


def _move(tcp: np.ndarray, target: np.ndarray, gain: float = 1.5) -> np.ndarray:
    return np.clip(gain * (target - tcp) / EE_DELTA_SCALE, -1.0, 1.0)


def push_cube_expert(ms_env) -> np.ndarray:
    """7-D ``pd_ee_delta_pose`` action (vla_gym gripper convention, +1 closed) for ManiSkill's PushCube."""
    cube = ms_env.obj.pose.p[0].cpu().numpy().astype(np.float64)
    goal = ms_env.goal_region.pose.p[0].cpu().numpy().astype(np.float64)
    tcp = ms_env.agent.tcp.pose.p[0].cpu().numpy().astype(np.float64)
    half = float(ms_env.cube_half_size)
    behind = np.array([cube[0] - half - 0.03, cube[1], half])
    aligned = abs(tcp[1] - cube[1]) < 0.012 and tcp[0] < cube[0] - half - 0.01
    if aligned and tcp[2] < 2.5 * half:
        target = np.array([goal[0], cube[1], half])          # push through the cube to the goal
    elif np.linalg.norm(tcp[:2] - behind[:2]) < 0.012:
        target = behind                                      # above the pre-push point: go down
    else:
        target = np.array([behind[0], behind[1], 0.08])       # travel high to the pre-push point
    action = np.zeros(7)
    action[:3] = _move(tcp, target)
    action[6] = 1.0
    return action


#: ManiSkill task name -> memoryless expert of the unwrapped ManiSkill env
MANISKILL_EXPERTS: dict[str, Callable[[Any], np.ndarray]] = {"PushCube": push_cube_expert}
