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
recorded one's path, allowing a time shift of :data:`WINDOW` sample; a replay under the reference versions gives
exactly 0:

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
"""
from __future__ import annotations

import argparse
import io
import json
import pathlib
import platform
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources

import numpy as np

from vla_gym.core.errors import MissingSimulatorError, RenderingUnavailableError
from vla_gym.core.make import make
from vla_gym.core.registry import ENTRIES
from vla_gym.runtime.cli_args import parser_with_examples
from vla_gym.runtime.receipt import package_versions

#: ``--suite`` name -> the env id its cases run on
SUITES = {
    "object": "VLA/LiberoObject-v0",
    "spatial": "VLA/LiberoSpatial-v0",
    "goal": "VLA/LiberoGoal-v0",
    "90": "VLA/Libero90-v0",
    "maniskill": "VLA/ManiSkill-PushCube-v0",
}
#: positions are fingerprinted every STRIDE steps (and at the last step); 5 steps = 0.25 s at 20 Hz
STRIDE = 5
#: path_drift's allowance for a time shift, in samples (1 sample = STRIDE steps)
WINDOW = 1
#: default drift alarm (m): 5x the most any kept case drifts when its actions move by 1e-6 (STABLE_M), a
#: sixth of LIBERO's 3 cm goal tolerance; docs/evaluation.md ("Physics canary") says how it was chosen
TOLERANCE_M = 0.005
#: an expert episode goes on this many steps after the first success, so success is judged on a settled scene,
#: not on the step where it first held: LIBERO's expert plays on (release, lift); ManiSkill's PushCube expert
#: would push the cube on past the goal (vla_gym's episodes end on success), so there the arm holds still
HOLD_STEPS = 20
#: LIBERO: the first of these init states (seed = init state) that makes a good canary is the task's case
LIBERO_INIT_STATES = tuple(range(8))
#: ManiSkill PushCube: the first MANISKILL_CASES good canaries among these seeds
MANISKILL_SEEDS = tuple(range(10))
MANISKILL_CASES = 3
#: the recording screen (:func:`screen`): a case is kept when SCREEN_REPEATS replays with the actions moved by
#: +-SCREEN_EPSILON keep its success and stay within STABLE_M of it. Open-loop contact is chaotic: any change
#: of the numbers, 1e-15 as much as 1e-6, moves a dropped bowl by millimetres in some episodes and by
#: centimetres in others; those would raise an alarm on every rebuild of the same physics, so they are left out
SCREEN_EPSILON = 1e-6
SCREEN_REPEATS = 5
STABLE_M = 0.001
#: the distributions whose versions are stamped into the fingerprints (LIBERO's under whichever name it has)
VERSIONED = ("mujoco", "robosuite", "LIBERO", "mani_skill", "sapien", "torch", "numpy")
ASSET = ("canary", "fingerprints.json")
#: the cameras a LIBERO case fingerprints at its reset (steps here never render): both, FRAME_PX square, pooled
#: into FRAME_POOL x FRAME_POOL blocks
FRAME_PX, FRAME_POOL = 64, 4
LIBERO_ENV_KWARGS = {"cameras": ("main", "wrist"), "image_size": FRAME_PX}
#: default render alarm: the mean absolute difference of the pooled frames, of 255; LIBERO's frames under MuJoCo
#: 2.3.7-3.3.2 and 3.17 with linear textures differ by < 0.1, MuJoCo >= 3.3.3's own sRGB textures by about 36
RENDER_TOLERANCE = 2.0
MANISKILL_ENV_KWARGS = {"obs_mode": "state"}


class CanaryError(RuntimeError):
    """A problem with the command or the fingerprints (exit 2), not a drift."""


# ----------------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Case:
    """One canary episode: ``reset(seed, options={task_id, init_state_id})`` on ``env_id``."""

    suite: str
    env_id: str
    task_id: int
    task: str
    init_state_id: int | None
    seed: int

    @property
    def key(self) -> str:
        """A stable name, e.g. ``object-t3-i0-s0`` or ``maniskill-t0-s2``."""
        init = "" if self.init_state_id is None else f"-i{self.init_state_id}"
        return f"{self.suite}-t{self.task_id}{init}-s{self.seed}"


@dataclass
class Trace:
    """What one played episode leaves: the executed actions and the sampled positions (float32)."""

    actions: np.ndarray        # [T, 7]
    robot: np.ndarray          # [S, 3] end-effector position
    objects: np.ndarray        # [S, K, 3] movable objects' positions
    object_names: list[str]
    success: bool              # success at the last step
    length: int | None         # the step of the first success (None: never)
    frames: dict[str, np.ndarray] = field(default_factory=dict)  # role -> pooled reset frame (uint8), LIBERO only


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


def versions() -> dict[str, str | None]:
    """Versions of the simulators and libraries the physics depends on (None: not installed), from the receipt's
    :func:`~vla_gym.runtime.receipt.package_versions` in the fingerprints' notation (``"LIBERO": "<dist> <version>"``)."""
    installed = package_versions()
    found: dict[str, str | None] = {"python": platform.python_version(), "machine": platform.machine()}
    for name in VERSIONED:
        version = installed.get("libero" if name == "LIBERO" else name)
        if name == "LIBERO" and version is not None and "==" not in version:
            version = f"libero {version}"
        found[name] = None if version is None else version.replace("==", " ")
    return found


