"""vla_gym's async vector env: one worker process per sub-env, on vla_gym's own pipe protocol.

    envs = VLAAsyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 4, autoreset_mode=AutoresetMode.SAME_STEP)
    obs, infos = envs.reset(seed=0)                          # sub-env i: seed 0 + i
    obs, rewards, terminated, truncated, infos = envs.step(envs.action_space.sample())
    envs.step_rows_async([0, 1], actions[:2])                # start some sub-envs; others may start meanwhile
    obs01, rewards01, terminated01, truncated01, infos01 = envs.step_rows_wait([0, 1])
    envs.close()

``vla_gym.make_vec(..., vectorization="async")`` builds it (spawned workers, SAME_STEP autoreset). It is a
:class:`gymnasium.vector.VectorEnv` built on gymnasium's public API only (spaces, batching and shared-memory
utilities): the worker loop and its commands are :mod:`vla_gym.vector.worker`'s, what happens when a worker fails is
:mod:`vla_gym.vector.respawn`'s, and info dicts are batched by :mod:`vla_gym.vector.batching` in gymnasium's layout.
The public surface is gymnasium's ``AsyncVectorEnv``'s: ``reset`` / ``step`` (and their ``_async`` / ``_wait``
halves, ``timeout=`` included), ``call`` / ``get_attr`` / ``set_attr`` / ``render``, ``close(terminate=...)``,
``processes``, ``observations``, ``metadata["autoreset_mode"]`` and the spaces. Observations come back through shared
memory (gymnasium's ``create_shared_memory``; ``shared_memory=False`` or a space without shared memory: through the
pipes). An exception in ``call`` / ``get_attr`` / ``set_attr`` (e.g. AttributeError) is raised here and the workers
go on.
"""
from __future__ import annotations

import copy as copying
import logging
import multiprocessing
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, CustomSpaceError, NoAsyncCallError
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import (
    batch_space,
    concatenate,
    create_empty_array,
    create_shared_memory,
    read_from_shared_memory,
)

from vla_gym.vector.batching import add_info, check_rows, reset_options, row, seeds_and_mask, split_batch, take_rows
from vla_gym.vector.respawn import CALL_NAMES, CallFailed, Failure, RespawnMixin, check_failure_options
from vla_gym.vector.worker import rebuild_error, start_worker

logger = logging.getLogger(__name__)

#: seconds ``close`` waits for a worker process to exit after it closed its env, before killing it
EXIT_TIMEOUT = 30.0


@dataclass(eq=False)
class Worker:
    """The parent's handle on one worker: its process and pipe, the command last sent (and when), and a failure
    found by a ``ping`` that the next command reports."""

    process: Any
    pipe: Any
    command: str | None = None
    data: Any = None
    sent_at: float = 0.0
    pending: Failure | None = None


