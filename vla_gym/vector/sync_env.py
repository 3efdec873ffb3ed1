"""vla_gym's sync vector env: every sub-env in this process, stepped one after another.

    envs = VLASyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    obs, infos = envs.reset(seed=0, options={"per_env": [{"x": 1}, None]})   # sub-env 0 with its own options
    obs, rewards, terminated, truncated, infos = envs.step(envs.action_space.sample())
    envs.envs[0]                                                               # the sub-envs themselves
    envs.close()

``vla_gym.make_vec(..., vectorization="sync")`` builds it: for debugging and cheap envs. A
:class:`gymnasium.vector.VectorEnv` with gymnasium's ``SyncVectorEnv`` surface (``envs``, ``reset`` / ``step``,
``call`` / ``get_attr`` / ``set_attr`` / ``render``, ``close``, ``metadata["autoreset_mode"]``) on gymnasium's public
API only; the autoreset rule is :class:`vla_gym.vector.worker.SubEnv`'s, the same as in the async env's workers, and
the infos are batched in gymnasium's layout (:mod:`vla_gym.vector.batching`). Its sub-envs step in this process,
so it does not step subsets of them (pipelined rollouts need :class:`~vla_gym.vector.async_env.VLAAsyncVectorEnv`).
"""
from __future__ import annotations

import copy as copying
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from vla_gym.vector.batching import add_info, reset_options, seeds_and_mask, split_batch
from vla_gym.vector.worker import SubEnv


class VLASyncVectorEnv(VectorEnv):
    """Sub-envs in this process (module docstring) with per-sub-env reset options, as
    :class:`~vla_gym.vector.async_env.VLAAsyncVectorEnv`: ``reset(options={"per_env": [dict or None per sub-env],
    "reset_mask": mask})``. ``copy`` and ``autoreset_mode`` (NEXT_STEP, gymnasium's default, SAME_STEP or DISABLED)
    are gymnasium's ``SyncVectorEnv`` arguments."""

    #: reset(options={"per_env": [...]}) gives each sub-env its own options
    accepts_per_env_options = True

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], copy: bool = True,
                 autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP):
        if not env_fns:
            raise ValueError("VLASyncVectorEnv needs at least one env fn")
        self.env_fns, self.copy = env_fns, copy
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.envs: list[gym.Env] = []
        for env_fn in env_fns:
            try:
                self.envs.append(env_fn())
            except BaseException:
                self.close_extras()
                raise
        self.num_envs = len(self.envs)
        first = self.envs[0]
        self.metadata = {**first.metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = first.render_mode
        self.single_observation_space, self.single_action_space = first.observation_space, first.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        for i, env in enumerate(self.envs):
            for what in ("observation", "action"):
                if getattr(env, f"{what}_space") != getattr(self, f"single_{what}_space"):
                    self.close_extras()
                    raise RuntimeError(f"sub-env {i} has an {what} space other than sub-env 0's "
                                       f"({getattr(self, f'single_{what}_space')}): the spaces must be equal to batch them")
        self._sub_envs = [SubEnv(env, self.autoreset_mode) for env in self.envs]
        self._env_obs: list[Any] = [None] * self.num_envs
        self._observations = create_empty_array(self.single_observation_space, n=self.num_envs, fn=np.zeros)

    @property
    def np_random_seed(self) -> tuple[int, ...]:
        """The sub-envs' ``np_random_seed``."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        """The sub-envs' ``np_random``."""
        return self.get_attr("np_random")

    def reset(self, *, seed=None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs (those in ``options["reset_mask"]``; all by default) with seeds ``seed + i`` (an int),
        one each (a list) or none, and per-sub-env options under ``options["per_env"]``."""
        seeds, mask = seeds_and_mask(seed, options, self.num_envs)
        per_env = reset_options(options, self.num_envs)
        infos: dict[str, Any] = {}
        for i in np.flatnonzero(mask):
            self._env_obs[i], info = self._sub_envs[i].reset(seed=seeds[i], options=per_env[i])
            infos = add_info(infos, info, i, self.num_envs)
        return self._batch_obs(), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env on its row of ``actions`` (autoresets as ``autoreset_mode`` says)."""
        per_env = split_batch(self.action_space, actions, self.num_envs, "actions")
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=np.bool_)
        truncated = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict[str, Any] = {}
        for i, action in enumerate(per_env):
            self._env_obs[i], rewards[i], terminated[i], truncated[i], info = self._sub_envs[i].step(action)
            infos = add_info(infos, info, i, self.num_envs)
        return self._batch_obs(), rewards, terminated, truncated, infos

    def _batch_obs(self) -> Any:
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return copying.deepcopy(self._observations) if self.copy else self._observations

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Attribute ``name`` of every sub-env (through its wrappers), called with the arguments if a method."""
        return tuple(sub.call(name, args, kwargs) for sub in self._sub_envs)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` of every sub-env: one value each (a list or tuple) or the same for all."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"Values must be a list or tuple with length equal to the number of environments. "
                             f"Got `{len(values)}` values for {self.num_envs} environments.")
        for env, value in zip(self.envs, values):
            env.set_wrapper_attr(name, value)

    def render(self) -> tuple[Any, ...]:
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        """Close every sub-env (``close``'s keywords, e.g. ``terminate``, are the async env's: ignored here)."""
        for env in self.envs:
            env.close()