# ---------------------------------------------------------------------------------- simulators
def make_env(env_id: str):
    """A physics-only env for ``env_id``: LIBERO with one 32x32 camera, ManiSkill with state observations."""
    kwargs = LIBERO_ENV_KWARGS if ENTRIES[env_id].backend == "libero" else MANISKILL_ENV_KWARGS
    return make(env_id, **kwargs)


def unavailable(env_id: str) -> str | None:
    """Why ``env_id``'s simulator cannot run here (the pip extra to install), or None."""
    entry = ENTRIES[env_id]
    if not entry.available():
        return f'{entry.backend} is not installed here: pip install "vla-gym[{entry.extra}]"'
    return None


def probe(env) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The simulator's true end-effector position and its movable objects' positions, now."""
    backend = env.unwrapped.backend
    if getattr(backend, "robosuite_env", None) is not None:
        from vla_gym.data.experts.libero_scene import Scene

        scene = Scene(backend.robosuite_env)
        return scene.eef_pos(), {name: scene.body_pos(name) for name in backend.robosuite_env.objects_dict}
    ms_env = backend.maniskill_env  # PushCube: the gripper's tcp and the cube
    return _actor_position(ms_env.agent.tcp), {"cube": _actor_position(ms_env.obj)}


def _actor_position(actor) -> np.ndarray:
    """A ManiSkill actor's position (its only sub-env) as numpy."""
    return actor.pose.p[0].cpu().numpy().astype(np.float64)


def play(env, case: Case, actions: np.ndarray | None = None, stride: int = STRIDE) -> Trace:
    """Play ``case`` from its reset, physics only (no rendering): with ``actions`` None the scripted expert,
    until :data:`HOLD_STEPS` steps after its first success (see there) or the step limit; else ``actions`` open
    loop, all of them."""
    from vla_gym.data.experts.dispatch import expert_for

    options = {"task_id": case.task_id}
    if case.init_state_id is not None:
        options["init_state_id"] = case.init_state_id
    observation, _ = env.reset(seed=case.seed, options=options)
    frames = {role: pooled(image) for role, image in (observation.get("images") or {}).items()}
    base = env.unwrapped
    expert = expert_for(env) if actions is None else None
    hold_still = getattr(base.backend, "maniskill_env", None) is not None
    robot, objects = probe(env)
    names = list(objects)
    robots, positions, executed = [robot], [[objects[n] for n in names]], []
    first_success, success = None, False
    while actions is None or len(executed) < len(actions):
        if actions is not None:
            action = np.asarray(actions[len(executed)], np.float32)
        elif first_success and hold_still:  # the arm stops where it is, the gripper as it was
            action = np.r_[np.zeros(6), executed[-1][6]].astype(np.float32)
        else:
            action = np.asarray(expert(), np.float32)
        _, _, success, truncated, _ = base.step(action, observe=False)
        executed.append(action)
        robot, objects = probe(env)
        robots.append(robot)
        positions.append([objects[n] for n in names])
        if success and first_success is None:
            first_success = len(executed)
        if actions is None and (truncated or first_success and len(executed) >= first_success + HOLD_STEPS):
            break
    rows = sample_indices(len(robots), stride)
    return Trace(
        actions=np.stack(executed).astype(np.float32), robot=np.asarray(robots, np.float32)[rows],
        objects=np.asarray(positions, np.float32).reshape(len(robots), len(names), 3)[rows],
        object_names=names, success=bool(success), length=first_success, frames=frames)


