"""Throughput of the same vla_gym envs under vla_gym.make_vec, gymnasium AsyncVectorEnv and SB3 SubprocVecEnv.

    python benchmarks/bench_vectorizers.py                 # LIBERO + ManiSkill, 2 and 4 envs, chunks of 1 and 4
    python benchmarks/bench_vectorizers.py --quick         # ManiSkill state, 2 envs, a few steps
    python benchmarks/bench_vectorizers.py --quick --num-envs 1   # the same with one env each (CI)
    nice -n 10 python benchmarks/bench_vectorizers.py --families maniskill --num-envs 4 --sequential

Configs (one camera so that a 2-core machine finishes; the same for every vectorizer):
- ``libero``: ``VLA/LiberoSpatial-v0`` task 0, main camera 128x128;
- ``maniskill``: ``VLA/ManiSkill-PushCube-v0``, images mode, main camera 128x128 (``--quick``: state only).

Vectorizers (built by :func:`interop_drivers.make_vectorized`): ``vla_gym-async`` (``vla_gym.make_vec``:
spawn, SAME_STEP autoreset), ``gymnasium-async-spawn`` (``gym.make_vec(..., vectorization_mode="async",
vector_kwargs=dict(context="spawn"))``, shared memory) and ``sb3-subproc-forkserver`` (``SubprocVecEnv``
with its default start method, :class:`~vla_gym.wrappers.SB3Compat` observations). With ``chunk 4`` every
sub-env is wrapped in :class:`~vla_gym.wrappers.ActionChunk` (4 simulator steps, one render per vector step).

Per config, the vectorizers are timed in turns so that load from other jobs hits all alike: by default
every vector env is built first (``build s``: construction + first reset) and warmed up with 2 steps, then
``--rounds`` rounds each time one block of ``--steps`` vector steps with random actions per vectorizer, the
order rotating every round (A,B,C / B,C,A / C,A,B). ``--sequential`` keeps one vector env alive at a time
(each round builds, warms up, times and closes every vectorizer in turn): memory of one vector env, for
4 envs on a small machine. Reported per vectorizer:

- ``sim steps/s``: median over blocks of simulator steps of all sub-envs (vector steps x envs x chunk) per
  second of wall clock, and every block's figure;
- ``vs vla_gym-async``: the median over rounds of its rate divided by vla_gym's in the same round
  (> 1: faster than vla_gym);
- ``CPU ms per sim step``: CPU time of this process plus the vectorizer's worker processes (read from
  /proc) per simulator step, median over blocks. On a machine shared with other jobs this is the steadier
  figure: wall clock there measures the scheduler as much as the vectorizer. Workers are counted in clock
  ticks (10 ms per process): give a block a second of CPU or more (``--quick`` is a smoke test);
- ``load avg``: the 1-minute load average before and after the config.

Prints one JSON line per vectorizer and config, then a Markdown table.
"""
from __future__ import annotations

import json
import os
import statistics
import time

from interop_drivers import VECTORIZERS as KNOWN_VECTORIZERS
from interop_drivers import make_vectorized

from vla_gym.runtime.cli_args import script_parser

