"""Step timeouts and respawned workers for vla_gym's async vector env (:class:`~vla_gym.vector.envs.VLAAsyncVectorEnv`).

    envs = vla_gym.make_vec("VLA/LiberoSpatial-v0", 4, step_timeout=120, on_worker_failure="respawn")
    obs, rewards, terminated, truncated, infos = envs.step(actions)
    for i in np.flatnonzero(infos.get("_env_failure", ())):    # rows whose worker failed in this step
        print(infos["env_failure"][i])   # sub-env 2 (env 'VLA/LiberoSpatial-v0', task 'pick_bowl', init state 7):
                                         # timeout after 120s during step()
    envs.worker_restarts                 # workers restarted so far, all sub-envs together

A sub-env *fails* when its ``step`` or ``reset`` takes longer than ``step_timeout`` seconds, when its worker process
dies (segfault, out-of-memory kill, ``kill -9``) or when its env raises. ``on_worker_failure`` says what then:

- ``"raise"`` (``make_vec``'s default): the run stops. A dead worker raises :class:`WorkerCrashedError` naming the
  sub-env, its task and the signal; an exception of the env is raised again here (gymnasium's behaviour); a
  timeout raises :class:`WorkerCrashedError`. The vector env is closed.
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
modes. A respawned worker gets ``max(step_timeout, MIN_START_TIMEOUT)`` seconds to build its env and reset.

How: each parent pipe of the vector env is a :class:`SupervisedPipe`. It waits for the worker's reply with
``poll(timeout)`` and, on a failure, hands back the reply that the respawned worker gives, shaped as the failed
worker's would have been, so that gymnasium's own ``step_wait`` / ``reset_wait`` and vla_gym's
``step_rows_wait`` read it unchanged (:class:`RespawnMixin` owns the processes).
"""
from __future__ import annotations

import logging
import multiprocessing
import queue
import signal
import time
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.async_vector_env import AsyncState
from gymnasium.vector.utils import clear_mpi_env_vars

# ENV_FAILURE: the info key of a row whose worker failed (the cause, as text)
from vla_gym.core.episodes import ENV_FAILURE, SUCCESS

logger = logging.getLogger(__name__)

FAILURE_MODES = ("raise", "respawn")
#: seconds a respawned worker gets at least to start, build its env and reset
MIN_START_TIMEOUT = 60.0

_RETRIED = ("step", "reset", "reset-noop")  # commands whose failure respawns the worker
_CALL_NAMES = {"step": "step()", "reset": "reset()", "reset-noop": "reset()", "_call": "call()",
               "_setattr": "set_attr()", "close": "close()"}


class WorkerCrashedError(RuntimeError):
    """An async vector env's worker process died, hung or failed too often; the message names the sub-env and its
    task."""


class Failure(NamedTuple):
    """Why a worker failed: ``cause`` (``timeout after 2s``, ``signal 9 (SIGKILL)``, ``RuntimeError: ...``),
    ``during`` (``step()``) and ``kind`` (``timeout``, ``died`` or ``raised``)."""

    cause: str
    during: str
    kind: str


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


class SupervisedPipe:
    """A worker's parent pipe (``multiprocessing.connection.Connection``) that notices a late, dead or failing
    worker: gymnasium's code uses it as the pipe (``send``, ``recv``, ``poll``, ``close``, ``closed``); on a
    failure ``recv`` returns what :meth:`RespawnMixin._worker_failed` makes of it (module docstring)."""

    def __init__(self, connection, index: int, owner: RespawnMixin):
        self.connection, self.index, self.owner = connection, index, owner
        self.command: str | None = None
        self.data: Any = None
        self.sent_at = 0.0
        #: a failure found in a ``reset-noop``, reported at the next command
        self.pending: Failure | None = None

    @property
    def closed(self) -> bool:
        return self.connection.closed

    def poll(self, timeout: float | None = 0.0) -> bool:
        return self.connection.poll(timeout)

    def close(self) -> None:
        self.connection.close()

    def send(self, message: tuple[str, Any]) -> None:
        self.command, self.data = message
        self.sent_at = time.monotonic()
        if self.pending is not None:
            return  # the worker is known dead: recv reports it
        try:
            self.connection.send(message)
        except OSError:  # BrokenPipeError: the worker is gone; recv reports it
            self.pending = self.owner._death(self.index, self.command)

    def recv(self) -> Any:
        failure, self.pending = self.pending, None
        reply = None
        if failure is None:
            timeout = self.owner.step_timeout
            try:
                if timeout is not None and not self.connection.poll(max(0.0, self.sent_at + timeout - time.monotonic())):
                    failure = Failure(f"timeout after {timeout:g}s", _CALL_NAMES.get(self.command, "a call"),
                                      "timeout")
                else:
                    reply = self.connection.recv()
            except (EOFError, OSError):
                failure = self.owner._death(self.index, self.command)
        if failure is None and reply[1]:
            if self.command in ("step", "reset"):
                self.owner._failures_in_a_row[self.index] = 0
            return reply
        if failure is None:  # the env raised: the worker sent (None, False) and is exiting
            if self.owner.on_worker_failure == "raise" or self.command not in _RETRIED:
                return reply  # gymnasium raises the env's exception (its error queue holds it)
            failure = self.owner._raised(self.index, self.command)
        return self.owner._worker_failed(self, failure)


