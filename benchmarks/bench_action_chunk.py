"""Time per executed action: ActionChunk (renders once per chunk) vs single rendered steps.

    python benchmarks/bench_action_chunk.py                      # LIBERO-10 task 0, 224x224, K=8
    python benchmarks/bench_action_chunk.py --env-id VLA/ManiSkill-PickCube-v0 --task-id -1

Both modes run on the same env, from a fresh reset each, with the same random actions (small, so
the arm stays in its workspace): ``--chunks`` chunks of ``K`` actions per mode after one warm-up
chunk. Wall-clock time is the figure to quote; CPU time (all threads of this process, llvmpipe's
included) is printed too because it moves less when other jobs share the machine. Prints a table
and one JSON line.
"""
from __future__ import annotations

import json
import time

import gymnasium as gym
import numpy as np

import vla_gym
from vla_gym.runtime.cli_args import script_parser
from vla_gym.wrappers import ActionChunk


class Timer:
    """Wall-clock and CPU seconds (all threads of this process, llvmpipe's included) of a block."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def time_single_steps(env: ActionChunk, actions: np.ndarray, seed: int) -> Timer:
    """Time stepping the env below the chunk wrapper, every step rendered."""
    env.reset(seed=seed)
    env.env.step(actions[0, 0])  # warm-up
    with Timer() as timer:
        for chunk in actions[1:]:
            for action in chunk:
                env.env.step(action)
    return timer


def time_chunks(env: ActionChunk, actions: np.ndarray, seed: int) -> Timer:
    """Time the same actions through ActionChunk (one render per chunk)."""
    env.reset(seed=seed)
    env.step(actions[0])  # warm-up
    with Timer() as timer:
        for chunk in actions[1:]:
            _, _, terminated, truncated, _ = env.step(chunk)
            if terminated or truncated:
                raise RuntimeError("episode ended during the benchmark: use fewer --chunks")
    return timer


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--env-id", default="VLA/Libero10-v0")
    parser.add_argument("--task-id", type=int, default=0, help="-1: let the env draw")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--chunk-size", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=6, help="timed chunks per mode (after one warm-up chunk)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    kwargs = {"image_size": args.image_size}
    if args.task_id >= 0:
        kwargs["task_id"] = args.task_id
    start = time.perf_counter()
    env = ActionChunk(vla_gym.make(args.env_id, **kwargs), args.chunk_size)
    env.reset(seed=args.seed)
    build_s = time.perf_counter() - start
    rng = np.random.default_rng(args.seed)
    actions = rng.uniform(-0.2, 0.2, size=(args.chunks + 1, args.chunk_size, env.action_dim))
    actions[..., -1] = -1.0  # gripper open

    single = time_single_steps(env, actions, args.seed)
    chunked = time_chunks(env, actions, args.seed)
    cameras = list(env.observation_space["images"])
    env.close()

    n = args.chunks * args.chunk_size
    result = {
        "env_id": args.env_id, "image_size": args.image_size, "cameras": cameras, "chunk_size": args.chunk_size,
        "timed_actions_per_mode": n, "build_and_first_reset_s": round(build_s, 2),
        "single_ms_per_action": round(single.wall / n * 1e3, 1), "chunk_ms_per_action": round(chunked.wall / n * 1e3, 1),
        "speedup": round(single.wall / chunked.wall, 2),
        "single_cpu_ms_per_action": round(single.cpu / n * 1e3, 1),
        "chunk_cpu_ms_per_action": round(chunked.cpu / n * 1e3, 1),
        "cpu_speedup": round(single.cpu / chunked.cpu, 2),
    }
    print(f"{args.env_id}  images {args.image_size}x{args.image_size} {cameras}  K={args.chunk_size}  ({n} actions per mode)")
    print("                          wall ms/action   CPU ms/action")
    print(f"  single rendered steps : {result['single_ms_per_action']:14.1f} {result['single_cpu_ms_per_action']:15.1f}")
    print(f"  ActionChunk           : {result['chunk_ms_per_action']:14.1f} {result['chunk_cpu_ms_per_action']:15.1f}")
    print(f"  speed-up              : {result['speedup']:13.2f}x {result['cpu_speedup']:14.2f}x")
    print(json.dumps(result))


if __name__ == "__main__":
    gym.logger.min_level = gym.logger.ERROR
    main()
