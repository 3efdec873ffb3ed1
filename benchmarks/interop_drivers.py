"""vla_gym ids as other RL libraries vectorize them, each behind one small driving interface.

Used by ``tests/test_interop.py`` (the library x start-method matrix) and
``benchmarks/bench_vectorizers.py`` (throughput side by side); the builders are also the
copy-paste recipes of docs/interop.md, written once::

    >>> from interop_drivers import VECTORIZERS, make_vectorized
    >>> "gymnasium-async" in VECTORIZERS and "sb3-subproc-spawn" in VECTORIZERS
    True
    >>> run = make_vectorized("sb3-dummy", "VLA/ManiSkill-PushCube-v0", 2, obs_mode="state")  # doctest: +SKIP
    >>> run.reset(seed=0); dones = run.step(run.random_actions()); run.close()                # doctest: +SKIP

Each :class:`VectorRun` hides one library's calling convention: ``reset(seed)``, ``step(actions) -> dones``
(one bool per sub-env, the episode ended on this step, whatever the library calls it), ``close()``.
``chunk_size`` puts :class:`vla_gym.wrappers.ActionChunk` inside every sub-env. SB3 gets
:class:`vla_gym.wrappers.SB3Compat` (SB3 has no text space); TorchRL carries the instruction itself.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import gymnasium as gym
import numpy as np

import vla_gym  # registers the VLA/... ids, also in the worker processes that unpickle these factories
from vla_gym.wrappers import ActionChunk, SB3Compat

#: name -> (library, how it starts processes); every name :func:`make_vectorized` accepts
VECTORIZERS: dict[str, tuple[str, str]] = {
    "gymnasium-sync": ("gymnasium", "in process"),
    "gymnasium-async": ("gymnasium", "default (fork)"),
    "gymnasium-async-spawn": ("gymnasium", "spawn"),
    "sb3-subproc-fork": ("stable-baselines3", "fork"),
    "sb3-subproc-forkserver": ("stable-baselines3", "forkserver (default)"),
    "sb3-subproc-spawn": ("stable-baselines3", "spawn"),
    "sb3-dummy": ("stable-baselines3", "in process"),
    "torchrl-gymenv": ("torchrl", "in process"),
    "torchrl-parallel": ("torchrl", "default (spawn)"),
    "vla_gym-async": ("vla_gym", "spawn"),
}


def make_single(env_id: str, chunk_size: int = 1, sb3: bool = False, **env_kwargs) -> gym.Env:
    """One env as the libraries' worker processes make it (module level, so it pickles for spawn)."""
    env = gym.make(env_id, **env_kwargs)
    if chunk_size > 1:
        env = ActionChunk(env, chunk_size=chunk_size)
    if sb3:
        env = SB3Compat(env)
    return env


class VectorRun:
    """One library's vector env driven the same way: reset, step -> dones, close."""

    def __init__(self, env, num_envs: int, action_space: gym.spaces.Box,
                 step: Callable[[np.ndarray], np.ndarray], reset: Callable[[int], None]):
        self.env, self.num_envs, self.action_space = env, num_envs, action_space
        self._step, self._reset = step, reset
        self._rng = np.random.default_rng(0)

    def random_actions(self) -> np.ndarray:
        low, high = self.action_space.low, self.action_space.high
        return self._rng.uniform(low, high, (self.num_envs, *self.action_space.shape)).astype(np.float32)

    def reset(self, seed: int = 0) -> None:
        self._reset(seed)

    def step(self, actions: np.ndarray) -> np.ndarray:
        return np.asarray(self._step(actions), dtype=bool).reshape(self.num_envs)

    def close(self) -> None:
        self.env.close()


def _gymnasium(vector_env) -> VectorRun:
    def step(actions):
        _, _, terminated, truncated, _ = vector_env.step(actions)
        return terminated | truncated

    return VectorRun(vector_env, vector_env.num_envs, vector_env.single_action_space, step,
                     lambda seed: vector_env.reset(seed=seed))


def _sb3(vec_env) -> VectorRun:
    def reset(seed):
        vec_env.seed(seed)
        vec_env.reset()

    def step(actions):
        return vec_env.step(actions)[2]

    return VectorRun(vec_env, vec_env.num_envs, vec_env.action_space, step, reset)


def _torchrl(env, num_envs: int) -> VectorRun:
    import torch

    state = {}

    def reset(seed):
        env.set_seed(seed)
        state["td"] = env.reset()

    def step(actions):
        td = state["td"]
        td["action"] = torch.as_tensor(actions).reshape(td.batch_size + env.action_spec.shape[len(td.batch_size):])
        out, state["td"] = env.step_and_maybe_reset(td)
        return out["next", "done"].reshape(num_envs).numpy()

    spec = env.action_spec  # (batch..., action...) torch bounds -> one sub-env's gymnasium Box
    batch_dims = len(env.batch_size)
    low = spec.space.low.reshape(-1, *spec.shape[batch_dims:])[0].numpy()
    high = spec.space.high.reshape(-1, *spec.shape[batch_dims:])[0].numpy()
    return VectorRun(env, num_envs, gym.spaces.Box(low, high, dtype=np.float32), step, reset)


def make_vectorized(name: str, env_id: str, num_envs: int, chunk_size: int = 1, **env_kwargs) -> VectorRun:
    """``num_envs`` copies of ``env_id`` vectorized by the library and start method ``name`` (:data:`VECTORIZERS`)."""
    if name not in VECTORIZERS:
        raise ValueError(f"unknown vectorizer {name!r}; choose from {list(VECTORIZERS)}")
    if name.startswith("gymnasium"):
        wrappers = [functools.partial(_chunk, chunk_size=chunk_size)] if chunk_size > 1 else None
        mode = "sync" if name == "gymnasium-sync" else "async"
        vector_kwargs = {"context": "spawn"} if name == "gymnasium-async-spawn" else None
        return _gymnasium(gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode,
                                       vector_kwargs=vector_kwargs, wrappers=wrappers, **env_kwargs))
    if name.startswith("sb3"):
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

        env_fns = [functools.partial(make_single, env_id, chunk_size, True, **env_kwargs)] * num_envs
        if name == "sb3-dummy":
            return _sb3(DummyVecEnv(env_fns))
        return _sb3(SubprocVecEnv(env_fns, start_method=name.rsplit("-", 1)[1]))
    if name.startswith("torchrl"):
        from torchrl.envs import ParallelEnv

        create = functools.partial(torchrl_env, env_id, chunk_size, **env_kwargs)
        if name == "torchrl-gymenv":
            if num_envs != 1:
                raise ValueError("torchrl-gymenv is one env; use torchrl-parallel for several")
            return _torchrl(create(), 1)
        return _torchrl(ParallelEnv(num_envs, create), num_envs)
    wrappers = [functools.partial(ActionChunk, chunk_size=chunk_size)] if chunk_size > 1 else []
    return _gymnasium(vla_gym.make_vec(env_id, num_envs, wrappers=wrappers, **env_kwargs))


def _chunk(env: gym.Env, chunk_size: int) -> gym.Env:
    return ActionChunk(env, chunk_size=chunk_size)


def torchrl_env(env_id: str, chunk_size: int = 1, **env_kwargs):
    """A TorchRL env of ``env_id``: ``GymEnv`` itself, or ``GymWrapper`` around the ActionChunk-wrapped env."""
    from torchrl.envs import GymEnv, GymWrapper

    if chunk_size == 1:
        return GymEnv(env_id, **env_kwargs)
    return GymWrapper(make_single(env_id, chunk_size, **env_kwargs))
