"""Demonstrations without a motion planner: scripted experts that read ManiSkill's privileged state.

    >>> from vla_gym.demos import collect_demos
    >>> demos = collect_demos("VLA/ManiSkill-PushCube-v0", episodes=20, seed=0, image_size=128)   # doctest: +SKIP
    >>> demos["images"]["main"].shape, demos["actions"].shape, demos["success_rate"]             # doctest: +SKIP
    ((812, 128, 128, 3), (812, 7), 1.0)

The expert acts on the simulator's true object and goal poses (the policy it teaches only sees the
cameras, its proprioception and the instruction). It is a memoryless function of that state, so a
policy can imitate it from what it observes. ``noise`` executes the expert's action plus Gaussian noise
while recording the clean expert action as the label (DART): the demos then cover the small mistakes
a cloned policy makes, and behaviour cloning drifts less. Only successful episodes are kept.

Experts: ``PushCube`` (``pd_ee_delta_pose``: go behind the cube, lower, push it along +x to the goal).
ManiSkill's own motion-planning solutions need ``mplib``, which crashes with numpy 2 (see FACTS).
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


EXPERTS: dict[str, Callable[[Any], np.ndarray]] = {"PushCube": push_cube_expert}


def expert_for(env) -> Callable[[Any], np.ndarray]:
    """The scripted expert of the env's current task (raises naming the tasks that have one)."""
    task = env.unwrapped.task.name
    if task not in EXPERTS:
        raise KeyError(f"no scripted expert for task {task!r}; experts exist for {sorted(EXPERTS)}")
    return EXPERTS[task]


def collect_demos(env_id: str = "VLA/ManiSkill-PushCube-v0", episodes: int = 20, seed: int = 0,
                  noise: float = 0.3, max_attempts: int | None = None, **env_kwargs) -> dict[str, Any]:
    """Run the expert for ``episodes`` successful episodes; returns stacked per-step arrays.

    Keys: ``images`` (role -> uint8 ``[N, H, W, 3]``), ``state`` ``[N, D]``, ``instruction`` (list of N),
    ``actions`` ``[N, A]`` (clean expert labels), ``episode`` ``[N]`` (index of the kept episode),
    ``success_rate`` (kept / attempted) and ``seeds`` (the reset seeds of the kept episodes).
    """
    import gymnasium as gym

    import vla_gym  # noqa: F401  (registers the ids)

    env = gym.make(env_id, **env_kwargs)
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {"images": [], "state": [], "instruction": [], "actions": [], "episode": []}
    kept_seeds, attempts = [], 0
    try:
        while len(kept_seeds) < episodes and attempts < (max_attempts or 3 * episodes):
            episode_seed = seed + attempts
            attempts += 1
            obs, info = env.reset(seed=episode_seed)
            expert, ms_env = expert_for(env), maniskill_env(env)
            steps, done, success = [], False, False
            while not done:
                action = expert(ms_env)
                steps.append((obs, action))
                executed = np.clip(action + noise * rng.standard_normal(action.shape) * (action != 0), -1, 1)
                obs, _, terminated, truncated, info = env.step(executed.astype(np.float32))
                success |= bool(info.get("success", False))
                done = terminated or truncated or success
            if success:
                for obs_t, action_t in steps:
                    rows["images"].append(obs_t["images"])
                    rows["state"].append(obs_t["state"])
                    rows["instruction"].append(obs_t["instruction"])
                    rows["actions"].append(action_t)
                    rows["episode"].append(len(kept_seeds))
                kept_seeds.append(episode_seed)
    finally:
        env.close()
    if not kept_seeds:
        raise RuntimeError(f"the expert solved none of {attempts} episodes of {env_id}")
    return {
        "images": {role: np.stack([im[role] for im in rows["images"]]) for role in rows["images"][0]},
        "state": np.stack(rows["state"]).astype(np.float32),
        "instruction": rows["instruction"],
        "actions": np.stack(rows["actions"]).astype(np.float32),
        "episode": np.asarray(rows["episode"]),
        "success_rate": len(kept_seeds) / attempts,
        "seeds": kept_seeds,
    }