def sensitivity(env, case: Case, trace: Trace, stride: int = STRIDE) -> tuple[float, bool]:
    """How ``case`` answers noise: the largest drift (m) of up to :data:`SCREEN_REPEATS` replays of ``trace``'s
    actions moved by +-:data:`SCREEN_EPSILON`, and whether every one kept ``trace``'s success. It stops at the
    first replay that drifts beyond :data:`STABLE_M` or loses the success: the case is out either way."""
    arrays = {"x.actions": trace.actions}
    worst, kept = 0.0, True
    for repeat in range(SCREEN_REPEATS):
        replay = play(env, case, perturb_actions(arrays, SCREEN_EPSILON, seed=repeat)["x.actions"], stride)
        worst = max(worst, *drifts(trace, replay.robot, replay.objects)[:2])
        kept = kept and replay.success == trace.success
        if worst > STABLE_M or not kept:
            break
    return worst, kept


def drifts(reference: Trace, robot: np.ndarray, objects: np.ndarray) -> tuple[float, float, int | None]:
    """(robot drift, largest object drift, index of that object) of a replay against ``reference``."""
    per_object = [path_drift(reference.objects[:, k], objects[:, k]) for k in range(reference.objects.shape[1])]
    worst = int(np.argmax(per_object)) if per_object else None
    return path_drift(reference.robot, robot), per_object[worst] if per_object else 0.0, worst


def perturb_actions(arrays: dict[str, np.ndarray], epsilon: float, seed: int = 0) -> dict[str, np.ndarray]:
    """A copy of ``arrays`` whose ``*.actions`` moved by +-``epsilon`` (random signs): how far a tiny numerical
    difference grows over an episode, the floor under any useful tolerance."""
    rng = np.random.default_rng(seed)
    return {name: (array + epsilon * rng.choice([-1.0, 1.0], array.shape)).astype(np.float32)
            if name.endswith(".actions") else array for name, array in arrays.items()}


# ------------------------------------------------------------------------------------ recording
def candidate_cases(suite: str) -> list[tuple[list[Case], int]]:
    """Groups of (cases to try in order, how many to keep): per LIBERO task with an expert its first
    :data:`LIBERO_INIT_STATES`; for ManiSkill PushCube :data:`MANISKILL_CASES` of its seeds."""
    from vla_gym.data.experts.dispatch import has_expert
    from vla_gym.tasks.libero import suite_tasks
    from vla_gym.tasks.maniskill import task_specs

    env_id = SUITES[suite]
    entry = ENTRIES[env_id]
    if entry.backend == "maniskill":
        task = task_specs(entry.kwargs["tasks"])[0]
        return [([Case(suite, env_id, task.index, task.name, None, seed) for seed in MANISKILL_SEEDS],
                 MANISKILL_CASES)]
    return [([Case(suite, env_id, task.index, task.name, init, init) for init in LIBERO_INIT_STATES], 1)
            for task in suite_tasks(entry.kwargs["suite"]) if has_expert(task)]


