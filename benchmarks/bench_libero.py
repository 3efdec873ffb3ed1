"""Raw LIBERO ``OffScreenRenderEnv`` against ``VLA/Libero10-v0``, side by side in one run.

    python benchmarks/bench_libero.py                 # 224x224, main + wrist cameras, task 0
    python benchmarks/bench_libero.py --steps 100 --resets 5 --size 128

Both envs render the same two cameras at the same size every step and run the same random
actions. Rounds alternate between the two so that machine noise hits both alike. Reports
rendered steps/s, the per-step overhead of the unified env (wall clock, and CPU time, which a
busy machine disturbs less), and reset times: the raw env's
default (hard) reset + set_init_state against vla_gym's same-task (soft) reset.
"""
from __future__ import annotations

import time

import numpy as np

from vla_gym.runtime.cli_args import script_parser


def make_raw(size: int, task_id: int):
    from libero.libero import benchmark
    from libero.libero.envs import OffScreenRenderEnv

    suite = benchmark.get_benchmark_dict()["libero_10"]()
    env = OffScreenRenderEnv(bddl_file_name=suite.get_task_bddl_file_path(task_id), camera_heights=size,
                             camera_widths=size, camera_names=["agentview", "robot0_eye_in_hand"])
    return env, suite.get_task_init_states(task_id)


def time_steps(step, actions) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads: llvmpipe renders on several)."""
    wall, cpu = time.perf_counter(), time.process_time()
    for action in actions:
        step(action)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--steps", type=int, default=60, help="steps per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--resets", type=int, default=3)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--task-id", type=int, default=0)
    args = parser.parse_args()

    import gymnasium as gym

    import vla_gym  # noqa: F401  (registers the ids)

    rng = np.random.default_rng(0)
    actions = rng.uniform(-0.3, 0.3, size=(args.steps, 7)).astype(np.float32)

    raw, init_states = make_raw(args.size, args.task_id)
    ours = gym.make("VLA/Libero10-v0", task_id=args.task_id, image_size=args.size).unwrapped
    raw.reset()
    raw.set_init_state(init_states[0])
    ours.reset(seed=0, options={"init_state_id": 0})

    raw_time, ours_time = np.zeros(2), np.zeros(2)
    for _ in range(args.rounds):
        raw_time += time_steps(raw.step, actions)
        ours_time += time_steps(ours.step, actions)
    n = args.steps * args.rounds
    raw_sps, ours_sps = n / raw_time[0], n / ours_time[0]

    raw_resets, ours_resets = [], []
    for i in range(args.resets):
        start = time.perf_counter()
        raw.reset()
        raw.set_init_state(init_states[i])
        raw_resets.append(time.perf_counter() - start)
        start = time.perf_counter()
        ours.reset(options={"init_state_id": i})
        ours_resets.append(time.perf_counter() - start)
    raw.close()
    ours.close()

    raw_reset, ours_reset = float(np.median(raw_resets)), float(np.median(ours_resets))
    print(f"LIBERO libero_10 task {args.task_id}, cameras main+wrist at {args.size}x{args.size}, "
          f"{n} steps per env")
    print(f"{'env':<28}{'steps/s':>10}{'reset s (median)':>18}")
    print(f"{'raw OffScreenRenderEnv':<28}{raw_sps:>10.2f}{raw_reset:>18.2f}")
    print(f"{'VLA/Libero10-v0':<28}{ours_sps:>10.2f}{ours_reset:>18.2f}")
    print(f"per-step overhead: {100 * (raw_sps / ours_sps - 1):+.1f}% wall, "
          f"{100 * (ours_time[1] / raw_time[1] - 1):+.1f}% CPU time   "
          f"reset speed-up: {raw_reset / ours_reset:.1f}x (vla_gym's reset includes 10 settle steps)")


if __name__ == "__main__":
    main()
