"""Step timeouts and respawned workers for vla_gym's async vector env (:class:`~vla_gym.vector.async_env.VLAAsyncVectorEnv`).

    envs = vla_gym.make_vec("VLA/LiberoSpatial-v0", 4, step_timeout=120, on_worker_failure="respawn")
    obs, rewards, terminated, truncated, infos = envs.step(actions)
    for i in np.flatnonzero(infos.get("_env_failure", ())):    # rows whose worker failed in this step
        print(infos["env_failure"][i])   # sub-env 2 (env 'VLA/LiberoSpatial-v0', task 'pick_bowl', init state 7):
                                         # timeout after 120s during step()
    envs.worker_restarts                 # workers restarted so far, all sub-envs together

A sub-env *fails* when its ``step`` or ``reset`` takes longer than ``step_timeout`` seconds, when its worker process
dies (segfault, out-of-memory kill, ``kill -9``) or when its env raises. ``on_worker_failure`` says what then:

- ``"raise"`` (``make_vec``'s default): the run stops and the vector env is closed. A dead worker raises
  :class:`WorkerCrashedError` naming the sub-env, its task and the signal; a timeout raises
  :class:`WorkerCrashedError`; an exception of the env in ``step`` / ``reset`` is raised again here (its type and
  message, with the worker's traceback as a note).
- ``"respawn"``: the failed worker is killed and a new worker process is started from the same env fn (a fresh
  env, with the sub-env's wrappers). The sub-env's episode ends as truncated (``terminated`` False, ``truncated``
  True, reward 0; ``infos["final_info"]["success"]`` False when the env reports success, so that an episode cut
  at its first step still has one) and its row's observation is the new worker's reset observation, as after an autoreset
  (SAME_STEP): ``infos["final_obs"]`` is the last observation the row returned before the failure and
  ``infos["env_failure"]`` (at the top level and in ``infos["final_info"]``) is a string naming the sub-env, its
  env id, task and init state (where known) and the cause: ``timeout after 120s``, ``signal 9 (SIGKILL)``,
  ``exit code 1`` or the exception (``RuntimeError: ...``). A failed ``reset`` is tried again in the new worker
  with the same seed and options (its info says ``env_failure`` too). The other sub-envs go on untouched, with
  row-wise stepping (``step_rows_async`` / ``step_rows_wait``) too. A sub-env that fails more than
  ``max_worker_restarts`` times in a row (no successful step or reset in between) raises
  :class:`WorkerCrashedError` with the last cause, and the vector env is closed.

A worker found dead while it was not asked to reset (``reset(options={"reset_mask": ...})`` left it out) is
restarted at its next step, whose result reports the failure. ``call`` / ``get_attr`` / ``set_attr`` /
``render`` are never retried: a worker that dies or times out there raises :class:`WorkerCrashedError` in both
modes; an exception there (e.g. AttributeError for a missing attribute) is raised again and the worker goes on.
A respawned worker gets ``max(step_timeout, MIN_START_TIMEOUT)`` seconds to build its env and reset.

How: the async vector env reads every reply through its ``_receive``, which waits with ``poll(timeout)`` and hands
each failure to :meth:`RespawnMixin._worker_failed`. That returns the reply the respawned worker gives, shaped as
the failed worker's would have been (so the whole-step and row-wise code read it unchanged), or raises.
"""
from __future__ import annotations

import logging
import signal
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

# ENV_FAILURE: the info key of a row whose worker failed (the cause, as text)
from vla_gym.core.episodes import ENV_FAILURE, SUCCESS
from vla_gym.vector.worker import rebuild_error

logger = logging.getLogger(__name__)

FAILURE_MODES = ("raise", "respawn")
#: seconds a respawned worker gets at least to start, build its env and reset (and a new vector env's workers to
#: build their envs, where a step_timeout is set)
MIN_START_TIMEOUT = 60.0

RETRIED = ("step", "reset", "ping")  # commands whose failure respawns the worker
CALL_NAMES = {"step": "step()", "reset": "reset()", "ping": "reset()", "call": "call()", "setattr": "set_attr()",
              "close": "close()", "spaces": "start-up (making the env)"}


class WorkerCrashedError(RuntimeError):
    """An async vector env's worker process died, hung or failed too often; the message names the sub-env and its
    task."""


class Failure(NamedTuple):
    """Why a worker failed: ``cause`` (``timeout after 2s``, ``signal 9 (SIGKILL)``, ``RuntimeError: ...``),
    ``during`` (``step()``), ``kind`` (``timeout``, ``died`` or ``raised``) and, when it raised, the exception."""

    cause: str
    during: str
    kind: str
    error: BaseException | None = None


class CallFailed(NamedTuple):
    """The reply of a worker whose env raised in ``call`` / ``set_attr``: raised once every worker has answered."""

    error: BaseException


