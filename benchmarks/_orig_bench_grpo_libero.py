"""GRPO's LIBERO rollout: the share of time spent rebuilding scenes, and env-steps/s against raw LIBERO.

    nice -n 10 python benchmarks/bench_grpo_libero.py                     # both measurements (about 15 min, 2 cores)
    nice -n 10 python benchmarks/bench_grpo_libero.py --only rebuild --updates 4
    nice -n 10 python benchmarks/bench_grpo_libero.py --only throughput --repeats 3
    python benchmarks/bench_grpo_libero.py --quick                        # short form (CI): one env, tiny episodes

1. **Rebuild share** (``VLA/Libero130-v0``): the real :class:`~vla_gym.trainers.GRPO` (groups of
   ``--group-size`` rollouts of one (task, init state), ``--groups`` groups per update, tasks drawn at random
   from all 130) with an untrained ``mlp`` chunk policy runs ``--updates`` updates in ``--num-envs`` spawned
   worker processes. Every worker's LIBERO backend counts its scene builds (``LiberoBackend.scene_loads`` /
   ``scene_load_seconds``); the share is their seconds over (rollout wall time x number of envs): the part
   of the env slots' time spent rebuilding. The first update (every env builds its first scene) is reported
   apart from the steady state.
2. **Throughput** (``VLA/LiberoObject-v0``, task 0, 8-step chunks, ``--cameras`` at ``--image-size``): GRPO's
   rollout env-steps/s (``ActionChunk`` + the vector env + the policy + the episode runner) against raw LIBERO:
   ``OffScreenRenderEnv`` in as many spawned processes, each stepping 8 random actions per chunk and rendering
   the same cameras once per chunk, episodes of the same length reset the way LIBERO's evaluation does
   (``reset``, ``set_init_state``, 10 no-op steps). Repeated ``--repeats`` times, alternating.
"""
from __future__ import annotations

import json
import multiprocessing
import statistics
import sys
import time

import gymnasium as gym
import numpy as np

from vla_gym.runtime.cli_args import script_parser

CHUNK = 8


class SceneLoadStats(gym.Wrapper):
    """Exposes the LIBERO backend's scene-build counters to ``vector_env.call("scene_load_stats")``."""

    def scene_load_stats(self) -> tuple[int, float]:
        backend = self.env.unwrapped.backend
        return backend.scene_loads, backend.scene_load_seconds


def make_grpo(env_id: str, num_envs: int, group_size: int, groups: int, env_kwargs: dict, seed: int = 0):
    import vla_gym
    from vla_gym.trainers import GRPO
    from vla_gym.wrappers import ActionChunk

    envs = vla_gym.make_vec(env_id, num_envs, wrappers=[{"name": "ActionChunk", "kwargs": {"chunk_size": CHUNK}},
                                                        SceneLoadStats], **env_kwargs)
    assert envs.single_action_space.shape == (CHUNK, 7), ActionChunk
    grpo = GRPO("mlp", envs, seed=seed, group_size=group_size, groups_per_update=groups, n_epochs=1,
                batch_size=256, policy_kwargs={"hidden_sizes": [64, 64], "critic": False})
    return grpo, envs


def scene_loads(envs) -> tuple[int, float]:
    stats = envs.call("scene_load_stats")
    return sum(s[0] for s in stats), sum(s[1] for s in stats)


def run_updates(grpo, envs, updates: int) -> list[dict]:
    """Run GRPO update by update; per update: rollout seconds, env steps, scene builds and their seconds."""
    rows, metrics = [], []
    for _ in range(updates):
        loads_before, seconds_before = scene_loads(envs)
        steps_before = grpo.num_timesteps
        grpo.learn(grpo.num_timesteps + 1, callback=lambda algo, m: metrics.append(m))
        loads, seconds = scene_loads(envs)
        rows.append({"rollout_s": metrics[-1]["time/rollout_s"], "env_steps": grpo.num_timesteps - steps_before,
                     "scene_loads": loads - loads_before, "scene_load_s": seconds - seconds_before})
        print("update", len(rows) - 1, json.dumps(rows[-1]), flush=True)
    return rows


def rebuild_share(args) -> dict:
    env_kwargs = {"cameras": args.cameras, "image_size": args.image_size}
    if args.max_episode_steps:
        env_kwargs["max_episode_steps"] = args.max_episode_steps
    grpo, envs = make_grpo("VLA/Libero130-v0", args.num_envs, args.group_size, args.groups, env_kwargs)
    try:
        rows = run_updates(grpo, envs, args.updates)
    finally:
        grpo.close()

    def share(part: list[dict]) -> float:
        return sum(r["scene_load_s"] for r in part) / (sum(r["rollout_s"] for r in part) * args.num_envs)

    result = {"updates": rows, "share_all": share(rows), "share_after_first": share(rows[1:]) if len(rows) > 1 else None,
              "episodes_per_update": args.group_size * args.groups}
    print(f"\nLibero130 rebuild share: {args.num_envs} envs, groups of {args.group_size}, {args.groups} groups/update")
    print("| update | rollout s | env steps | scene builds | build s (all envs) |\n|---:|---:|---:|---:|---:|")
    for k, r in enumerate(rows):
        print(f"| {k} | {r['rollout_s']:.1f} | {r['env_steps']} | {r['scene_loads']} | {r['scene_load_s']:.1f} |")
    print(f"share of env-slot time rebuilding: all updates {result['share_all']:.1%}"
          + (f", after the first {result['share_after_first']:.1%}" if result["share_after_first"] is not None else ""))
    return result


