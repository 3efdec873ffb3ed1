"""``vla-gym canary``: a physics canary that catches simulator drift (a new MuJoCo, robosuite, SAPIEN) in one command.

    vla-gym canary --quick                     # 1 case per LIBERO suite + 1 ManiSkill seed, under a minute
    vla-gym canary                             # every case: one init state per task with an expert, 3 PushCube seeds
    vla-gym canary --suite object,maniskill --tolerance 0.01 --json runs/canary.json
    python scripts/record_canary.py            # re-record the fingerprints (under the reference versions)

Published LIBERO success rates move with the MuJoCo version (one policy: 98 % on MuJoCo 3.1, about 91 % on
3.9). The canary replays fixed action sequences, recorded from the scripted experts
(:mod:`vla_gym.data.experts`), open loop from fixed resets (task, init state, seed), and compares what the
simulator does now with the fingerprint recorded under the reference versions: the robot's end-effector
position and every movable object's position every :data:`STRIDE` steps (and at the last step), whether the
episode succeeded and the step it first did, and (LIBERO) what the main and wrist cameras show at the reset, as a
16x16 grid of 4x4-pixel means of a 64-pixel frame. A case is ``FLIP`` when its success changed, ``DRIFT`` when the
robot or an object moved more than the tolerance (default :data:`TOLERANCE_M`) away from its recorded
trajectory, ``RENDER`` when the frames moved more than :data:`RENDER_TOLERANCE` of 255 on average (MuJoCo 3.3.3's
texture colour space moves them by about 36), else ``OK``; the command exits 1 on any ``FLIP``, ``DRIFT`` or
``RENDER``.

The fingerprints ship in ``vla_gym.assets`` (``canary/fingerprints.json``: the reference versions and the
cases; ``canary/fingerprints.npz``: per case the actions, the robot's and the objects' subsampled positions).
Drift (:func:`path_drift`) is how far (m) the replayed trajectory of the robot, or of an object, strays from the
recorded one's path, allowing a time shift of one sample; a replay under the reference versions gives exactly 0.

The package, one job per module (every public name is importable from ``vla_gym.canary`` too):

- :mod:`~vla_gym.canary.fingerprints`: the suites and settings, :class:`Case`, :class:`Trace`, :func:`load`,
  :func:`select`, :func:`versions`
- :mod:`~vla_gym.canary.metrics`: frame and trajectory comparison (:func:`path_drift`, :func:`render_drift`,
  :func:`pooled`) and one case's verdict (:func:`compare` -> :class:`Result`)
- :mod:`~vla_gym.canary.player`: playing a case in a simulator (:func:`play`) and replaying fingerprints
  (:func:`check`)
- :mod:`~vla_gym.canary.recorder`: recording fingerprints (:func:`record`, :func:`rebase`, :func:`drop_cases`),
  used by ``scripts/record_canary.py``
- :mod:`~vla_gym.canary.report`: the lines, summary and exit code the command prints
- :mod:`~vla_gym.canary.cli`: the ``vla-gym canary`` command (:func:`add_arguments`, :func:`main`)

    >>> from vla_gym import canary
    >>> meta, arrays = canary.load()
    >>> [case["key"] for case in canary.select(meta, ["maniskill"])] == [
    ...     key for key in (c["key"] for c in meta["cases"]) if key.startswith("maniskill-")]
    True
    >>> canary.path_drift([[0, 0, 0], [0, 0, 0.1]], [[0, 0.002, 0], [0, 0.002, 0.1]])
    0.002
"""
from __future__ import annotations

from vla_gym.canary.cli import EXAMPLES, add_arguments, main, parse_suites
from vla_gym.canary.fingerprints import (
    ASSET,
    FRAME_POOL,
    FRAME_PX,
    LIBERO_ENV_KWARGS,
    MANISKILL_ENV_KWARGS,
    RENDER_TOLERANCE,
    STRIDE,
    SUITES,
    TOLERANCE_M,
    VERSIONED,
    CanaryError,
    Case,
    Trace,
    default_path,
    load,
    select,
    versions,
)
from vla_gym.canary.metrics import (
    WINDOW,
    Result,
    compare,
    drifts,
    path_drift,
    pooled,
    render_drift,
    sample_indices,
)
from vla_gym.canary.player import HOLD_STEPS, check, make_env, play, probe, replays, unavailable
from vla_gym.canary.recorder import (
    LIBERO_INIT_STATES,
    MANISKILL_CASES,
    MANISKILL_SEEDS,
    SCREEN_EPSILON,
    SCREEN_REPEATS,
    STABLE_M,
    candidate_cases,
    drop_cases,
    frame_settings,
    merge_other_suites,
    perturb_actions,
    rebase,
    record,
    screen,
    sensitivity,
    trace_arrays,
)
from vla_gym.canary.report import exit_code, format_result, format_versions, summary
from vla_gym.core.registry import ENTRIES  # noqa: F401  (``canary.ENTRIES``, as before the split into a package)

__all__ = [
    # fingerprints
    "SUITES", "STRIDE", "TOLERANCE_M", "RENDER_TOLERANCE", "VERSIONED", "ASSET", "FRAME_PX", "FRAME_POOL",
    "LIBERO_ENV_KWARGS", "MANISKILL_ENV_KWARGS", "CanaryError", "Case", "Trace", "default_path", "load", "select",
    "versions",
    # metrics
    "WINDOW", "Result", "compare", "drifts", "path_drift", "pooled", "render_drift", "sample_indices",
    # player
    "HOLD_STEPS", "check", "make_env", "play", "probe", "replays", "unavailable",
    # recorder
    "LIBERO_INIT_STATES", "MANISKILL_SEEDS", "MANISKILL_CASES", "SCREEN_EPSILON", "SCREEN_REPEATS", "STABLE_M",
    "candidate_cases", "drop_cases", "frame_settings", "merge_other_suites", "perturb_actions", "rebase", "record",
    "screen", "sensitivity", "trace_arrays",
    # report
    "exit_code", "format_result", "format_versions", "summary",
    # cli
    "EXAMPLES", "add_arguments", "main", "parse_suites",
]