def screen(env, candidates: Sequence[Case], count: int, stride: int = STRIDE):
    """Up to ``count`` good canaries among ``candidates`` (tried in order), as (case, trace, sensitivity,
    tried), and why the rest of ``count`` found none. A good canary: the expert succeeds, and
    :func:`sensitivity` keeps its success and stays within :data:`STABLE_M`."""
    kept, failed, noisy, fallback = [], 0, [], None
    for tried, case in enumerate(candidates, 1):
        trace = play(env, case, stride=stride)
        fallback = fallback or (case, trace, None, tried)
        if not trace.success:
            failed += 1
            continue
        drift, same_success = sensitivity(env, case, trace, stride)
        if same_success and drift <= STABLE_M:
            kept.append((case, trace, drift, tried))
            if len(kept) == count:
                break
        else:
            noisy.append(f"{case.key}: {drift * 1000:.2f} mm" + ("" if same_success else ", success flips"))
    reason = None if len(kept) == count else (
        f"{len(kept)} of {count} kept; of {len(candidates)} tried, the expert failed {failed}; "
        f"too sensitive to +-{SCREEN_EPSILON:g} on the actions: {'; '.join(noisy) or 'none'}")
    return kept, reason, fallback


def record(out: str | pathlib.Path, suites: Sequence[str] = tuple(SUITES), stride: int = STRIDE,
           log: Callable[[str], None] = print, merge: bool = False) -> dict:
    """Screen the candidate cases of ``suites`` (:func:`screen`) and write ``out`` (JSON) and its ``.npz``.

    A task without a good canary is listed under ``left_out`` with the reason; a suite left with no case at
    all keeps its first candidate as it played (a failure or a noisy case, marked ``screened: false``) so
    that the suite is still watched. The first case of each suite is its ``--quick`` case. With ``merge`` the
    other suites' cases already in ``out`` stay (:func:`merge_other_suites`).
    """
    out = pathlib.Path(out)
    meta = {"format": 1, "recorded": time.strftime("%Y-%m-%d"), "reference": versions(), "stride": stride,
            "hold_steps": HOLD_STEPS, "tolerance_m": TOLERANCE_M, "frames": frame_settings(),
            "screen": {"epsilon": SCREEN_EPSILON, "repeats": SCREEN_REPEATS, "stable_m": STABLE_M},
            "cases": [], "left_out": []}
    arrays: dict[str, np.ndarray] = {}

    def keep(case: Case, trace: Trace, drift: float | None, tried: int, quick: bool) -> None:
        meta["cases"].append({**asdict(case), "key": case.key, "quick": quick, "screened": drift is not None,
                              "success": trace.success, "length": trace.length, "steps": len(trace.actions),
                              "objects": trace.object_names, "tried": tried,
                              "sensitivity_m": None if drift is None else round(drift, 7)})
        arrays.update(trace_arrays(case.key, trace))
        note = "" if drift is None else f", {drift * 1000:.3f} mm under +-{SCREEN_EPSILON:g}"
        log(f"{case.key}  {case.task}: {'success' if trace.success else 'FAILED'} at step {trace.length}{note}")

    for suite in suites:
        env = make_env(SUITES[suite])
        first_fallback, kept_any = None, False
        try:
            for candidates, count in candidate_cases(suite):
                kept, reason, fallback = screen(env, candidates, count, stride)
                first_fallback = first_fallback or fallback
                for case, trace, drift, tried in kept:
                    keep(case, trace, drift, tried, quick=not kept_any)
                    kept_any = True
                if reason:
                    meta["left_out"].append({"suite": suite, "task_id": candidates[0].task_id,
                                             "task": candidates[0].task, "reason": reason})
                    log(f"{suite} task {candidates[0].task_id} {candidates[0].task}: {reason}")
            if not kept_any:
                keep(*first_fallback, quick=True)
        finally:
            env.close()
    if merge:
        merge_other_suites(meta, arrays, *load(out), suites)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(meta, indent=1) + "\n")
    np.savez_compressed(out.with_suffix(".npz"), **arrays)
    return meta


def frame_settings() -> dict:
    """How the reset frames are fingerprinted (stored with the fingerprints)."""
    return {"cameras": list(LIBERO_ENV_KWARGS["cameras"]), "px": FRAME_PX, "pool": FRAME_POOL,
            "texture_colorspace": "linear", "render_tolerance": RENDER_TOLERANCE}