def exit_cause(exitcode: int | None) -> str:
    """A worker's exit code in words: ``signal 9 (SIGKILL)``, ``exit code 1``.

        >>> exit_cause(-9), exit_cause(1), exit_cause(None)
        ('signal 9 (SIGKILL)', 'exit code 1', 'exit code unknown')
    """
    if exitcode is None:
        return "exit code unknown"
    if exitcode < 0:
        try:
            return f"signal {-exitcode} ({signal.Signals(-exitcode).name})"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def check_failure_options(step_timeout: float | None, on_worker_failure: str, max_worker_restarts: int) -> None:
    """ValueError naming the argument unless the three are valid."""
    if on_worker_failure not in FAILURE_MODES:
        raise ValueError(f"on_worker_failure must be one of {FAILURE_MODES}, got {on_worker_failure!r}")
    if step_timeout is not None and (isinstance(step_timeout, bool) or not step_timeout > 0):
        raise ValueError(f"step_timeout must be a positive number of seconds or None, got {step_timeout!r}")
    if isinstance(max_worker_restarts, bool) or not isinstance(max_worker_restarts, int) or max_worker_restarts < 0:
        raise ValueError(f"max_worker_restarts must be an integer >= 0, got {max_worker_restarts!r}")


def failed_rows(infos: dict[str, Any], n: int) -> np.ndarray:
    """Bool per sub-env: its step's info says ``env_failure`` (its worker failed and was restarted)."""
    mask = infos.get("_" + ENV_FAILURE) if isinstance(infos, dict) else None
    return np.zeros(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(n)


class RespawnMixin:
    """What the async vector env does when a worker fails (module docstring). The host class owns the workers:
    ``_workers[i]`` (``process``, ``pipe``, ``command``, ``data``, ``pending``), ``_launch(i)`` (a new process and
    pipe for sub-env ``i``), ``_row_obs(i)`` (row ``i``'s last observation), ``_episodes[i]`` (the ``task_id`` /
    ``task_name`` / ``init_state_id`` its infos reported) and ``_shut_down()``. ``worker_restarts`` counts the
    workers restarted so far."""

    step_timeout: float | None = None
    on_worker_failure: str = "raise"
    max_worker_restarts: int = 3
    worker_restarts: int = 0

    def _time_limit(self, command: str | None) -> float | None:
        """Seconds a worker may take to answer ``command`` (None: no limit)."""
        if self.step_timeout is None:
            return None
        return max(self.step_timeout, MIN_START_TIMEOUT) if command == "spaces" else self.step_timeout

    # ------------------------------------------------------------------------------- what failed
    def _remember_tasks(self, infos: Mapping[str, Any], rows: Sequence[int] | None = None) -> None:
        """Keep what the infos of sub-envs ``rows`` (all: None) say of their episodes, for failure reports."""
        for key in ("task_id", "task_name", "init_state_id"):
            values, mask = infos.get(key), infos.get("_" + key)
            if values is None or mask is None:
                continue
            for k, index in enumerate(range(self.num_envs) if rows is None else rows):
                if mask[k]:
                    value = values[k]
                    self._episodes[index][key] = value.item() if isinstance(value, np.generic) else value

    def _describe_row(self, i: int) -> str:
        """``sub-env 2 (env 'X', task 'T', init state 7)``: what is known of sub-env ``i``'s episode."""
        episode = self._episodes[i]
        known = [f"env {self.env_id!r}"] if getattr(self, "env_id", "") else []
        if "task_name" in episode:
            known.append(f"task {episode['task_name']!r}")
        if episode.get("init_state_id") is not None:
            known.append(f"init state {episode['init_state_id']}")
        return f"sub-env {i}" + (f" ({', '.join(known)})" if known else "")

    def _death(self, i: int, command: str | None) -> Failure:
        process = self._workers[i].process
        process.join(timeout=5.0)  # the pipe broke: the process is exiting, give it a moment
        return Failure(exit_cause(process.exitcode), CALL_NAMES.get(command, "a call"), "died")

    # ------------------------------------------------------------------------------- what then
    def _worker_failed(self, i: int, failure: Failure) -> Any:
        """The payload that sub-env ``i``'s reply stands for after ``failure``, a :class:`CallFailed`, or an
        exception (module docstring)."""
        worker = self._workers[i]
        command = worker.command
        if command == "close":
            self._kill(i)
            return None
        if failure.kind == "raised" and command in ("call", "setattr"):
            return CallFailed(failure.error)  # the env raised; its worker is fine
        if failure.kind == "raised" and command == "spaces":
            raise self._give_up(f"{self._describe_row(i)} could not be made: {failure.cause} (the worker's traceback "
                                f"is in this error's notes)") from failure.error
        if self.on_worker_failure == "raise" or command not in RETRIED:
            if failure.kind == "raised":  # step / reset: the env is mid-episode in an unknown state
                self._shut_down()
                raise failure.error
            if failure.kind == "died":
                raise self._crash_error(failure.during)
            raise self._give_up(f"{self._describe_row(i)} did not answer: {failure.cause} during {failure.during}")
        if failure.kind == "raised":
            logger.warning("%s raised during %s:\n%s", self._describe_row(i), failure.during,
                           "\n".join(getattr(failure.error, "__notes__", ())))
        if command == "ping":  # not asked to reset: its episode ends at its next step, which reports it
            worker.pending = failure
            return None
        where = self._describe_row(i)  # before the new worker's reset replaces the task
        self._kill(i)  # first: a hung worker must not write its observation any more
        final_obs = self._row_obs(i) if command == "step" else None
        reset_kwargs = worker.data if command == "reset" else {"seed": None, "options": None}
        texts = []  # the failure that cut the episode, then those of new workers that failed at once
        while failure is not None:
            self._failures_in_a_row[i] += 1
            texts.append(f"{where}: {failure.cause} during {failure.during}")
            if self._failures_in_a_row[i] > self.max_worker_restarts:
                raise self._give_up(
                    f"{texts[-1]}; it failed {self._failures_in_a_row[i]} times in a row, more than "
                    f"max_worker_restarts={self.max_worker_restarts} (config env.max_worker_restarts)")
            logger.warning("%s; restarting its worker (%d in a row)", texts[-1], self._failures_in_a_row[i])
            reply, failure = self._restart(i, reset_kwargs)
        text = texts[0] + (f" (and {len(texts) - 1} new workers failed at once)" if len(texts) > 1 else "")
        obs, info = reply
        info = {**info, ENV_FAILURE: text}
        if command == "reset":
            return obs, info
        final_info = {**self._episodes[i], ENV_FAILURE: text}  # the cut episode's task and init state, where known
        if SUCCESS in info:  # an env that reports success: the cut step did not succeed (as it earned no reward), so
            final_info[SUCCESS] = False  # an episode cut at its first step still reports success (GRPO scores it)
        return obs, 0.0, False, True, {**info, "final_obs": final_obs, "final_info": final_info}

    def _restart(self, i: int, reset_kwargs: dict) -> tuple[Any, Failure | None]:
        """Kill sub-env ``i``'s worker, start a new one and reset it: ``(reply, None)`` or ``(None, failure)``."""
        self._kill(i)
        worker = self._workers[i]
        worker.pipe.close()
        worker.process, worker.pipe = self._launch(i)
        worker.command, worker.data, worker.pending = "reset", reset_kwargs, None
        self.worker_restarts += 1
        timeout = max(self.step_timeout or 0.0, MIN_START_TIMEOUT)
        try:
            worker.pipe.send(("reset", reset_kwargs))
            if not worker.pipe.poll(timeout):
                return None, Failure(f"timeout after {timeout:g}s", "the new worker's start and reset()", "timeout")
            status, payload = worker.pipe.recv()
        except (EOFError, OSError):
            return None, self._death(i, "reset")
        if status != "ok":
            error = rebuild_error(payload)
            return None, Failure(payload[1], "the new worker's start and reset()", "raised", error)
        return payload, None

    def _kill(self, i: int) -> None:
        process = self._workers[i].process
        if process.is_alive():
            process.kill()
        process.join(timeout=5.0)

    def _give_up(self, message: str) -> WorkerCrashedError:
        self._shut_down()
        return WorkerCrashedError(f"{message}; the vector env is closed. Common causes: the simulator hangs or "
                                  "crashes on this episode, or the machine is out of memory (docs/reliability.md).")

    def _crash_error(self, during: str) -> WorkerCrashedError:
        """The error for a dead worker in "raise" mode, naming every dead worker (the vector env is closed)."""
        deadline = time.monotonic() + 5.0  # the pipe broke: the process is exiting, give it a moment
        dead = []
        while not dead and time.monotonic() < deadline:
            dead = [i for i, worker in enumerate(self._workers) if not worker.process.is_alive()]
            if not dead:
                time.sleep(0.05)
        details = "; ".join(
            f"sub-env {i} (env {self.env_id!r}, task {self._episodes[i].get('task_name', 'not reset yet')!r}, "
            f"worker pid {self._workers[i].process.pid}, {_describe_exit(self._workers[i].process.exitcode)})"
            for i in dead
        ) or "a worker process (could not tell which)"
        self._shut_down()  # nothing is pending any more: close() must not wait
        return WorkerCrashedError(
            f"the worker process of {details} died during {during}; the vector env is closed. "
            "Common causes: the simulator crashed (segfault), the machine ran out of memory, or making the env "
            "raised (its traceback is printed above). Create a new vector env to continue."
        )


def _describe_exit(exitcode: int | None) -> str:
    cause = exit_cause(exitcode)
    return f"killed by {cause}" if cause.startswith("signal") else cause