CONFIGS = {
    "libero": ("VLA/LiberoSpatial-v0", {"task_id": 0, "cameras": ("main",), "image_size": 128}),
    "maniskill": ("VLA/ManiSkill-PushCube-v0", {"obs_mode": "images", "cameras": ("main",), "image_size": 128}),
    "maniskill-state": ("VLA/ManiSkill-PushCube-v0", {"obs_mode": "state"}),
}
VECTORIZERS = ("vla_gym-async", "gymnasium-async-spawn", "sb3-subproc-forkserver")
#: the vectorizer the others are compared with, round by round
REFERENCE = "vla_gym-async"
#: long enough that no episode ends inside a timed run (autoreset cost is not what is compared)
MAX_EPISODE_STEPS = 1000


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (workers, SB3's forkserver and its children), read from /proc (Linux;
    elsewhere none, and the CPU figures count this process only)."""
    children: dict[int, list[int]] = {}
    for entry in (os.listdir("/proc") if os.path.isdir("/proc") else []):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # exited while we looked
            children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _cpu_seconds(pids: set[int]) -> float:
    """User + system CPU seconds so far of ``pids`` (a process that exited counts 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def _load() -> float:
    """The machine's 1-minute load average (quoted beside every figure: the machine may be shared)."""
    return round(os.getloadavg()[0], 1)


class Contender:
    """One vectorizer's vector env for one config: built, warmed up, timed block by block, closed."""

    def __init__(self, vectorizer: str, family: str, num_envs: int, chunk_size: int):
        env_id, env_kwargs = CONFIGS[family]
        self.sim_steps_per_vector_step = num_envs * chunk_size
        before = _descendants(os.getpid())
        start = time.perf_counter()
        self.run = make_vectorized(vectorizer, env_id, num_envs, chunk_size=chunk_size,
                                   max_episode_steps=MAX_EPISODE_STEPS, **env_kwargs)
        try:
            self.run.reset(seed=0)
            self.build_s = time.perf_counter() - start
            self.workers = _descendants(os.getpid()) - before  # its worker processes (and SB3's forkserver)
            for _ in range(2):  # warm-up
                self.run.step(self.run.random_actions())
        except BaseException:
            self.run.close()
            raise

    def time_block(self, steps: int) -> tuple[float, float]:
        """``steps`` vector steps with random actions -> (sim steps/s, CPU ms per sim step of this process and
        the vectorizer's workers; the other vectorizers' workers are idle meanwhile)."""
        actions = [self.run.random_actions() for _ in range(steps)]
        sim_steps = steps * self.sim_steps_per_vector_step
        cpu_start, start = time.process_time() + _cpu_seconds(self.workers), time.perf_counter()
        for action in actions:
            self.run.step(action)
        wall = time.perf_counter() - start
        cpu = time.process_time() + _cpu_seconds(self.workers) - cpu_start
        return sim_steps / wall, 1000 * cpu / sim_steps

    def close(self) -> None:
        self.run.close()


def _turn_order(vectorizers: list[str], turn: int) -> list[str]:
    """A,B,C then B,C,A then C,A,B...: each goes first equally often over a multiple of len(vectorizers)."""
    shift = turn % len(vectorizers)
    return vectorizers[shift:] + vectorizers[:shift]


def measure(family: str, num_envs: int, chunk_size: int, vectorizers: list[str], steps: int, rounds: int,
            build_offset: int = 0, sequential: bool = False) -> list[dict]:
    """Time every vectorizer on one config in turns; one row per vectorizer.

    Default: all vector envs are built first (in an order starting at ``build_offset``, so that no vectorizer
    always pays for cold file caches), then ``rounds`` rounds each time one block of ``steps`` vector steps
    per vectorizer, the order rotating per round. ``sequential``: only one vector env is alive at a time
    (memory of one; for 4 envs on a small machine): each round builds, warms up, times and closes every
    vectorizer in turn. Either way a change in the machine's load hits every vectorizer alike. Per
    vectorizer: the median and every block's rate, the median over rounds of its rate divided by vla_gym's
    in the same round, and CPU milliseconds per simulator step (little affected by other jobs' load).
    """
    rates = {vectorizer: [] for vectorizer in vectorizers}
    cpu_ms = {vectorizer: [] for vectorizer in vectorizers}
    builds = {vectorizer: [] for vectorizer in vectorizers}
    load_start = _load()
    if sequential:
        for turn in range(rounds):
            for vectorizer in _turn_order(vectorizers, turn + build_offset):
                contender = Contender(vectorizer, family, num_envs, chunk_size)
                try:
                    rate, ms = contender.time_block(steps)
                finally:
                    contender.close()
                builds[vectorizer].append(contender.build_s)
                rates[vectorizer].append(rate)
                cpu_ms[vectorizer].append(ms)
    else:
        contenders = {}
        try:
            for vectorizer in _turn_order(vectorizers, build_offset):
                contenders[vectorizer] = Contender(vectorizer, family, num_envs, chunk_size)
                builds[vectorizer].append(contenders[vectorizer].build_s)
            for turn in range(rounds):
                for vectorizer in _turn_order(vectorizers, turn):
                    rate, ms = contenders[vectorizer].time_block(steps)
                    rates[vectorizer].append(rate)
                    cpu_ms[vectorizer].append(ms)
        finally:
            for contender in contenders.values():
                contender.close()
    load = f"{load_start}-{_load()}"
    reference = rates.get(REFERENCE)
    rows = []
    for vectorizer in vectorizers:
        ratio = (round(statistics.median(r / v for r, v in zip(rates[vectorizer], reference)), 2)
                 if reference else None)
        rows.append({"vectorizer": vectorizer, "family": family, "num_envs": num_envs, "chunk": chunk_size,
                     "build_s": round(statistics.median(builds[vectorizer]), 1),
                     "sim_steps_per_s": round(statistics.median(rates[vectorizer]), 3),
                     "blocks": [round(rate, 3) for rate in rates[vectorizer]],
                     "vs_vla_gym": ratio,
                     "cpu_ms_per_sim_step": round(statistics.median(cpu_ms[vectorizer]), 1),
                     "cpu_ms_blocks": [round(ms, 1) for ms in cpu_ms[vectorizer]],
                     "load": load, "sequential": sequential})
    return rows


def table(rows: list[dict]) -> str:
    header = ("| config | envs | chunk | vectorizer | build s | sim steps/s (median) | per block | "
              f"vs {REFERENCE} (median of per-round ratios) | CPU ms per sim step | load avg |")
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        blocks = " ".join(str(rate) for rate in row["blocks"])
        family = f"{row['family']} (sequential)" if row.get("sequential") else row["family"]
        lines.append(f"| {family} | {row['num_envs']} | {row['chunk']} | {row['vectorizer']} | "
                     f"{row['build_s']} | {row['sim_steps_per_s']} | {blocks} | {row['vs_vla_gym']} | "
                     f"{row['cpu_ms_per_sim_step']} | {row['load']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = script_parser(__doc__)
    parser.add_argument("--families", default="libero,maniskill", help=f"comma list from {list(CONFIGS)}")
    parser.add_argument("--num-envs", default=None, help="comma list (default 2,4; --quick 2)")
    parser.add_argument("--chunks", default="1,4")
    parser.add_argument("--steps", type=int, default=10, help="timed vector steps per block")
    parser.add_argument("--rounds", type=int, default=None,
                        help="timed blocks per vectorizer (median; default 6, --quick 2); a multiple of the number "
                             "of vectorizers lets each go first equally often")
    parser.add_argument("--vectorizers", default=",".join(VECTORIZERS))
    parser.add_argument("--sequential", action="store_true",
                        help="one vector env alive at a time (rebuilt every round): for memory-bound machines")
    parser.add_argument("--quick", action="store_true",
                        help="ManiSkill state, 2 envs (unless --num-envs), chunk 1, 2 blocks of 5 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.families, args.num_envs, args.chunks, args.steps = "maniskill-state", args.num_envs or "2", "1", 5
    args.num_envs = args.num_envs or "2,4"
    if args.rounds is None:
        args.rounds = 2 if args.quick else 6
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be at least 1")
    for name in args.vectorizers.split(","):
        if name not in KNOWN_VECTORIZERS:
            parser.error(f"--vectorizers: unknown {name!r}; choose from {list(KNOWN_VECTORIZERS)}")
    for family in args.families.split(","):
        if family not in CONFIGS:
            parser.error(f"--families: unknown {family!r}; choose from {list(CONFIGS)}")
    configs = [(family, num_envs, chunk) for family in args.families.split(",")
               for num_envs in map(int, args.num_envs.split(",")) for chunk in map(int, args.chunks.split(","))]
    rows = []
    for index, (family, num_envs, chunk) in enumerate(configs):
        for row in measure(family, num_envs, chunk, args.vectorizers.split(","), args.steps, args.rounds,
                           build_offset=index, sequential=args.sequential):
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
