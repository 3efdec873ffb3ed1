"""Per-feature statistics of a dataset (``meta/stats.json`` and each episode's ``stats/...`` columns).

Numeric features: min, max, mean, std, count and the quantiles q01 q10 q50 q90 q99 over frames, per dimension;
image features: the same per channel over pixels scaled to [0, 1], shaped ``(3, 1, 1)`` as LeRobot keeps them.
"""
from __future__ import annotations

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)


def _stats(values: np.ndarray) -> dict[str, list]:
    """min/max/mean/std/count and quantiles over axis 0 of [N, D] values."""
    out = {"min": values.min(0), "max": values.max(0), "mean": values.mean(0), "std": values.std(0),
           "count": np.array([len(values)])}
    for q in QUANTILES:
        out[f"q{int(round(q * 100)):02d}"] = np.quantile(values, q, axis=0)
    return {key: value.tolist() for key, value in out.items()}


def _image_stats(frames: list[np.ndarray]) -> dict[str, list]:
    """Per-channel statistics of images scaled to [0, 1], shaped (3, 1, 1) as LeRobot keeps them."""
    pixels = np.stack(frames).reshape(-1, 3).astype(np.float64) / 255.0
    return {key: (np.asarray(value)[:, None, None].tolist() if key != "count" else [len(frames)])
            for key, value in _stats(pixels).items()}

