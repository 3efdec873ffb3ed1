"""Scripted experts that read the simulator's privileged state, and recording their episodes.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.data.experts.dispatch import record_episode
    >>> env = gym.make("VLA/ManiSkill-PushCube-v0", cameras=["main"], image_size=64)     # doctest: +SKIP
    >>> episode = record_episode(env, seed=0)                                              # doctest: +SKIP
    >>> len(episode), episode.succeeded, episode.images["main"][0].shape                   # doctest: +SKIP
    (31, True, (64, 64, 3))

:func:`expert_for` gives, after ``env.reset()``, a per-episode expert: a callable that returns the next 7-D
action (vla_gym's convention, gripper +1 closed) from the simulator's true object and goal poses. The policy
it teaches only sees the cameras, its proprioception and the instruction.

- ManiSkill ``PushCube`` (``pd_ee_delta_pose``): go behind the cube, lower, push it along +x to the goal
  (:func:`push_cube_expert`, memoryless). ManiSkill's own motion-planning solutions need ``mplib``, which
  crashes with numpy 2, hence this expert.
- LIBERO: :func:`vla_gym.data.experts.libero.libero_expert` (pick-and-place state machines on the BDDL goal).

``noise`` executes the expert's action plus Gaussian noise while recording the clean expert action as the
label (DART): the demos then cover the small mistakes a cloned policy makes, and behaviour cloning drifts
less. ``vla-gym demos`` (:mod:`vla_gym.data.record`) records many episodes in parallel into a LeRobot v3
dataset; :func:`collect_demos` returns a few in memory.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vla_gym.backends.base import TaskSpec
from vla_gym.data.experts.libero import libero_expert
from vla_gym.data.experts.libero_tasks import SUPPORTED as LIBERO_SUPPORTED
from vla_gym.data.lerobot import RecordedEpisode

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


def has_expert(task: TaskSpec) -> bool:
    """Whether :func:`expert_for` has an expert for ``task`` (no simulator needed)."""
    if task.name in MANISKILL_EXPERTS and "maniskill_id" in task.extra:
        return True
    return (task.suite, task.name) in LIBERO_SUPPORTED


def expert_for(env) -> Callable[[], np.ndarray]:
    """After ``env.reset()``: the scripted expert of the env's current task for this episode.

    Each call returns the next 7-D action. Raises KeyError naming the tasks that have an expert.
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
    raise KeyError(f"no scripted expert for {task.suite}/{task.name}: experts exist for ManiSkill "
                   f"{sorted(MANISKILL_EXPERTS)} and the LIBERO tasks in vla_gym.data.experts.libero_tasks.SUPPORTED")


def record_episode(env, seed: int | None = None, task_id: int | None = None, init_state_id: int | None = None,
                   noise: float = 0.0, rng: np.random.Generator | None = None) -> RecordedEpisode:
    """Run the expert for one episode from ``reset(seed, options={task_id, init_state_id})``.

    Frame t holds the observation before action t; the episode ends on success or at the step limit.
    ``noise`` (DART) perturbs the executed actions of non-zero expert dimensions, never the labels.
    """
    options = {k: v for k, v in (("task_id", task_id), ("init_state_id", init_state_id)) if v is not None}
    rng = rng if rng is not None else np.random.default_rng(seed)
    obs, info = env.reset(seed=seed, options=options)
    expert = expert_for(env)
    images: dict[str, list[np.ndarray]] = {role: [] for role in obs.get("images", {})}
    states, actions, rewards, successes = [], [], [], []
    done = False
    while not done:
        action = np.asarray(expert(), dtype=np.float64)
        for role in images:
            images[role].append(np.asarray(obs["images"][role]))
        states.append(np.asarray(obs["state"], dtype=np.float32))
        actions.append(action.astype(np.float32))
        executed = np.clip(action + noise * rng.standard_normal(action.shape) * (action != 0), -1, 1) if noise \
            else action
        obs, reward, terminated, truncated, info = env.step(executed.astype(np.float32))
        rewards.append(float(reward))
        successes.append(bool(info.get("success", False)))
        done = terminated or truncated or successes[-1]
    return RecordedEpisode(
        images=images, state=np.stack(states), action=np.stack(actions), reward=np.asarray(rewards, np.float32),
        success=np.asarray(successes), instruction=str(obs["instruction"]), task_id=int(info["task_id"]),
        task_name=str(info["task_name"]), init_state_id=info.get("init_state_id"), seed=seed,
    )


def collect_demos(env_id: str = "VLA/ManiSkill-PushCube-v0", episodes: int = 20, seed: int = 0,
                  noise: float = 0.3, max_attempts: int | None = None, **env_kwargs) -> dict[str, Any]:
    """Run the expert for ``episodes`` successful episodes in this process; returns stacked per-step arrays.

    Keys: ``images`` (role -> uint8 ``[N, H, W, 3]``), ``state`` ``[N, D]``, ``instruction`` (list of N),
    ``actions`` ``[N, A]`` (clean expert labels), ``episode`` ``[N]`` (index of the kept episode),
    ``success_rate`` (kept / attempted) and ``seeds`` (the reset seeds of the kept episodes). For datasets on
    disk (parallel, resumable, LeRobot v3) use ``vla-gym demos`` instead.
    """
    import gymnasium as gym

    import vla_gym  # noqa: F401  (registers the ids)

    env = gym.make(env_id, **env_kwargs)
    rng = np.random.default_rng(seed)
    kept: list[RecordedEpisode] = []
    attempts = 0
    try:
        while len(kept) < episodes and attempts < (max_attempts or 3 * episodes):
            episode = record_episode(env, seed=seed + attempts, noise=noise, rng=rng)
            attempts += 1
            if episode.succeeded:
                kept.append(episode)
    finally:
        env.close()
    if not kept:
        raise RuntimeError(f"the expert solved none of {attempts} episodes of {env_id}")
    return {
        "images": {role: np.concatenate([np.stack(e.images[role]) for e in kept]) for role in kept[0].images},
        "state": np.concatenate([e.state for e in kept]).astype(np.float32),
        "instruction": [e.instruction for e in kept for _ in range(len(e))],
        "actions": np.concatenate([e.action for e in kept]).astype(np.float32),
        "episode": np.concatenate([np.full(len(e), k) for k, e in enumerate(kept)]),
        "success_rate": len(kept) / attempts,
        "seeds": [e.seed for e in kept],
    }
