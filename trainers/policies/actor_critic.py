"""``ActorCriticPolicy``: a shared observation encoder, then separate actor and critic MLPs.

    encoder(obs) -> features -> pi MLP -> action head (Gaussian | Categorical)
                             -> vf MLP -> value head            (absent with critic=False)

This is Stable-Baselines3's ``ActorCriticPolicy`` layout (``net_arch=dict(pi=..., vf=...)``,
orthogonal init with gains sqrt(2) / 0.01 / 1), so the same hyperparameters mean the same network.
Concrete policies (:mod:`.mlp`, :mod:`.cnn`) only choose the encoder.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from gymnasium import spaces
from torch import nn

from vla_gym.trainers.policies.base import DistributionPolicy, Obs
from vla_gym.trainers.policies.distributions import make_action_head
from vla_gym.trainers.policies.encoders import mlp


class ActorCriticPolicy(DistributionPolicy):
    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        encoder: nn.Module,
        pi_sizes: Sequence[int] = (64, 64),
        vf_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        critic: bool = True,
        log_std_init: float = 0.0,
        ortho_init: bool = True,
        noise: str = "step",
    ):
        super().__init__(observation_space, action_space)
        self.has_critic = bool(critic)
        self.encoder = encoder
        self.pi_net, pi_dim = mlp(encoder.out_dim, pi_sizes, activation)
        self.action_head = make_action_head(action_space, pi_dim, log_std_init, noise)
        if self.has_critic:
            self.vf_net, vf_dim = mlp(encoder.out_dim, vf_sizes, activation)
            self.value_head = nn.Linear(vf_dim, 1)
        if ortho_init:
            self._orthogonal_init()

    def _orthogonal_init(self) -> None:
        gains = [(self.encoder, math.sqrt(2)), (self.pi_net, math.sqrt(2)), (self.action_head, 0.01)]
        if self.has_critic:
            gains += [(self.vf_net, math.sqrt(2)), (self.value_head, 1.0)]
        for module, gain in gains:
            for layer in module.modules():
                if isinstance(layer, (nn.Linear, nn.Conv2d)):
                    nn.init.orthogonal_(layer.weight, gain=gain)
                    nn.init.zeros_(layer.bias)

    def _heads(self, obs: Obs, with_value: bool = True):
        features = self.encoder(obs)
        dist = self.action_head(self.pi_net(features))
        values = None
        if self.has_critic and with_value:
            values = self.value_head(self.vf_net(features)).squeeze(-1)
        return dist, values

    def update_statistics(self, obs: Obs, reduce=None) -> None:
        if hasattr(self.encoder, "update_statistics"):
            self.encoder.update_statistics(obs, reduce)

    def value(self, obs: Obs) -> torch.Tensor | None:
        if not self.has_critic:
            return None
        return self.value_head(self.vf_net(self.encoder(obs))).squeeze(-1)
