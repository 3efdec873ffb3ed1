"""Success of Meta-World's scripted policies through vla_gym, per task: the table in docs/metaworld.md, as data.

    python experiments/scripted_experts/measure_metaworld_experts.py               # 50 tasks x seeds 0-19 (1000 episodes)
    python experiments/scripted_experts/measure_metaworld_experts.py --tasks push pick-place --seeds 0-4 --out /tmp/mw.json
    python experiments/scripted_experts/measure_metaworld_experts.py --quick --out /tmp/mw.json   # 2 tasks x 2 seeds
    python experiments/scripted_experts/measure_metaworld_experts.py readme [--check]   # the study README's table

Each episode is ``VLA/MetaWorld-<task>-v0`` with ``obs_mode="state"`` (no camera is rendered), reset with the seed
(Meta-World's own seeded goal and object sampling), driven by the task's scripted policy (``expert_for``) until
Meta-World's success flag or its 500-step limit. Writes ``--out`` (default: ``metaworld_experts_mujoco<version>.json``
beside this script): the command, the versions (MuJoCo, metaworld), and per task the successes over the seeds and the
seeds that failed. Under another MuJoCo, run it with that environment's python (``experiments/mujoco_versions/measure.py``
makes such environments); each version writes its own file. When it writes into this folder, the summary table of
every version's file there is rendered into the study's README; ``readme`` renders it alone, ``readme --check`` only
compares (exit 1 when the README differs from the JSON files).
"""
from __future__ import annotations

import json
import pathlib
import sys
import time

from vla_gym.runtime.cli_args import add_ids, script_parser
from vla_gym.trainers.evaluation.stats import rate_with_interval
from vla_gym.trainers.runtime.results import render_block, write_results

HERE = pathlib.Path(__file__).resolve().parent
README = HERE / "README.md"


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


def version_key(path: pathlib.Path) -> tuple[int, ...]:
    return tuple(int(part) for part in path.stem.removeprefix("metaworld_experts_mujoco").split("."))


def table(paths: list[pathlib.Path]) -> str:
    """One line per MuJoCo version: episodes solved (95 % Wilson interval) and the tasks that missed any seed.

    >>> import tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = write_results(folder / "metaworld_experts_mujoco3.3.0.json", {"mujoco": "3.3.0", "metaworld": "3.1.1",
    ...     "seeds": [0, 1], "episodes": 4, "successes": 3, "tasks": [
    ...     {"task": "push", "episodes": 2, "successes": 2}, {"task": "reach", "episodes": 2, "successes": 1}]})
    >>> table(sorted(folder.glob("*.json"))).splitlines()[2]
    '| 3.3.0 | 3.1.1 | 2 | 3 / 4: 75.0 % [30.1, 95.4] | reach 1 / 2 |'
    """
    lines = ["| MuJoCo | metaworld | seeds per task | episodes solved [95 % CI] | tasks that missed a seed |",
             "|---|---|---:|---|---|"]
    for path in sorted(paths, key=version_key):
        data = json.loads(path.read_text())
        missed = ", ".join(f"{r['task']} {r['successes']} / {r['episodes']}" for r in data["tasks"]
                           if r["successes"] < r["episodes"])
        lines.append(f"| {data['mujoco']} | {data['metaworld']} | {len(data['seeds'])} | {data['successes']} / "
                     f"{data['episodes']}: {rate_with_interval(data['successes'], data['episodes'])} | {missed or '-'} |")
    return "\n".join(lines) + "\n"


def readme(argv: list[str]) -> int:
    """``readme [--check]``: the table of every ``metaworld_experts_mujoco*.json`` here into the study's README."""
    parser = script_parser(__doc__, prog="measure_metaworld_experts.py readme")
    parser.add_argument("--readme", default=str(README))
    parser.add_argument("--check", action="store_true", help="only compare: exit 1 when the README differs")
    args = parser.parse_args(argv)
    same = render_block(args.readme, "metaworld", table(list(HERE.glob("metaworld_experts_mujoco*.json"))),
                        check=args.check)
    if args.check and not same:
        print(f"{args.readme}'s Meta-World table differs from the JSON files beside it: run "
              "python experiments/scripted_experts/measure_metaworld_experts.py readme", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["readme"]:
        return readme(argv[1:])
    parser = script_parser(__doc__)
    parser.add_argument("--tasks", nargs="+", default=None, help="Meta-World task names (default: all 50)")
    add_ids(parser, "--seeds", "reset seeds of every task", default=list(range(20)))
    parser.add_argument("--quick", action="store_true", help="2 tasks x 2 seeds")
    parser.add_argument("--out", default=None, help="default: metaworld_experts_mujoco<version>.json beside this script")
    args = parser.parse_args(argv)
    from importlib.metadata import version

    import mujoco

    from vla_gym.tasks.metaworld import TASKS

    tasks, seeds = args.tasks or list(TASKS), args.seeds
    args.out = args.out or str(HERE / f"metaworld_experts_mujoco{mujoco.__version__}.json")
    if args.quick:
        tasks, seeds = tasks[:2], seeds[:2]
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        parser.error(f"unknown Meta-World tasks {unknown}; `vla-gym list --backend metaworld` lists them")
    rows = measure(tasks, seeds)
    solved, played = sum(r["successes"] for r in rows), sum(r["episodes"] for r in rows)
    write_results(args.out, {"command": "python experiments/scripted_experts/measure_metaworld_experts.py " + " ".join(
        argv), "mujoco": mujoco.__version__,
        "metaworld": version("metaworld"), "seeds": seeds,
        "episodes": played, "successes": solved, "tasks": rows})
    print(f"all: {solved}/{played} -> {args.out}")
    if pathlib.Path(args.out).resolve().parent == HERE and README.is_file():
        render_block(README, "metaworld", table(list(HERE.glob("metaworld_experts_mujoco*.json"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
