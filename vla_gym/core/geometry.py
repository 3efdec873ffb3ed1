"""Small rotation helpers shared by backends (numpy only)."""
from __future__ import annotations

import numpy as np


def quat_to_axis_angle(quat: np.ndarray, scalar_first: bool) -> np.ndarray:
    """Unit quaternion -> axis-angle vector (angle * axis), angle in [0, pi].

    >>> quat_to_axis_angle(np.array([0.0, 0.0, 0.0, 1.0]), scalar_first=False)
    array([0., 0., 0.])
    """
    q = np.asarray(quat, dtype=np.float64)
    w, xyz = (q[0], q[1:4]) if scalar_first else (q[3], q[0:3])
    if w < 0:  # q and -q are the same rotation; pick the one with angle <= pi
        w, xyz = -w, -xyz
    sin_half = np.linalg.norm(xyz)
    if sin_half < 1e-8:
        return np.zeros(3)
    angle = 2.0 * np.arctan2(sin_half, min(w, 1.0))
    return xyz / sin_half * angle
