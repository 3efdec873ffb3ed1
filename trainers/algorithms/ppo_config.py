"""PPO's settings: the ``ppo:`` section of a run config (trainers/ppo.py; Stable-Baselines3's names).

    >>> PPOConfig(n_steps=64).batch_size
    64
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vla_gym.trainers.runtime.schema import ConfigError, at_least_one


@dataclass
class PPOConfig:
    #: vector steps per rollout (each env contributes n_steps transitions)
    n_steps: int = 128
    #: minibatch size over all ranks; n_steps * env.num_envs / batch_size minibatches per epoch
    batch_size: int = 64
    n_epochs: int = 10
    learning_rate: float = 3e-4
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    clip_range: float = 0.2
    clip_schedule: Literal["constant", "linear", "cosine"] = "constant"
    #: value clipping around the rollout's values; null disables it
    clip_range_vf: float | None = None
    gamma: float = 0.99
    gae_lambda: float = 0.95
    #: bootstrap V(final obs) at terminations too, as at truncations: for envs that terminate on success with a
    #: dense reward (ManiSkill), so that succeeding is worth as much as staying successful (ManiSkill's PPO does so)
    bootstrap_terminated: bool = False
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float | None = 0.5
    normalize_advantage: bool = True
    #: stop an update's epochs early once the (all-ranks) approx KL exceeds this; null disables it
    target_kl: float | None = None
    adam_eps: float = 1e-5
    #: checkpoint (SFT, PPO or GRPO) whose actor to start from; a critic it lacks starts fresh
    init_checkpoint: str | None = None
    #: the first N updates train the critic only (the actor takes no step): a fresh value head on an SFT actor
    critic_warmup_updates: int = 0
    #: sample with this std in every action dimension from the start (after ``init_checkpoint``); null: the policy's
    exploration_std: float | None = None
    #: where the probability ratio lives, as GRPO's ``ratio_level``: chunk (one per action), step (per env step of a
    #: chunk) or dim (per action dimension; clip and approx_kl/target_kl per dimension). step and dim need a policy
    #: with per-dimension log-probs (``per_dim``, trainers/policies/base.py)
    ratio_level: Literal["chunk", "step", "dim"] = "chunk"

    def __post_init__(self):
        at_least_one("ppo", {"n_steps": self.n_steps, "batch_size": self.batch_size, "n_epochs": self.n_epochs})
        if self.exploration_std is not None and not self.exploration_std > 0:
            raise ConfigError(f"ppo.exploration_std={self.exploration_std}: must be positive")
        if self.critic_warmup_updates < 0:
            raise ConfigError(f"ppo.critic_warmup_updates={self.critic_warmup_updates}: must be 0 (off) or positive")
