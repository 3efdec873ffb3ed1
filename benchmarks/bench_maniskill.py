"""Raw ManiSkill3 env against ``VLA/ManiSkill-PickCube-v0``, side by side in one run.

    python benchmarks/bench_maniskill.py                        # CPU: state-only and 224x224 images
    python benchmarks/bench_maniskill.py --modes state --episodes 20
    python benchmarks/bench_maniskill.py --gpu                  # GPU sim: N = 64, 256, 1024 (needs CUDA)
    python benchmarks/bench_maniskill.py --size 32 --episodes 1 --steps 5   # short form (CI): it runs, nothing is claimed

CPU: both envs are made with ``gym.make`` (the raw one as ManiSkill's docs do: ``PickCube-v1``,
``panda_wristcam``, ``pd_ee_delta_pose``; ``obs_mode="state"`` or ``"rgb"`` with both cameras at the
same size) and run the same random actions (with the gripper sign converted for the raw env).
Steps alternate one by one between the two envs so that machine noise hits both alike; resets are
not timed. Reports steps/s and the per-step overhead of the unified env (total and median).

GPU: ``ManiSkillVectorEnv`` over the raw GPU env against :func:`make_gpu_vector_env`, steps/s
(env steps summed over the N sub-envs) for each N, state-only and with images.
"""
from __future__ import annotations

import time

import numpy as np
from step_overhead import print_step_overhead

from vla_gym.runtime.cli_args import script_parser

TASK, RAW_TASK, ROBOT, CONTROL = "VLA/ManiSkill-PickCube-v0", "PickCube-v1", "panda_wristcam", "pd_ee_delta_pose"


def make_pair(mode: str, size: int):
    """(raw ManiSkill env, vla_gym env) with the same cameras and control mode."""
    import gymnasium as gym

    import vla_gym  # noqa: F401  (registers the ids)
    from vla_gym.backends.maniskill.env import default_render_backend, import_maniskill

    import_maniskill()  # registers ManiSkill's own ids with gymnasium
    raw_kwargs = {"obs_mode": "state", "robot_uids": ROBOT, "control_mode": CONTROL,
                  "render_backend": default_render_backend()}
    ours_kwargs = {"obs_mode": "state"}
    if mode == "images":
        raw_kwargs.update(obs_mode="rgb", sensor_configs={"width": size, "height": size})
        ours_kwargs = {"obs_mode": "images", "image_size": size}
    return gym.make(RAW_TASK, **raw_kwargs), gym.make(TASK, **ours_kwargs)


def bench_cpu(mode: str, size: int, episodes: int, seed: int, steps: int | None = None) -> None:
    raw, ours = make_pair(mode, size)
    steps = steps or ours.unwrapped.tasks[0].max_episode_steps  # 50 for PickCube
    rng = np.random.default_rng(seed)
    raw_times, ours_times = [], []
    for episode in range(episodes + 1):  # episode 0 warms up both (first renders compile shaders)
        raw.reset(seed=seed + episode)
        ours.reset(seed=seed + episode)
        for action in rng.uniform(-1, 1, size=(steps, 7)).astype(np.float32):
            raw_action = action.copy()
            raw_action[-1] = -raw_action[-1]  # ManiSkill: +1 opens the gripper
            start = time.perf_counter()
            raw.step(raw_action)
            middle = time.perf_counter()
            ours.step(action)
            end = time.perf_counter()
            if episode:
                raw_times.append(middle - start)
                ours_times.append(end - middle)
    raw.close()
    ours.close()
    raw_times, ours_times = np.array(raw_times), np.array(ours_times)
    label = "state-only" if mode == "state" else f"images {size}x{size} (main + wrist)"
    print_step_overhead(label, "raw ManiSkill", TASK, raw_times, ours_times)


def bench_gpu(mode: str, size: int, num_envs: int, steps: int, seed: int) -> None:
    import gymnasium as gym
    import torch
    from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv

    from vla_gym.backends.maniskill.env import import_maniskill
    from vla_gym.backends.maniskill.gpu import make_gpu_vector_env

    import_maniskill()  # registers ManiSkill's own ids with gymnasium
    raw_kwargs = {"obs_mode": "state", "robot_uids": ROBOT, "control_mode": CONTROL, "sim_backend": "gpu"}
    ours_kwargs = {"obs_mode": "state"}
    if mode == "images":
        raw_kwargs.update(obs_mode="rgb", sensor_configs={"width": size, "height": size})
        ours_kwargs = {"obs_mode": "images", "image_size": size}
    results = {}
    for name in ("raw ManiSkill", TASK):
        if name == TASK:
            envs = make_gpu_vector_env(TASK, num_envs, "cuda", **ours_kwargs)
        else:
            envs = ManiSkillVectorEnv(gym.make(RAW_TASK, num_envs=num_envs, **raw_kwargs), auto_reset=True)
        envs.reset(seed=seed)
        generator = torch.Generator(device="cuda").manual_seed(seed)
        actions = torch.rand((steps, num_envs, 7), device="cuda", generator=generator) * 2 - 1
        for action in actions[:5]:  # warm-up
            envs.step(action)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for action in actions:
            envs.step(action)
        torch.cuda.synchronize()
        results[name] = steps * num_envs / (time.perf_counter() - start)
        envs.close()
    label = "state-only" if mode == "state" else f"images {size}x{size}"
    raw_rate, ours_rate = results["raw ManiSkill"], results[TASK]
    print(f"GPU {label} N={num_envs}: raw {raw_rate:10.0f} steps/s   vla_gym {ours_rate:10.0f} steps/s   "
          f"overhead {100 * (raw_rate / ours_rate - 1):+.1f}%", flush=True)


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--modes", nargs="+", default=["state", "images"], choices=["state", "images"])
    parser.add_argument("--size", type=int, default=224, help="image height and width")
    parser.add_argument("--episodes", type=int, default=None,
                        help="timed 50-step episodes per env (default: 20 state-only, 4 images)")
    parser.add_argument("--gpu", action="store_true", help="benchmark the GPU-batched env instead")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 256, 1024], help="--gpu: batch sizes")
    parser.add_argument("--steps", type=int, default=None,
                        help="--gpu: timed steps per batch size (default 100); CPU: steps per episode (default: the "
                             "task's limit, 50)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.gpu:
        import torch

        if not torch.cuda.is_available():
            parser.error("--gpu needs a CUDA device (ManiSkill's GPU simulation); without one, leave --gpu out")
    for mode in args.modes:
        if args.gpu:
            for num_envs in args.num_envs:
                bench_gpu(mode, args.size, num_envs, args.steps or 100, args.seed)
        else:
            episodes = args.episodes or (20 if mode == "state" else 4)
            bench_cpu(mode, args.size, episodes, args.seed, args.steps)


if __name__ == "__main__":
    main()
