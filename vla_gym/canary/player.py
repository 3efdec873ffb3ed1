"""Playing canary cases: the scripted expert (to record a case) or recorded actions open loop (to replay one),
physics only, sampling the end-effector's and the movable objects' positions; :func:`check` replays fingerprinted
cases and compares each with its fingerprint.

    >>> from vla_gym.canary.fingerprints import load, select
    >>> from vla_gym.canary.player import check, unavailable
    >>> meta, arrays = load()
    >>> cases = select(meta, ["maniskill"], quick=True)
    >>> [(r.key, r.status, r.identical) for r in check(meta, arrays, cases)]   # doctest: +SKIP
    [('maniskill-t0-s3', 'OK', True)]
    >>> unavailable("VLA/ManiSkill-PushCube-v0")      # doctest: +SKIP
    'maniskill is not installed here: pip install "vla-gym[maniskill]"'

One case by hand (:func:`make_env`, :func:`play`; ``actions=None`` plays the scripted expert instead):

    >>> from vla_gym.canary.fingerprints import Case
    >>> env = make_env("VLA/ManiSkill-PushCube-v0")                                            # doctest: +SKIP
    >>> trace = play(env, Case(**{k: cases[0][k] for k in ("suite", "env_id", "task_id", "task",
    ...              "init_state_id", "seed")}), actions=arrays[f"{cases[0]['key']}.actions"])  # doctest: +SKIP
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from vla_gym.canary.fingerprints import (
    LIBERO_ENV_KWARGS,
    MANISKILL_ENV_KWARGS,
    RENDER_TOLERANCE,
    STRIDE,
    TOLERANCE_M,
    CanaryError,
    Case,
    Trace,
)
from vla_gym.canary.metrics import Result, compare, pooled, sample_indices
from vla_gym.core.errors import MissingSimulatorError, RenderingUnavailableError
from vla_gym.core.make import make
from vla_gym.core.registry import ENTRIES

#: an expert episode goes on this many steps after the first success, so success is judged on a settled scene,
#: not on the step where it first held: LIBERO's expert plays on (release, lift); ManiSkill's PushCube expert
#: would push the cube on past the goal (vla_gym's episodes end on success), so there the arm holds still
HOLD_STEPS = 20


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


def replays(env, cases: Sequence[dict], arrays: dict[str, np.ndarray], stride: int):
    """(recorded case, :class:`Trace`) of each of ``cases`` (of one env id) replayed open loop in ``env``."""
    for recorded in cases:
        case = Case(recorded["suite"], recorded["env_id"], recorded["task_id"], recorded["task"],
                    recorded["init_state_id"], recorded["seed"])
        yield recorded, play(env, case, actions=arrays[f"{case.key}.actions"], stride=stride)


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


def _skipped(recorded: dict, reason: str) -> Result:
    return Result(recorded["key"], recorded["env_id"], recorded["task"], recorded["init_state_id"], recorded["seed"],
                  "SKIP", success_ref=recorded["success"], length_ref=recorded["length"], note=reason)