class VLAAsyncVectorEnv(RespawnMixin, VectorEnv):
    """Sub-envs in worker processes (module docstring) that report a dead worker by sub-env index and task, take
    per-sub-env reset options and step any subset of the sub-envs while the others step. ``step_timeout``,
    ``on_worker_failure`` and ``max_worker_restarts`` (defaults None, "raise", 3) stop hung steps and restart failed
    workers (:mod:`vla_gym.vector.respawn`); ``autoreset_mode`` (NEXT_STEP, gymnasium's default, SAME_STEP or
    DISABLED), ``context`` (multiprocessing start method), ``shared_memory``, ``copy`` and ``daemon`` are
    gymnasium's ``AsyncVectorEnv`` arguments.

    ``step_rows_async(rows, actions)``: start the sub-envs ``rows`` (distinct indices; none of them may still be
    stepping) on ``actions`` (a batch with one action per row, in ``rows`` order) and return at once; other rows
    may be started before these are waited for. ``step_rows_wait(rows)``: wait for exactly those sub-envs and
    return ``(obs, rewards, terminated, truncated, infos)`` of ``rows`` in ``rows`` order, as ``step`` returns them
    for all sub-envs (autoresets included: SAME_STEP puts ``final_obs`` / ``final_info`` in the infos): ``obs`` a
    batch of ``len(rows)`` (a copy), ``rewards`` float64, ``terminated`` / ``truncated`` bool, ``infos`` a vector
    info dict of ``len(rows)`` entries (``_key`` masks). :func:`~vla_gym.vector.batching.concat_infos` joins the
    infos of several row blocks into those of a whole step. While rows step, ``step`` / ``reset`` / ``call`` /
    ``set_attr`` raise ``AlreadyPendingCallError``; ``close`` waits for them.

        envs.step_rows_async([0, 1], actions[:2]); envs.step_rows_async([2, 3], actions[2:])
        obs01, rewards01, terminated01, truncated01, infos01 = envs.step_rows_wait([0, 1])   # 2, 3 still step

    ``reset(seed=[...], options={"per_env": [dict or None per sub-env], "reset_mask": mask})``: sub-env ``i``
    resets with the other keys of ``options`` updated by its own dict (:func:`vla_gym.core.env.sub_env_options`).
    """

    #: reset(options={"per_env": [...]}) gives each sub-env its own options
    accepts_per_env_options = True
    #: step_rows_async returns while the sub-envs step in their worker processes (pipelined rollouts)
    steps_rows_in_background = True

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], env_id: str = "", step_timeout: float | None = None,
                 on_worker_failure: str = "raise", max_worker_restarts: int = 3, *,
                 autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP, context: str | None = None,
                 shared_memory: bool = True, copy: bool = True, daemon: bool = True):
        check_failure_options(step_timeout, on_worker_failure, max_worker_restarts)  # before any process starts
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        if on_worker_failure == "respawn" and self.autoreset_mode != AutoresetMode.SAME_STEP:
            raise ValueError("on_worker_failure='respawn' needs SAME_STEP autoreset (vla_gym.make_vec's): a respawned "
                             "row's step returns the new episode's first observation, as a SAME_STEP autoreset does")
        if not env_fns:
            raise ValueError("VLAAsyncVectorEnv needs at least one env fn")
        self.env_fns, self.env_id, self.num_envs = list(env_fns), env_id, len(env_fns)
        self.context, self.daemon, self.copy = context, daemon, copy
        self.step_timeout = None if step_timeout is None else float(step_timeout)
        self.on_worker_failure, self.max_worker_restarts = on_worker_failure, max_worker_restarts
        self.worker_restarts = 0
        self._failures_in_a_row = [0] * self.num_envs
        #: what each sub-env's infos said of its episode: task_id, task_name, init_state_id (crash reports)
        self._episodes: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        self._workers: list[Worker] = []
        self._pending: str | None = None  # "reset", "step" or "call": the whole-env call waiting for its replies
        self._reset_mask = np.ones(self.num_envs, dtype=np.bool_)
        self._rows_stepping: set[int] = set()
        self._row_action_spaces: dict[int, gym.Space] = {}
        self._closing = False

        dummy = self.env_fns[0]()  # the spaces and metadata (the shared memory is made before the workers start)
        try:
            self.metadata = {**dummy.metadata, "autoreset_mode": self.autoreset_mode}
            self.render_mode = dummy.render_mode
            self.single_observation_space, self.single_action_space = dummy.observation_space, dummy.action_space
        finally:
            dummy.close()
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

        self._shm = None
        if shared_memory:
            try:
                self._shm = create_shared_memory(self.single_observation_space, n=self.num_envs,
                                                 ctx=multiprocessing.get_context(context))
            except CustomSpaceError:
                logger.info("the observation space has no shared-memory layout: observations go through the pipes")
        self.shared_memory = self._shm is not None
        self._last_obs: list[Any] = [None] * self.num_envs  # without shared memory: each row's last observation
        self.observations = (read_from_shared_memory(self.single_observation_space, self._shm, n=self.num_envs)
                             if self.shared_memory else
                             create_empty_array(self.single_observation_space, n=self.num_envs, fn=np.zeros))
        try:
            for i in range(self.num_envs):
                self._workers.append(Worker(*self._launch(i)))
            self._compare_spaces()
        except BaseException:
            self._shut_down()
            raise

    @property
    def processes(self) -> list[multiprocessing.process.BaseProcess]:
        """The worker processes, sub-env order (a respawned worker replaces its sub-env's)."""
        return [worker.process for worker in self._workers]

    @property
    def np_random_seed(self) -> tuple[int, ...]:
        """The sub-envs' ``np_random_seed``."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        """The sub-envs' ``np_random``."""
        return self.get_attr("np_random")

    # ------------------------------------------------------------------------------------- reset
    def reset(self, *, seed=None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs (those in ``options["reset_mask"]``; all by default) with seeds ``seed + i`` (an int),
        one each (a list) or none, and per-sub-env options under ``options["per_env"]`` (class docstring)."""
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def reset_async(self, seed=None, options: dict[str, Any] | None = None) -> None:
        self._check_idle("reset_async")
        seeds, mask = seeds_and_mask(seed, options, self.num_envs)
        per_env = reset_options(options, self.num_envs)
        for i in range(self.num_envs):
            if mask[i]:
                self._send(i, "reset", {"seed": seeds[i], "options": per_env[i]})
            else:
                self._send(i, "ping")  # left out: only checked alive (respawn reports a dead one at its next step)
        self._pending, self._reset_mask = "reset", mask

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        replies = self._wait_all("reset", "reset_wait", timeout)
        infos: dict[str, Any] = {}
        for i in np.flatnonzero(self._reset_mask):
            self._last_obs[i], info = replies[i]
            infos = add_info(infos, info, i, self.num_envs)
        self._remember_tasks(infos)
        return self._batch_obs(), infos

    # -------------------------------------------------------------------------------------- step
    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env on its row of ``actions``."""
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Any) -> None:
        self._check_idle("step_async")
        for i, action in enumerate(split_batch(self.action_space, actions, self.num_envs, "actions")):
            self._send(i, "step", action)
        self._pending = "step"

    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        results = self._step_results(range(self.num_envs), self._wait_all("step", "step_wait", timeout))
        return (self._batch_obs(), *results)

    def step_rows_async(self, rows: Sequence[int], actions: Any) -> None:
        """Start sub-envs ``rows`` stepping on ``actions`` (one per row); see the class docstring."""
        self._check_running()
        if self._pending is not None:
            raise AlreadyPendingCallError(f"step_rows_async while waiting for {self._pending}", self._pending)
        rows = check_rows(rows, self.num_envs)
        busy = sorted(set(rows) & self._rows_stepping)
        if busy:
            raise AlreadyPendingCallError(f"sub-envs {busy} are still stepping: step_rows_wait({busy}) first", "step")
        if len(rows) not in self._row_action_spaces:
            self._row_action_spaces[len(rows)] = batch_space(self.single_action_space, len(rows))
        for i, action in zip(rows, split_batch(self._row_action_spaces[len(rows)], actions, len(rows), "actions")):
            self._send(i, "step", action)
            self._rows_stepping.add(i)

    def step_rows_wait(self, rows: Sequence[int]) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Wait for sub-envs ``rows`` (started by :meth:`step_rows_async`) and return their step; see the class
        docstring."""
        self._check_running()
        rows = check_rows(rows, self.num_envs)
        idle = sorted(set(rows) - self._rows_stepping)
        if idle:
            raise NoAsyncCallError(f"step_rows_wait for sub-envs {idle} without step_rows_async", "step")
        try:
            replies = self._receive_all(rows)
        finally:
            self._rows_stepping.difference_update(rows)
        results = self._step_results(rows, replies)
        if self.shared_memory:
            obs = take_rows(self.single_observation_space, self._read_shared(), rows)
        else:
            obs = concatenate(self.single_observation_space, [self._last_obs[i] for i in rows],
                              create_empty_array(self.single_observation_space, n=len(rows)))
        return (obs, *results)

    def _step_results(self, rows: Sequence[int], replies: list[tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                                 dict]:
        infos: dict[str, Any] = {}
        for k, (i, reply) in enumerate(zip(rows, replies)):
            self._last_obs[i] = reply[0]
            infos = add_info(infos, reply[4], k, len(rows))
        self._remember_tasks(infos, rows)
        return (np.array([reply[1] for reply in replies], dtype=np.float64),
                np.array([reply[2] for reply in replies], dtype=np.bool_),
                np.array([reply[3] for reply in replies], dtype=np.bool_), infos)

    # -------------------------------------------------------------------------- call, attributes
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Attribute ``name`` of every sub-env (through its wrappers), called with the arguments if a method."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        self._check_idle("call_async")
        for i in range(self.num_envs):
            self._send(i, "call", (name, args, kwargs))
        self._pending = "call"

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        return tuple(self._wait_all("call", "call_wait", timeout))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of every sub-env (AttributeError where one lacks it; the workers go on)."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` of every sub-env: one value each (a list or tuple) or the same for all."""
        self._check_idle("set_attr")
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"Values must be a list or tuple with length equal to the number of environments. "
                             f"Got `{len(values)}` values for {self.num_envs} environments.")
        for i, value in enumerate(values):
            self._send(i, "setattr", (name, value))
        self._receive_all(range(self.num_envs))

    def render(self) -> tuple[Any, ...]:
        return self.call("render")

    # ------------------------------------------------------------------------------------- close
    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """Wait for pending calls (``timeout`` seconds at most; ``terminate``: don't), close the sub-envs and end the
        worker processes (terminated when ``terminate`` or when waiting failed)."""
        self._closing = True
        if not terminate:
            try:
                if self._rows_stepping:  # let the workers finish their steps, then close them
                    self.step_rows_wait(sorted(self._rows_stepping))
                if self._pending is not None:
                    logger.warning("closing while waiting for a pending call to %s", self._pending)
                    getattr(self, f"{self._pending}_wait")(timeout)
            except Exception:  # noqa: BLE001 - closing anyway
                terminate = True
        self._pending = None
        self._rows_stepping.clear()
        if not terminate:
            try:
                live = [i for i, worker in enumerate(self._workers) if not worker.pipe.closed]
                for i in live:
                    self._send(i, "close")
                for i in live:
                    self._receive(i)
            except Exception:  # noqa: BLE001 - closing anyway
                terminate = True
        for worker in self._workers:
            if terminate and worker.process.is_alive():
                worker.process.terminate()
        for worker in self._workers:
            worker.process.join(timeout=5.0 if terminate else EXIT_TIMEOUT)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=5.0)
            worker.pipe.close()

    def _shut_down(self) -> None:
        """Close after a fatal failure: nothing is pending any more, so ``close`` waits for nothing."""
        self._pending = None
        self._rows_stepping.clear()
        if not self._closing:
            self.close(terminate=True)

    def __del__(self) -> None:
        if not getattr(self, "closed", True) and getattr(self, "_workers", None):
            try:
                self.close(terminate=True)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    # ---------------------------------------------------------------------------- the protocol
    def _launch(self, i: int) -> tuple[multiprocessing.process.BaseProcess, Any]:
        """Start sub-env ``i``'s worker process: ``(process, the parent's end of its pipe)``."""
        return start_worker(multiprocessing.get_context(self.context), i, self.env_fns[i], self._shm,
                            self.autoreset_mode, name=f"Worker<{type(self).__name__}>-{i}", daemon=self.daemon)

    def _compare_spaces(self) -> None:
        """Every worker made its env, with the first env's spaces (RuntimeError or WorkerCrashedError)."""
        for i in range(self.num_envs):
            self._send(i, "spaces", (self.single_observation_space, self.single_action_space))
        same = self._receive_all(range(self.num_envs))
        for k, what in enumerate(("observation", "action")):
            differ = [i for i, answer in enumerate(same) if not answer[k]]
            if differ:
                self._shut_down()
                raise RuntimeError(f"sub-envs {differ} have {what} spaces other than sub-env 0's "
                                   f"({getattr(self, f'single_{what}_space')}): the spaces must be equal to batch them")

    def _send(self, i: int, command: str, data: Any = None) -> None:
        worker = self._workers[i]
        worker.command, worker.data, worker.sent_at = command, data, time.monotonic()
        if worker.pending is not None:
            return  # known dead: its next _receive reports it
        try:
            worker.pipe.send((command, data))
        except OSError:  # BrokenPipeError: the worker is gone; _receive reads its last answer (an error) or EOF
            pass

    def _receive(self, i: int) -> Any:
        """Sub-env ``i``'s answer to its last command: the payload, or what :meth:`_worker_failed` makes of a
        failure."""
        worker = self._workers[i]
        failure, worker.pending = worker.pending, None
        during = CALL_NAMES.get(worker.command, "a call")
        if failure is None:
            limit = self._time_limit(worker.command)
            try:
                if limit is not None and not worker.pipe.poll(max(0.0, worker.sent_at + limit - time.monotonic())):
                    failure = Failure(f"timeout after {limit:g}s", during, "timeout")
                else:
                    status, payload = worker.pipe.recv()
                    if status == "ok":
                        if worker.command in ("step", "reset"):
                            self._failures_in_a_row[i] = 0
                        return payload
                    failure = Failure(payload[1], during, "raised", rebuild_error(payload))
            except (EOFError, OSError):
                failure = self._death(i, worker.command)
            except Exception as exc:  # noqa: BLE001 - a reply that does not unpickle here
                failure = Failure(f"{type(exc).__name__}: {exc}", during, "raised", exc)
        return self._worker_failed(i, failure)

    def _receive_all(self, indices: Iterable[int]) -> list[Any]:
        """The answers of ``indices``; an exception of a ``call`` / ``set_attr`` is raised once all have answered."""
        replies = [self._receive(i) for i in indices]
        failed = next((reply for reply in replies if isinstance(reply, CallFailed)), None)
        if failed is not None:
            raise failed.error
        return replies

    def _wait_all(self, call: str, method: str, timeout: float | None) -> list[Any]:
        """Every sub-env's answer to the pending whole-env ``call`` (``method``: the caller, for errors)."""
        self._check_running()
        if self._pending != call:
            raise NoAsyncCallError(f"Calling `{method}` without any prior call to `{call}_async`.", call)
        if timeout is not None:
            deadline = time.monotonic() + timeout
            for worker in self._workers:
                if worker.pending is None and not worker.pipe.poll(max(0.0, deadline - time.monotonic())):
                    raise multiprocessing.TimeoutError(f"The call to `{method}` has timed out after {timeout} "
                                                       "second(s).")  # still pending: wait again or close
        try:
            return self._receive_all(range(self.num_envs))
        finally:
            self._pending = None

    def _check_running(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")

    def _check_idle(self, method: str) -> None:
        self._check_running()
        if self._pending is not None:
            raise AlreadyPendingCallError(f"Calling `{method}` while waiting for a pending call to `{self._pending}` "
                                          "to complete.", self._pending)
        if self._rows_stepping:
            raise AlreadyPendingCallError(
                f"sub-envs {sorted(self._rows_stepping)} are still stepping (step_rows_async): call step_rows_wait "
                f"for them before {method}", "step")

    # ------------------------------------------------------------------------------ observations
    def _read_shared(self) -> Any:
        """The observation batch in shared memory (read again: a ``Text`` field is decoded at each read)."""
        self.observations = read_from_shared_memory(self.single_observation_space, self._shm, n=self.num_envs)
        return self.observations

    def _batch_obs(self) -> Any:
        """Every sub-env's latest observation, batched (a copy unless ``copy=False``)."""
        if self.shared_memory:
            self._read_shared()
        else:
            self.observations = concatenate(self.single_observation_space, self._last_obs, self.observations)
        return copying.deepcopy(self.observations) if self.copy else self.observations

    def _row_obs(self, i: int) -> Any:
        """Row ``i``'s last observation, unbatched (a failed step's ``final_obs``)."""
        if self.shared_memory:
            return row(self.single_observation_space, self._read_shared(), i)
        return self._last_obs[i]
