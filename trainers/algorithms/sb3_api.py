"""The Stable-Baselines3-style front end of PPO and GRPO: keyword constructor, ``save``, ``load``, ``predict``.

    from vla_gym.trainers import PPO
    model = PPO("mlp", "CartPole-v1", num_envs=8, n_steps=32, learning_rate=1e-3)   # hyperparameters of cfg.ppo
    model.learn(100_000)
    model.save("cartpole.pt")
    model = PPO.load("cartpole.pt")
    action, _ = model.predict(obs, deterministic=True)

The constructor turns its keywords into the same validated :class:`~vla_gym.trainers.runtime.config.Config` a
YAML file gives :meth:`~SB3Interface.from_config` (what ``torchrun trainers/ppo.py --config ...`` does):
every keyword not named below is a field of the algorithm's section (``cfg.ppo`` / ``cfg.grpo``).
The algorithm itself (:class:`~vla_gym.trainers.algorithms.on_policy.OnPolicyAlgorithm`) provides ``algo``,
``_setup``, ``state_dict`` and ``load_state``.
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from vla_gym.trainers.policies import Policy
from vla_gym.trainers.rollout.batch import to_torch
from vla_gym.trainers.runtime.checkpoint import atomic_save, load_checkpoint
from vla_gym.trainers.runtime.config import Config, config_from_checkpoint, config_from_dict
from vla_gym.trainers.runtime.distributed import Distributed


class SB3Interface:
    def __init__(
        self,
        policy: str | Policy = "mlp",
        env: str | VectorEnv | gym.Env | None = None,
        *,
        config: Config | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        env_kwargs: dict[str, Any] | None = None,
        num_envs: int | None = None,
        seed: int | None = None,
        device: str | None = None,
        run_dir: str | None = None,
        name: str | None = None,
        progress_bar: bool = False,
        observation_space: gym.Space | None = None,
        action_space: gym.Space | None = None,
        dist: Distributed | None = None,
        **hparams,
    ):
        """``policy``: a registered name or a :class:`Policy`; ``env``: an env id, a vector env (this rank's
        shard) or one env. Files are written only with ``run_dir`` (then under ``{run_dir}/{name}/``)."""
        data = dataclasses.asdict(config or Config())
        data[self.algo].update(hparams)
        if isinstance(policy, str):
            data["policy"]["name"] = policy
        if policy_kwargs is not None:
            data["policy"]["kwargs"] = dict(policy_kwargs)
        if isinstance(env, str):
            data["env"]["id"] = env
        elif env is not None and config is None:
            # evaluation envs are made from config.env, which does not describe an env instance (as in SB3, a
            # model built on an instance does not evaluate unless asked: pass an id, or a config with eval.*)
            data["eval"]["episodes"] = 0
        if env_kwargs is not None:
            data["env"]["kwargs"] = dict(env_kwargs)
        for key, value in (("seed", seed), ("device", device), ("run_dir", run_dir), ("name", name)):
            if value is not None:
                data[key] = value
        if num_envs is not None:
            data["env"]["num_envs"] = num_envs
        data["logging"]["progress_bar"] = progress_bar
        cfg = config_from_dict(data)
        if isinstance(env, gym.Env):
            env = SyncVectorEnv([lambda: env], autoreset_mode=AutoresetMode.SAME_STEP)
        self._setup(cfg, dist, policy if isinstance(policy, Policy) else None, env if isinstance(env, VectorEnv) else None,
                    observation_space, action_space, write_run=run_dir is not None)

    @classmethod
    def from_config(
        cls, cfg: Config, dist: Distributed | None = None, write_run: bool = True, env: VectorEnv | None = None,
        observation_space: gym.Space | None = None, action_space: gym.Space | None = None,
    ):
        """Build from a validated config (the torchrun entry points use this, with ``write_run=True``)."""
        self = cls.__new__(cls)
        self._setup(cfg, dist, None, env, observation_space, action_space, write_run)
        return self

    def save(self, path: str | pathlib.Path) -> pathlib.Path:
        """Write the model (with optimizer and counters) to ``path`` atomically (rank 0 writes; every rank calls
        it under ``distributed.strategy: fsdp``, which gathers the parameters)."""
        state = self.state_dict()
        if not self.dist.is_main:
            return pathlib.Path(path)
        return atomic_save(state, path)

    @classmethod
    def load(cls, path: str | pathlib.Path, env: VectorEnv | None = None, device: str = "auto", **overrides):
        """Rebuild a saved model; ``env`` is only needed to continue training (made from the config otherwise)."""
        state = load_checkpoint(path)
        if state["algo"] != cls.algo:
            raise ValueError(f"{path} is a {state['algo'].upper()} checkpoint: use {state['algo'].upper()}.load")
        if state.get("policy_name") is None:
            raise ValueError(f"{path}: the policy was passed in as an instance; build the algorithm with the same "
                             "policy and call load_state(load_checkpoint(path))")
        data = state["config"]
        data["device"] = device
        for key, value in overrides.items():
            data[cls.algo][key] = value
        cfg = config_from_checkpoint(data)
        self = cls.from_config(cfg, dist=Distributed(device=torch.device(
            "cuda" if device == "cuda" or (device == "auto" and torch.cuda.is_available()) else "cpu")),
            write_run=False, env=env, observation_space=state["observation_space"], action_space=state["action_space"])
        self.load_state(state)
        return self

    def predict(self, obs: Any, deterministic: bool = True) -> tuple[np.ndarray, None]:
        """Actions for one observation or a batch (numpy in, numpy out), like SB3's ``predict``."""
        single = _is_single(obs, self.policy.observation_space)
        batch = _add_batch_dim(obs) if single else obs
        with torch.inference_mode():
            actions, _, _ = self.policy.act(to_torch(batch, self.device), deterministic=deterministic)
        out = self.policy.env_actions(actions)
        return (out[0] if single else out), None


def _is_single(obs: Any, space: gym.Space) -> bool:
    if isinstance(space, gym.spaces.Dict) and "state" in space.spaces:
        return np.asarray(obs["state"]).ndim == len(space["state"].shape)
    if isinstance(space, gym.spaces.Box):
        return np.asarray(obs).shape == space.shape
    raise TypeError(f"predict() cannot tell single from batched observations for {space}")


def _add_batch_dim(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {key: _add_batch_dim(value) for key, value in obs.items()}
    if isinstance(obs, str):
        return [obs]
    return np.asarray(obs)[None]
