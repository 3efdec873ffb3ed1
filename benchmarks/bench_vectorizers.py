"""Throughput of the same vla_gym envs under vla_gym.make_vec, gymnasium AsyncVectorEnv and SB3 SubprocVecEnv.

    python benchmarks/bench_vectorizers.py                 # LIBERO + ManiSkill, 2 and 4 envs, chunks of 1 and 4
    python benchmarks/bench_vectorizers.py --quick         # ManiSkill state, 2 envs, a few steps (CI)
    nice -n 10 python benchmarks/bench_vectorizers.py --steps 12 --families maniskill,libero

Configs (one camera so that a 2-core machine finishes; the same for every vectorizer):
- ``libero``: ``VLA/LiberoSpatial-v0`` task 0, main camera 128x128;
- ``maniskill``: ``VLA/ManiSkill-PushCube-v0``, images mode, main camera 128x128 (``--quick``: state only).

Vectorizers (built by :func:`vla_gym.interop.make_vectorized`): ``vla_gym-async`` (``vla_gym.make_vec``:
spawn, SAME_STEP autoreset), ``gymnasium-async-spawn`` (``gym.make_vec(..., vectorization_mode="async",
vector_kwargs=dict(context="spawn"))``, shared memory) and ``sb3-subproc-forkserver`` (``SubprocVecEnv``
with its default start method, :class:`~vla_gym.wrappers.SB3Compat` observations). With ``chunk 4`` every
sub-env is wrapped in :class:`~vla_gym.wrappers.ActionChunk` (4 simulator steps, one render per vector step).

Per config: every vectorizer's vector env is built (``build s``: construction + first reset, one after the
other) and warmed up with 2 steps; then they are timed in turns, ``--rounds`` blocks of ``--steps`` vector
steps with random actions each, so that load from other jobs hits all alike. ``sim steps/s`` (median over
the blocks) counts simulator steps of all sub-envs (vector steps x envs x chunk). Wall clock: quote it with
the machine's load. Prints a Markdown table and one JSON line per vectorizer and config.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from vla_gym.interop import make_vectorized

CONFIGS = {
    "libero": ("VLA/LiberoSpatial-v0", {"task_id": 0, "cameras": ("main",), "image_size": 128}),
    "maniskill": ("VLA/ManiSkill-PushCube-v0", {"obs_mode": "images", "cameras": ("main",), "image_size": 128}),
    "maniskill-state": ("VLA/ManiSkill-PushCube-v0", {"obs_mode": "state"}),
}
VECTORIZERS = ("vla_gym-async", "gymnasium-async-spawn", "sb3-subproc-forkserver")
#: long enough that no episode ends inside a timed run (autoreset cost is not what is compared)
MAX_EPISODE_STEPS = 1000


def measure(family: str, num_envs: int, chunk_size: int, vectorizers: list[str], steps: int, rounds: int) -> list[dict]:
    """Build every vectorizer's vector env for one config, then time them in turns (round-robin).

    All of them are built before any is timed and the timed blocks alternate, so a change in the machine's
    load hits every vectorizer alike; the figure is the median of ``rounds`` blocks of ``steps`` vector steps.
    """
    env_id, env_kwargs = CONFIGS[family]
    runs, builds = {}, {}
    try:
        for vectorizer in vectorizers:
            start = time.perf_counter()
            runs[vectorizer] = make_vectorized(vectorizer, env_id, num_envs, chunk_size=chunk_size,
                                               max_episode_steps=MAX_EPISODE_STEPS, **env_kwargs)
            runs[vectorizer].reset(seed=0)
            builds[vectorizer] = time.perf_counter() - start
            for _ in range(2):  # warm-up
                runs[vectorizer].step(runs[vectorizer].random_actions())
        rates = {vectorizer: [] for vectorizer in vectorizers}
        for turn in range(rounds):
            for vectorizer in vectorizers[turn % len(vectorizers):] + vectorizers[:turn % len(vectorizers)]:
                run = runs[vectorizer]
                actions = [run.random_actions() for _ in range(steps)]
                start = time.perf_counter()
                for action in actions:
                    run.step(action)
                rates[vectorizer].append(steps * num_envs * chunk_size / (time.perf_counter() - start))
    finally:
        for run in runs.values():
            run.close()
    return [{"vectorizer": vectorizer, "family": family, "num_envs": num_envs, "chunk": chunk_size,
             "build_s": round(builds[vectorizer], 1),
             "sim_steps_per_s": round(statistics.median(rates[vectorizer]), 1)} for vectorizer in vectorizers]


def table(rows: list[dict]) -> str:
    lines = ["| config | envs | chunk | vectorizer | build s | sim steps/s |", "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['family']} | {row['num_envs']} | {row['chunk']} | {row['vectorizer']} | "
                     f"{row['build_s']} | {row['sim_steps_per_s']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default="libero,maniskill", help=f"comma list from {list(CONFIGS)}")
    parser.add_argument("--num-envs", default="2,4")
    parser.add_argument("--chunks", default="1,4")
    parser.add_argument("--steps", type=int, default=10, help="timed vector steps per block")
    parser.add_argument("--rounds", type=int, default=3, help="timed blocks per vectorizer (median)")
    parser.add_argument("--vectorizers", default=",".join(VECTORIZERS))
    parser.add_argument("--quick", action="store_true", help="ManiSkill state, 2 envs, chunk 1, 2 blocks of 5 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.families, args.num_envs, args.chunks, args.steps, args.rounds = "maniskill-state", "2", "1", 5, 2
    rows = []
    for family in args.families.split(","):
        for num_envs in map(int, args.num_envs.split(",")):
            for chunk in map(int, args.chunks.split(",")):
                for row in measure(family, num_envs, chunk, args.vectorizers.split(","), args.steps, args.rounds):
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
