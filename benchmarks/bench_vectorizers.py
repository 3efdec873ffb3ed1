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

Per run: build + first reset (``build s``), 2 warm-up steps, then ``--steps`` timed vector steps with random
actions; ``sim steps/s`` counts simulator steps of all sub-envs (vector steps x envs x chunk). Wall clock:
quote it with the machine's load. Prints a Markdown table and one JSON line per run.
"""
from __future__ import annotations

import argparse
import json
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


def measure(vectorizer: str, family: str, num_envs: int, chunk_size: int, steps: int) -> dict:
    env_id, env_kwargs = CONFIGS[family]
    start = time.perf_counter()
    run = make_vectorized(vectorizer, env_id, num_envs, chunk_size=chunk_size,
                          max_episode_steps=MAX_EPISODE_STEPS, **env_kwargs)
    try:
        run.reset(seed=0)
        build = time.perf_counter() - start
        for _ in range(2):
            run.step(run.random_actions())
        actions = [run.random_actions() for _ in range(steps)]
        start = time.perf_counter()
        for action in actions:
            run.step(action)
        seconds = time.perf_counter() - start
    finally:
        run.close()
    return {"vectorizer": vectorizer, "family": family, "num_envs": num_envs, "chunk": chunk_size,
            "build_s": round(build, 1), "sim_steps_per_s": round(steps * num_envs * chunk_size / seconds, 1)}


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
    parser.add_argument("--steps", type=int, default=30, help="timed vector steps per run")
    parser.add_argument("--vectorizers", default=",".join(VECTORIZERS))
    parser.add_argument("--quick", action="store_true", help="ManiSkill state, 2 envs, chunk 1, 5 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.families, args.num_envs, args.chunks, args.steps = "maniskill-state", "2", "1", 5
    rows = []
    for family in args.families.split(","):
        for num_envs in map(int, args.num_envs.split(",")):
            for chunk in map(int, args.chunks.split(",")):
                for vectorizer in args.vectorizers.split(","):
                    rows.append(measure(vectorizer, family, num_envs, chunk, args.steps))
                    print(json.dumps(rows[-1]), flush=True)
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