def trace_arrays(key: str, trace: Trace) -> dict[str, np.ndarray]:
    """The arrays of one case's fingerprint: actions, robot and object positions, pooled reset frames."""
    return {f"{key}.actions": trace.actions, f"{key}.robot": trace.robot, f"{key}.objects": trace.objects,
            **{f"{key}.frame_{role}": frame for role, frame in trace.frames.items()}}


def rebase(path: str | pathlib.Path, log: Callable[[str], None] = print) -> dict:
    """Record the fingerprints at ``path`` again under the versions installed here, keeping their cases and actions.

    The canary compares what the simulator does with fixed actions; a new reference version only changes what that
    is. Each case's recorded actions are replayed open loop and its positions, success and reset frames replace the
    old ones; the cases (chosen by :func:`record`'s screen) and their actions stay, so every version measured
    against either reference replays the same episodes. ``meta["rebased"]`` keeps the older reference.
    """
    path = pathlib.Path(path)
    meta, arrays = load(path)
    old_reference, old_recorded = meta["reference"], meta.get("recorded")
    for env_id in dict.fromkeys(c["env_id"] for c in meta["cases"]):
        env = make_env(env_id)
        try:
            group = [c for c in meta["cases"] if c["env_id"] == env_id]
            for recorded, trace in replays(env, group, arrays, meta["stride"]):
                before = (recorded["success"], recorded["length"])
                recorded.update(success=trace.success, length=trace.length)
                arrays.update(trace_arrays(recorded["key"], trace))
                log(f"{recorded['key']}  {recorded['task']}: success {before[0]} -> {trace.success}, first at "
                    f"{before[1]} -> {trace.length}")
        finally:
            env.close()
    meta.update(reference=versions(), recorded=time.strftime("%Y-%m-%d"), frames=frame_settings(),
                rebased={"from": old_reference, "recorded": old_recorded,
                         "note": "cases and actions chosen and recorded under 'from'; positions, successes and frames "
                                 "replayed under 'reference'"})
    path.write_text(json.dumps(meta, indent=1) + "\n")
    np.savez_compressed(path.with_suffix(".npz"), **arrays)
    return meta


def drop_cases(path: str | pathlib.Path, keys: Sequence[str], reason: str) -> dict:
    """Move the cases ``keys`` of the fingerprints at ``path`` to ``left_out`` with ``reason`` (e.g. one that a
    rebased reference made too sensitive to +-1e-6 on its actions); the others stay as recorded."""
    path = pathlib.Path(path)
    meta, arrays = load(path)
    unknown = sorted(set(keys) - {case["key"] for case in meta["cases"]})
    if unknown:
        raise CanaryError(f"no such case: {', '.join(unknown)}")
    dropped = [case for case in meta["cases"] if case["key"] in keys]
    meta["cases"] = [case for case in meta["cases"] if case["key"] not in keys]
    meta["left_out"] += [{"suite": c["suite"], "task_id": c["task_id"], "task": c["task"], "reason": f"{c['key']}: {reason}"}
                         for c in dropped]
    arrays = {name: array for name, array in arrays.items() if name.rsplit(".", 1)[0] not in keys}
    path.write_text(json.dumps(meta, indent=1) + "\n")
    np.savez_compressed(path.with_suffix(".npz"), **arrays)
    return meta


