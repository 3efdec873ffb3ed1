"""Success of Meta-World's scripted policies through vla_gym, per task: the table in docs/metaworld.md, as data.

    python scripts/measure_metaworld_experts.py                              # 50 tasks x seeds 0-19 (1000 episodes)
    python scripts/measure_metaworld_experts.py --tasks push pick-place --seeds 0-4 --out /tmp/mw.json
    python scripts/measure_metaworld_experts.py --quick --out /tmp/mw.json   # short form: 2 tasks x 2 seeds

Each episode is ``VLA/MetaWorld-<task>-v0`` with ``obs_mode="state"`` (no camera is rendered), reset with the seed
(Meta-World's own seeded goal and object sampling), driven by the task's scripted policy (``expert_for``) until
Meta-World's success flag or its 500-step limit. Writes ``--out`` (``docs/results/metaworld_experts_mujoco<version>.json``): the
command, the versions (MuJoCo, metaworld), and per task the successes over the seeds and the seeds that failed.
Under another MuJoCo, run it with that environment's python (``scripts/measure_mujoco_versions.py`` makes such
environments) and another ``--out``.
"""
from __future__ import annotations

import sys
import time

from vla_gym.runtime.cli_args import add_ids, script_parser
from vla_gym.trainers.runtime.results import write_results


def solve(env_id: str, seed: int) -> tuple[bool, int]:
    """(success, steps) of the scripted policy on one seeded episode."""
    import gymnasium as gym

    from vla_gym.data.experts.dispatch import expert_for

    env = gym.make(env_id, obs_mode="state")
    try:
        env.reset(seed=seed)
        expert, steps = expert_for(env), 0
        while True:
            _, _, terminated, truncated, info = env.step(expert())
            steps += 1
            if terminated or truncated:
                return bool(info.get("success", terminated)), steps
    finally:
        env.close()


def measure(tasks: list[str], seeds: list[int]) -> list[dict]:
    from vla_gym.tasks.metaworld import env_id

    rows = []
    for task in tasks:
        started, outcomes = time.perf_counter(), [solve(env_id(task), seed) for seed in seeds]
        rows.append({"task": task, "episodes": len(seeds), "successes": sum(ok for ok, _ in outcomes),
                     "failed_seeds": [seed for seed, (ok, _) in zip(seeds, outcomes) if not ok],
                     "mean_steps_of_successes": round(sum(n for ok, n in outcomes if ok) /
                                                      max(1, sum(ok for ok, _ in outcomes)), 1)})
        print(f"[{time.perf_counter() - started:5.1f} s] {task}: {rows[-1]['successes']}/{len(seeds)}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--tasks", nargs="+", default=None, help="Meta-World task names (default: all 50)")
    add_ids(parser, "--seeds", "reset seeds of every task", default=list(range(20)))
    parser.add_argument("--quick", action="store_true", help="2 tasks x 2 seeds")
    parser.add_argument("--out", default=None, help="default: docs/results/metaworld_experts_mujoco<version>.json")
    args = parser.parse_args(argv)
    from importlib.metadata import version

    import mujoco

    from vla_gym.tasks.metaworld import TASKS

    tasks, seeds = args.tasks or list(TASKS), args.seeds
    args.out = args.out or f"docs/results/metaworld_experts_mujoco{mujoco.__version__}.json"
    if args.quick:
        tasks, seeds = tasks[:2], seeds[:2]
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        parser.error(f"unknown Meta-World tasks {unknown}; `vla-gym list --backend metaworld` lists them")
    rows = measure(tasks, seeds)
    solved, played = sum(r["successes"] for r in rows), sum(r["episodes"] for r in rows)
    write_results(args.out, {"command": "python scripts/measure_metaworld_experts.py " + " ".join(
        argv if argv is not None else sys.argv[1:]), "mujoco": mujoco.__version__,
        "metaworld": version("metaworld"), "seeds": seeds,
        "episodes": played, "successes": solved, "tasks": rows})
    print(f"all: {solved}/{played} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
