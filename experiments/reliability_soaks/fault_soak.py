"""A fault-injected soak of LIBERO GRPO under torchrun: env workers killed and hung, the trainer SIGKILLed and
restarted with the same command, its newest checkpoint truncated on disk; then checks that nothing was lost.

    nice -n 19 python experiments/reliability_soaks/fault_soak.py --updates 60 --fault-every 180 --minutes 30 # long
    python experiments/reliability_soaks/fault_soak.py --short --json /tmp/fault_soak.json                  # short (CI)
    python experiments/reliability_soaks/fault_soak.py --table experiments/reliability_soaks/results/fault_soak.json

The supervisor starts the real trainer as a subprocess, ``torchrun --standalone --nproc_per_node=2 trainers/grpo.py
--config experiments/libero_miniature/configs/libero_object_miniature_grpo_v3.yaml run_dir=... <overrides>`` (the
small VLA policy, one async LIBERO worker per rank, a checkpoint every update, ``checkpoint.resume=auto``), and while
it runs injects the faults of ``--faults`` in turn, at least ``--fault-every`` seconds apart and only once the trainer
has completed 2 updates since the previous fault (so each fault is recovered from, and logged, before the next):

- ``kill-worker``: ``kill -9`` of one env worker process (a child of a trainer rank, found in /proc);
- ``hang-worker``: SIGSTOP of one env worker, a step that hangs: the rank's ``env.step_timeout`` must kill it and
  start a new one;

  both wait (up to 20 s) until the worker, watched in /proc/PID/syscall, has finished the rollout's first command
  (its reset) and started another, so that they land in a step and cut an episode (:class:`StepWatch`);
- ``kill-trainer``: SIGKILL of the whole trainer (torchrun and every rank and worker: torchrun starts each rank in
  a session of its own, so killing torchrun's process group alone would leave the ranks training), then the newest
  checkpoint file is truncated to half its size while the trainer is down, then the same command starts again: it
  must skip the truncated file and resume from the one before.

``--short`` injects each fault once in a small run (64 px, 16-step episodes, one settling step after an initial
state, 2 groups of 2 per update, 9 updates, ``env.step_timeout=20``); the long form cycles through them until the
planned updates are done. The trainer runs
a fixed number of updates: every update plays ``groups_per_update * group_size`` episodes of at most
``max_episode_steps`` steps (S env steps in all when none is cut), and ``total_timesteps`` is set to
``(updates - 1) * S + 1``, so the run stops after exactly ``--updates`` updates as long as the episodes cut by
faults (whose steps GRPO does not count) take fewer than S steps in all.

At the end (``checks`` in the JSON; the exit code is 1 if one fails):

- ``finished``: the last trainer start exited 0;
- ``updates``: the newest checkpoint holds ``counters.num_updates == --updates`` and no update past it ran;
- ``checkpoints``: every checkpoint the trainer wrote loaded (``load_checkpoint``, i.e. ``torch.load``) and held
  the update its name says when the supervisor saw it appear; at the end the files left are exactly updates
  ``updates - keep_last + 1 .. updates`` and load again; no ``*.tmp`` is left; each truncated file was written
  again, complete, by the resumed run (``keep_last`` may prune it later);
- ``resumes``: after each trainer kill, the next start said it skipped the truncated file and resumed from the
  checkpoint of the update before it;
- ``episodes``: TensorBoard's history of the run (what ``tensorboard --logdir`` shows: the steps a resumed run
  replayed are purged) holds each of the planned updates once, its episodes (``rollout/groups * group_size``) sum
  to ``updates * groups_per_update * group_size`` (what a fault-free run plays), its last step is the final
  checkpoint's ``num_timesteps``, and the episodes cut by faults (from each update's steps and mean episode
  length: GRPO counts no step of a cut episode) are as many as the worker failures the ranks reported
  ``during step()`` (one during ``reset()`` is retried and cuts nothing);
- ``worker_restarts``: the restarts the trainer logged (``env/worker_restarts``, the largest value in each trainer
  start's event file, summed) are at least the worker faults injected;
- ``hangs_detected``: every SIGSTOPped worker was killed by the trainer (its process went away);
- ``faults``: every kind of ``--faults`` was injected at least once;
- ``duration`` (with ``--minutes``): the soak ran at least that long.

Time lost by a fault: the time from the completion of the last update finished before it to the completion of the
first update numbered past that one, minus the median time of an update that no fault touched; for a trainer kill
it holds the restart, the update in flight and the update redone because its checkpoint was truncated. The JSON
(``--json``, default ``experiments/reliability_soaks/results/fault_soak.json``; the short form's default is in the
temp folder) has the faults with their times, the trainer starts, the restarts, the time lost and the checks. The
trainer's output is in ``{run dir}/trainer-<start>.log``. A stopped soak does not resume: run it again with a fresh
``--run-dir``.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import pathlib
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from vla_gym.runtime.cli_args import script_parser

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results" / "fault_soak.json"
CONFIG = "experiments/libero_miniature/configs/libero_object_miniature_grpo_v3.yaml"
FAULTS = ("kill-worker", "hang-worker", "kill-trainer")
#: updates the trainer must complete after a fault (or a start) before the next fault
SETTLE_UPDATES = 2
#: the run's name inside --run-dir
NAME = "run"
#: what a rank prints when it restarts a worker (vla_gym/vector/respawn.py)
RESTART_LINE = re.compile(r"^sub-env \d+ \(.*\): (?P<cause>.+?) during (?P<call>[\w-]+)\(\); restarting its worker", re.M)


@dataclasses.dataclass
class Plan:
    """What the soak runs: the trainer's sizes and the fault schedule."""

    updates: int = 60
    nproc: int = 2
    group_size: int = 8
    groups_per_update: int = 2
    image_size: int = 128
    max_episode_steps: int = 128
    #: LIBERO's no-op steps after an initial state is set (None: the env's own, 10)
    settle_steps: int | None = None
    step_timeout: float = 120.0
    n_epochs: int = 4
    batch_size: int = 128
    keep_last: int = 3
    seed: int = 0
    fault_every: float = 180.0
    #: passes through ``faults`` (0: keep cycling until the trainer is done)
    cycles: int = 0
    faults: tuple[str, ...] = FAULTS
    config: str = CONFIG

    @property
    def episodes_per_update(self) -> int:
        return self.groups_per_update * self.group_size

    @property
    def steps_per_update(self) -> int:
        """Env steps of an update whose episodes all run to ``max_episode_steps`` (none cut, none successful)."""
        return self.episodes_per_update * self.max_episode_steps

    @property
    def total_timesteps(self) -> int:
        """The trainer's budget: it stops after exactly ``updates`` updates unless faults cut S steps or more."""
        return (self.updates - 1) * self.steps_per_update + 1