class RespawnMixin:
    """Step timeouts and worker respawn for a gymnasium ``AsyncVectorEnv`` subclass (module docstring): call
    :meth:`_supervise` at the end of ``__init__``. ``worker_restarts`` counts the workers restarted so far. The
    subclass keeps ``_episodes[i]``: the ``task_id`` / ``task_name`` / ``init_state_id`` of sub-env ``i``'s
    episode, those its infos reported."""

    step_timeout: float | None = None
    on_worker_failure: str = "raise"
    max_worker_restarts: int = 3
    worker_restarts: int = 0

    @property
    def processes(self) -> _WorkerList:
        return self._workers

    @processes.setter
    def processes(self, value: list) -> None:  # gymnasium's __init__ sets it to [] and appends each worker
        self._workers = value if isinstance(value, _WorkerList) else _WorkerList(value)

    def _supervise(self, step_timeout: float | None, on_worker_failure: str, max_worker_restarts: int) -> None:
        """Wrap the worker pipes (only where a timeout or respawn is asked for: else gymnasium's pipes as they are)."""
        check_failure_options(step_timeout, on_worker_failure, max_worker_restarts)
        if on_worker_failure == "respawn" and self.autoreset_mode != AutoresetMode.SAME_STEP:
            raise ValueError("on_worker_failure='respawn' needs SAME_STEP autoreset (vla_gym.make_vec's): a respawned "
                             "row's step returns the new episode's first observation, as a SAME_STEP autoreset does")
        self.step_timeout = None if step_timeout is None else float(step_timeout)
        self.on_worker_failure, self.max_worker_restarts = on_worker_failure, max_worker_restarts
        self.worker_restarts = 0
        self._failures_in_a_row = [0] * self.num_envs
        self._worker_errors: dict[int, tuple] = {}  # error-queue entries read while looking for another worker's
        if step_timeout is not None or on_worker_failure == "respawn":
            self.parent_pipes = [SupervisedPipe(pipe, i, self) for i, pipe in enumerate(self.parent_pipes)]

    # ------------------------------------------------------------------------------- what failed
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
        process = self.processes[i]
        process.join(timeout=5.0)  # the pipe broke: the process is exiting, give it a moment
        return Failure(exit_cause(process.exitcode), _CALL_NAMES.get(command, "a call"), "died")

    def _raised(self, i: int, command: str) -> Failure:
        """The exception sub-env ``i``'s worker put in the error queue (gymnasium's worker does so before replying)."""
        deadline = time.monotonic() + 5.0
        while i not in self._worker_errors and time.monotonic() < deadline:
            try:
                index, exctype, value, trace = self.error_queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            self._worker_errors[index] = (exctype, value, trace)
        exctype, value, trace = self._worker_errors.pop(i, (RuntimeError, "the env raised (no traceback came)", ""))
        logger.warning("%s raised during %s:\n%s", self._describe_row(i), _CALL_NAMES[command], trace)
        return Failure(f"{getattr(exctype, '__name__', exctype)}: {value}", _CALL_NAMES[command], "raised")

    # ------------------------------------------------------------------------------- what then
    def _worker_failed(self, pipe: SupervisedPipe, failure: Failure) -> Any:
        """The reply ``pipe.recv()`` returns for a failed worker, or an exception (module docstring)."""
        i, command = pipe.index, pipe.command
        if command == "close":
            self._kill(i)
            return None, True
        if self.on_worker_failure == "raise" or command not in _RETRIED:
            if failure.kind == "died":
                raise EOFError(failure.cause)  # VLAAsyncVectorEnv turns it into WorkerCrashedError naming the sub-env
            raise self._give_up(f"{self._describe_row(i)} did not answer: {failure.cause} during {failure.during}")
        if command == "reset-noop":  # not asked to reset: its episode ends at its next step, which reports it
            pipe.pending = failure
            return (None if self.shared_memory else _row(self.single_observation_space, self.observations, i), {}), True
        where = self._describe_row(i)  # before the new worker's reset replaces the task
        final_obs = _row(self.single_observation_space, self.observations, i) if command == "step" else None
        reset_kwargs = pipe.data if command == "reset" else {"seed": None, "options": None}
        texts = []  # the failure that cut the episode, then those of new workers that failed at once
        while failure is not None:
            self._failures_in_a_row[i] += 1
            texts.append(f"{where}: {failure.cause} during {failure.during}")
            if self._failures_in_a_row[i] > self.max_worker_restarts:
                raise self._give_up(
                    f"{texts[-1]}; it failed {self._failures_in_a_row[i]} times in a row, more than "
                    f"max_worker_restarts={self.max_worker_restarts} (config env.max_worker_restarts)")
            logger.warning("%s; restarting its worker (%d in a row)", texts[-1], self._failures_in_a_row[i])
            reply, failure = self._restart(pipe, reset_kwargs)
        text = texts[0] + (f" (and {len(texts) - 1} new workers failed at once)" if len(texts) > 1 else "")
        obs, info = reply
        info = {**info, ENV_FAILURE: text}
        if command == "reset":
            return (obs, info), True
        final_info = {**self._episodes[i], ENV_FAILURE: text}  # the cut episode's task and init state, where known
        if SUCCESS in info:  # an env that reports success: the cut step did not succeed (as it earned no reward), so
            final_info[SUCCESS] = False  # an episode cut at its first step still reports success (GRPO scores it)
        return (obs, 0.0, False, True, {**info, "final_obs": final_obs, "final_info": final_info}), True

    def _restart(self, pipe: SupervisedPipe, reset_kwargs: dict) -> tuple[Any, Failure | None]:
        """Kill sub-env ``pipe.index``'s worker, start a new one and reset it: ``(reply, None)`` or ``(None, failure)``."""
        i = pipe.index
        self._kill(i)
        pipe.close()
        ctx = multiprocessing.get_context(self.context)
        parent, child = ctx.Pipe()
        target, (index, env_fn, _, _, *rest) = self.processes.launches[i]  # the same env fn, shared memory, ...
        process = ctx.Process(target=target, name=self.processes[i].name, args=(index, env_fn, child, parent, *rest),
                              daemon=self.daemon)
        with clear_mpi_env_vars():
            process.start()
        child.close()
        self.processes[i], pipe.connection = process, parent
        self.worker_restarts += 1
        timeout = max(self.step_timeout or 0.0, MIN_START_TIMEOUT)
        try:
            parent.send(("reset", reset_kwargs))
            if not parent.poll(timeout):
                return None, Failure(f"timeout after {timeout:g}s", "the new worker's start and reset()", "timeout")
            (obs, info), success = parent.recv()
        except (EOFError, OSError):
            return None, self._death(i, "reset")
        if not success:
            return None, self._raised(i, "reset")
        return (obs, info), None

    def _kill(self, i: int) -> None:
        process = self.processes[i]
        if process.is_alive():
            process.kill()
        process.join(timeout=5.0)

    def _give_up(self, message: str) -> WorkerCrashedError:
        self._shut_down()
        return WorkerCrashedError(f"{message}; the vector env is closed. Common causes: the simulator hangs or "
                                  "crashes on this episode, or the machine is out of memory (docs/reliability.md).")

    def _shut_down(self) -> None:
        """Close after a fatal failure: nothing is pending any more, so ``close`` does not wait for anything."""
        self._state = AsyncState.DEFAULT
        getattr(self, "_rows_stepping", set()).clear()
        self.close(terminate=True)


