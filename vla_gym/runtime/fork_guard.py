"""Keep process forks from hanging on a simulator the parent already started.

SAPIEN (ManiSkill3) and MuJoCo's EGL renderer (LIBERO) start driver threads (Vulkan / llvmpipe) and
take locks when first used. A child made with ``fork`` inherits the locks but not the threads, so its
first simulator call waits forever. Two things follow from that, both done here:

1. :func:`note_initialised` is called by a backend right after it started its simulator. It records
   which process did so and, if this process would otherwise ``fork`` new processes (Linux's
   multiprocessing default before Python 3.14), sets the default start method to ``spawn``. So the
   standard calls keep working unchanged: ``gym.make_vec(id, n, vectorization_mode="async")``
   (gymnasium builds one env in the parent before it starts the workers), ``multiprocessing.Pool``,
   ``torch.multiprocessing``. A script that starts processes then needs the usual
   ``if __name__ == "__main__":`` guard, as with ``vla_gym.make_vec``.
2. :func:`check_not_forked` is called by a backend before it touches its simulator. In a child forked
   from a process that had started a simulator (an explicit ``context="fork"`` /
   ``start_method="fork"``), it raises :class:`ForkedAfterInitError` at once, naming the remedy, where
   the simulator would hang.

    >>> from vla_gym.runtime import fork_guard
    >>> fork_guard.check_not_forked("LIBERO (MuJoCo EGL)")   # nothing started in this process: no error
"""
from __future__ import annotations

import logging
import multiprocessing
import os

logger = logging.getLogger(__name__)

#: the start method set when a simulator starts and the default would still be fork
SAFE_START_METHOD = "spawn"

_initialised: dict[str, int] = {}  # simulator -> pid of the process that started it


class ForkedAfterInitError(RuntimeError):
    """This process was forked from one whose simulator was already running; using it here would hang."""


def note_initialised(simulator: str) -> None:
    """Record that ``simulator`` now runs in this process; make ``spawn`` the default start method."""
    _initialised.setdefault(simulator, os.getpid())
    if multiprocessing.get_start_method(allow_none=True) in (None, "fork"):
        multiprocessing.set_start_method(SAFE_START_METHOD, force=True)
        logger.info("%s started: multiprocessing now starts processes with %r (fork would hang them)",
                    simulator, SAFE_START_METHOD)


def started_here() -> list[str]:
    """The simulators this process (or the process it was forked from) has started."""
    return sorted(_initialised)


def forked_after(simulator: str) -> int | None:
    """The pid of the parent that started ``simulator`` if this process is a fork of it, else None."""
    pid = _initialised.get(simulator)
    return pid if pid is not None and pid != os.getpid() else None


def check_not_forked(simulator: str) -> None:
    """Raise :class:`ForkedAfterInitError` when this process is a fork of one that started ``simulator``."""
    parent = forked_after(simulator)
    if parent is None:
        return
    raise ForkedAfterInitError(
        f"this process (pid {os.getpid()}) was forked from pid {parent} after that process had started "
        f"{simulator}; {simulator} cannot run in a forked child (it would hang). Start worker processes with "
        "'spawn' or 'forkserver' instead: gymnasium.make_vec(..., vector_kwargs=dict(context='spawn')), "
        "SubprocVecEnv(..., start_method='spawn'), multiprocessing.get_context('spawn'), or use "
        "vla_gym.make_vec(...), which spawns its workers."
    )
