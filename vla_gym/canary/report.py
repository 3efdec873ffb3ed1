"""What ``vla-gym canary`` prints: one line per case (:func:`format_result`), the summary (:func:`summary`), and
its exit code (:func:`exit_code`).

    >>> from vla_gym.canary.metrics import Result
    >>> drifted = Result("maniskill-t0-s3", "VLA/ManiSkill-PushCube-v0", "PushCube", None, 3, "DRIFT",
    ...                  robot_drift_m=0.0, object_drift_m=0.02, worst_object="cube", success_ref=True,
    ...                  success_now=True, length_ref=40, length_now=41)
    >>> print(format_result(drifted))   # doctest: +NORMALIZE_WHITESPACE
    VLA/ManiSkill-PushCube-v0 maniskill-t0-s3 robot 0.00 mm objects 20.00 mm (cube) success yes -> yes
    first success at step 40 -> 41 DRIFT (PushCube)
    >>> exit_code([drifted]), exit_code([])
    (1, 2)
    >>> format_versions({"mujoco": "3.3.0"}, {"mujoco": "3.3.3"})
    'reference MuJoCo 3.3.0, now MuJoCo 3.3.3; differs: mujoco 3.3.0 -> 3.3.3'
"""
from __future__ import annotations

from collections.abc import Sequence

from vla_gym.canary.fingerprints import RENDER_TOLERANCE, VERSIONED, versions
from vla_gym.canary.metrics import Result


def _mm(metres: float | None) -> str:
    return "     -" if metres is None else f"{metres * 1000:6.2f}"


def _yes(flag: bool | None) -> str:
    return "-" if flag is None else "yes" if flag else "no"


def _step(step: int | None) -> str:
    return "-" if step is None else str(step)


def format_result(result: Result) -> str:
    """One line: env id, case, drift of the robot and the objects in mm, success and length ref -> now, status."""
    where = f"{result.env_id:<27} {result.key:<18}"
    if result.status == "SKIP":
        return f"{where} SKIP  {result.note}   ({result.task})"
    obj = f" ({result.worst_object})" if result.worst_object and result.object_drift_m else ""
    frames = "" if result.render_drift is None else f"frames {result.render_drift:5.2f}/255  "
    return (f"{where} robot {_mm(result.robot_drift_m)} mm  objects {_mm(result.object_drift_m)} mm{obj}  {frames}"
            f"success {_yes(result.success_ref)} -> {_yes(result.success_now)}  "
            f"first success at step {_step(result.length_ref):>3} -> {_step(result.length_now):<3}  {result.status:<5}  "
            f"({result.task})")


def format_versions(reference: dict, current: dict) -> str:
    """The reference and current MuJoCo (and the rest, where they differ)."""
    differ = [f"{name} {reference.get(name)} -> {current.get(name)}" for name in ("python", "machine", *VERSIONED)
              if reference.get(name) != current.get(name)]
    line = f"reference MuJoCo {reference.get('mujoco')}, now MuJoCo {current.get('mujoco')}"
    return line + ("; differs: " + ", ".join(differ) if differ else "; every versioned package is the same")


def summary(results: Sequence[Result], meta: dict, tolerance: float, seconds: float,
            render_tolerance: float = RENDER_TOLERANCE) -> str:
    """The counts per status and of identical replays, the largest drift, the tolerance, the versions, the time."""
    counts = {status: sum(r.status == status for r in results) for status in ("OK", "DRIFT", "FLIP", "RENDER", "SKIP")}
    worst = max((max(r.robot_drift_m, r.object_drift_m) for r in results if r.status != "SKIP"), default=0.0)
    identical = sum(r.identical for r in results)
    frames = [r.render_drift for r in results if r.render_drift is not None]
    render = f"; largest frame change {max(frames):.2f}/255 (tolerance {render_tolerance:g})" if frames else ""
    return (f"canary: {len(results)} cases: " + ", ".join(f"{n} {s}" for s, n in counts.items()) +
            f"; {identical} replayed identically to the fingerprint; largest drift {worst * 1000:.2f} mm "
            f"(tolerance {tolerance * 1000:.1f} mm){render}; {seconds:.0f} s\n" +
            format_versions(meta["reference"], versions()) + f" (fingerprints recorded {meta.get('recorded')})")


def exit_code(results: Sequence[Result]) -> int:
    """1 when a success flipped, a trajectory left the tolerance or the frames changed; 2 when nothing ran; else 0."""
    if any(r.status in ("DRIFT", "FLIP", "RENDER") for r in results):
        return 1
    return 0 if any(r.status != "SKIP" for r in results) else 2
