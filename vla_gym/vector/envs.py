"""``make_vec``: many copies of a vla_gym env behind one gymnasium vector env.

    >>> import vla_gym
    >>> from vla_gym.wrappers import EpisodeMetrics
    >>> envs = vla_gym.make_vec("VLA/ManiSkill-PickCube-v0", 4, wrappers=[EpisodeMetrics], obs_mode="state")  # doctest: +SKIP
    >>> obs, infos = envs.reset(seed=0)          # sub-env i is seeded with 0 + i          # doctest: +SKIP
    >>> obs, rewards, terminated, truncated, infos = envs.step(envs.action_space.sample())  # doctest: +SKIP

CPU simulators run one env per sub-env. ``vectorization="async"`` (default; gymnasium's
``AsyncVectorEnv``) puts each in its own worker process, started with ``spawn`` (so a script that calls
it needs the usual ``if __name__ == "__main__":`` guard); observations come back through the pipes.
``"sync"`` (``SyncVectorEnv``) runs them one after another in this process: for debugging and cheap envs.
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

Faults: if an async worker process dies (segfault, out-of-memory kill), the call raises
:class:`WorkerCrashedError` naming the sub-env, its task and the exit code, and the vector env is
closed (remaining workers are terminated): nothing hangs. Make a new vector env to continue.
"""
from __future__ import annotations

import functools
import inspect
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from vla_gym.core.make import make
from vla_gym.core.registry import check_env_id
from vla_gym.vector.wrapper_spec import parse_wrapper, parse_wrappers

VECTORIZATIONS = ("async", "sync")
AUTORESET_MODE = AutoresetMode.SAME_STEP


class WorkerCrashedError(RuntimeError):
    """An async vector env's worker process died; the message names the sub-env and its task."""


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


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "exit code unknown"
    if exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _guard_worker_crash(method, during: str):
    """Turn a dead worker's broken pipe into a WorkerCrashedError and close the vector env."""

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            result = method(self, *args, **kwargs)
        except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
            raise self._crash_error(during) from exc
        if method.__name__ in ("reset_wait", "step_wait"):
            self._remember_tasks(result[-1])
        return result

    return guarded


class VLAAsyncVectorEnv(AsyncVectorEnv):
    """gymnasium's AsyncVectorEnv that reports a dead worker by sub-env index and task (module docstring)."""

    def __init__(self, env_fns, env_id: str = "", **kwargs):
        self.env_id = env_id
        self._task_names = ["not reset yet"] * len(env_fns)
        super().__init__(env_fns, **kwargs)

    def _remember_tasks(self, infos: Mapping[str, Any]) -> None:
        names, mask = infos.get("task_name"), infos.get("_task_name")
        if names is None or mask is None:
            return
        for index in range(self.num_envs):
            if mask[index]:
                self._task_names[index] = str(names[index])

    def _crash_error(self, during: str) -> WorkerCrashedError:
        deadline = time.monotonic() + 5.0  # the pipe broke: the process is exiting, give it a moment
        dead = []
        while not dead and time.monotonic() < deadline:
            dead = [i for i, process in enumerate(self.processes) if not process.is_alive()]
            if not dead:
                time.sleep(0.05)
        details = "; ".join(
            f"sub-env {i} (env {self.env_id!r}, task {self._task_names[i]!r}, worker pid {self.processes[i].pid}, "
            f"{_describe_exit(self.processes[i].exitcode)})" for i in dead
        ) or "a worker process (could not tell which)"
        self._state = type(self._state).DEFAULT  # nothing is pending any more: close() must not wait
        self.close(terminate=True)
        return WorkerCrashedError(
            f"the worker process of {details} died during {during}; the vector env is closed. "
            "Common causes: the simulator crashed (segfault), the machine ran out of memory, or making the env "
            "raised (its traceback is printed above). Create a new vector env to continue."
        )

    _check_spaces = _guard_worker_crash(AsyncVectorEnv._check_spaces, "start-up (making the env)")
    reset_async = _guard_worker_crash(AsyncVectorEnv.reset_async, "reset()")
    reset_wait = _guard_worker_crash(AsyncVectorEnv.reset_wait, "reset()")
    step_async = _guard_worker_crash(AsyncVectorEnv.step_async, "step()")
    step_wait = _guard_worker_crash(AsyncVectorEnv.step_wait, "step()")
    call_async = _guard_worker_crash(AsyncVectorEnv.call_async, "call()")
    call_wait = _guard_worker_crash(AsyncVectorEnv.call_wait, "call()")
    set_attr = _guard_worker_crash(AsyncVectorEnv.set_attr, "set_attr()")


def make_vec(
    env_id: str,
    num_envs: int,
    vectorization: str = "async",
    wrappers: Sequence[Callable[[gym.Env], gym.Env] | str | Mapping] = (),
    device: str | None = None,
    per_env_kwargs: Sequence[Mapping[str, Any]] | None = None,
    context: str = "spawn",
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
        from vla_gym.backends.maniskill.gpu import make_gpu_vector_env

        return make_gpu_vector_env(env_id, num_envs, device, **env_kwargs)
    if device not in (None, "cpu"):
        raise ValueError(f"device must be None, 'cpu' or 'cuda[:N]', got {device!r}")
    if vectorization not in VECTORIZATIONS:
        raise ValueError(f"vectorization must be one of {VECTORIZATIONS}, got {vectorization!r}")
    if per_env_kwargs is not None and len(per_env_kwargs) != num_envs:
        raise ValueError(f"per_env_kwargs needs one dict per sub-env ({num_envs}), got {len(per_env_kwargs)}")

    wrappers = parse_wrappers(wrappers, key="wrappers")
    env_fns = [
        functools.partial(_make_sub_env, env_id, {**env_kwargs, **(per_env_kwargs[i] if per_env_kwargs else {})},
                          wrappers, i)
        for i in range(num_envs)
    ]
    if vectorization == "sync":
        return SyncVectorEnv(env_fns, autoreset_mode=AUTORESET_MODE)
    # Observations come back through shared memory (0.57 ms per step for two sub-envs with two 224x224
    # images, against 0.83 ms pickled through the pipes); the instruction's InstructionText space makes
    # gymnasium read it live there (vla_gym/core/instruction_space.py).
    return VLAAsyncVectorEnv(env_fns, env_id=env_id, autoreset_mode=AUTORESET_MODE, context=context,
                             shared_memory=True)
