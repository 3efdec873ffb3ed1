"""Recording a scripted expert's episodes: :func:`record_episode` (one, as a ``RecordedEpisode``) and
:func:`collect_demos` (a few, in memory).

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.data.expert_episodes import record_episode
    >>> env = gym.make("VLA/ManiSkill-PushCube-v0", cameras=["main"], image_size=64)     # doctest: +SKIP
    >>> episode = record_episode(env, seed=0)                                              # doctest: +SKIP
    >>> len(episode), episode.succeeded, episode.images["main"][0].shape                   # doctest: +SKIP
    (31, True, (64, 64, 3))

``noise`` executes the expert's action plus Gaussian noise while recording the clean expert action as the
label (DART): the demos then cover the small mistakes a cloned policy makes, and behaviour cloning drifts
less. ``vla-gym demos`` (:mod:`vla_gym.data.record`) records many episodes in parallel into a LeRobot v3
dataset.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from vla_gym.data.experts.dispatch import expert_for
from vla_gym.data.lerobot import RecordedEpisode


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
