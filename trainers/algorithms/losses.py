"""PPO's losses, each returning (loss, stats) with stats named as they are logged.

    >>> loss, stats = clipped_policy_loss(new_log_probs, old_log_probs, advantages, clip_range=0.2)  # doctest: +SKIP
    >>> sorted(stats)                                                                                  # doctest: +SKIP
    ['train/actor/approx_kl', 'train/actor/clip_fraction', 'train/actor/clipped_ratio']

All inputs are ``[B]`` tensors. ``weight`` (0 or 1) lets an empty minibatch run a zero-gradient
backward pass so distributed ranks stay paired (see :mod:`.buffer`).
"""
from __future__ import annotations

import torch

from vla_gym.trainers.algorithms.ratio_levels import clipped_token_loss


def clipped_policy_loss(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, clip_range: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate objective (negated, to minimise): one ratio per sample, a symmetric clip
    (:func:`~vla_gym.trainers.algorithms.ratio_levels.clipped_token_loss` with one token per row)."""
    return clipped_token_loss(log_probs.unsqueeze(1), old_log_probs.unsqueeze(1), advantages, clip_range, clip_range)


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip_range_vf: float | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Squared error to the returns; with ``clip_range_vf`` the pessimum of clipped and unclipped."""
    loss = (values - returns).square()
    clip_ratio = 0.0
    if clip_range_vf is not None:
        delta = values - old_values
        clipped_values = old_values + delta.clamp(-clip_range_vf, clip_range_vf)
        loss = torch.max(loss, (clipped_values - returns).square())
        clip_ratio = (delta.detach().abs() > clip_range_vf).float().mean().item()
    return loss.mean(), {"train/critic/value_clip_ratio": clip_ratio}


def kl_to_reference(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """Per-sample k3 estimate of KL(policy || reference) from sampled actions (unbiased, >= 0)."""
    log_ratio = ref_log_probs - log_probs
    return log_ratio.exp() - log_ratio - 1.0


def explained_variance(predictions: torch.Tensor, targets: torch.Tensor) -> float:
    """1 - Var(targets - predictions) / Var(targets); nan when the targets are constant."""
    variance = targets.var()
    if variance.item() == 0:
        return float("nan")
    return (1.0 - (targets - predictions).var() / variance).item()