def merge_other_suites(meta: dict, arrays: dict[str, np.ndarray], old_meta: dict, old_arrays: dict[str, np.ndarray],
                       suites: Sequence[str]) -> None:
    """Add to a new recording of ``suites`` the other suites' cases of an older one, in :data:`SUITES` order.

    Refused (:class:`CanaryError`) unless both were recorded under the same versions and settings.
    """
    settings = ("reference", "stride", "hold_steps", "screen", "frames")
    if any(old_meta.get(name) != meta[name] for name in settings):
        differ = [name for name in settings if old_meta.get(name) != meta[name]]
        raise CanaryError(f"cannot merge: the fingerprints there were recorded with other {', '.join(differ)}; "
                          "record every suite (leave out --merge)")
    order = {suite: number for number, suite in enumerate(SUITES)}
    kept = [case for case in old_meta["cases"] if case["suite"] not in suites]
    meta["cases"] = sorted(kept + meta["cases"], key=lambda case: order[case["suite"]])
    meta["left_out"] = sorted([row for row in old_meta["left_out"] if row["suite"] not in suites] + meta["left_out"],
                              key=lambda row: order[row["suite"]])
    keys = {case["key"] for case in kept}
    arrays.update({name: array for name, array in old_arrays.items() if name.rsplit(".", 1)[0] in keys})
    if old_meta["recorded"] != meta["recorded"]:
        meta["recorded"] = f"{old_meta['recorded']} ({', '.join(suites)}: {meta['recorded']})"


# ------------------------------------------------------------------------------------- checking
def default_path() -> pathlib.Path:
    """The shipped fingerprints (``vla_gym.assets/canary/fingerprints.json``)."""
    return pathlib.Path(str(resources.files("vla_gym.assets").joinpath(*ASSET)))


