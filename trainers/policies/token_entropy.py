"""How widely an action-token policy samples (its entropy per token on a dataset's frames), and the temperature that
gives another policy the same width.

A policy cloned from its own samples drawn at a temperature T > 1 learns the flattened distribution it was shown, so
sampling it at T again is wider still: round after round of RFT at 1.6, a token policy's entropy grows (on the LIBERO
study's frames 2.45 nats per token for the SFT at 1.6, 3.01 for the policy fitted on those samples, 3.27 after the
next round) and fewer of its samples succeed. ``trainers/rft.py --hold-entropy`` samples each round at the
temperature that gives its policy the first round's entropy instead:

    >>> matched_temperature("runs/rft/round_2/sft/final.pt", "runs/demos", reference="runs/sft/final.pt",
    ...                     temperature=1.6)                                     # doctest: +SKIP
    {'temperature': 0.9, 'entropy': 2.45, 'frames': 96}

    >>> logits = torch.tensor([[[2.0, 0.0, -1.0, -3.0], [0.5, 0.4, -2.0, -2.0]]])
    >>> round(temperature_for_entropy(logits, token_entropy(logits, 1.6)), 3)
    1.6
"""
from __future__ import annotations

import numpy as np
import torch

from vla_gym.trainers.policies.distributions import BinnedCategorical


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> float:
    """The mean over tokens of the entropy (nats) of ``softmax(logits / temperature)``, logits ``[B, *shape,
    n_bins]`` (:class:`~vla_gym.trainers.policies.distributions.BinnedCategorical`'s, per token)."""
    tokens = logits[0, ..., 0].numel()
    return float(BinnedCategorical(logits.double(), temperature).entropy().mean()) / tokens


def temperature_for_entropy(logits: torch.Tensor, entropy: float, low: float = 0.05, high: float = 20.0,
                            iterations: int = 60) -> float:
    """The temperature at which ``logits`` have ``entropy`` nats per token on average (bisection: the entropy grows
    with the temperature); ``low`` or ``high`` when the target lies beyond what they give."""
    if token_entropy(logits, low) >= entropy:
        return low
    if token_entropy(logits, high) <= entropy:
        return high
    for _ in range(iterations):
        middle = (low * high) ** 0.5  # bisect on a log scale: temperatures span orders of magnitude
        low, high = (middle, high) if token_entropy(logits, middle) < entropy else (low, middle)
    return (low * high) ** 0.5


def dataset_frames(dataset, count: int, seed: int = 0) -> dict:
    """``count`` frames drawn from ``dataset`` (a :class:`~vla_gym.data.lerobot.reader.DemoDataset`) as one
    observation batch, as SFT reads them."""
    from vla_gym.trainers.rollout.batch import to_torch

    rows = np.random.default_rng(seed).choice(len(dataset), min(count, len(dataset)), replace=False)
    return to_torch(dataset.batch(rows)[0])


def token_logits(policy, obs: dict) -> torch.Tensor:
    """The token head's logits ``[B, *action_shape, n_bins]`` at temperature 1 (up to a constant per token)."""
    if getattr(policy, "head", None) != "tokens":
        raise ValueError(f"this policy has no action-token head (policy.kwargs.head={getattr(policy, 'head', None)}); "
                         "train it with policy.kwargs.head=tokens")
    with torch.no_grad():
        return policy.distribution(obs).logits * policy.action_head.temperature  # the head's temperature undone


def checkpoint_logits(checkpoint: str, dataset: str, frames: int = 96) -> torch.Tensor:
    """:func:`token_logits` of the policy in ``checkpoint`` on ``frames`` frames of the LeRobot dataset ``dataset``."""
    from vla_gym.data.lerobot.reader import DemoDataset
    from vla_gym.trainers.runtime.checkpoint import load_policy

    policy = load_policy(checkpoint, "cpu").eval()
    return token_logits(policy, dataset_frames(DemoDataset(dataset), frames))


def matched_temperature(checkpoint: str, dataset: str, reference: str, temperature: float, frames: int = 96) -> dict:
    """The temperature at which ``checkpoint`` samples as widely as ``reference`` does at ``temperature`` (the mean
    entropy per token on the same ``frames`` frames of ``dataset``): ``{"temperature", "entropy", "frames"}``."""
    target = token_entropy(checkpoint_logits(reference, dataset, frames), temperature)
    matched = temperature_for_entropy(checkpoint_logits(checkpoint, dataset, frames), target)
    return {"temperature": round(matched, 4), "entropy": round(target, 4), "frames": frames}
