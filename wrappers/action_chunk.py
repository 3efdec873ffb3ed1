"""``ActionChunk``: the policy sends ``K`` actions at once; only the last one renders the cameras.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.wrappers import ActionChunk
    >>> env = ActionChunk(gym.make("VLA/Libero10-v0", task_id=0), chunk_size=8)   # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)                                              # doctest: +SKIP
    >>> obs, reward, terminated, truncated, info = env.step(chunk)   # chunk: (8, 7)  # doctest: +SKIP
    >>> info["chunk_steps"], info["chunk_rewards"]        # 8, array of 8 per-step rewards  # doctest: +SKIP

A step runs the actions in order and stops early when a sub-step terminates or truncates. It returns
the observation after the last executed action, the summed reward, that sub-step's ``terminated`` /
``truncated`` / info, plus

- ``info["chunk_steps"]``: how many actions ran (1..K),
- ``info["chunk_rewards"]``: float64 array of shape (K,): per-step rewards, zero after ``chunk_steps``
  (fixed length so that vector envs can batch it).

A chunk shorter than ``K`` (shape ``(k, action_dim)``, ``1 <= k <= K``) is accepted and runs ``k`` steps.

Speed: every sub-step but the last calls ``VLAEnv.step(action, observe=False)``, which advances
the physics without rendering; rendering is most of a step's cost (LIBERO: see
``docs/wrappers.md`` for the measured speed-up). If a sub-step ends the episode early, the cameras
are rendered once for the returned observation.

Placement: ActionChunk must sit directly on the ``VLAEnv`` (the wrappers ``gym.make`` adds,
``OrderEnforcing`` and ``PassiveEnvChecker``, may sit between: they only check the call order and
are skipped for sub-steps). Other wrappers go above it; a wrapper below it would see only some of the
sub-steps, so that raises a ``ValueError``. ``gym.make(id, max_episode_steps=N)`` adds gymnasium's
``TimeLimit`` below, which would count chunks (the VLAEnv already enforces each task's limit per
env step). ``metadata["render_fps"]`` is divided by ``K`` (one observation per chunk), so videos
recorded above it play in real time.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker

from vla_gym.env import VLAEnv

#: wrappers allowed between ActionChunk and the VLAEnv: they only check call order and types
PASS_THROUGH_WRAPPERS = (OrderEnforcing, PassiveEnvChecker)


def base_vla_env(env: gym.Env, wrapper_name: str) -> VLAEnv:
    """The VLAEnv under ``env``, checking that only pass-through wrappers lie in between."""
    layer = env
    while isinstance(layer, gym.Wrapper):
        if not isinstance(layer, PASS_THROUGH_WRAPPERS):
            raise ValueError(
                f"{wrapper_name} must sit directly on the VLAEnv, but {type(layer).__name__} is below it: "
                f"apply {type(layer).__name__} on top of {wrapper_name} instead"
                + (" (gym.make(..., max_episode_steps=N) adds TimeLimit; use vla_gym.make(..., max_episode_steps=N), "
                   "which sets the VLAEnv's own limit)" if isinstance(layer, gym.wrappers.TimeLimit) else "")
            )
        layer = layer.env
    if not isinstance(layer, VLAEnv):
        raise TypeError(f"{wrapper_name} needs a vla_gym VLAEnv underneath (step(action, observe=False)), "
                        f"got {type(layer).__name__}")
    return layer


class ActionChunk(gym.Wrapper):
    """Run a chunk of ``chunk_size`` actions per step; only the last sub-step renders (module docstring)."""

    def __init__(self, env: gym.Env, chunk_size: int):
        super().__init__(env)
        if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
        self.base = base_vla_env(env, "ActionChunk")
        self.chunk_size = int(chunk_size)
        single = env.action_space
        self.action_dim = single.shape[0]
        self.action_space = spaces.Box(
            np.broadcast_to(single.low, (self.chunk_size, self.action_dim)),
            np.broadcast_to(single.high, (self.chunk_size, self.action_dim)),
            dtype=single.dtype,
        )
        self.metadata = dict(env.metadata, render_fps=env.metadata.get("render_fps", 20) / self.chunk_size)

    def _check_chunk(self, chunk) -> np.ndarray:
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.ndim != 2 or chunk.shape[1] != self.action_dim or not 1 <= chunk.shape[0] <= self.chunk_size:
            raise ValueError(
                f"ActionChunk expects actions of shape (k, {self.action_dim}) with 1 <= k <= {self.chunk_size}, "
                f"got shape {chunk.shape}"
                + ("; wrap a single action as action[None]" if chunk.shape == (self.action_dim,) else "")
            )
        return chunk

    def step(self, chunk):
        chunk = self._check_chunk(chunk)
        rewards = np.zeros(self.chunk_size, dtype=np.float64)
        last = len(chunk) - 1
        for index, action in enumerate(chunk):
            obs, reward, terminated, truncated, info = self.base.step(action, observe=index == last)
            rewards[index] = reward
            if terminated or truncated:
                break
        if not info["observed"]:  # the episode ended on an unobserved sub-step
            obs = self.base.observe()
            info["observed"] = True
        info["chunk_steps"] = index + 1
        info["chunk_rewards"] = rewards
        return obs, float(rewards.sum()), terminated, truncated, info
