"""``ContinuousVLAPolicy``: the OpenVLA-OFT recipe: one forward pass, a K-step chunk from a small head.

    >>> policy = make_policy("vla_gym.trainers.policies.vla_continuous:ContinuousVLAPolicy",
    ...                      env.observation_space, env.action_space,          # (K, A) with ActionChunk
    ...                      model="HuggingFaceTB/SmolVLM-Instruct", lora={"rank": 32})   # doctest: +SKIP
    >>> chunks, log_probs, values = policy.act(obs)                               # chunks: [B, K, A]  # doctest: +SKIP

The VLM reads the images and OpenVLA's prompt once; the last layer's hidden state at the last prompt
token feeds an MLP action head that predicts the whole chunk in parallel (no autoregressive decoding:
``K * A`` numbers from one pass, as OFT's parallel decoding does). For RL the head is a diagonal Gaussian
around that prediction with a learned, state-independent log standard deviation; ``deterministic=True``
returns the mean. A separate MLP on the same feature is the value head. ``imitation_loss`` is OFT's L1
regression of the mean onto expert chunks.

Options are those of :class:`~vla_gym.trainers.policies.vla_tokens.ActionTokenVLAPolicy` (``model``,
``cameras``, ``lora``, ``freeze_vision``, ``dtype``, ``critic``, ``action_stats``, ``value_hidden``,
``gradient_checkpointing``) plus ``head_hidden`` and ``log_std_init``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from vla_gym.trainers.policies.base import DistributionPolicy, Obs
from vla_gym.trainers.policies.distributions import GaussianHead
from vla_gym.trainers.policies.vla_common import (
    TrainableStateMixin,
    ValueHead,
    VLMBackbone,
    chunk_shape,
)


class ContinuousVLAPolicy(TrainableStateMixin, DistributionPolicy):
    """VLM features -> Gaussian action chunk + value (module docstring)."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        model: str,
        cameras: Sequence[str] = ("main",),
        lora: Any = None,
        freeze_vision: bool = True,
        dtype: str = "auto",
        critic: bool = True,
        action_stats: dict | None = None,
        head_hidden: int = 512,
        log_std_init: float = -1.0,
        noise: str = "step",
        value_hidden: int = 256,
        gradient_checkpointing: bool = False,
    ):
        super().__init__(observation_space, action_space)
        self.chunk = chunk_shape(action_space)
        self.has_critic = bool(critic)
        self.action_stats = action_stats
        self.vlm = VLMBackbone(model, cameras, dtype, lora, freeze_vision, gradient_checkpointing)
        width = self.vlm.hidden_size
        self.trunk = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, head_hidden), nn.GELU())
        self.action_head = GaussianHead(head_hidden, action_space.shape, log_std_init, noise)
        if self.has_critic:
            self.value_head = ValueHead(width, value_hidden)

    def features(self, obs: Obs) -> torch.Tensor:
        """Last-layer hidden state at the last prompt token, float32 ``[B, hidden]``."""
        inputs = self.vlm.inputs(obs)
        out = self.vlm.model(**inputs, output_hidden_states=True, use_cache=False, logits_to_keep=1)
        return out.hidden_states[-1][:, -1].float()

    def _heads(self, obs: Obs):
        features = self.features(obs)
        dist = self.action_head(self.trunk(features))
        return dist, self.value_head(features) if self.has_critic else None

    def value(self, obs: Obs) -> torch.Tensor | None:
        if not self.has_critic:
            return None
        return self.value_head(self.features(obs))

    def imitation_loss(self, obs: Obs, expert_actions: torch.Tensor) -> torch.Tensor:
        """L1 between the predicted chunk (the Gaussian's mean) and the expert's."""
        dist = self.action_head(self.trunk(self.features(obs)))
        return (dist.mode() - expert_actions.to(dist.mode().device).reshape(dist.mode().shape)).abs().mean()
