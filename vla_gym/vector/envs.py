"""``make_vec``: many copies of a vla_gym env behind one gymnasium vector env.

    >>> import vla_gym
    >>> from vla_gym.wrappers import EpisodeMetrics
    >>> envs = vla_gym.make_vec("VLA/ManiSkill-PickCube-v0", 4, wrappers=[EpisodeMetrics], obs_mode="state")  # doctest: +SKIP
    >>> obs, infos = envs.reset(seed=0)          # sub-env i is seeded with 0 + i          # doctest: +SKIP
    >>> obs, rewards, terminated, truncated, infos = envs.step(envs.action_space.sample())  # doctest: +SKIP

CPU simulators run one env per sub-env. ``vectorization="async"`` (default; gymnasium's
``AsyncVectorEnv``) puts each in its own worker process, started with ``spawn`` (so a script that calls
it needs the usual ``if __name__ == "__main__":`` guard); observations come back through the pipes.
``"sync"`` (:class:`VLASyncVectorEnv`, a ``SyncVectorEnv``) runs them one after another in this process: for
debugging and cheap envs.
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
"""
from __future__ import annotations

import copy
import functools
import inspect
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.vector.async_vector_env import AsyncState
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from vla_gym.core.env import sub_env_options
from vla_gym.core.make import make
from vla_gym.core.registry import check_env_id
from vla_gym.vector.respawn import RespawnMixin, WorkerCrashedError, check_failure_options, exit_cause
from vla_gym.vector.wrapper_spec import parse_wrapper, parse_wrappers

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


def _describe_exit(exitcode: int | None) -> str:
    cause = exit_cause(exitcode)
    return f"killed by {cause}" if cause.startswith("signal") else cause


def _guard_worker_crash(method, during: str, needs_idle_rows: bool = False):
    """Turn a dead worker's broken pipe into a WorkerCrashedError and close the vector env; with
    ``needs_idle_rows``, refuse while sub-envs started by ``step_rows_async`` still step."""

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        if needs_idle_rows:
            self._check_no_rows_stepping(during)
        try:
            result = method(self, *args, **kwargs)
        except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
            raise self._crash_error(during) from exc
        if method.__name__ in ("reset_wait", "step_wait"):
            self._remember_tasks(result[-1])
        return result

    return guarded


class _RowStepping:
    """Stepping a subset of the sub-envs (bookkeeping of :class:`VLAAsyncVectorEnv`'s ``step_rows_*``)."""

    def _check_rows(self, rows: Iterable[int]) -> list[int]:
        rows = [int(row) for row in rows]
        if not rows or len(set(rows)) != len(rows) or not all(0 <= row < self.num_envs for row in rows):
            raise ValueError(f"rows must be distinct sub-env indices in 0..{self.num_envs - 1}, got {rows}")
        return rows

    def _row_actions(self, rows: list[int], actions: Any) -> list[Any]:
        """The actions batch of ``rows`` (first axis: one per row, as ``step`` takes for all sub-envs), per row."""
        spaces_by_size = self.__dict__.setdefault("_row_action_spaces", {})
        if len(rows) not in spaces_by_size:
            spaces_by_size[len(rows)] = batch_space(self.single_action_space, len(rows))
        per_row = list(iterate(spaces_by_size[len(rows)], actions))
        if len(per_row) != len(rows):
            raise ValueError(f"step_rows_async got {len(per_row)} actions for {len(rows)} rows")
        return per_row

    def _check_no_rows_stepping(self, during: str) -> None:
        if self._rows_stepping:
            raise AlreadyPendingCallError(
                f"sub-envs {sorted(self._rows_stepping)} are still stepping (step_rows_async): call "
                f"step_rows_wait for them before {during}", "step")

    def _start_rows(self, rows: Iterable[int]) -> list[int]:
        rows = self._check_rows(rows)
        busy = sorted(set(rows) & self._rows_stepping)
        if busy:
            raise AlreadyPendingCallError(f"sub-envs {busy} are still stepping: step_rows_wait({busy}) first", "step")
        return rows

    def _finish_rows(self, rows: Iterable[int]) -> list[int]:
        rows = self._check_rows(rows)
        idle = sorted(set(rows) - self._rows_stepping)
        if idle:
            raise NoAsyncCallError(f"step_rows_wait for sub-envs {idle} without step_rows_async", "step")
        return rows

    def _rows_result(self, rows: list[int], results: Sequence[tuple]) -> tuple:
        """(obs, rewards, terminated, truncated, infos) of ``rows`` from each row's ``(obs, r, term, trunc, info)``;
        ``obs`` of a row is None where it already is in ``observations`` (shared memory)."""
        if all(result[0] is None for result in results):
            obs = _take_rows(self.single_observation_space, self.observations, rows)
        else:
            obs = concatenate(self.single_observation_space, [result[0] for result in results],
                              create_empty_array(self.single_observation_space, n=len(rows)))
        infos: dict[str, Any] = {}
        for row, result in zip(rows, results):
            infos = self._add_info(infos, result[4], row)
        return (obs, np.array([result[1] for result in results], dtype=np.float64),
                np.array([result[2] for result in results], dtype=np.bool_),
                np.array([result[3] for result in results], dtype=np.bool_), _info_rows(infos, rows))


