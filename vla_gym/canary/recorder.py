"""Recording the canary's fingerprints (``scripts/record_canary.py``): choosing the cases, recording them, replaying
them under a new reference (:func:`rebase`), leaving one out (:func:`drop_cases`).

    >>> from vla_gym.canary.recorder import record, rebase, drop_cases
    >>> record("runs/canary/fingerprints.json", ["maniskill"])          # doctest: +SKIP
    >>> record("runs/canary/fingerprints.json", ["goal"], merge=True)   # doctest: +SKIP
    >>> rebase("runs/canary/fingerprints.json")                         # doctest: +SKIP
    >>> drop_cases("runs/canary/fingerprints.json", ["90-t79-i4-s4"], "7.2 mm under +-1e-6")   # doctest: +SKIP

A case is kept only when it survives :func:`screen`: the expert succeeds, and replays with its actions moved by
+-:data:`SCREEN_EPSILON` (:func:`perturb_actions`) keep the success and stay within :data:`STABLE_M`:

    >>> import numpy as np
    >>> moved = perturb_actions({"k.actions": np.zeros((2, 7), np.float32), "k.robot": np.zeros((1, 3))}, 1e-6)
    >>> bool(np.allclose(np.abs(moved["k.actions"]), 1e-6)), bool(moved["k.robot"].any())
    (True, False)
    >>> frame_settings()["cameras"], frame_settings()["px"], frame_settings()["pool"]
    (['main', 'wrist'], 64, 4)
"""
from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict

import numpy as np

from vla_gym.canary.fingerprints import (
    FRAME_POOL,
    FRAME_PX,
    LIBERO_ENV_KWARGS,
    RENDER_TOLERANCE,
    STRIDE,
    SUITES,
    TOLERANCE_M,
    CanaryError,
    Case,
    Trace,
    load,
    versions,
)
from vla_gym.canary.metrics import drifts
from vla_gym.canary.player import HOLD_STEPS, make_env, play, replays
from vla_gym.core.registry import ENTRIES

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


def perturb_actions(arrays: dict[str, np.ndarray], epsilon: float, seed: int = 0) -> dict[str, np.ndarray]:
    """A copy of ``arrays`` whose ``*.actions`` moved by +-``epsilon`` (random signs): how far a tiny numerical
    difference grows over an episode, the floor under any useful tolerance."""
    rng = np.random.default_rng(seed)
    return {name: (array + epsilon * rng.choice([-1.0, 1.0], array.shape)).astype(np.float32)
            if name.endswith(".actions") else array for name, array in arrays.items()}


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
