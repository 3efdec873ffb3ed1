"""Resident memory of this process and of a vector env's worker processes, from ``/proc`` (Linux), in MB.

    >>> from vla_gym.runtime.memory import proc_status
    >>> proc_status()["VmRSS"] > 0                       # this process                        # doctest: +SKIP
    True
    >>> worker_rss_mb(envs)                               # the largest worker's, None: no workers # doctest: +SKIP
    2143.5

The trainers log ``env/worker_rss_mb`` (the largest worker's RSS on any rank) and ``proc/rss_mb`` (the largest
trainer process's) every update, so a long run's memory curve is in its TensorBoard (docs/reliability.md);
``experiments/reliability_soaks/memory_soak.py`` samples them per reset. :func:`release_freed_memory` gives the heap
a process has freed back to the OS (a LIBERO scene rebuild, a trainer's update: docs/reliability.md).
"""
from __future__ import annotations

import ctypes
from typing import Any

MB = 1024.0


def proc_status(pid: int | str = "self") -> dict[str, float]:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem of process ``pid`` in MB (from /proc/PID/status; empty if it is
    gone or there is no /proc)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                    out[key] = int(value.split()[0]) / MB  # kB
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def worker_rss_mb(envs: Any) -> float | None:
    """The largest RSS among ``envs``' live worker processes in MB; None for envs without worker processes (the
    same answer on every rank of a run, so a collective over it cannot hang)."""
    processes = getattr(getattr(envs, "unwrapped", envs), "processes", None)
    if not processes:
        return None
    sizes = [proc_status(p.pid).get("VmRSS") for p in processes if getattr(p, "pid", None)]
    return max((s for s in sizes if s is not None), default=0.0)  # 0: every worker is gone (being respawned)


_LIBC: list = []  # glibc, loaded once (empty list: not looked up yet; [None]: not glibc)


def release_freed_memory() -> bool:
    """Give the C heap's free pages back to the OS (glibc's ``malloc_trim(0)``); False where there is no glibc.

    glibc keeps freed heap in the process. A LIBERO task change frees the old scene (its ``MjModel``, ~0.3 GB with
    LIBERO's meshes and textures, and its render context, ~0.5 GB under Mesa's software EGL) and the XML compiler's
    temporaries: a worker's RSS then sits ~0.5 GB above what it uses, so the LIBERO env calls this after each scene
    build (experiments/reliability_soaks/memory_soak.py measures both). The trainers call it after each update,
    whose rollout arrays (about 100 MB of frames an update, of a different size each time under dynamic sampling)
    are freed then.
    """
    if not _LIBC:
        try:
            _LIBC.append(ctypes.CDLL("libc.so.6"))
            _LIBC[0].malloc_trim  # noqa: B018 - musl and others have no malloc_trim
        except (OSError, AttributeError):
            _LIBC[:] = [None]
    return _LIBC[0] is not None and bool(_LIBC[0].malloc_trim(0))