#: the short form: each fault once, a couple of minutes. 9 updates: the faults land after updates 2, 4 and 6 (each
#: waits for 2 updates since the one before), and the trainer kill may come 2 updates late and still find one to cut
SHORT = {"updates": 9, "group_size": 2, "image_size": 64, "max_episode_steps": 16, "settle_steps": 1,
         "step_timeout": 20.0, "n_epochs": 1, "batch_size": 16, "fault_every": 0.0, "cycles": 1}


def trainer_command(plan: Plan, run_dir: pathlib.Path) -> list[str]:
    """The trainer's command line: the same for the first start and every restart."""
    overrides = [
        f"run_dir={run_dir}", f"name={NAME}", f"seed={plan.seed}", f"total_timesteps={plan.total_timesteps}",
        "time_limit_s=null", "device=cpu", "torch_threads=1",
        f"env.num_envs={plan.nproc}", "env.vectorization=async", f"env.kwargs.image_size={plan.image_size}",
        f"env.kwargs.max_episode_steps={plan.max_episode_steps}", f"env.step_timeout={plan.step_timeout}",
        *([f"env.kwargs.settle_steps={plan.settle_steps}"] if plan.settle_steps is not None else []),
        "env.on_worker_failure=respawn", "env.max_worker_restarts=3",
        f"grpo.group_size={plan.group_size}", f"grpo.groups_per_update={plan.groups_per_update}",
        "grpo.min_mixed_groups=0", "grpo.filter_uniform_groups=false",  # every update: the same number of episodes
        f"grpo.n_epochs={plan.n_epochs}", f"grpo.batch_size={plan.batch_size}",
        "checkpoint.every=1", f"checkpoint.keep_last={plan.keep_last}", "checkpoint.resume=auto",
        "eval.episodes=0", "logging.log_interval=1", "logging.tensorboard=true", "logging.progress_bar=false",
    ]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={plan.nproc}",
            "trainers/grpo.py", "--config", plan.config, *overrides]


# ------------------------------------------------------------------------------------------------ /proc
@dataclasses.dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    state: str
    cmdline: str


def parse_stat(text: str) -> tuple[int, str, int, int]:
    """``(pid, state, ppid, pgid)`` from a /proc/PID/stat line (the command name in parentheses may hold spaces).

    >>> parse_stat("42 (python -c (x)) S 7 42 42 0")
    (42, 'S', 7, 42)
    """
    pid, _, rest = text.partition(" ")
    fields = text[text.rindex(")") + 2:].split()
    return int(pid), fields[0], int(fields[1]), int(fields[2])


def process_table(proc: str | os.PathLike = "/proc") -> dict[int, Proc]:
    """Every process now: pid -> :class:`Proc` (processes that end while being read are left out)."""
    table = {}
    for entry in pathlib.Path(proc).iterdir():
        if not entry.name.isdigit():
            continue
        try:
            pid, state, ppid, pgid = parse_stat((entry / "stat").read_text())
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue
        table[pid] = Proc(pid, ppid, pgid, state, cmdline)
    return table


