"""Estimates PPO and GRPO share: the KL to a reference policy from sampled actions, and the critic's explained
variance. (PPO's clipped surrogate and value loss are in trainers/ppo.py; GRPO's per-token surrogate in
:mod:`~vla_gym.trainers.algorithms.ratio_levels`.)

    >>> kl_to_reference(torch.zeros(2), torch.zeros(2)).tolist()
    [0.0, 0.0]
"""
from __future__ import annotations

import torch


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