def load(path: str | pathlib.Path | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """The fingerprints' metadata (JSON) and arrays (the ``.npz`` beside it)."""
    path = pathlib.Path(path) if path is not None else default_path()
    arrays_path = path.with_suffix(".npz")
    if not path.is_file() or not arrays_path.is_file():
        raise CanaryError(f"no fingerprints at {path} (and {arrays_path.name} beside it): record them with "
                          "`python scripts/record_canary.py`")
    with np.load(io.BytesIO(arrays_path.read_bytes())) as npz:
        arrays = {name: npz[name] for name in npz.files}
    return json.loads(path.read_text()), arrays


def select(meta: dict, suites: Iterable[str] | None = None, quick: bool = False) -> list[dict]:
    """The recorded cases of ``suites`` (all when None), only the quick ones with ``quick``."""
    wanted = set(suites) if suites is not None else None
    return [c for c in meta["cases"] if (wanted is None or c["suite"] in wanted) and (c["quick"] or not quick)]


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


def check(meta: dict, arrays: dict[str, np.ndarray], cases: Sequence[dict], tolerance: float = TOLERANCE_M,
          on_result: Callable[[Result], None] = lambda result: None, strict: bool = False,
          render_tolerance: float = RENDER_TOLERANCE) -> list[Result]:
    """Replay ``cases`` (recorded entries of ``meta``) and compare each with its fingerprint.

    Cases whose simulator is missing are ``SKIP`` (with the pip extra that installs it), or raise
    :class:`CanaryError` with ``strict``. One env per env id, closed after its cases.
    """
    results = []
    for env_id in dict.fromkeys(c["env_id"] for c in cases):
        group = [c for c in cases if c["env_id"] == env_id]
        env, reason = None, unavailable(env_id)
        if reason is None:
            try:
                env = make_env(env_id)
            except (MissingSimulatorError, RenderingUnavailableError, FileNotFoundError) as error:
                reason = str(error).splitlines()[0] + " ..."
        if env is None:
            if strict:
                raise CanaryError(f"cannot run {env_id}: {reason}")
            skipped = [_skipped(c, reason) for c in group]
            for result in skipped:
                on_result(result)
            results += skipped
            continue
        try:
            for recorded, trace in replays(env, group, arrays, meta["stride"]):
                results.append(compare(recorded, arrays, trace, tolerance, render_tolerance))
                on_result(results[-1])
        finally:
            env.close()
    return results


def replays(env, cases: Sequence[dict], arrays: dict[str, np.ndarray], stride: int):
    """(recorded case, :class:`Trace`) of each of ``cases`` (of one env id) replayed open loop in ``env``."""
    for recorded in cases:
        case = Case(recorded["suite"], recorded["env_id"], recorded["task_id"], recorded["task"],
                    recorded["init_state_id"], recorded["seed"])
        yield recorded, play(env, case, actions=arrays[f"{case.key}.actions"], stride=stride)


def _skipped(recorded: dict, reason: str) -> Result:
    return Result(recorded["key"], recorded["env_id"], recorded["task"], recorded["init_state_id"], recorded["seed"],
                  "SKIP", success_ref=recorded["success"], length_ref=recorded["length"], note=reason)


# ------------------------------------------------------------------------------------- printing
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


# ------------------------------------------------------------------------------------------ CLI
EXAMPLES = [
    "vla-gym canary --quick",
    "vla-gym canary",
    "vla-gym canary --suite object,spatial --tolerance 0.01",
    "vla-gym canary --quick --json runs/canary.json",
]


def parse_suites(tokens: Sequence[str] | None) -> list[str] | None:
    """``["object,spatial", "90"]`` -> ``["object", "spatial", "90"]``; unknown names raise CanaryError."""
    if tokens is None:
        return None
    names = [part.strip() for token in tokens for part in token.split(",") if part.strip()]
    unknown = [name for name in names if name not in SUITES]
    if unknown or not names:
        raise CanaryError(f"--suite {','.join(unknown) or '(empty)'}: choose from {','.join(SUITES)}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``vla-gym canary`` flags (the parser gets the description and examples)."""
    parser_with_examples(None, "Replay the scripted experts' recorded actions from fixed resets and compare robot "
                         "and object trajectories and success with the fingerprints recorded under a reference "
                         "MuJoCo: exit 1 when a success flips or a trajectory drifts beyond the tolerance. See "
                         "docs/evaluation.md.", EXAMPLES, parser=parser)
    parser.add_argument("--quick", action="store_true",
                        help="one case per LIBERO suite and one ManiSkill seed (under a minute)")
    parser.add_argument("--suite", nargs="+", metavar="NAMES",
                        help=f"only these suites, comma separated (default all: {','.join(SUITES)})")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE_M, metavar="M",
                        help=f"largest drift (metres) of the robot or an object before DRIFT (default {TOLERANCE_M})")
    parser.add_argument("--render-tolerance", type=float, default=RENDER_TOLERANCE, metavar="LEVELS",
                        help="largest mean change of the pooled reset frames (of 255) before RENDER "
                             f"(default {RENDER_TOLERANCE:g})")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON to this file")
    parser.add_argument("--fingerprints", metavar="PATH",
                        help="fingerprints JSON (its .npz beside it); default: the ones shipped in vla_gym.assets")
    return parser


def main(args: argparse.Namespace) -> int:
    """Run ``vla-gym canary``: print one line per case and a summary; the exit code of :func:`exit_code`."""
    started = time.perf_counter()
    try:
        if args.tolerance <= 0:
            raise CanaryError(f"--tolerance {args.tolerance}: give a positive distance in metres, e.g. 0.005")
        suites = parse_suites(args.suite)
        meta, arrays = load(args.fingerprints)
        cases = select(meta, suites, args.quick)
        if not cases:
            raise CanaryError(f"the fingerprints hold no case of {suites}")
        results = check(meta, arrays, cases, args.tolerance, on_result=lambda r: print(format_result(r), flush=True),
                        strict=suites is not None, render_tolerance=args.render_tolerance)
    except CanaryError as error:
        print(f"vla-gym canary: {error}", file=sys.stderr)
        return 2
    code = exit_code(results)
    print(summary(results, meta, args.tolerance, time.perf_counter() - started, args.render_tolerance))
    if code == 2:
        print("vla-gym canary: no case could run here (see the SKIP lines)", file=sys.stderr)
    if args.json:
        report = {"exit_code": code, "tolerance_m": args.tolerance, "render_tolerance": args.render_tolerance,
                  "reference": meta["reference"],
                  "current": versions(), "recorded": meta.get("recorded"), "results": [asdict(r) for r in results]}
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return code


__all__ = ["SUITES", "STRIDE", "TOLERANCE_M", "RENDER_TOLERANCE", "Case", "Result", "Trace", "add_arguments", "check",
           "compare", "drifts", "load", "main", "merge_other_suites", "path_drift", "perturb_actions", "play", "pooled",
           "drop_cases", "rebase", "record", "render_drift", "sample_indices", "select", "versions"]
