"""RL trainers for vla_gym envs: PPO and GRPO on torch, distributed with torchrun.

    >>> from vla_gym.trainers import PPO
    >>> model = PPO("mlp", "CartPole-v1", num_envs=8).learn(50_000)     # doctest: +SKIP

    torchrun --nproc_per_node=2 trainers/ppo.py --config examples/configs/maniskill_pushcube_ppo.yaml
    torchrun --nproc_per_node=2 trainers/grpo.py --config examples/configs/maniskill_pushcube_grpo.yaml
    torchrun --nproc_per_node=2 trainers/eval.py --checkpoint runs/<name>/checkpoints/ckpt_<n>.pt

Pieces, one job each: :mod:`.config` (YAML + overrides), :mod:`.envs` (vector envs per rank),
:mod:`.policies` (act / evaluate interface and registry), :mod:`.rollout` and :mod:`.buffer` (PPO data),
:mod:`.advantages` (GAE, group advantages), :mod:`.losses`, :mod:`.rollout.episode_runner` (episode runner; its specs in :mod:`.rollout.episode_plan`), :mod:`.evaluation.report` (reports),
:mod:`.distributed`, :mod:`.logger`, :mod:`.checkpoint`, :mod:`.algorithm` (the update loop PPO and GRPO
share), :mod:`.sb3_api` (keyword constructor, save / load / predict), :mod:`.run` (run directory, resume,
logger, checkpoint cadence), :mod:`.periodic_eval` (evaluation episodes and videos during training).
See docs/trainers.md. Importing this package does not import torch until a name is used.
"""
from __future__ import annotations

_LAZY = {
    "PPO": "vla_gym.trainers.ppo",
    "GRPO": "vla_gym.trainers.grpo",
    "Config": "vla_gym.trainers.runtime.config",
    "load_config": "vla_gym.trainers.runtime.config",
    "make_policy": "vla_gym.trainers.policies",
    "register_policy": "vla_gym.trainers.policies",
    "Policy": "vla_gym.trainers.policies",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vla_gym.trainers' has no attribute {name!r}")


__all__ = ["GRPO", "PPO", "Config", "Policy", "load_config", "make_policy", "register_policy"]
