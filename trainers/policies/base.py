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

``forward(obs, actions, **kwargs)`` is :meth:`evaluate`, so a ``DistributedDataParallel`` wrapper synchronises
gradients of exactly the pass the losses use.

Optional keywords (a policy offers them by accepting them; :func:`log_prob_options` lists what a policy offers,
and GRPO asks for them only when its config needs them, so policies without them keep working):

- ``per_dim=True`` in ``act`` and ``evaluate``: log-probs per action dimension, ``[B, *action_shape]`` (a token
  policy: one per action token, ``[B, K*A]``) instead of their sum ``[B]``; entropy stays ``[B]``. GRPO's
  ``ratio_level: dim | step`` and ``mask_unexecuted`` need it. :class:`DistributionPolicy` and the action-token
  VLA offer it.
- ``executed=True`` in ``act``: the returned actions are clipped to what the env executes
  (:meth:`DistributionPolicy.executed_actions`) and the log-probs are those of the clipped actions (GRPO's
  ``logprob_of_executed``). :class:`DistributionPolicy` offers it.
"""
from __future__ import annotations

import copy
import inspect
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

    def forward(self, obs: Obs, actions: torch.Tensor, **kwargs):
        return self.evaluate(obs, actions, **kwargs)

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

    def act(self, obs: Obs, deterministic: bool = False, per_dim: bool = False, executed: bool = False):
        """``per_dim``: log-probs per action dimension; ``executed``: actions clipped to what the env runs, and
        their log-probs (module docstring)."""
        with torch.no_grad():
            dist, values = self._heads(obs)
            actions = dist.mode() if deterministic else dist.sample()
            if executed:
                actions = self.executed_actions(actions)
            return actions, _log_prob(dist, actions, per_dim), values

    def evaluate(self, obs: Obs, actions: torch.Tensor, per_dim: bool = False):
        dist, values = self._heads(obs)
        return _log_prob(dist, actions, per_dim), dist.entropy(), values

    def distribution(self, obs: Obs):
        """The action distribution for ``obs`` (GRPO's diagnostics read a Gaussian's ``mean`` and ``log_std``)."""
        return self._heads(obs)[0]

    def set_exploration(self, std: float | None = None, noise: str | None = None,
                        temperature: float | None = None) -> None:
        """Sample with this std (every dimension) and/or noise shape (``step`` | ``chunk``) from now on, with a
        Gaussian ``action_head``; at this ``temperature`` with a token head (trainers/policies/distributions.py)."""
        head = getattr(self, "action_head", None)
        if not hasattr(head, "set_exploration"):
            raise TypeError(f"{type(self).__name__} has no Gaussian or token action_head: its exploration cannot be "
                            "set")
        head.set_exploration(std, noise, **({} if temperature is None else {"temperature": temperature}))

    def executed_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """``actions`` (in the policy's action space) clipped so that :meth:`to_env_actions` would not clip them:
        to the Box bounds, mapped through ``action_stats``' un-normalisation when set. Discrete: unchanged."""
        if not isinstance(self.action_space, spaces.Box) or not actions.is_floating_point():
            return actions
        low, high = policy_space_bounds(self.action_space, self.action_stats)
        low = torch.as_tensor(low, dtype=actions.dtype, device=actions.device)
        high = torch.as_tensor(high, dtype=actions.dtype, device=actions.device)
        return torch.maximum(torch.minimum(actions, high), low)

    def imitation_loss(self, obs: Obs, expert_actions: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of the expert's actions under the action distribution (mean over the batch)."""
        dist, _ = self._heads(obs)
        target = expert_actions.to(dist.mode().device)
        target = target.reshape(dist.mode().shape) if target.is_floating_point() else target
        return -dist.log_prob(target).mean()


def _log_prob(dist, actions: torch.Tensor, per_dim: bool) -> torch.Tensor:
    return dist.log_prob(actions, per_dim=True) if per_dim else dist.log_prob(actions)


def policy_space_bounds(action_space: spaces.Box, action_stats: dict | None) -> tuple[np.ndarray, np.ndarray]:
    """The Box bounds in the policy's action space: the env's bounds, or with ``action_stats`` the actions whose
    un-normalisation (``q01 + (a + 1) / 2 * (q99 - q01)``, affine per dimension) lands on them (unbounded for a
    dimension whose un-normalisation is constant)."""
    low = np.asarray(action_space.low, dtype=np.float64)
    high = np.asarray(action_space.high, dtype=np.float64)
    if action_stats is None:
        return low, high
    offset = unnormalize_actions(np.zeros(low.shape), action_stats)
    scale = unnormalize_actions(np.ones(low.shape), action_stats) - offset
    safe = np.where(scale != 0, scale, 1.0)
    ends = np.stack([(low - offset) / safe, (high - offset) / safe])
    low_p = np.where(scale != 0, ends.min(0), -np.inf)
    high_p = np.where(scale != 0, ends.max(0), np.inf)
    return low_p, high_p


def log_prob_options(policy: Policy) -> set[str]:
    """The optional keywords of the Policy API (module docstring) that ``policy`` accepts: ``per_dim`` (in both
    ``act`` and ``evaluate``) and ``executed`` (in ``act``)."""
    act = inspect.signature(policy.act).parameters
    evaluate = inspect.signature(policy.evaluate).parameters
    options = set()
    if "per_dim" in act and "per_dim" in evaluate:
        options.add("per_dim")
    if "executed" in act:
        options.add("executed")
    return options
