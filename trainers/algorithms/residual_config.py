"""Residual RL's settings: the ``residual:`` section of a run config (trainers/residual.py).

    >>> ResidualConfig(exploration_std=0.1).n_step
    3
"""
from __future__ import annotations

from dataclasses import dataclass, field

from vla_gym.trainers.runtime.schema import ConfigError


@dataclass
class ResidualConfig:
    """Residual RL on a frozen base policy (trainers/residual.py; the base is ``policy.kwargs.base_checkpoint``)."""

    gamma: float = 0.99                 # per decision (action chunk)
    n_step: int = 3                     # n-step returns of the sparse success reward
    batch_size: int = 256
    buffer_size: int = 100_000          # decisions kept (features: about 7 KB each with the bootstrap's)
    episodes_per_round: int = 4         # episodes played between two rounds of gradient steps
    updates_per_decision: float = 2.0   # gradient steps per decision played (update-to-data ratio)
    warmup_episodes: int = 40           # episodes of the base (residual zero) before the first gradient step
    train_init_states: int | None = None  # draw init states 0..N-1 of each task (null: all)
    exploration_std: float = 0.05       # the rollouts' Gaussian noise on every action dimension
    critic_hidden_sizes: list[int] = field(default_factory=lambda: [512, 512])
    critic_lr: float = 3.0e-4
    actor_lr: float = 1.0e-4
    tau: float = 0.005
    actor_every: int = 2                # critic steps per actor step (TD3's delay)
    actor_warmup: int = 1000            # critic steps before the actor moves
    target_noise: float = 0.02          # target policy smoothing
    target_noise_clip: float = 0.05
    residual_l2: float = 0.0            # actor penalty on mean (residual / scale)^2, against Q / mean|Q|
    max_grad_norm: float = 10.0

    def __post_init__(self):
        for key in ("n_step", "batch_size", "buffer_size", "episodes_per_round", "actor_every"):
            if getattr(self, key) < 1:
                raise ConfigError(f"residual.{key}={getattr(self, key)}: must be at least 1")
        if not 0 < self.gamma <= 1:
            raise ConfigError(f"residual.gamma={self.gamma}: must be in (0, 1]")
        for key in ("exploration_std", "critic_lr", "actor_lr", "tau"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"residual.{key}={getattr(self, key)}: must be positive")
        if self.updates_per_decision < 0 or self.warmup_episodes < 0 or self.actor_warmup < 0:
            raise ConfigError("residual.updates_per_decision, warmup_episodes and actor_warmup must be >= 0")
