"""Schedules of a hyperparameter over training (learning rate, clip range): a multiplier of progress in [0, 1]."""
from __future__ import annotations

import math


def schedule(kind: str, progress: float) -> float:
    """Multiplier of a scheduled value at ``progress`` in [0, 1] of the training budget.

    >>> schedule("linear", 0.25), schedule("cosine", 0.5), schedule("constant", 0.9)
    (0.75, 0.5, 1.0)
    """
    progress = min(max(progress, 0.0), 1.0)
    if kind == "constant":
        return 1.0
    if kind == "linear":
        return 1.0 - progress
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown schedule {kind!r}; use constant, linear or cosine")