class VLAAsyncVectorEnv(RespawnMixin, _RowStepping, AsyncVectorEnv):
    """gymnasium's AsyncVectorEnv that reports a dead worker by sub-env index and task (module docstring), takes
    per-sub-env reset options and steps any subset of its sub-envs while the others step. ``step_timeout``,
    ``on_worker_failure`` and ``max_worker_restarts`` (keywords; defaults None, "raise", 3) stop hung steps and
    restart failed workers (:mod:`vla_gym.vector.respawn`).

    ``step_rows_async(rows, actions)``: start the sub-envs ``rows`` (distinct indices; none of them may still be
    stepping) on ``actions`` (a batch with one action per row, in ``rows`` order) and return at once; other rows
    may be started before these are waited for. ``step_rows_wait(rows)``: wait for exactly those sub-envs and
    return ``(obs, rewards, terminated, truncated, infos)`` of ``rows`` in ``rows`` order, as ``step`` returns them
    for all sub-envs (autoresets included: SAME_STEP puts ``final_obs`` / ``final_info`` in the infos): ``obs`` a
    batch of ``len(rows)`` (a copy), ``rewards`` float64, ``terminated`` / ``truncated`` bool, ``infos`` a vector
    info dict of ``len(rows)`` entries (``_key`` masks). :func:`concat_infos` joins the infos of several row
    blocks into those of a whole step. While rows step, ``step`` / ``reset`` / ``call`` / ``set_attr`` raise
    ``AlreadyPendingCallError``; ``close`` waits for them.

        envs.step_rows_async([0, 1], actions[:2]); envs.step_rows_async([2, 3], actions[2:])
        obs01, rewards01, terminated01, truncated01, infos01 = envs.step_rows_wait([0, 1])   # 2, 3 still step

    ``reset(seed=[...], options={"per_env": [dict or None per sub-env], "reset_mask": mask})``: sub-env ``i``
    resets with the other keys of ``options`` updated by its own dict (module docstring).
    """

    #: reset(options={"per_env": [...]}) gives each sub-env its own options
    accepts_per_env_options = True
    #: step_rows_async returns while the sub-envs step in their worker processes (pipelined rollouts)
    steps_rows_in_background = True

    def __init__(self, env_fns, env_id: str = "", step_timeout: float | None = None, on_worker_failure: str = "raise",
                 max_worker_restarts: int = 3, **kwargs):
        check_failure_options(step_timeout, on_worker_failure, max_worker_restarts)  # before any process starts
        self.env_id = env_id
        #: what each sub-env's infos said of its episode: task_id, task_name, init_state_id (crash reports)
        self._episodes: list[dict[str, Any]] = [{} for _ in env_fns]
        self._rows_stepping: set[int] = set()
        super().__init__(env_fns, **kwargs)
        self._supervise(step_timeout, on_worker_failure, max_worker_restarts)

    def _remember_tasks(self, infos: Mapping[str, Any], rows: Sequence[int] | None = None) -> None:
        for key in ("task_id", "task_name", "init_state_id"):
            values, mask = infos.get(key), infos.get("_" + key)
            if values is None or mask is None:
                continue
            for k, index in enumerate(range(self.num_envs) if rows is None else rows):
                if mask[k]:
                    value = values[k]
                    self._episodes[index][key] = value.item() if isinstance(value, np.generic) else value

    # ------------------------------------------------------------------------------- some sub-envs
    def step_rows_async(self, rows: Sequence[int], actions: Any) -> None:
        """Start sub-envs ``rows`` stepping on ``actions`` (one per row); see the class docstring."""
        self._assert_is_running()
        if self._state != AsyncState.DEFAULT:
            raise AlreadyPendingCallError(f"step_rows_async while waiting for {self._state.value}",
                                          str(self._state.value))
        rows = self._start_rows(rows)
        per_row = self._row_actions(rows, actions)
        try:
            for row, action in zip(rows, per_row):
                self.parent_pipes[row].send(("step", action))
                self._rows_stepping.add(row)
        except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
            raise self._crash_error("step()") from exc

    def step_rows_wait(self, rows: Sequence[int]) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Wait for sub-envs ``rows`` (started by :meth:`step_rows_async`) and return their step; see the class
        docstring."""
        self._assert_is_running()
        rows = self._finish_rows(rows)
        try:
            replies = [self.parent_pipes[row].recv() for row in rows]
        except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
            raise self._crash_error("step()") from exc
        finally:
            self._rows_stepping.difference_update(rows)
        # gymnasium counts the failures among all sub-envs: the others are fine
        self._raise_if_errors([True] * (self.num_envs - len(rows)) + [success for _, success in replies])
        result = self._rows_result(rows, [reply for reply, _ in replies])
        self._remember_tasks(result[-1], rows)
        return result

    # ----------------------------------------------------------------------------- per-env options
    def _reset_async(self, seed=None, options=None) -> None:
        per_env = sub_env_options(options, self.num_envs)
        if per_env is None:
            return AsyncVectorEnv.reset_async(self, seed=seed, options=options)
        self._assert_is_running()
        if self._state != AsyncState.DEFAULT:
            raise AlreadyPendingCallError(f"Calling `reset_async` while waiting for a pending call to "
                                          f"`{self._state.value}` to complete", str(self._state.value))
        seeds, mask = _seeds_and_mask(seed, options, self.num_envs)
        for pipe, env_seed, env_reset, env_options in zip(self.parent_pipes, seeds, mask, per_env, strict=True):
            pipe.send(("reset", {"seed": env_seed, "options": env_options}) if env_reset else ("reset-noop", None))
        self._state = AsyncState.WAITING_RESET

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        if self._rows_stepping and not terminate:  # let the workers finish their steps, then close them
            try:
                self.step_rows_wait(sorted(self._rows_stepping))
            except Exception:  # noqa: BLE001 - closing anyway
                terminate = True
        self._rows_stepping.clear()
        super().close_extras(timeout=timeout, terminate=terminate)

    def _crash_error(self, during: str) -> WorkerCrashedError:
        deadline = time.monotonic() + 5.0  # the pipe broke: the process is exiting, give it a moment
        dead = []
        while not dead and time.monotonic() < deadline:
            dead = [i for i, process in enumerate(self.processes) if not process.is_alive()]
            if not dead:
                time.sleep(0.05)
        details = "; ".join(
            f"sub-env {i} (env {self.env_id!r}, task {self._episodes[i].get('task_name', 'not reset yet')!r}, "
            f"worker pid {self.processes[i].pid}, {_describe_exit(self.processes[i].exitcode)})" for i in dead
        ) or "a worker process (could not tell which)"
        self._shut_down()  # nothing is pending any more: close() must not wait
        return WorkerCrashedError(
            f"the worker process of {details} died during {during}; the vector env is closed. "
            "Common causes: the simulator crashed (segfault), the machine ran out of memory, or making the env "
            "raised (its traceback is printed above). Create a new vector env to continue."
        )

    _check_spaces = _guard_worker_crash(AsyncVectorEnv._check_spaces, "start-up (making the env)")
    reset_async = _guard_worker_crash(_reset_async, "reset()", needs_idle_rows=True)
    reset_wait = _guard_worker_crash(AsyncVectorEnv.reset_wait, "reset()")
    step_async = _guard_worker_crash(AsyncVectorEnv.step_async, "step()", needs_idle_rows=True)
    step_wait = _guard_worker_crash(AsyncVectorEnv.step_wait, "step()")
    call_async = _guard_worker_crash(AsyncVectorEnv.call_async, "call()", needs_idle_rows=True)
    call_wait = _guard_worker_crash(AsyncVectorEnv.call_wait, "call()")
    set_attr = _guard_worker_crash(AsyncVectorEnv.set_attr, "set_attr()", needs_idle_rows=True)


class VLASyncVectorEnv(SyncVectorEnv):
    """gymnasium's SyncVectorEnv (sub-envs in this process) with per-sub-env reset options, as
    :class:`VLAAsyncVectorEnv`: ``reset(options={"per_env": [dict or None per sub-env], "reset_mask": mask})``.
    Its sub-envs step in this process, so it does not step subsets of them (pipelined rollouts need workers).
    """

    accepts_per_env_options = True

    def reset(self, *, seed=None, options=None):
        per_env = sub_env_options(options, self.num_envs)
        if per_env is None:
            return super().reset(seed=seed, options=options)
        seeds, mask = _seeds_and_mask(seed, options, self.num_envs)
        self._terminations[mask] = False
        self._truncations[mask] = False
        self._autoreset_envs[mask] = False
        infos: dict[str, Any] = {}
        for i in np.flatnonzero(mask):
            self._env_obs[i], env_info = self.envs[i].reset(seed=seeds[i], options=per_env[i])
            infos = self._add_info(infos, env_info, i)
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return (copy.deepcopy(self._observations) if self.copy else self._observations), infos


def concat_infos(infos: Sequence[Mapping[str, Any]], sizes: Sequence[int]) -> dict[str, Any]:
    """One vector info dict from those of consecutive blocks of sub-envs (``sizes[k]`` sub-envs in ``infos[k]``,
    e.g. :meth:`VLAAsyncVectorEnv.step_rows_wait`'s of rows ``0..k-1``, ``k..2k-1``, ...), as the whole vector env's
    step would have built it: keys missing in a block are zeros / None there, with their ``_key`` mask False.

        >>> a = {"success": np.array([True, False]), "_success": np.array([True, True])}
        >>> concat_infos([a, {}], [2, 1])["success"], concat_infos([a, {}], [2, 1])["_success"]
        (array([ True, False, False]), array([ True,  True, False]))
    """
    if len(infos) != len(sizes):
        raise ValueError(f"concat_infos needs one size per info dict, got {len(infos)} dicts and {len(sizes)} sizes")
    out: dict[str, Any] = {}
    keys = list(dict.fromkeys(key for part in infos for key in part))
    for key in keys:
        present = [part.get(key) for part in infos]
        first = next(value for value in present if value is not None)
        if isinstance(first, Mapping):
            out[key] = concat_infos([value if value is not None else {} for value in present], sizes)
            continue
        blocks = [np.asarray(value) if value is not None else _blank(first, size)
                  for value, size in zip(present, sizes)]
        out[key] = np.concatenate(blocks).astype(first.dtype, copy=False)  # the first sub-env's type, as gymnasium's
    return out


def _blank(like: np.ndarray, size: int) -> np.ndarray:
    if like.dtype == object:
        return np.full(size, None, dtype=object)
    return np.zeros((size, *like.shape[1:]), dtype=like.dtype)


def _info_rows(infos: Mapping[str, Any], rows: Sequence[int]) -> dict[str, Any]:
    """A whole vector env's info dict cut down to ``rows`` (in ``rows`` order)."""
    return {key: _info_rows(value, rows) if isinstance(value, Mapping) else value[rows] for key, value in infos.items()}


def _take_rows(space: gym.Space, batch: Any, rows: Sequence[int]) -> Any:
    """Rows ``rows`` of a batched observation of ``space`` (copied: shared memory is rewritten by the workers)."""
    if isinstance(space, spaces.Dict):
        return {key: _take_rows(sub, batch[key], rows) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_take_rows(sub, part, rows) for sub, part in zip(space.spaces, batch))
    if isinstance(space, spaces.Text):
        return tuple(batch[row] for row in rows)
    return np.asarray(batch)[rows]


def _seeds_and_mask(seed, options: Mapping[str, Any], num_envs: int) -> tuple[list, np.ndarray]:
    """gymnasium's reading of ``reset(seed=...)`` (int s: s + i; a list: one each) and ``options["reset_mask"]``."""
    if seed is None:
        seeds = [None] * num_envs
    elif isinstance(seed, (int, np.integer)):
        seeds = [int(seed) + i for i in range(num_envs)]
    else:
        seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"If seeds are passed as a list the length must match num_envs={num_envs} but got "
                         f"length={len(seeds)}.")
    mask = options.get("reset_mask")
    if mask is None:
        return seeds, np.ones(num_envs, dtype=np.bool_)
    if not isinstance(mask, np.ndarray) or mask.shape != (num_envs,) or mask.dtype != np.bool_ or not mask.any():
        raise ValueError(f"options['reset_mask'] must be a bool numpy array of shape ({num_envs},) with a True value, "
                         f"got {mask!r}")
    return seeds, mask


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
    # images, against 0.83 ms pickled through the pipes); the instruction's InstructionText space makes
    # gymnasium read it live there (vla_gym/core/instruction_space.py).
    return VLAAsyncVectorEnv(env_fns, env_id=env_id, autoreset_mode=AUTORESET_MODE, context=context,
                             shared_memory=True, step_timeout=step_timeout, on_worker_failure=on_worker_failure,
                             max_worker_restarts=max_worker_restarts)
