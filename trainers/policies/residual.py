"""``ResidualPolicy``: a frozen base policy (an SFT checkpoint) plus a small, bounded correction that RL trains.

    >>> policy = make_policy("vla_gym.trainers.policies.residual:ResidualPolicy", obs_space, act_space,
    ...                      base_checkpoint="experiments/libero_miniature/models/libero_object_seed0_sft_3demos_fitted.pt")
    ...                                                                                      # doctest: +SKIP
    >>> actions, _, _ = policy.act(obs, deterministic=True)   # base's greedy chunk + the residual  # doctest: +SKIP

The action is ``base_mean(obs) + scale * tanh(head(net([features(obs), base_mean(obs)])))``: the base's greedy
action (chunk) and its frozen features, as the base computes them, go into a small MLP whose output layer starts at
zero, so the residual policy starts as the base, exactly, and never moves further than ``scale`` per action dimension
from it (ResFiT, Ankile et al. 2025; ResiP for chunked behaviour cloning). The base is never trained, so an update
cannot re-draw the outcome of the starts the base already solves the way a full update does (experiments/libero_miniature/README.md).

Sampling adds a Gaussian of the head's ``log_std`` (``set_exploration``, ``trainers/eval.py --stochastic --std``), in
the shape ``noise`` (``step`` | ``chunk``, trainers/policies/distributions.py). ``feature_cache`` sizes the base's
cache of encoded frames (a rollout's frames are read twice: to act, then for the replay). Checkpoints hold only the residual's
parameters; the base is rebuilt from ``base_checkpoint`` (a path relative to the working directory or to the
repository), so a residual model is a few MB beside the base it names. ``trainers/residual.py`` trains it with
critics (off-policy, :mod:`vla_gym.trainers.algorithms.residual_td3`).
"""
from __future__ import annotations

import math
import pathlib
from collections.abc import Sequence

import torch
from gymnasium import spaces
from torch import nn

from vla_gym.trainers.policies.base import DistributionPolicy, Obs
from vla_gym.trainers.policies.distributions import ChunkGaussian, DiagGaussian, GaussianHead
from vla_gym.trainers.policies.encoders import mlp
from vla_gym.trainers.policies.vla_common import TrainableStateMixin
from vla_gym.trainers.policies.vla_small import FeatureCache

ROOT = pathlib.Path(__file__).resolve().parents[2]


def find_base_checkpoint(path: str) -> pathlib.Path:
    """``path`` as given, else relative to the repository (a trainer or ``trainers/eval.py`` started elsewhere)."""
    given = pathlib.Path(path)
    for candidate in (given, ROOT / given):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"policy.kwargs.base_checkpoint={path}: no such file; pass the SFT checkpoint the residual "
                            "policy corrects (an exported model (trainers.runtime.checkpoint.export_policy) or a run's final.pt)")


class ResidualPolicy(TrainableStateMixin, DistributionPolicy):
    """A frozen base policy plus a bounded residual MLP (module docstring)."""

    has_critic = False

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        base_checkpoint: str,
        scale: float = 0.1,
        hidden_sizes: Sequence[int] = (256, 256),
        log_std_init: float = math.log(0.05),
        noise: str = "step",
        feature_cache: int = 512,
    ):
        super().__init__(observation_space, action_space)
        from vla_gym.trainers.runtime.checkpoint import load_policy  # runtime imports the policy registry

        if not scale > 0:
            raise ValueError(f"policy.kwargs.scale={scale}: the residual's bound per action dimension must be > 0")
        self.scale = float(scale)
        self.base = load_policy(find_base_checkpoint(base_checkpoint)).requires_grad_(False).eval()
        if hasattr(self.base, "feature_cache"):  # a rollout's frames, read twice (act, then the replay's features)
            self.base.feature_cache = FeatureCache(feature_cache)
        if tuple(self.base.action_space.shape) != tuple(action_space.shape):
            raise ValueError(f"policy.kwargs.base_checkpoint={base_checkpoint} acts in {self.base.action_space.shape}, "
                             f"this env in {action_space.shape}: pass a base trained with the same env.wrappers")
        self.action_stats = self.base.action_stats
        self.action_shape = tuple(action_space.shape)
        self.feature_dim = int(self.base.norm.normalized_shape[0]) if hasattr(self.base, "norm") else None
        if self.feature_dim is None:
            raise TypeError(f"the base policy {type(self.base).__name__} exposes no features(obs) width: the residual "
                            "policy needs a base with a LayerNorm'd feature vector (SmallVLAPolicy)")
        self.net, width = mlp(self.feature_dim + math.prod(self.action_shape), hidden_sizes, "gelu")
        self.action_head = GaussianHead(width, self.action_shape, log_std_init, noise)
        nn.init.zeros_(self.action_head.mean.weight)  # the residual starts at exactly zero: the base's actions
        nn.init.zeros_(self.action_head.mean.bias)

    def train(self, mode: bool = True):
        super().train(mode)
        self.base.eval()  # frozen: BatchNorm statistics, no dropout
        return self

    def base_outputs(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor]:
        """``(features [B, F], base greedy action [B, *action_shape])``, without gradients (what the replay keeps)."""
        with torch.no_grad():
            features = self.base.features(obs)
            return features, self.base.action_head(self.base.pi_net(features)).mode()

    def residual(self, features: torch.Tensor, base_action: torch.Tensor,
                 layers: tuple[nn.Module, nn.Module] | None = None) -> torch.Tensor:
        """The bounded correction ``[B, *action_shape]`` for given base outputs (with gradients: the actor update);
        ``layers``: other ``(net, output layer)`` of the same shapes (a target actor's) instead of this policy's."""
        net, out = layers or self.actor_layers()
        raw = out(net(torch.cat([features, base_action.flatten(1)], dim=1))).view(-1, *self.action_shape)
        return self.scale * torch.tanh(raw)

    def actor_layers(self) -> tuple[nn.Module, nn.Module]:
        """``(net, output layer)``: the residual's trained layers (the exploration ``log_std`` is not among them)."""
        return self.net, self.action_head.mean

    def mean_action(self, features: torch.Tensor, base_action: torch.Tensor) -> torch.Tensor:
        """Base plus residual, clipped to what the env executes (the critic scores executed actions)."""
        return self.executed_actions(base_action + self.residual(features, base_action))

    def _heads(self, obs: Obs):
        features, base_action = self.base_outputs(obs)
        mean = base_action + self.residual(features, base_action)
        head = self.action_head
        gaussian = ChunkGaussian if head.noise == "chunk" else DiagGaussian
        return gaussian(mean, head.log_std), None
