"""The one interface PPO and GRPO talk to, whatever the network behind it.

A policy is an ``nn.Module`` with three calls::

    actions, log_probs, values = policy.act(obs, deterministic=False)   # rollout, no grad
    log_probs, entropy, values = policy.evaluate(obs, actions)          # training, with grad
    values = policy.value(obs)                                           # bootstrap on truncation

``log_probs``, ``entropy`` and ``values`` are float tensors of shape ``[B]``; ``values`` is ``None``
for critic-free policies (``has_critic = False``, GRPO). ``actions`` has shape ``[B, *action_shape]``
(``[B]`` for Discrete, ``[B, K, A]`` for action chunks) and is what the rollout buffer stores and hands
back to :meth:`evaluate`; :meth:`env_actions` turns it into what ``env.step`` receives (by default:
a numpy array clipped to the Box bounds). A policy that samples tokens can store token ids as
``actions`` and decode them in :meth:`env_actions`: the algorithms never look inside.

Observation batches mirror the env's observation, batched and as torch tensors on the policy's device:
a tensor ``[B, D]`` for Box envs (CartPole), or for vla_gym envs a dict
``{"images": {role: uint8 [B, H, W, 3]}, "state": float32 [B, D], "instruction": list of B str}``.
Everything model specific (normalisation, tokenisation, resizing) happens inside the policy.

``forward(obs, actions)`` is :meth:`evaluate`, so a ``DistributedDataParallel`` wrapper synchronises
gradients of exactly the pass the losses use.
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from vla_gym.trainers.policies.openvla_prompts import unnormalize_actions

Obs = Any  # torch.Tensor | dict[str, torch.Tensor | dict[str, torch.Tensor] | list[str]]


class Policy(nn.Module):
    """Base class of every policy (see the module docstring for the contract)."""

    #: False for critic-free policies: ``act``/``evaluate``/``value`` then return ``None`` as values
    has_critic: bool = True

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space):
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space

    def frozen_copy(self) -> Policy:
        """A copy that no optimizer moves, in eval mode: GRPO's reference policy for its KL term."""
        return copy.deepcopy(self).eval().requires_grad_(False)

    def act(self, obs: Obs, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Sample (or, deterministic, take the mode of) actions: (actions, log_probs [B], values [B] | None)."""
        raise NotImplementedError

    def evaluate(self, obs: Obs, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Score stored actions under the current parameters: (log_probs [B], entropy [B], values [B] | None)."""
        raise NotImplementedError

    def value(self, obs: Obs) -> torch.Tensor | None:
        """State values ``[B]`` (``None`` without a critic)."""
        if not self.has_critic:
            return None
        raise NotImplementedError(f"{type(self).__name__} has a critic but does not implement value()")

    def forward(self, obs: Obs, actions: torch.Tensor):
        return self.evaluate(obs, actions)

    def imitation_loss(self, obs: Obs, expert_actions: torch.Tensor) -> torch.Tensor:
        """Behaviour-cloning loss (scalar, with grad) of expert ``actions`` ``[B, *action_shape]`` (trainers/sft.py).

        Each family defines its own: the negative log-likelihood here for distribution heads, token cross-entropy
        (action tokens), L1 of the chunk (OFT), MSE of the mean (the small CPU policy), flow matching (PI0).
        """
        raise NotImplementedError(f"{type(self).__name__} has no imitation_loss(obs, expert_actions): add one to "
                                  "train it with trainers/sft.py")

    def update_statistics(self, obs: Obs, reduce=None) -> None:
        """Called by the trainer after each update with that rollout's observations (e.g. to update running
        observation normalisation); ``reduce`` sums a tensor over ranks. Default: nothing."""

    #: dataset statistics (``q01``/``q99``/``mask``) that un-normalise actions for the env, or None
    action_stats: dict | None = None

    def env_actions(self, actions: torch.Tensor) -> np.ndarray:
        """What ``env.step`` receives for a batch of ``actions`` (see :meth:`to_env_actions`)."""
        actions = actions.detach()
        if actions.is_floating_point():
            actions = actions.float()  # numpy has no bfloat16
        return self.to_env_actions(actions.cpu().numpy())

    def to_env_actions(self, array: np.ndarray) -> np.ndarray:
        """Un-normalise a numpy batch with ``action_stats`` (if set) and clip it to the Box bounds."""
        if self.action_stats is not None:
            array = unnormalize_actions(array, self.action_stats).astype(np.float32)
        if isinstance(self.action_space, spaces.Box):
            array = np.clip(array, self.action_space.low, self.action_space.high)
        return array

    @property
    def device(self) -> torch.device:
        for tensor in self.parameters():
            return tensor.device
        return torch.device("cpu")


class DistributionPolicy(Policy):
    """A policy whose ``_heads(obs) -> (distribution, values | None)`` gives everything PPO/GRPO need.

    Subclasses implement ``_heads`` (and ``value``); sampling and scoring are the same for all of them.
    """

    def _heads(self, obs: Obs):
        raise NotImplementedError

    def act(self, obs: Obs, deterministic: bool = False):
        with torch.no_grad():
            dist, values = self._heads(obs)
            actions = dist.mode() if deterministic else dist.sample()
            return actions, dist.log_prob(actions), values

    def evaluate(self, obs: Obs, actions: torch.Tensor):
        dist, values = self._heads(obs)
        return dist.log_prob(actions), dist.entropy(), values

    def imitation_loss(self, obs: Obs, expert_actions: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of the expert's actions under the action distribution (mean over the batch)."""
        dist, _ = self._heads(obs)
        target = expert_actions.to(dist.mode().device)
        target = target.reshape(dist.mode().shape) if target.is_floating_point() else target
        return -dist.log_prob(target).mean()
