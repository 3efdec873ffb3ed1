"""How much of a running process's memory is heap it has freed but glibc keeps? Trim it from outside and see.

    python experiments/reliability_soaks/heap_probe.py --match trainers/grpo.py --every-minutes 20 --probes 5 \
        --json experiments/reliability_soaks/results/memory_trim_probe.json   # a running GRPO trainer, every 20 min
    python experiments/reliability_soaks/heap_probe.py --pid 12345                   # one probe of one process

Each probe reads the process's resident memory (VmRSS, RssAnon from /proc/PID/status), makes the process call
glibc's ``malloc_trim(0)`` through ``gdb -p PID -batch``, and reads it again. The difference is memory the
process had freed but still held. A growth of the RSS before the trim with a flat RSS after it is heap kept by
the allocator, not a leak (experiments/reliability_soaks/README.md, "Memory of a training run"). Each probe
pauses the process for well under a second. It needs gdb (``apt-get install gdb``) and the right to ptrace the
process (root, or the process's owner with ``kernel.yama.ptrace_scope`` 0). ``--json`` writes every probe with
the time and command.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time

from vla_gym.runtime.cli_args import script_parser
from vla_gym.runtime.memory import proc_status
from vla_gym.trainers.runtime.results import git_commit, write_results


def find_pid(pattern: str) -> int:
    """The oldest live process whose command line contains ``pattern`` (not this one)."""
    matches = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if pattern in command and "heap_probe" not in command:
            matches.append(int(entry.name))
    if not matches:
        raise SystemExit(f"no running process's command line contains {pattern!r}")
    return min(matches)


def probe(pid: int) -> dict:
    """RSS and anonymous RSS (MB) of ``pid`` before and after it calls ``malloc_trim(0)``."""
    before = proc_status(pid)
    if not before:
        raise SystemExit(f"process {pid} is gone")
    result = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "call (int)malloc_trim(0)"],
                            capture_output=True, text=True, timeout=120)  # noqa: PLW1510
    if "$1 = " not in result.stdout:
        raise SystemExit(f"gdb could not make process {pid} call malloc_trim (is ptrace allowed? run as root or "
                         f"set kernel.yama.ptrace_scope=0): {(result.stderr or result.stdout).strip()[-300:]}")
    after = proc_status(pid)
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "pid": pid,
            "rss_before_mb": round(before["VmRSS"], 1), "rss_after_mb": round(after["VmRSS"], 1),
            "anon_before_mb": round(before["RssAnon"], 1), "anon_after_mb": round(after["RssAnon"], 1),
            "freed_mb": round(before["VmRSS"] - after["VmRSS"], 1)}


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--pid", type=int, help="the process to probe")
    target.add_argument("--match", help="probe the oldest process whose command line contains this")
    parser.add_argument("--probes", type=int, default=1)
    parser.add_argument("--every-minutes", type=float, default=20.0, help="between probes")
    parser.add_argument("--json", default=None, help="write the probes here (e.g. results/...)")
    args = parser.parse_args(argv)
    if shutil.which("gdb") is None:
        parser.error("gdb is not installed: apt-get install gdb")
    pid = args.pid or find_pid(args.match)
    probes = []
    for i in range(args.probes):
        if i:
            time.sleep(60 * args.every_minutes)
        probes.append(probe(pid))
        row = probes[-1]
        print(f"{row['time']} pid {pid}: RSS {row['rss_before_mb']:.0f} -> {row['rss_after_mb']:.0f} MB "
              f"(freed {row['freed_mb']:.0f}), anonymous {row['anon_before_mb']:.0f} -> {row['anon_after_mb']:.0f}",
              flush=True)
        if args.json:
            command = "python experiments/reliability_soaks/heap_probe.py " + " ".join(argv or sys.argv[1:])
            write_results(args.json, {"probes": probes, "commit": git_commit(), "command": command})
    return 0


if __name__ == "__main__":
    sys.exit(main())
