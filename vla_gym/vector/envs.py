"""``make_vec``: many copies of a vla_gym env behind one gymnasium vector env.

    >>> import vla_gym
    >>> from vla_gym.wrappers import EpisodeMetrics
    >>> envs = vla_gym.make_vec("VLA/ManiSkill-PickCube-v0", 4, wrappers=[EpisodeMetrics], obs_mode="state")  # doctest: +SKIP
    >>> obs, infos = envs.reset(seed=0)          # sub-env i is seeded with 0 + i          # doctest: +SKIP
    >>> obs, rewards, terminated, truncated, infos = envs.step(envs.action_space.sample())  # doctest: +SKIP

CPU simulators run one env per sub-env. ``vectorization="async"`` (default;
:class:`~vla_gym.vector.async_env.VLAAsyncVectorEnv`) puts each in its own worker process, started with ``spawn``
(so a script that calls it needs the usual ``if __name__ == "__main__":`` guard); observations come back through
shared memory. ``"sync"`` (:class:`~vla_gym.vector.sync_env.VLASyncVectorEnv`) runs them one after another in this
process: for debugging and cheap envs. Both are :class:`gymnasium.vector.VectorEnv` subclasses built on gymnasium's
public API only; vla_gym owns the worker protocol (:mod:`vla_gym.vector.worker`).
``device="cuda"`` hands over to the GPU-batched ManiSkill backend
(:func:`vla_gym.backends.maniskill.gpu.make_gpu_vector_env`), which simulates all sub-envs in one
process.

Auto-reset: **SAME_STEP** (not gymnasium 1.x's default NEXT_STEP). When sub-env ``i`` ends an episode,
the same ``step()`` call resets it: ``obs[i]`` is already the first observation of the next episode,
the last observation of the finished one is ``infos["final_obs"][i]`` and its info is
``infos["final_info"]`` (masked by ``infos["_final_obs"]``). Every step is then a real transition,
which is what PPO needs: it bootstraps a truncated episode from ``V(final_obs)``, and no step is spent
on NEXT_STEP's reset-only transitions (whose actions are ignored and must be masked out of the loss).
:func:`vla_gym.wrappers.finished_episodes` reads ``EpisodeMetrics`` out of either layout.

Seeds: ``reset(seed=s)`` seeds sub-env ``i`` with ``s + i`` (gymnasium's rule), which starts the
simulator's own episode ``s + i`` (ManiSkill's seed, LIBERO's initial state ``(s + i) % 50``; the task of
a multi-task id is drawn from the seeded generator); unseeded autoresets draw from each sub-env's
generator (docs/fidelity.md). The GPU-batched env follows the same rule. ``per_env_kwargs`` gives sub-envs their
own constructor arguments (e.g. one LIBERO task each: ``[{"task_id": i} for i in range(n)]``).

Wrappers: each entry of ``wrappers`` is applied in order inside every sub-env (so the first is the
innermost; put :class:`~vla_gym.wrappers.ActionChunk` first): a callable ``env -> env``, or for configs
a name (``"EpisodeMetrics"``, ``"package.module:Class"``) or ``{"name": ..., "kwargs": {...}}``. A callable that has
an ``env_index`` parameter also gets the sub-env's index, e.g.
``functools.partial(RecordEpisodeVideo, video_folder="videos")``.

Per-sub-env reset options: ``reset(seed=[...], options={"per_env": [options_0, options_1, ...], "reset_mask":
mask})`` resets the masked sub-envs in one call, sub-env ``i`` with its own options dict (None: none) over the
other keys of ``options`` (:func:`vla_gym.core.env.sub_env_options`); e.g. each its own ``task_id`` /
``init_state_id`` (the episode runner's GRPO groups and evaluation episodes).

Stepping some sub-envs only (pipelined rollouts, ``trainers/rollout/pipeline.py``): ``step_rows_async(rows,
actions)`` / ``step_rows_wait(rows)``, SB3's ``step_async`` / ``step_wait`` for a subset of the sub-envs (the
classes' docstrings). :func:`concat_infos` joins the infos of row blocks into the whole step's.

Faults: by default (``on_worker_failure="raise"``), if an async worker process dies (segfault, out-of-memory
kill), the call raises :class:`WorkerCrashedError` naming the sub-env, its task and the exit code, and the vector
env is closed (remaining workers are terminated): nothing hangs. Make a new vector env to continue.
``step_timeout=seconds`` also stops a step or reset that hangs (WorkerCrashedError). ``on_worker_failure="respawn"``
instead restarts the failed sub-env's worker, ends its episode as truncated with ``info["env_failure"]`` saying why,
and goes on; more than ``max_worker_restarts`` failures of one sub-env in a row stop the run
(:mod:`vla_gym.vector.respawn`, docs/reliability.md)::

    envs = vla_gym.make_vec("VLA/LiberoSpatial-v0", 4, step_timeout=120, on_worker_failure="respawn")

Modules, one job each: this one (``make_vec``, wrappers inside sub-envs), :mod:`~vla_gym.vector.async_env` (worker
processes, the parent's side of the protocol, row-wise stepping), :mod:`~vla_gym.vector.worker` (the worker's side,
the autoreset rule), :mod:`~vla_gym.vector.respawn` (timeouts, dead workers, restarts),
:mod:`~vla_gym.vector.sync_env` (in-process sub-envs), :mod:`~vla_gym.vector.batching` (info dicts, rows, seeds) and
:mod:`~vla_gym.vector.wrapper_spec` (wrapper specs). This module re-exports the names callers import from it.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from vla_gym.core.make import make
from vla_gym.core.registry import check_env_id
from vla_gym.vector.async_env import VLAAsyncVectorEnv
from vla_gym.vector.batching import concat_infos
from vla_gym.vector.respawn import WorkerCrashedError, check_failure_options
from vla_gym.vector.sync_env import VLASyncVectorEnv
from vla_gym.vector.wrapper_spec import parse_wrapper, parse_wrappers

__all__ = ["AUTORESET_MODE", "VECTORIZATIONS", "VLAAsyncVectorEnv", "VLASyncVectorEnv", "WorkerCrashedError",
           "concat_infos", "make_vec", "resolve_wrapper"]

VECTORIZATIONS = ("async", "sync")
AUTORESET_MODE = AutoresetMode.SAME_STEP


def resolve_wrapper(spec, key: str = "wrapper") -> Callable[..., gym.Env]:
    """A wrapper callable from a spec: a callable, a name or ``{"name": ..., "kwargs": {...}}``.

    The one parser is :func:`vla_gym.vector.wrapper_spec.parse_wrapper` (its docstring lists the accepted forms)::

        wrappers: [{name: ActionChunk, kwargs: {chunk_size: 8}}, EpisodeMetrics]
    """
    return parse_wrapper(spec, key)


def _apply_wrappers(env: gym.Env, wrappers: Iterable[Callable], env_index: int) -> gym.Env:
    for wrapper in wrappers:
        try:
            takes_index = "env_index" in inspect.signature(wrapper).parameters
        except (TypeError, ValueError):  # builtins without a signature
            takes_index = False
        env = wrapper(env, env_index=env_index) if takes_index else wrapper(env)
    return env


def _make_sub_env(env_id: str, env_kwargs: Mapping[str, Any], wrappers: Sequence[Callable], env_index: int):
    return _apply_wrappers(make(env_id, **env_kwargs), wrappers, env_index)


def make_vec(
    env_id: str,
    num_envs: int,
    vectorization: str = "async",
    wrappers: Sequence[Callable[[gym.Env], gym.Env] | str | Mapping] = (),
    device: str | None = None,
    per_env_kwargs: Sequence[Mapping[str, Any]] | None = None,
    context: str = "spawn",
    step_timeout: float | None = None,
    on_worker_failure: str = "raise",
    max_worker_restarts: int = 3,
    **env_kwargs,
) -> gym.vector.VectorEnv:
    """Make ``num_envs`` copies of ``env_id`` behind a vector env (see the module docstring).

    Args:
        env_id: a registered ``VLA/...`` id.
        num_envs: number of sub-envs.
        vectorization: ``"async"`` (one worker process per sub-env) or ``"sync"`` (in this process).
        wrappers: applied in order inside each sub-env (first = innermost): callables ``env -> env``,
            names or ``{"name": ..., "kwargs": {...}}`` mappings (see :func:`resolve_wrapper`).
        device: None or ``"cpu"`` for the CPU simulators; ``"cuda"`` / ``"cuda:N"`` for GPU-batched ManiSkill.
        per_env_kwargs: optional list of ``num_envs`` dicts merged over ``env_kwargs`` per sub-env.
        context: multiprocessing start method for ``"async"``: ``"spawn"`` (default) or ``"forkserver"``;
            ``"fork"`` starts faster but only works while this process has not started the simulator (its
            workers then raise :class:`vla_gym.runtime.fork_guard.ForkedAfterInitError` instead of hanging).
        step_timeout: ``"async"`` only: seconds a sub-env's ``step`` or ``reset`` may take before its worker counts
            as failed (None: no limit).
        on_worker_failure: ``"async"`` only: ``"raise"`` (:class:`WorkerCrashedError`, the default) or
            ``"respawn"`` (restart the worker, end its episode as truncated with ``info["env_failure"]``, go on;
            :mod:`vla_gym.vector.respawn`).
        max_worker_restarts: with ``"respawn"``: a sub-env that fails more often than this in a row raises
            :class:`WorkerCrashedError`.
        **env_kwargs: passed to every sub-env's constructor (``task_id=``, ``image_size=``, ...).
    """
    check_env_id(env_id)
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    if device is not None and str(device).startswith("cuda"):
        if wrappers or per_env_kwargs:
            raise ValueError(
                "wrappers= and per_env_kwargs= apply to CPU vector envs (one env per sub-env); the GPU backend "
                "simulates all sub-envs in one process: wrap the returned vector env with gymnasium.vector wrappers"
            )
        if step_timeout is not None or on_worker_failure != "raise":
            raise ValueError("step_timeout and on_worker_failure='respawn' apply to CPU vector envs (a worker process "
                             "per sub-env); the GPU backend simulates all sub-envs in this process")
        from vla_gym.backends.maniskill.gpu import make_gpu_vector_env

        return make_gpu_vector_env(env_id, num_envs, device, **env_kwargs)
    if device not in (None, "cpu"):
        raise ValueError(f"device must be None, 'cpu' or 'cuda[:N]', got {device!r}")
    if vectorization not in VECTORIZATIONS:
        raise ValueError(f"vectorization must be one of {VECTORIZATIONS}, got {vectorization!r}")
    if per_env_kwargs is not None and len(per_env_kwargs) != num_envs:
        raise ValueError(f"per_env_kwargs needs one dict per sub-env ({num_envs}), got {len(per_env_kwargs)}")
    check_failure_options(step_timeout, on_worker_failure, max_worker_restarts)
    if vectorization == "sync" and (step_timeout is not None or on_worker_failure != "raise"):
        raise ValueError("step_timeout and on_worker_failure='respawn' need worker processes: use "
                         "vectorization='async' (a sync vector env steps its sub-envs in this process)")

    wrappers = parse_wrappers(wrappers, key="wrappers")
    env_fns = [
        functools.partial(_make_sub_env, env_id, {**env_kwargs, **(per_env_kwargs[i] if per_env_kwargs else {})},
                          wrappers, i)
        for i in range(num_envs)
    ]
    if vectorization == "sync":
        return VLASyncVectorEnv(env_fns, autoreset_mode=AUTORESET_MODE)
    # Observations come back through shared memory (0.57 ms per step for two sub-envs with two 224x224
    # images, against 0.83 ms pickled through the pipes); the instruction's InstructionText space reads it
    # live there (vla_gym/core/instruction_space.py).
    return VLAAsyncVectorEnv(env_fns, env_id=env_id, autoreset_mode=AUTORESET_MODE, context=context,
                             shared_memory=True, step_timeout=step_timeout, on_worker_failure=on_worker_failure,
                             max_worker_restarts=max_worker_restarts)
