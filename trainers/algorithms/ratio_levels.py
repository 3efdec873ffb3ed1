"""GRPO's probability ratio per action chunk, per env step of a chunk or per action dimension, and its clipped loss.

    >>> per_dim = torch.zeros(2, 3, 4)                                  # [B, K, A] log-probs of chunks K=3 x A=4
    >>> mask = executed_mask(torch.tensor([3, 1]), steps=3)             # row 1's episode ended after 1 sub-step
    >>> [level_log_probs(per_dim, level, mask)[0].shape[1] for level in RATIO_LEVELS]   # tokens per row
    [1, 3, 12]

A row (one transition) holds ``T`` "tokens", each with its own ratio ``exp(log_prob - old_log_prob)``:

- ``chunk``: ``T = 1``, the joint log-prob of the whole chunk (today's PPO/GRPO on action chunks);
- ``step``: ``T = K``, the log-probs of the ``A`` dimensions of each env step summed;
- ``dim``: ``T = K * A``, one ratio per action dimension (RLinf's and SimpleVLA-RL's per-token ratio).

``mask`` (``[B, K]``, from the sub-steps a chunk ran, :func:`executed_mask`) drops the sub-actions the env never
ran: out of the chunk's sum, and out of the tokens of the other levels. :func:`clipped_token_loss` is PPO's
clipped surrogate per token, clipped to ``[1 - low, 1 + high]``; a row's loss is the sum over its valid tokens
divided by ``T`` (a token the env did not run counts zero), rows are averaged, optionally with weights (GRPO's
``loss_weighting: episode``). With ``T = 1``, no mask and no weights it is exactly
:func:`~vla_gym.trainers.ppo.clipped_policy_loss`.
"""
from __future__ import annotations

import torch

RATIO_LEVELS = ("chunk", "step", "dim")
#: the keys of :func:`per_dim_ratio_stats`: per-dimension and per-chunk ratio statistics of a minibatch
PER_DIM_KEYS = tuple(f"train/actor/{stat}_{level}" for level in ("dim", "chunk")
                     for stat in ("approx_kl", "clip_fraction", "ratio_std"))


def chunk_view(per_dim: torch.Tensor, steps: int) -> torch.Tensor:
    """Per-dimension log-probs ``[B, ...]`` (``[B, K, A]``, ``[B, A]``, ``[B, K*A]`` tokens) -> ``[B, K, A]``."""
    flat = per_dim.reshape(per_dim.shape[0], -1)
    if flat.shape[1] % steps:
        raise ValueError(f"{flat.shape[1]} log-probs per row do not split into {steps} steps of a chunk")
    return flat.reshape(flat.shape[0], steps, -1)


def executed_mask(sub_steps: torch.Tensor | None, steps: int) -> torch.Tensor | None:
    """``[B]`` sub-steps each row's chunk ran (-1: not reported, all) -> ``[B, K]`` bool, True where it ran."""
    if sub_steps is None:
        return None
    sub_steps = sub_steps.reshape(-1, 1)
    k = torch.arange(steps, device=sub_steps.device).reshape(1, -1)
    return (sub_steps < 0) | (k < sub_steps)


def level_log_probs(per_dim: torch.Tensor, level: str, mask: torch.Tensor | None = None,
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[B, K, A]`` per-dimension log-probs -> (``[B, T]`` log-probs of the level's tokens, ``[B, T]`` bool mask of
    the tokens that count or None for all)."""
    if mask is not None:
        per_dim = torch.where(mask.unsqueeze(-1), per_dim, torch.zeros((), dtype=per_dim.dtype, device=per_dim.device))
    if level == "chunk":
        return per_dim.flatten(1).sum(1, keepdim=True), None
    if level == "step":
        return per_dim.sum(2), mask
    if level == "dim":
        token_mask = None if mask is None else mask.unsqueeze(-1).expand(per_dim.shape).flatten(1)
        return per_dim.flatten(1), token_mask
    raise ValueError(f"ratio level {level!r}: use one of {', '.join(RATIO_LEVELS)}")


def masked_row_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``[B, T]`` -> ``[B]``: the sum over a row's valid tokens divided by ``T`` (an invalid token counts zero)."""
    if mask is not None:
        values = torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))
    return values.sum(1) / values.shape[1]


def masked_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over the valid tokens (all when ``mask`` is None); 0 when none is valid."""
    if mask is None:
        return values.mean()
    count = mask.sum()
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device)).sum() / count.clamp(min=1)


def ratio_stats(log_ratio: torch.Tensor, mask: torch.Tensor | None, clip_low: float, clip_high: float,
                ) -> tuple[float, float, float, float]:
    """(approx KL(old || new) per token (Schulman's k3), fraction of tokens whose ratio lies outside
    [1 - low, 1 + high], mean clipped ratio, std of the ratio) over the valid tokens."""
    with torch.no_grad():
        ratio = log_ratio.exp()
        excess = ratio - 1.0
        outside = ((excess > clip_high) | (excess < -clip_low)).to(ratio.dtype)
        clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
        mean = masked_mean(ratio, mask)
        std = masked_mean((ratio - mean).square(), mask).sqrt()
        values = torch.stack([masked_mean(excess - log_ratio, mask), masked_mean(outside, mask),
                              masked_mean(clipped, mask), std])
        return tuple(values.tolist())


def clipped_token_loss(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, clip_low: float,
    clip_high: float, mask: torch.Tensor | None = None, row_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate (negated) over ``[B, T]`` token log-probs; ``advantages`` ``[B]`` (one per row);
    ``mask`` ``[B, T]`` tokens that count; ``row_weights`` ``[B]`` (module docstring). Stats as
    :func:`~vla_gym.trainers.ppo.clipped_policy_loss` names them, per token."""
    log_ratio = log_probs - old_log_probs
    ratio = log_ratio.exp()
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    advantages = advantages.reshape(-1, 1)
    surrogate = torch.min(advantages * ratio, advantages * clipped)
    per_row = masked_row_mean(surrogate, mask)
    if row_weights is not None:
        per_row = per_row * row_weights
    loss = -per_row.mean()
    approx_kl, clip_fraction, clipped_mean, _ = ratio_stats(log_ratio.detach(), mask, clip_low, clip_high)
    stats = {
        "train/actor/approx_kl": approx_kl,
        "train/actor/clip_fraction": clip_fraction,
        "train/actor/clipped_ratio": clipped_mean,
    }
    return loss, stats


def per_dim_ratio_stats(log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor | None,
                        clip_low: float, clip_high: float) -> dict[str, float]:
    """Diagnostics of ``[B, K, A]`` per-dimension log-probs, whatever level the loss uses: the ratio's spread, clip
    fraction and approx KL per dimension and per chunk (``train/actor/*_dim``, ``*_chunk``)."""
    with torch.no_grad():
        stats = {}
        for level in ("dim", "chunk"):
            new, token_mask = level_log_probs(log_probs.detach(), level, mask)
            old, _ = level_log_probs(old_log_probs, level, mask)
            approx_kl, clip_fraction, _, std = ratio_stats(new - old, token_mask, clip_low, clip_high)
            stats.update({f"train/actor/approx_kl_{level}": approx_kl,
                          f"train/actor/clip_fraction_{level}": clip_fraction,
                          f"train/actor/ratio_std_{level}": std})
        return stats
