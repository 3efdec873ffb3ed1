"""The worker side of vla_gym's async vector env: one process per sub-env, looping on commands from a pipe.

:class:`~vla_gym.vector.async_env.VLAAsyncVectorEnv` starts :func:`run_worker` in a process per sub-env and talks
to it through a ``multiprocessing`` pipe. The protocol is vla_gym's own (no gymnasium internals): the parent sends
``(command, data)`` and the worker answers every command with exactly one ``("ok", payload)`` or
``("error", (exception or None, "Type: message", traceback text))``:

=============  ====================================  ======================================================
command        data                                  payload
=============  ====================================  ======================================================
``spaces``     (observation space, action space)     (observation space equal?, action space equal?)
``reset``      ``{"seed": s, "options": o}``         ``(obs, info)``
``step``       one action                            ``(obs, reward, terminated, truncated, info)``
``ping``       None                                  None (a sub-env left out of a masked reset: alive?)
``call``       ``(name, args, kwargs)``              the attribute, or the method's result
``setattr``    ``(name, value)``                     None
``close``      None                                  None; the worker closes its env and exits
=============  ====================================  ======================================================

``obs`` is None when the observations go through shared memory (the worker wrote them there). If making the env
fails, the worker answers its first command with the error and exits. An exception of the env is answered as an
error and the worker waits for the next command (the parent decides: raise it again, or restart the worker).

:class:`SubEnv` holds the autoreset rule (SAME_STEP, NEXT_STEP or DISABLED) and is shared with the in-process
:class:`~vla_gym.vector.sync_env.VLASyncVectorEnv`::

    sub = SubEnv(gym.make("CartPole-v1"), AutoresetMode.SAME_STEP)
    obs, info = sub.reset(seed=0)
    obs, reward, terminated, truncated, info = sub.step(0)   # ended: info["final_obs"], info["final_info"]
"""
from __future__ import annotations

import pickle
import traceback
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import CloudpickleWrapper, clear_mpi_env_vars, write_to_shared_memory

#: methods that ``call`` must not reach in a worker (use the vector env's own)
_NOT_CALLABLE = ("reset", "step", "close")


