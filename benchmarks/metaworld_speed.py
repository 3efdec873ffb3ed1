"""Raw Meta-World env against ``VLA/MetaWorld-<task>-v0``, side by side in one run: steps/s, state-only and images.

    python benchmarks/metaworld_speed.py                                   # push: state-only and 224x224 images
    python benchmarks/metaworld_speed.py --task pick-place --steps 500 --episodes 4
    python benchmarks/metaworld_speed.py --size 32 --episodes 1 --steps 5  # short form (CI): it runs, nothing is claimed
    python benchmarks/metaworld_speed.py --steps 100 --json benchmarks/results/metaworld_speed.json   # the docs' figures

The raw env is Meta-World's own class (``metaworld.env_dict.ALL_V3_ENVIRONMENTS``) set up as vla_gym runs it
(:func:`vla_gym.backends.metaworld.env.configure_raw_env`: goal in the observation, seeded goal sampling); with
images it renders the same camera (``corner4``) at the same size through its own ``render()`` after every step.
Both run the same random actions; steps alternate one by one between the two envs so that machine noise hits
both alike; resets are not timed. Reports steps/s and the unified env's overhead (total and median); ``--json``
also writes them, with the command, the MuJoCo version and the load average when it started.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
from step_overhead import print_step_overhead

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.runtime.results import write_results


def make_pair(task: str, mode: str, size: int):
    """(raw Meta-World env, vla_gym env): the same task, and with images the same camera at the same size."""
    import gymnasium as gym

    import vla_gym  # noqa: F401  (registers the ids)
    from vla_gym.backends.metaworld.cameras import CAMERAS
    from vla_gym.backends.metaworld.env import configure_raw_env, import_metaworld
    from vla_gym.tasks.metaworld import env_id, metaworld_name

    classes = import_metaworld()
    raw_kwargs = {} if mode == "state" else {"render_mode": "rgb_array", "camera_name": CAMERAS["main"],
                                             "width": size, "height": size}
    raw = classes[metaworld_name(task)](**raw_kwargs)
    configure_raw_env(raw)
    ours_kwargs = {"obs_mode": "state"} if mode == "state" else {"image_size": size}
    return raw, gym.make(env_id(task), **ours_kwargs)


def bench(task: str, mode: str, size: int, episodes: int, steps: int, seed: int) -> dict:
    raw, ours = make_pair(task, mode, size)
    rng = np.random.default_rng(seed)
    raw_times, ours_times = [], []
    for episode in range(episodes + 1):  # episode 0 warms up both (renderer start-up)
        raw.seed(seed + episode)
        raw.reset()
        ours.reset(seed=seed + episode)
        for action in rng.uniform(-1, 1, size=(steps, 4)).astype(np.float32):
            start = time.perf_counter()
            raw.step(action)
            if mode == "images":
                raw.render()
            middle = time.perf_counter()
            ours.step(action)
            end = time.perf_counter()
            if episode:
                raw_times.append(middle - start)
                ours_times.append(end - middle)
    raw.close()
    ours.close()
    raw_times, ours_times = np.array(raw_times), np.array(ours_times)
    label = "state-only" if mode == "state" else f"images {size}x{size} (main camera)"
    print_step_overhead(f"{task}, {label}", "raw Meta-World", f"VLA/MetaWorld-{task}-v0", raw_times, ours_times)
    return {"task": task, "mode": mode, "size": None if mode == "state" else size, "steps": len(raw_times),
            "raw_steps_per_s": round(1 / raw_times.mean(), 2), "ours_steps_per_s": round(1 / ours_times.mean(), 2),
            "overhead_total_pct": round(100 * (ours_times.sum() / raw_times.sum() - 1), 2),
            "overhead_median_pct": round(100 * (np.median(ours_times) / np.median(raw_times) - 1), 2)}


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--task", default="push", help="Meta-World task without -v3 (default push)")
    parser.add_argument("--modes", nargs="+", default=["state", "images"], choices=["state", "images"])
    parser.add_argument("--size", type=int, default=224, help="image height and width")
    parser.add_argument("--episodes", type=int, default=None,
                        help="timed episodes per env (default: 5 state-only, 2 images)")
    parser.add_argument("--steps", type=int, default=200, help="steps per episode (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows = [bench(args.task, mode, args.size, args.episodes or (5 if mode == "state" else 2), args.steps, args.seed)
            for mode in args.modes]
    if args.json:
        import mujoco

        write_results(args.json, {"command": "python benchmarks/metaworld_speed.py " + " ".join(sys.argv[1:]),
                                  "mujoco": mujoco.__version__, "load_average_at_start": round(load, 2),
                                  "cpus": os.cpu_count(), "rows": rows})


if __name__ == "__main__":
    main()