def descendants(table: dict[int, Proc], root: int) -> list[int]:
    """The pids below ``root`` (children first, then theirs)."""
    children: dict[int, list[int]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found, frontier = [], [root]
    while frontier:
        frontier = sorted(pid for parent in frontier for pid in children.get(parent, ()))
        found += frontier
    return found


def env_workers(table: dict[int, Proc], launcher: int) -> list[int]:
    """The env worker processes of the trainer that ``launcher`` (torchrun's pid) started: children of its ranks
    (children of torchrun running ``trainers/``) started by multiprocessing's spawn, not its resource tracker."""
    ranks = [pid for pid, proc in table.items() if proc.ppid == launcher and "trainers/" in proc.cmdline]
    return sorted(pid for pid, proc in table.items() if proc.ppid in ranks and "spawn_main" in proc.cmdline
                  and "resource_tracker" not in proc.cmdline and proc.state != "Z")


def state(pid: int, proc: str | os.PathLike = "/proc") -> str | None:
    """Process ``pid``'s state letter (R running, S sleeping, T stopped, Z zombie, ...); None when it is gone."""
    try:
        return parse_stat((pathlib.Path(proc) / str(pid) / "stat").read_text())[1]
    except (OSError, ValueError, IndexError):
        return None


def gone(pid: int, proc: str | os.PathLike = "/proc") -> bool:
    """Whether process ``pid`` has ended (no longer listed, or a zombie waiting to be reaped)."""
    return state(pid, proc) in (None, "Z", "X")


def waiting_for_a_command(pid: int, proc: str | os.PathLike = "/proc") -> bool | None:
    """Whether worker ``pid`` is blocked in ``read`` (syscall 0 in /proc/PID/syscall): waiting for its next command
    on the pipe, not stepping or resetting; None when it is gone."""
    try:
        return (pathlib.Path(proc) / str(pid) / "syscall").read_text().split()[0] == "0"
    except (OSError, IndexError):
        return None


class StepWatch:
    """Tells from samples of a worker (busy, or waiting for a command) when it is in the second command of a
    rollout or later: seen busy, waiting, busy again. The first busy stretch after an update is the reset (a
    scene build: seconds), so a fault then lands in a step and cuts an episode; a fault in a reset would be
    retried with the same seed and cut nothing.

    >>> watch = StepWatch()
    >>> [watch.add(busy) for busy in (False, True, True, False, True)]
    [False, False, False, False, True]
    """

    def __init__(self):
        self.marks = ""

    def add(self, busy: bool) -> bool:
        mark = "B" if busy else "W"
        if not self.marks.endswith(mark):
            self.marks += mark
        return "BWB" in self.marks


def wait_for_a_step(pid: int, timeout_s: float) -> bool:
    """Wait until worker ``pid`` is stepping (:class:`StepWatch`); False if not seen within ``timeout_s``."""
    watch, deadline = StepWatch(), time.time() + timeout_s
    while time.time() < deadline:
        waiting = waiting_for_a_command(pid)
        if waiting is None:
            return False
        if watch.add(not waiting):
            return True
        time.sleep(0.002)
    return False


def rank_of(pid: int, table: dict[int, Proc]) -> int | None:
    """The torchrun rank (``RANK`` in its parent's environment) that a worker belongs to, where readable."""
    try:
        environ = pathlib.Path(f"/proc/{table[pid].ppid}/environ").read_bytes().split(b"\0")
    except (OSError, KeyError):
        return None
    for item in environ:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


# ---------------------------------------------------------------------------------------------- checkpoints
class CheckpointWatcher:
    """Update completions seen as checkpoint files: ``ckpt_<update>.pt`` appears (or is written again, after a
    resume) when an update ends, since the soak checkpoints every update. ``poll()`` returns the new ones as
    ``(update, mtime, path)``."""

    def __init__(self, directory: pathlib.Path):
        self.directory = directory
        self.seen: dict[str, int] = {}

    def files(self) -> list[pathlib.Path]:
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.glob("ckpt_*.pt") if p.name[5:-3].isdigit())

    def poll(self) -> list[tuple[int, float, pathlib.Path]]:
        new = []
        for path in self.files():
            try:
                stat = path.stat()
            except FileNotFoundError:  # pruned by keep_last meanwhile
                continue
            if self.seen.get(path.name) != stat.st_mtime_ns:
                self.seen[path.name] = stat.st_mtime_ns
                new.append((int(path.name[5:-3]), stat.st_mtime, path))
        return sorted(new, key=lambda item: item[1])

    def ignore(self, path: pathlib.Path) -> None:
        """Not an update: the soak itself changed ``path`` (truncated it)."""
        self.seen[path.name] = path.stat().st_mtime_ns

    def newest(self) -> pathlib.Path | None:
        files = self.files()
        return files[-1] if files else None


def readable(path: pathlib.Path, update: int) -> bool | None:
    """Whether checkpoint ``path`` loads and holds ``update`` (None: pruned by keep_last before it was read)."""
    from vla_gym.trainers.runtime.checkpoint import CheckpointError, load_checkpoint

    try:
        return load_checkpoint(path)["counters"]["num_updates"] == update
    except FileNotFoundError:
        return None
    except CheckpointError:
        return False