class SubEnv:
    """One sub-env stepped under a vector env's autoreset rule (module docstring).

    SAME_STEP: a step that ends the episode resets the env at once; it returns the new episode's first observation
    and ``{"final_info": <the step's info>, "final_obs": <its observation>, **<the reset's info>}``. NEXT_STEP: the
    step after an episode's end is the reset (reward 0, not terminated nor truncated; the action is ignored).
    DISABLED: only ``reset`` resets. ``reset`` ends a pending NEXT_STEP autoreset.
    """

    def __init__(self, env: gym.Env, autoreset_mode: AutoresetMode):
        self.env, self.autoreset_mode = env, AutoresetMode(autoreset_mode)
        self.needs_reset = False

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        self.needs_reset = False
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.needs_reset:  # NEXT_STEP only
            self.needs_reset = False
            obs, info = self.env.reset()
            return obs, 0.0, False, False, info
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                final_obs, final_info = obs, info
                obs, info = self.env.reset()
                info = {"final_info": final_info, "final_obs": final_obs, **info}
            elif self.autoreset_mode == AutoresetMode.NEXT_STEP:
                self.needs_reset = True
        return obs, reward, terminated, truncated, info

    def call(self, name: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Attribute ``name`` of the env (through its wrappers); called with the arguments if it is a method."""
        attr = self.env.get_wrapper_attr(name)
        return attr(*args, **(kwargs or {})) if callable(attr) else attr


def error_payload(exc: BaseException) -> tuple[BaseException | None, str, str]:
    """What the worker sends for an exception: the exception itself where it pickles both ways (else None), its
    ``Type: message`` and its traceback."""
    try:
        sendable = pickle.loads(pickle.dumps(exc))
        sendable = exc if type(sendable) is type(exc) else None
    except Exception:  # noqa: BLE001 - an exception that does not pickle travels as text
        sendable = None
    return sendable, f"{type(exc).__name__}: {exc}", traceback.format_exc()


def rebuild_error(payload: tuple[BaseException | None, str, str]) -> BaseException:
    """The exception to raise in the parent from an ``("error", payload)`` reply, with the worker's traceback as a
    note (Python 3.11+)."""
    exc, text, trace = payload
    error = exc if isinstance(exc, BaseException) else RuntimeError(text)
    if trace and hasattr(error, "add_note"):
        error.add_note("Traceback in the worker process:\n" + trace.rstrip())
    return error


def start_worker(ctx, index: int, env_fn, shared_memory, autoreset_mode: AutoresetMode, name: str,
                 daemon: bool = True) -> tuple[Any, Any]:
    """Start :func:`run_worker` for sub-env ``index`` in a process of the multiprocessing context ``ctx``:
    ``(process, the parent's end of its pipe)``. ``env_fn`` travels cloudpickled (lambdas work under spawn)."""
    parent, child = ctx.Pipe()
    process = ctx.Process(target=run_worker, name=name, daemon=daemon,
                          args=(index, CloudpickleWrapper(env_fn), child, parent, shared_memory, autoreset_mode))
    with clear_mpi_env_vars():  # mpi4py in a worker must not join this process's MPI job
        process.start()
    child.close()
    return process, parent


def run_worker(index: int, env_fn, pipe, parent_pipe, shared_memory, autoreset_mode: AutoresetMode) -> None:
    """A worker process's main function: make sub-env ``index`` with ``env_fn`` and answer ``pipe``'s commands
    until ``close`` or until the parent is gone (module docstring). ``parent_pipe`` (the parent's end, inherited
    under ``fork``) is closed first, so that the parent's exit ends the ``recv`` here; ``shared_memory``: gymnasium's
    :func:`~gymnasium.vector.utils.create_shared_memory` buffer, or None to send observations through the pipe."""
    parent_pipe.close()
    env = None
    try:
        try:
            env = env_fn()
        except Exception as exc:  # noqa: BLE001 - answered to the first command, then the worker exits
            pipe.send(("error", error_payload(exc)))
            return
        sub = SubEnv(env, autoreset_mode)
        while True:
            try:
                command, data = pipe.recv()
            except (EOFError, OSError):  # the parent is gone
                return
            if command == "close":
                env, closing = None, env
                _close_quietly(closing)
                pipe.send(("ok", None))
                return
            try:
                pipe.send(("ok", _answer(sub, index, command, data, shared_memory)))
            except Exception as exc:  # noqa: BLE001 - the env's exception: the parent decides what then
                pipe.send(("error", error_payload(exc)))
    except KeyboardInterrupt:  # Ctrl-C reaches every process of the group: the parent handles it
        pass
    except (BrokenPipeError, ConnectionResetError):  # the parent is gone while the worker answered
        pass
    finally:
        _close_quietly(env)


def _answer(sub: SubEnv, index: int, command: str, data: Any, shared_memory) -> Any:
    env = sub.env
    if command == "step":
        obs, reward, terminated, truncated, info = sub.step(data)
        return _shared(env, index, obs, shared_memory), reward, terminated, truncated, info
    if command == "reset":
        obs, info = sub.reset(**data)
        return _shared(env, index, obs, shared_memory), info
    if command == "ping":
        return None
    if command == "call":
        name, args, kwargs = data
        if name in _NOT_CALLABLE:  # the worker's own bookkeeping (autoreset, exit) must see these
            raise ValueError(f"call({name!r}): use the vector env's {name}() instead")
        return sub.call(name, args, kwargs)
    if command == "setattr":
        name, value = data
        env.set_wrapper_attr(name, value)
        return None
    if command == "spaces":
        observation_space, action_space = data
        return observation_space == env.observation_space, action_space == env.action_space
    raise RuntimeError(f"unknown command {command!r}: expected step, reset, ping, call, setattr, spaces or close")


def _shared(env: gym.Env, index: int, obs: Any, shared_memory) -> Any:
    """``obs`` to send back: None once written to shared memory."""
    if shared_memory is None:
        return obs
    write_to_shared_memory(env.observation_space, index, obs, shared_memory)
    return None


def _close_quietly(env: gym.Env | None) -> None:
    if env is None:
        return
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing anyway; the traceback is printed
        traceback.print_exc()
