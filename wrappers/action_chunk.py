"""``ActionChunk``: the policy sends ``K`` actions at once; only the last one renders the cameras.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.wrappers import ActionChunk
    >>> env = ActionChunk(gym.make("VLA/Libero10-v0", task_id=0), chunk_size=8)   # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)                                              # doctest: +SKIP
    >>> obs, reward, terminated, truncated, info = env.step(chunk)   # chunk: (8, 7)  # doctest: +SKIP
    >>> info["chunk_steps"], info["chunk_rewards"]        # 8, array of 8 per-step rewards  # doctest: +SKIP

A step runs the actions in order, each through ``self.env.step`` (so every wrapper below ActionChunk sees
every sub-step), and stops early when a sub-step terminates or truncates. It returns the observation after
the last executed action, the summed reward, that sub-step's ``terminated`` / ``truncated`` / info, plus

- ``info["chunk_steps"]``: how many actions ran (1..K),
- ``info["chunk_rewards"]``: float64 array of shape (K,): per-step rewards, zero after ``chunk_steps``
  (fixed length so that vector envs can batch it).

A chunk shorter than ``K`` (shape ``(k, action_dim)``, ``1 <= k <= K``) is accepted and runs ``k`` steps.

How the renders are skipped: every sub-step but the last is taken inside
``with env.unwrapped.skip_rendering():`` (:meth:`vla_gym.core.env.VLAEnv.skip_rendering`), a flag on the
``VLAEnv`` at the bottom of the stack. The step call itself travels through the wrappers in between as
usual; the VLAEnv advances the physics without rendering, returns the last rendered images and sets
``info["observed"] = False``, which the wrappers in between can read (a wrapper below ActionChunk that looks
at images should skip such steps). Rendering is most of a step's cost (LIBERO: see ``docs/wrappers.md``
for the measured speed-up).

If the chunk ends early on a skipped sub-step (the episode ended, e.g. a ``TimeLimit`` below ActionChunk
truncated it), the cameras are rendered once with ``VLAEnv.observe()`` and the fresh observation is passed
up through the observation-transforming layers in between (``gym.ObservationWrapper``s, and wrappers such
as :class:`~vla_gym.wrappers.Perturb` that transform observations in ``step`` and offer the same transform as
``refresh_observation(obs)``), so the chunk still renders exactly once. A wrapper below ActionChunk that
changes the observation space with neither could not be replayed that way, so it is refused (put it above
ActionChunk).

Placement: anywhere above the ``VLAEnv``. ``gym.make(id, max_episode_steps=N)``'s ``TimeLimit`` below it
counts env steps (sub-steps), like the VLAEnv's own per-task limit. ``metadata["render_fps"]`` is divided by
``K`` (one observation per chunk), so videos recorded above it play in real time.
"""
from __future__ import annotations

import contextlib

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vla_gym.core.env import VLAEnv


def wrappers_between(env: gym.Env) -> list[gym.Wrapper]:
    """The wrappers of ``env`` down to the unwrapped env, innermost first."""
    layers = []
    while isinstance(env, gym.Wrapper):
        layers.append(env)
        env = env.env
    return layers[::-1]


class ActionChunk(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Run a chunk of ``chunk_size`` actions per step; only the last sub-step renders (module docstring)."""

    def __init__(self, env: gym.Env, chunk_size: int):
        gym.utils.RecordConstructorArgs.__init__(self, chunk_size=chunk_size)
        super().__init__(env)
        if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
        if not isinstance(env.unwrapped, VLAEnv):
            raise TypeError(f"ActionChunk needs a vla_gym VLAEnv at the bottom of the stack (it skips renders "
                            f"with VLAEnv.skip_rendering()), got {type(env.unwrapped).__name__}")
        self.vla_env: VLAEnv = env.unwrapped
        # the observation transforms between, innermost first: replayed on a fresh observation
        self.observation_layers = []
        for layer in wrappers_between(env):
            if isinstance(layer, gym.ObservationWrapper):
                self.observation_layers.append(layer.observation)
            elif callable(getattr(layer, "refresh_observation", None)):
                self.observation_layers.append(layer.refresh_observation)
            elif getattr(layer, "_observation_space", None) is not None:
                raise ValueError(
                    f"{type(layer).__name__} below ActionChunk changes the observation space without being a "
                    "gymnasium ObservationWrapper (nor offering refresh_observation(obs)), so ActionChunk could not "
                    f"refresh a skipped observation through it: apply {type(layer).__name__} on top of ActionChunk "
                    "instead"
                )
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
            with self.vla_env.skip_rendering() if index < last else contextlib.nullcontext():
                obs, reward, terminated, truncated, info = self.env.step(action)
            rewards[index] = reward
            if terminated or truncated:
                break
        if info.get("observed") is False:  # the episode ended on a skipped sub-step
            obs = self._fresh_observation()
            info["observed"] = True
        info["chunk_steps"] = index + 1
        info["chunk_rewards"] = rewards
        return obs, float(rewards.sum()), terminated, truncated, info

    def _fresh_observation(self):
        """Render now and pass the observation up through the observation transforms below ActionChunk."""
        obs = self.vla_env.observe()
        for transform in self.observation_layers:
            obs = transform(obs)
        return obs