# ------------------------------------------------------------------------------------------ throughput
def raw_worker(args: tuple) -> tuple[float, int]:
    """One process of raw LIBERO: ``steps`` env steps in chunks of 8, one render of each camera per chunk."""
    suite_name, task_index, cameras, size, episode_steps, steps, barrier, seed = args
    from vla_gym.backends.libero.env import CAMERAS, NO_OP_OPEN, import_libero

    benchmark, env_class = import_libero()
    suite = benchmark.get_benchmark_dict()[suite_name]()
    env = env_class(bddl_file_name=suite.get_task_bddl_file_path(task_index),
                    camera_names=[CAMERAS[c] for c in cameras], camera_heights=size, camera_widths=size,
                    use_camera_obs=False, hard_reset=False, horizon=10**9, ignore_done=True)
    init_states = suite.get_task_init_states(task_index)
    rng = np.random.default_rng(seed)

    def new_episode(k: int) -> None:
        env.reset()
        env.set_init_state(init_states[k % len(init_states)])
        for _ in range(10):
            env.step(NO_OP_OPEN)
        for camera in cameras:
            env.sim.render(camera_name=CAMERAS[camera], width=size, height=size)

    new_episode(0)
    barrier.wait()
    started = time.perf_counter()
    done, in_episode, episode = 0, 0, 0
    while done < steps:
        for action in rng.uniform(-1, 1, size=(CHUNK, 7)):
            env.step(action)
            done += 1
            in_episode += 1
            if in_episode == episode_steps:
                break
        for camera in cameras:
            env.sim.render(camera_name=CAMERAS[camera], width=size, height=size)
        if in_episode == episode_steps:
            episode += 1
            in_episode = 0
            new_episode(episode)
    elapsed = time.perf_counter() - started
    env.close()
    return elapsed, done


def raw_steps_per_s(args, steps: int) -> float:
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(args.num_envs)
        jobs = [("libero_object", 0, args.cameras, args.image_size, args.episode_steps, steps, barrier, k)
                for k in range(args.num_envs)]
        with context.Pool(args.num_envs) as pool:
            results = pool.map(raw_worker, jobs)
    return sum(n for _, n in results) / max(t for t, _ in results)


def grpo_steps_per_s(grpo, envs, updates: int) -> float:
    rows = run_updates(grpo, envs, updates)
    return sum(r["env_steps"] for r in rows) / sum(r["rollout_s"] for r in rows)


def throughput(args) -> dict:
    env_kwargs = {"cameras": args.cameras, "image_size": args.image_size, "task_id": 0,
                  "max_episode_steps": args.episode_steps}
    # one update = group_size x groups episodes of episode_steps env steps
    grpo, envs = make_grpo("VLA/LiberoObject-v0", args.num_envs, args.group_size, args.groups, env_kwargs)
    steps = args.group_size * args.groups * args.episode_steps // args.num_envs  # per raw process: the same work
    raw, ours = [], []
    try:
        run_updates(grpo, envs, 1)  # warm-up: the first scene builds
        for _ in range(args.repeats):
            raw.append(raw_steps_per_s(args, steps))
            ours.append(grpo_steps_per_s(grpo, envs, 1))
            print(f"raw {raw[-1]:.1f} env-steps/s, GRPO rollout {ours[-1]:.1f} ({ours[-1] / raw[-1]:.1%})", flush=True)
    finally:
        grpo.close()
    ratios = [o / r for o, r in zip(ours, raw)]
    result = {"raw": raw, "grpo": ours, "ratios": ratios, "ratio_of_medians": statistics.median(ours) / statistics.median(raw)}
    print(f"\nLiberoObject, {args.num_envs} processes, {CHUNK}-step chunks, cameras {args.cameras} at {args.image_size}:"
          f"\n| | env-steps/s (median) | runs |\n|---|---:|---|"
          f"\n| raw OffScreenRenderEnv | {statistics.median(raw):.1f} | {', '.join(f'{x:.1f}' for x in raw)} |"
          f"\n| GRPO rollout | {statistics.median(ours):.1f} | {', '.join(f'{x:.1f}' for x in ours)} |"
          f"\nratio of medians {result['ratio_of_medians']:.1%}; per repeat {', '.join(f'{x:.1%}' for x in ratios)}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--only", choices=["rebuild", "throughput"])
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--groups", type=int, default=2, help="groups per update (rebuild share)")
    parser.add_argument("--updates", type=int, default=3, help="GRPO updates for the rebuild share")
    parser.add_argument("--max-episode-steps", type=int, default=None,
                        help="Libero130 episode cap (default: each task's own suite limit)")
    parser.add_argument("--episode-steps", type=int, default=280, help="LiberoObject episode length (throughput)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cameras", nargs="+", default=["main"])
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--quick", action="store_true", help="short form for CI: tiny episodes, one repeat")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.num_envs, args.group_size, args.groups, args.updates, args.repeats = 1, 2, 1, 2, 1
        args.max_episode_steps, args.episode_steps, args.image_size = 16, 16, 32
    results = {}
    if args.only in (None, "rebuild"):
        results["rebuild"] = rebuild_share(args)
    if args.only in (None, "throughput"):
        results["throughput"] = throughput(args)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), **results}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