# --------------------------------------------------------------------------------------------------- trainer
class Trainer:
    """The trainer's command, started (again) as a process of its own session; each start logs to
    ``trainer-<start>.log`` in ``log_dir``."""

    def __init__(self, command: list[str], log_dir: pathlib.Path):
        self.command, self.log_dir = command, log_dir
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.exit_codes: list[int | None] = []

    def start(self) -> None:
        self.starts += 1
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TQDM_DISABLE="1")
        with open(self.log_path(self.starts), "w") as log:
            self.process = subprocess.Popen(self.command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        self.exit_codes.append(None)

    def log_path(self, start: int) -> pathlib.Path:
        return self.log_dir / f"trainer-{start}.log"

    def poll(self) -> int | None:
        code = self.process.poll() if self.process else None
        if code is not None:
            self.exit_codes[-1] = code
        return code

    def kill(self) -> list[int]:
        """SIGKILL torchrun, its ranks and their workers at once (each rank has its own process group, which is
        killed too, so that a worker started meanwhile goes with it); waits until they are gone. Returns the pids."""
        if self.process is None:
            return []
        table = process_table()
        pids = [self.process.pid, *descendants(table, self.process.pid)]
        groups = {table[pid].pgid for pid in pids if pid in table} - {os.getpgrp()}
        for group in groups:
            _signal(lambda: os.killpg(group, signal.SIGKILL))
        for pid in pids:
            _signal(lambda: os.kill(pid, signal.SIGKILL))
        self.exit_codes[-1] = self.process.wait()
        deadline = time.time() + 30
        while time.time() < deadline and not all(gone(pid) for pid in pids):
            time.sleep(0.1)
        return pids


def _signal(send) -> None:
    try:
        send()
    except (ProcessLookupError, PermissionError):
        pass


# ----------------------------------------------------------------------------------------------------- soak
class Soak:
    """Runs the trainer and the fault schedule; ``run()`` returns the record that :func:`analyse` checks."""

    def __init__(self, plan: Plan, run_dir: pathlib.Path, timeout_s: float):
        self.plan, self.run_dir, self.timeout_s = plan, run_dir, timeout_s
        self.command = trainer_command(plan, run_dir)
        self.trainer = Trainer(self.command, run_dir)
        self.watcher = CheckpointWatcher(run_dir / NAME / "checkpoints")
        self.completions: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.start = time.time()
        self.error: str | None = None

    def say(self, message: str) -> None:
        print(f"[{time.time() - self.start:7.1f} s] {message}", flush=True)

    def schedule(self):
        kinds = itertools.cycle(self.plan.faults)
        return itertools.islice(kinds, self.plan.cycles * len(self.plan.faults)) if self.plan.cycles else kinds

    def run(self) -> dict[str, Any]:
        plan = self.plan
        self.say(f"trainer: {' '.join(self.command)}")
        self.say(f"plan: {plan.updates} updates of {plan.episodes_per_update} episodes ({plan.steps_per_update} env "
                 f"steps); the run ends after exactly {plan.updates} as long as faults cut fewer than "
                 f"{plan.steps_per_update} steps in all (about {plan.episodes_per_update - 1} episodes)")
        self.start = time.time()
        self.trainer.start()
        pending = self.schedule()
        kind = next(pending, None)
        settle_from, next_at = self.start, self.start + self.plan.fault_every
        try:
            while True:
                self.watch()
                code = self.trainer.poll()
                if code is not None:
                    if code != 0:
                        self.error = f"the trainer exited with {code} (see {self.trainer.log_path(self.trainer.starts)})"
                    break
                now = time.time()
                if now - self.start > self.timeout_s:
                    self.error = f"timeout: the soak ran past {self.timeout_s:.0f} s"
                    self.trainer.kill()
                    break
                if kind is not None and now >= next_at and self.fault_is_due(settle_from) and self.inject(kind):
                    kind = next(pending, None)
                    settle_from = time.time()
                    next_at = settle_from + self.plan.fault_every
                time.sleep(0.5)
        finally:
            if self.trainer.poll() is None:
                self.trainer.kill()
        self.watch()
        return {"wall_s": round(time.time() - self.start, 1), "start": self.start, "faults": self.faults,
                "completions": self.completions, "trainer_starts": self.trainer.starts,
                "exit_codes": self.trainer.exit_codes, "error": self.error}

    def fault_is_due(self, settle_from: float) -> bool:
        """``SETTLE_UPDATES`` updates completed since ``settle_from`` (the last fault) and one still to come: a fault
        after the last update (during the final save) would test nothing and cost no measurable time."""
        settled = sum(c["time"] > settle_from for c in self.completions) >= SETTLE_UPDATES
        done = max((c["update"] for c in self.completions), default=0)
        return settled and done < self.plan.updates

    def watch(self) -> None:
        """New update completions; hung workers that the trainer has killed."""
        for update, mtime, path in self.watcher.poll():
            loads = readable(path, update)
            self.completions.append({"update": update, "time": mtime, "start": self.trainer.starts, "loads": loads})
            self.say(f"update {update} done (trainer start {self.trainer.starts}), checkpoint "
                     f"{ {True: 'loads', False: 'DOES NOT LOAD', None: 'pruned before it was read'}[loads]}")
        for fault in self.faults:
            if fault["kind"] == "hang-worker" and "gone_after_s" not in fault and gone(fault["pid"]):
                fault["gone_after_s"] = round(time.time() - fault["time"], 1)
                self.say(f"hung worker {fault['pid']} is gone after {fault['gone_after_s']} s")

    def inject(self, kind: str) -> bool:
        """Inject one fault; False when it cannot be now (no worker running at this moment)."""
        done = max((c["update"] for c in self.completions), default=0)
        fault = {"kind": kind, "time": time.time(), "at_s": round(time.time() - self.start, 1),
                 "trainer_start": self.trainer.starts, "updates_done": done}
        if kind in ("kill-worker", "hang-worker"):
            table = process_table()
            workers = sorted(env_workers(table, self.trainer.process.pid), key=lambda pid: rank_of(pid, table) or 0)
            if not workers:
                return False
            pid = workers[sum(f["kind"] != "kill-trainer" for f in self.faults) % len(workers)]  # ranks in turn
            stepping = wait_for_a_step(pid, timeout_s=20.0)
            try:
                os.kill(pid, signal.SIGKILL if kind == "kill-worker" else signal.SIGSTOP)
            except ProcessLookupError:  # it ended meanwhile (the run finished, or a restart): try again later
                return False
            fault.update(time=time.time(), at_s=round(time.time() - self.start, 1), pid=pid,
                         rank=rank_of(pid, table), seen_stepping=stepping)
            self.say(f"fault {kind}: {'SIGKILL' if kind == 'kill-worker' else 'SIGSTOP'} env worker {pid} "
                     f"(rank {fault['rank']}{', seen stepping' if stepping else ''}) after update {done}")
        elif kind == "kill-trainer":
            pids = self.trainer.kill()
            self.say(f"fault kill-trainer: SIGKILL of {len(pids)} processes after update {done}")
            self.watch()  # a checkpoint finished just before the kill
            newest = self.watcher.newest()
            if newest is not None:
                size = newest.stat().st_size
                os.truncate(newest, size // 2)
                self.watcher.ignore(newest)
                fault["truncated"] = {"path": str(newest), "update": int(newest.name[5:-3]), "bytes": size,
                                      "bytes_after": size // 2}
                self.say(f"truncated {newest.name}: {size} -> {size // 2} bytes")
            fault["pids"] = len(pids)
            self.trainer.start()
            fault["restart_s"] = round(time.time() - self.start, 1)
            self.say(f"trainer started again (start {self.trainer.starts}), the same command")
        else:
            raise ValueError(f"unknown fault {kind!r}: choose from {', '.join(FAULTS)}")
        self.faults.append(fault)
        return True


# ------------------------------------------------------------------------------------------------- analysis
def time_lost(faults: list[dict], completions: list[dict]) -> tuple[float | None, list[float | None]]:
    """``(median update seconds, seconds lost per fault)`` (module docstring). An update's time is the interval
    between its completion and its predecessor's within one trainer start; the median is over intervals that no
    fault fell in. None where it cannot be told (no such update, or no recovery seen)."""
    ordered = sorted(completions, key=lambda c: c["time"])
    fault_times = [f["time"] for f in faults]
    clean = [b["time"] - a["time"] for a, b in zip(ordered, ordered[1:])
             if b["start"] == a["start"] and b["update"] == a["update"] + 1
             and not any(a["time"] < t < b["time"] for t in fault_times)]
    typical = statistics.median(clean) if clean else None
    lost = []
    for fault in faults:
        before = [c for c in ordered if c["time"] <= fault["time"]]
        if not before or typical is None:
            lost.append(None)
            continue
        top = max(c["update"] for c in before)
        last = max(c["time"] for c in before if c["update"] == top)
        after = [c["time"] for c in ordered if c["time"] > fault["time"] and c["update"] > top]
        lost.append(round(max(0.0, min(after) - last - typical), 1) if after else None)
    return typical, lost


def read_history(tb_dir: pathlib.Path) -> list[dict[str, float]]:
    """The run's history as TensorBoard shows it (every event file, the purges of resumed runs applied): one row
    per logged update, ``step`` (env steps so far), ``groups`` (``rollout/groups``) and ``episode_len``
    (``env/episode_len``, the mean over the update's episodes that no fault cut; None when all were cut)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logging.getLogger("tensorboard").setLevel(logging.ERROR)  # the purges are expected: not a warning here
    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    if "rollout/groups" not in tags:
        return []
    lengths = {e.step: e.value for e in acc.Scalars("env/episode_len")} if "env/episode_len" in tags else {}
    return [{"step": e.step, "groups": e.value, "episode_len": lengths.get(e.step)} for e in acc.Scalars("rollout/groups")]


def restarts_per_start(tb_dir: pathlib.Path) -> list[int]:
    """``env/worker_restarts`` as each trainer start logged it: the largest value in each event file (one file per
    start: rank 0's writer), in the order of the files; the counter starts at 0 with each start's new workers."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    counts = []
    for path in sorted(tb_dir.glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
        acc.Reload()
        values = acc.Scalars("env/worker_restarts") if "env/worker_restarts" in acc.Tags()["scalars"] else []
        counts.append(int(max((e.value for e in values), default=0)))
    return counts


def account_episodes(history: list[dict], plan: Plan, final_steps: int | None) -> dict[str, Any]:
    """The ``episodes`` check's figures (module docstring) from the history :func:`read_history` gives."""
    steps = [row["step"] for row in history]
    played = sum(round(row["groups"]) * plan.group_size for row in history)
    cut, previous = 0, 0
    for row in history:
        kept = round((row["step"] - previous) / row["episode_len"]) if row["episode_len"] else 0
        cut += round(row["groups"]) * plan.group_size - kept
        previous = row["step"]
    return {"updates_logged": len(history), "steps_increasing": all(a < b for a, b in zip(steps, steps[1:])),
            "episodes": played, "episodes_planned": plan.updates * plan.episodes_per_update,
            "episodes_cut": cut, "last_step": steps[-1] if steps else None, "final_num_timesteps": final_steps}


def check_checkpoints(directory: pathlib.Path, plan: Plan, completions: list[dict],
                      truncations: list[dict]) -> dict[str, Any]:
    """The ``checkpoints`` check's figures: what is on disk at the end (each file loaded again), whether every
    checkpoint written during the soak loaded when it appeared (``completions[i]["loads"]``), and what became of
    each truncated file (``truncations``: ``{"path", "update", "time"}``): ``rewritten`` when the resumed run wrote
    that update's checkpoint again and it loaded, else ``not rewritten``; then ``on disk`` or ``pruned``."""
    from vla_gym.trainers.runtime.checkpoint import CheckpointError, load_checkpoint

    files = CheckpointWatcher(directory).files()
    rows = []
    for path in files:
        try:
            counters = load_checkpoint(path)["counters"]
            rows.append({"file": path.name, "loads": True, "num_updates": counters["num_updates"],
                         "num_timesteps": counters["num_timesteps"], "bytes": path.stat().st_size})
        except CheckpointError as exc:
            rows.append({"file": path.name, "loads": False, "error": str(exc)})
    final = rows[-1] if rows and rows[-1]["loads"] else None
    expected = [f"ckpt_{u:08d}.pt" for u in range(max(1, plan.updates - plan.keep_last + 1), plan.updates + 1)]
    fates = []
    for item in truncations:
        again = [c for c in completions if c["update"] == item["update"] and c["time"] > item["time"]]
        rewritten = bool(again) and again[0]["loads"] is not False
        on_disk = pathlib.Path(item["path"]).exists()
        fates.append({"file": pathlib.Path(item["path"]).name, "rewritten": rewritten,
                      "fate": f"{'rewritten' if rewritten else 'not rewritten'}, {'on disk' if on_disk else 'pruned'}"})
    tmp_left = [p.name for p in directory.glob("*.tmp")]
    unreadable = [c["update"] for c in completions if c["loads"] is False]
    ok = ([row["file"] for row in rows] == expected and all(row["loads"] for row in rows)
          and all(row["num_updates"] == int(row["file"][5:-3]) for row in rows)
          and not tmp_left and not unreadable and all(fate["rewritten"] for fate in fates))
    return {"ok": ok, "files": rows, "expected": expected, "tmp_left": tmp_left, "truncated": fates,
            "written": len(completions), "unreadable_when_written": unreadable, "final": final}


def reported_failures(log_dir: pathlib.Path, starts: int) -> list[dict[str, Any]]:
    """The worker failures the ranks reported in the trainer's output, in order: ``{"start", "cause", "during"}``
    (``during``: ``step`` or ``reset``; a failed reset is tried again with the same seed, a failed step cuts the
    episode it was in)."""
    rows = []
    for start in range(1, starts + 1):
        path = log_dir / f"trainer-{start}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        rows += [{"start": start, "cause": m["cause"], "during": m["call"]} for m in RESTART_LINE.finditer(text)]
    return rows


def check_resumes(record: dict, log_dir: pathlib.Path) -> list[dict[str, Any]]:
    """For each trainer kill: did the next start skip the truncated file and resume from the update before it?"""
    results = []
    for fault in record["faults"]:
        if fault["kind"] != "kill-trainer" or "truncated" not in fault:
            continue
        truncated = pathlib.Path(fault["truncated"]["path"])
        previous = fault["truncated"]["update"] - 1
        log_path = log_dir / f"trainer-{fault['trainer_start'] + 1}.log"
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        skipped = f"cannot read checkpoint {truncated}" in log
        if previous >= 1:
            resumed = f"resumed from {truncated.with_name(f'ckpt_{previous:08d}.pt')} at update {previous}," in log
        else:
            resumed = "resumed from" not in log
        results.append({"truncated": truncated.name, "skipped": skipped, "resumed_from_update": previous,
                        "resumed": resumed, "log": str(log_path)})
    return results


def analyse(record: dict[str, Any], plan: Plan, run_dir: pathlib.Path, minutes: float | None) -> dict[str, Any]:
    """The checks and figures of a finished soak (module docstring)."""
    run = run_dir / NAME
    faults = record["faults"]
    typical, lost = time_lost(faults, record["completions"])
    for fault, seconds in zip(faults, lost):
        fault["lost_s"] = seconds
    truncations = [{**f["truncated"], "time": f["time"]} for f in faults if "truncated" in f]
    ckpts = check_checkpoints(run / "checkpoints", plan, record["completions"], truncations)
    final = ckpts["final"] or {}
    history = read_history(run / "tensorboard") if (run / "tensorboard").is_dir() else []
    episodes = account_episodes(history, plan, final.get("num_timesteps"))
    restarts = restarts_per_start(run / "tensorboard") if (run / "tensorboard").is_dir() else []
    resumes = check_resumes(record, run_dir)
    failures = reported_failures(run_dir, record["trainer_starts"])
    in_steps = sum(f["during"] == "step" for f in failures)
    by_kind = {kind: sum(f["kind"] == kind for f in faults) for kind in FAULTS}
    worker_faults = by_kind["kill-worker"] + by_kind["hang-worker"]
    hangs = [f for f in faults if f["kind"] == "hang-worker"]
    highest = max((c["update"] for c in record["completions"]), default=0)
    checks = {
        "finished": (record["error"] is None and record["exit_codes"][-1:] == [0],
                     record["error"] or f"exit codes of the trainer's starts: {record['exit_codes']}"),
        "updates": (final.get("num_updates") == plan.updates and highest == plan.updates,
                    f"final checkpoint at update {final.get('num_updates')}, highest update seen {highest}, "
                    f"planned {plan.updates}" + (" (more: faults cut a whole update's steps; fewer faults or a "
                                                 "larger --group-size)" if highest > plan.updates else "")),
        "checkpoints": (ckpts["ok"], f"on disk {[r['file'] for r in ckpts['files']]} (expected {ckpts['expected']}), "
                        f"all load: {all(r['loads'] for r in ckpts['files'])}; {ckpts['written']} written during the "
                        f"soak, unreadable when written: {ckpts['unreadable_when_written']}; tmp left: "
                        f"{ckpts['tmp_left']}; truncated: {[(t['file'], t['fate']) for t in ckpts['truncated']]}"),
        "resumes": (all(r["skipped"] and r["resumed"] for r in resumes) and len(resumes) == by_kind["kill-trainer"],
                    f"{[(r['truncated'], r['skipped'], r['resumed_from_update'], r['resumed']) for r in resumes]} "
                    "(truncated file, skipped, resumed from update, resumed)"),
        "episodes": (episodes["updates_logged"] == plan.updates and episodes["steps_increasing"]
                     and episodes["episodes"] == episodes["episodes_planned"]
                     and episodes["last_step"] == episodes["final_num_timesteps"]
                     and episodes["episodes_cut"] == in_steps,
                     f"{episodes['updates_logged']} updates logged, {episodes['episodes']} episodes "
                     f"(planned {episodes['episodes_planned']}), {episodes['episodes_cut']} cut by faults (the ranks "
                     f"reported {in_steps} worker failures during a step), last step {episodes['last_step']} = "
                     f"final num_timesteps {episodes['final_num_timesteps']}"),
        "worker_restarts": (sum(restarts) >= worker_faults,
                            f"logged {sum(restarts)} (per trainer start {restarts}) for {worker_faults} worker faults; "
                            f"the ranks reported {[(f['cause'], f['during']) for f in failures]}"),
        "hangs_detected": (all("gone_after_s" in f for f in hangs),
                           f"hung workers gone after {[f.get('gone_after_s') for f in hangs]} s "
                           f"(env.step_timeout={plan.step_timeout})"),
        "faults": (all(by_kind.get(kind, 0) >= 1 for kind in plan.faults), f"injected {by_kind}"),
    }
    if minutes:
        checks["duration"] = (record["wall_s"] >= minutes * 60, f"ran {record['wall_s'] / 60:.1f} min, "
                                                                 f"asked for at least {minutes}")
    from vla_gym.trainers.runtime.results import git_commit

    return {
        "commit": git_commit(), "command": trainer_command(plan, run_dir), "plan": dataclasses.asdict(plan),
        "total_timesteps": plan.total_timesteps, "wall_s": record["wall_s"],
        "trainer_starts": record["trainer_starts"], "exit_codes": record["exit_codes"],
        "faults_by_kind": by_kind, "faults": [{k: v for k, v in f.items() if k != "time"} for f in faults],
        "worker_restarts_logged": sum(restarts), "worker_restarts_per_start": restarts,
        "worker_failures_reported": failures,
        "median_update_s": round(typical, 1) if typical is not None else None,
        "time_lost_s": round(sum(s for s in lost if s is not None), 1),
        "time_lost_by_kind_s": {kind: round(sum(f["lost_s"] or 0.0 for f in faults if f["kind"] == kind), 1)
                                for kind in FAULTS},
        "episodes": episodes, "checkpoints": ckpts, "resumes": resumes,
        "updates": [{"update": c["update"], "at_s": round(c["time"] - record["start"], 1), "start": c["start"]}
                    for c in record["completions"]],
        "checks": {name: {"ok": bool(ok), "detail": detail} for name, (ok, detail) in checks.items()},
        "ok": all(ok for ok, _ in checks.values()),
    }


def markdown_table(summary: dict[str, Any]) -> str:
    """The study README's table of a soak's figures (``--table JSON`` prints it from a saved summary)."""
    faults, episodes, ckpts = summary["faults_by_kind"], summary["episodes"], summary["checkpoints"]
    unreadable = ckpts["unreadable_when_written"]
    lost = summary["time_lost_by_kind_s"]
    rows = [
        ("wall time (min)", f"{summary['wall_s'] / 60:.1f}"),
        ("updates planned / done", f"{summary['plan']['updates']} / {episodes['updates_logged']}"),
        ("faults injected: kill-worker / hang-worker / kill-trainer",
         " / ".join(str(faults.get(kind, 0)) for kind in FAULTS)),
        ("trainer starts", str(summary["trainer_starts"])),
        ("worker restarts logged", str(summary["worker_restarts_logged"])),
        ("episodes accounted for / planned (cut by faults)",
         f"{episodes['episodes']} / {episodes['episodes_planned']} ({episodes['episodes_cut']})"),
        ("checkpoints written / unreadable when written",
         f"{ckpts['written']} / {len(unreadable) if isinstance(unreadable, list) else unreadable}"),
        ("time lost (s): total / " + " / ".join(FAULTS),
         f"{summary['time_lost_s']} / " + " / ".join(str(lost.get(kind, 0.0)) for kind in FAULTS)),
        ("median update (s)", str(summary["median_update_s"])),
        ("checks", "all passed" if summary["ok"] else "FAILED: " + ", ".join(
            name for name, check in summary["checks"].items() if not check["ok"])),
    ]
    return "\n".join(["| figure | value |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--short", action="store_true", help="the short form: each fault once, a couple of minutes")
    parser.add_argument("--updates", type=int, help="updates the trainer must end with (long form 60, short 9)")
    parser.add_argument("--fault-every", type=float, help="seconds at least between faults (long 180, short 0)")
    parser.add_argument("--cycles", type=int, help="passes through --faults (0: until the run ends; short 1)")
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"the faults in turn (default {','.join(FAULTS)})")
    parser.add_argument("--minutes", type=float, default=None, help="fail the soak if it ran shorter than this")
    parser.add_argument("--step-timeout", type=float, help="env.step_timeout (long 120, short 20)")
    parser.add_argument("--image-size", type=int, help="camera pixels (long 128, short 64)")
    parser.add_argument("--max-episode-steps", type=int, help="episode length cap (long 128, short 16)")
    parser.add_argument("--settle-steps", type=int, help="no-op steps after an initial state (long: the env's 10, "
                                                         "short 1)")
    parser.add_argument("--group-size", type=int, help="grpo.group_size (long 8, short 2)")
    parser.add_argument("--config", default=CONFIG, help="a LIBERO GRPO config")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", default=None, help="where the trainer runs (default runs/fault_soak, short: "
                                                        "a new temp folder); must not hold a run yet")
    parser.add_argument("--json", default=None, help=f"the summary (default {RESULTS.relative_to(ROOT)}, short: "
                                                     "in the temp folder)")
    parser.add_argument("--timeout", type=float, default=None, help="give up after this many seconds (long 14400, "
                                                                    "short 1200)")
    parser.add_argument("--table", metavar="JSON", help="print the README's table of a saved summary and exit")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_table(json.loads(pathlib.Path(args.table).read_text())), end="")
        return 0

    faults = tuple(kind.strip() for kind in args.faults.split(",") if kind.strip())
    unknown = [kind for kind in faults if kind not in FAULTS]
    if unknown or not faults:
        parser.error(f"--faults {args.faults}: choose from {','.join(FAULTS)}")
    preset = SHORT if args.short else {}
    chosen = {"updates": args.updates, "fault_every": args.fault_every, "cycles": args.cycles,
              "step_timeout": args.step_timeout, "image_size": args.image_size,
              "max_episode_steps": args.max_episode_steps, "settle_steps": args.settle_steps,
              "group_size": args.group_size}
    plan = Plan(**{**preset, **{k: v for k, v in chosen.items() if v is not None}}, faults=faults,
                config=args.config, seed=args.seed)
    if plan.cycles and plan.updates <= SETTLE_UPDATES * plan.cycles * len(faults):
        print(f"note: --updates {plan.updates} may end before every fault is injected "
              f"(each waits for {SETTLE_UPDATES} updates)", flush=True)
    temp = pathlib.Path(tempfile.gettempdir())
    run_dir = pathlib.Path(args.run_dir) if args.run_dir else (
        pathlib.Path(tempfile.mkdtemp(prefix="fault_soak_")) if args.short else ROOT / "runs" / "fault_soak")
    run_dir = run_dir.resolve()  # the trainer runs in the repository root and names its files by this path
    out = pathlib.Path(args.json) if args.json else (temp / "fault_soak_short.json" if args.short else RESULTS)
    if (run_dir / NAME).exists():
        parser.error(f"--run-dir {run_dir} already holds a run ({run_dir / NAME}): the soak starts from nothing; "
                     "remove it or pass another --run-dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    timeout = args.timeout or (1200.0 if args.short else 14400.0)

    record = Soak(plan, run_dir, timeout).run()
    summary = analyse(record, plan, run_dir, args.minutes)
    summary["run_dir"] = str(run_dir)
    from vla_gym.trainers.runtime.results import write_results

    write_results(out, summary)
    print(f"\nsoak of {plan.updates} updates: {summary['wall_s'] / 60:.1f} min, {summary['trainer_starts']} trainer "
          f"starts, faults {summary['faults_by_kind']}, worker restarts logged {summary['worker_restarts_logged']}, "
          f"time lost {summary['time_lost_s']} s (median update {summary['median_update_s']} s)")
    for name, check in summary["checks"].items():
        print(f"  {'ok  ' if check['ok'] else 'FAIL'} {name}: {check['detail']}")
    print(f"-> {out}")
    print(markdown_table(summary), end="")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
