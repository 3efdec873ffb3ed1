"""Comparing a replay with its fingerprint: how far a trajectory strays (:func:`path_drift`), how much the reset
frames changed (:func:`render_drift`), and the verdict of one case (:func:`compare` -> :class:`Result`).

Drift is how far (m) the replayed trajectory of the robot, or of an object, strays from the recorded one's path,
allowing a time shift of :data:`WINDOW` sample; a replay under the reference versions gives exactly 0:

    >>> import numpy as np
    >>> recorded = np.array([[0, 0, 0], [0, 0, 0.05], [0, 0, 0.1], [0, 0, 0.1]])    # lifted 10 cm, held
    >>> path_drift(recorded, recorded), path_drift(recorded, recorded + [0, 0.003, 0])
    (0.0, 0.003)
    >>> path_drift(recorded, np.array([[0, 0, 0], [0, 0, 0], [0, 0, 0.05], [0, 0, 0.1]]))   # one sample late
    0.0
    >>> sample_indices(11, 5)
    [0, 5, 10]
    >>> sample_indices(13, 5)
    [0, 5, 10, 12]
    >>> pooled(np.full((64, 64, 3), 7, np.uint8)).shape
    (16, 16, 3)
    >>> render_drift({"main": pooled(np.full((64, 64, 3), 140, np.uint8))},
    ...              {"main": pooled(np.full((64, 64, 3), 104, np.uint8))})          # a darker scene
    36.0

A case's status (:func:`compare`): ``FLIP`` when its success changed, ``DRIFT`` when the robot or an object
strayed more than the tolerance, ``RENDER`` when the frames changed more than the render tolerance, else ``OK``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vla_gym.canary.fingerprints import FRAME_POOL, RENDER_TOLERANCE, STRIDE, Trace

#: path_drift's allowance for a time shift, in samples (1 sample = STRIDE steps)
WINDOW = 1


@dataclass
class Result:
    """The comparison of one case with its fingerprint."""

    key: str
    env_id: str
    task: str
    init_state_id: int | None
    seed: int
    status: str                     # OK, DRIFT, FLIP, RENDER or SKIP
    robot_drift_m: float | None = None
    object_drift_m: float | None = None
    worst_object: str | None = None
    success_ref: bool | None = None
    success_now: bool | None = None
    length_ref: int | None = None
    length_now: int | None = None
    identical: bool = False         # every sampled position, the success and its step as recorded (float32)
    render_drift: float | None = None  # mean absolute difference of the pooled reset frames, of 255 (worst camera)
    note: str = ""


def pooled(frame: np.ndarray, block: int = FRAME_POOL) -> np.ndarray:
    """A frame ``[H, W, 3]`` as the uint8 means of its ``block`` x ``block`` pixel squares: a fingerprint of what
    a camera shows that ignores single pixels (an edge one renderer anti-aliases otherwise) but not a darker scene."""
    height, width, channels = frame.shape
    blocks = frame[:height - height % block, :width - width % block].astype(np.float32)
    blocks = blocks.reshape(height // block, block, width // block, block, channels).mean(axis=(1, 3))
    return np.round(blocks).astype(np.uint8)


def render_drift(reference: dict[str, np.ndarray], now: dict[str, np.ndarray]) -> float | None:
    """The largest mean absolute difference (of 255) between the pooled frames of the cameras both have; None if
    none."""
    roles = [role for role in reference if role in now]
    if not roles:
        return None
    return round(max(float(np.abs(reference[r].astype(np.float32) - now[r].astype(np.float32)).mean())
                     for r in roles), 3)


def sample_indices(count: int, stride: int = STRIDE) -> list[int]:
    """The sampled rows of ``count`` per-step positions: every ``stride``-th and the last."""
    return sorted(set(range(0, count, stride)) | {count - 1})


def path_drift(reference: np.ndarray, now: np.ndarray, window: int = WINDOW) -> float:
    """How far (m) one trajectory (``[S, 3]``) strays from the other's path: the largest distance from a sample
    of either to the other's polyline within ``window`` samples of the same time. 0.0 when they are equal.

    A time shift along the same path costs nothing (a bowl let go one step later falls the same way, yet its
    positions at equal times differ by centimetres); leaving the path, or ending elsewhere, does.
    """
    reference, now = np.asarray(reference, np.float64), np.asarray(now, np.float64)
    if reference.size == 0:
        return 0.0
    return round(max(_stray(reference, now, window), _stray(now, reference, window)), 9)


def _stray(points: np.ndarray, path: np.ndarray, window: int) -> float:
    """Largest distance from ``points[i]`` to the segments of ``path`` between samples i-window and i+window."""
    worst = 0.0
    for i, point in enumerate(points):
        low, high = max(0, i - window), min(len(path) - 1, i + window)
        if high == low:  # a one-sample path: the point itself
            start = end = path[low:low + 1]
        else:
            start, end = path[low:high], path[low + 1:high + 1]
        along = end - start
        length2 = np.einsum("ij,ij->i", along, along)
        t = np.clip(np.einsum("ij,ij->i", point - start, along) / np.where(length2 > 0, length2, 1.0), 0.0, 1.0)
        worst = max(worst, float(np.linalg.norm(start + t[:, None] * along - point, axis=1).min()))
    return worst


def drifts(reference: Trace, robot: np.ndarray, objects: np.ndarray) -> tuple[float, float, int | None]:
    """(robot drift, largest object drift, index of that object) of a replay against ``reference``."""
    per_object = [path_drift(reference.objects[:, k], objects[:, k]) for k in range(reference.objects.shape[1])]
    worst = int(np.argmax(per_object)) if per_object else None
    return path_drift(reference.robot, robot), per_object[worst] if per_object else 0.0, worst


def compare(recorded: dict, arrays: dict[str, np.ndarray], trace: Trace, tolerance: float,
            render_tolerance: float = RENDER_TOLERANCE) -> Result:
    """The :class:`Result` of one replay (``trace``) against its fingerprint."""
    key = recorded["key"]
    frames = {name.split(".frame_", 1)[1]: array for name, array in arrays.items() if name.startswith(f"{key}.frame_")}
    reference = Trace(arrays[f"{key}.actions"], arrays[f"{key}.robot"], arrays[f"{key}.objects"],
                      recorded["objects"], recorded["success"], recorded["length"], frames)
    robot, objects, worst = drifts(reference, trace.robot, trace.objects)
    frame_drift = render_drift(reference.frames, trace.frames)
    status = ("FLIP" if trace.success != reference.success else "DRIFT" if max(robot, objects) > tolerance else
              "RENDER" if frame_drift is not None and frame_drift > render_tolerance else "OK")
    identical = (np.array_equal(reference.robot, trace.robot) and np.array_equal(reference.objects, trace.objects)
                 and (trace.success, trace.length) == (reference.success, reference.length))
    return Result(key, recorded["env_id"], recorded["task"], recorded["init_state_id"], recorded["seed"], status,
                  robot, objects, None if worst is None else recorded["objects"][worst], reference.success,
                  trace.success, reference.length, trace.length, identical=identical, render_drift=frame_drift)