class _WorkerList(list):
    """gymnasium's list of worker processes that remembers each worker's target and arguments as it is appended
    (before ``start``, which drops them from the Process), so that a failed worker can be started again alike: the
    same env fn, shared memory, error queue, autoreset mode and semaphore (and a new pipe)."""

    def __init__(self, processes=()):
        super().__init__(processes)
        self.launches: list[tuple[Any, tuple]] = [(p._target, p._args) for p in processes]

    def append(self, process) -> None:
        self.launches.append((process._target, process._args))
        super().append(process)


def _row(space: spaces.Space, batch: Any, i: int) -> Any:
    """A copy of row ``i`` of a batched observation of the single-env ``space`` (shared memory gets rewritten)."""
    if isinstance(space, spaces.Dict):
        return {key: _row(sub, batch[key], i) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_row(sub, part, i) for sub, part in zip(space.spaces, batch))
    if isinstance(space, spaces.Text):
        return batch[i]
    return np.array(batch[i], copy=True)


def failed_rows(infos: dict[str, Any], n: int) -> np.ndarray:
    """Bool per sub-env: its step's info says ``env_failure`` (its worker failed and was restarted)."""
    mask = infos.get("_" + ENV_FAILURE) if isinstance(infos, dict) else None
    return np.zeros(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(n)

