"""Advantage estimators: GAE for PPO, group-relative for GRPO.

    >>> rewards, values, dones = torch.ones(3, 1), torch.zeros(3, 1), torch.zeros(3, 1, dtype=torch.bool)  # [T, N]
    >>> advantages, returns = gae(rewards, values, dones, last_values=torch.zeros(1), gamma=0.5, lam=1.0)
    >>> returns[:, 0]                                   # 1 + 0.5 * (1 + 0.5 * 1), 1 + 0.5 * 1, 1
    tensor([1.7500, 1.5000, 1.0000])
    >>> group_advantages(torch.tensor([1., 0., 1., 1.]), group_size=2)
    tensor([ 0.5000, -0.5000,  0.0000,  0.0000])

``dones[t]`` means the episode ended at step ``t``: nothing is bootstrapped past it. Truncated
episodes are bootstrapped by the rollout, which adds ``gamma * V(final observation)`` to the
reward of the truncating step before calling :func:`gae`.
"""
from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_values: torch.Tensor,
    gamma: float, lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over ``[T, N]`` tensors; returns (advantages, returns)."""
    rewards, values, dones = rewards.double(), values.double(), dones.double()
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(last_values, dtype=torch.float64)
    next_values = last_values.double()
    for t in reversed(range(rewards.shape[0])):
        nonterminal = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_values * nonterminal - values[t]
        running = delta + gamma * lam * nonterminal * running
        advantages[t] = running
        next_values = values[t]
    returns = advantages + values
    return advantages.float(), returns.float()


def group_advantages(scores: torch.Tensor, group_size: int, normalize_std: bool = False, eps: float = 1e-6,
                     judged: torch.Tensor | None = None) -> torch.Tensor:
    """Score minus its group's mean (optionally divided by the group's std); groups are consecutive.

    ``judged`` (bool per score) leaves out of the mean and std the episodes the env did not judge (cut by a failed
    env worker: their 0 is no outcome); those get advantage 0. Without it every score counts.

    >>> group_advantages(torch.tensor([1., 0., 0., 1.]), 4).tolist()
    [0.5, -0.5, -0.5, 0.5]
    >>> cut = torch.tensor([True, True, False, True])          # the third was cut by a worker fault
    >>> [round(a, 3) for a in group_advantages(torch.tensor([1., 0., 0., 1.]), 4, judged=cut).tolist()]
    [0.333, -0.667, 0.0, 0.333]
    """
    if scores.numel() % group_size:
        raise ValueError(f"{scores.numel()} scores do not split into groups of {group_size}")
    grouped = scores.reshape(-1, group_size).float()
    if judged is None:
        mean, std = grouped.mean(dim=1, keepdim=True), grouped.std(dim=1, unbiased=False, keepdim=True)
        advantages = grouped - mean
    else:
        weight = judged.reshape(-1, group_size).float()
        count = weight.sum(dim=1, keepdim=True).clamp(min=1.0)
        mean = (grouped * weight).sum(dim=1, keepdim=True) / count
        std = (((grouped - mean) ** 2 * weight).sum(dim=1, keepdim=True) / count).sqrt()
        advantages = torch.where(weight > 0, grouped - mean, torch.zeros_like(grouped))
    if normalize_std:
        advantages = advantages / (std + eps)
    return advantages.reshape(-1)
