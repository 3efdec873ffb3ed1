"""Success of the scripted LIBERO experts over every initial state of chosen suites / tasks.

    python experiments/scripted_experts/measure_libero_experts.py            # Object + Spatial, all 50 init states
    python experiments/scripted_experts/measure_libero_experts.py --quick    # 2 tasks x 2 init states per suite
    python experiments/scripted_experts/measure_libero_experts.py --suites libero_object --tasks 0 3 --workers 2
    python experiments/scripted_experts/measure_libero_experts.py --suites libero_goal --init-states 0-9   # with an expert

Each episode restores one of the task's fixed initial states, runs the expert (physics only: the
cameras are never rendered after the reset) until success or the suite's episode limit, and
records success and length. Episodes stream to ``<out>/episodes.jsonl`` as they finish (a rerun
with the same ``--out`` skips the episodes already there), and ``<out>/table.md`` /
``<out>/table.json`` hold the per-task success table, rewritten after every batch.
Work is split into batches of (task, a slice of init states), handed out round robin over the tasks
(a run stopped early still covers every task) to ``--workers`` spawned processes; each worker keeps
one env per suite across batches, so a scene is rebuilt only when a worker changes task.
"""
from __future__ import annotations

import json
import multiprocessing
import pathlib
import sys
import time

from vla_gym.runtime.cli_args import add_init_states, add_tasks, parser_with_examples
from vla_gym.trainers.evaluation.stats import rate_with_interval

ENV_IDS = {
    "libero_object": "VLA/LiberoObject-v0", "libero_spatial": "VLA/LiberoSpatial-v0",
    "libero_goal": "VLA/LiberoGoal-v0", "libero_10": "VLA/Libero10-v0", "libero_90": "VLA/Libero90-v0",
}
_ENVS: dict = {}  # per worker process: suite -> env


def run_batch(batch: tuple[str, int, list[int]]) -> list[dict]:
    """Run the expert on (suite, task index, init state ids) in this worker's env for the suite."""
    import gymnasium as gym

    import vla_gym  # noqa: F401  (registers the ids)
    from vla_gym.data.experts.libero import libero_expert

    suite, task_id, init_ids = batch
    if suite not in _ENVS:
        # one small camera: LIBERO needs one, and reset() renders it once; steps never render
        _ENVS[suite] = gym.make(ENV_IDS[suite], cameras=("main",), image_size=32)
    env = _ENVS[suite]
    base = env.unwrapped
    rows = []
    for init_id in init_ids:
        start = time.perf_counter()
        _, info = env.reset(seed=init_id, options={"task_id": task_id, "init_state_id": init_id})
        expert = libero_expert(env)
        success, steps, done = False, 0, False
        while not done:
            _, _, success, truncated, info = base.step(expert(), observe=False)
            steps += 1
            done = success or truncated
        rows.append({"suite": suite, "task_id": task_id, "task": info["task_name"], "init_state_id": init_id,
                     "success": bool(success), "steps": steps, "seconds": round(time.perf_counter() - start, 2)})
    return rows


def table(rows: list[dict]) -> tuple[str, dict]:
    """Markdown and JSON per-task success tables (with per-suite totals); each success with its 95 % Wilson
    interval."""
    tasks: dict[tuple[str, int], dict] = {}
    for row in rows:
        entry = tasks.setdefault((row["suite"], row["task_id"]), {
            "suite": row["suite"], "task_id": row["task_id"], "task": row["task"],
            "episodes": 0, "successes": 0, "steps_of_successes": 0})
        entry["episodes"] += 1
        entry["successes"] += row["success"]
        entry["steps_of_successes"] += row["steps"] if row["success"] else 0
    lines = ["| suite | task | episodes | success [95 % CI] | mean steps (successes) |", "|---|---|---|---|---|"]
    suites: dict[str, list[int]] = {}
    for key in sorted(tasks):
        entry = tasks[key]
        entry["success_rate"] = entry["successes"] / entry["episodes"]
        mean_steps = entry.pop("steps_of_successes") / max(entry["successes"], 1)
        entry["mean_steps_of_successes"] = round(mean_steps, 1)
        lines.append(f"| {entry['suite']} | {entry['task_id']}: {entry['task']} | {entry['episodes']} | "
                     f"{rate_with_interval(entry['successes'], entry['episodes'])} | {mean_steps:.0f} |")
        totals = suites.setdefault(entry["suite"], [0, 0])
        totals[0] += entry["episodes"]
        totals[1] += entry["successes"]
    for suite, (episodes, successes) in suites.items():
        lines.append(f"| **{suite}** | **all** | **{episodes}** | **{rate_with_interval(successes, episodes)}** | |")
    summary = {suite: {"episodes": e, "successes": s, "success_rate": s / e} for suite, (e, s) in suites.items()}
    return "\n".join(lines) + "\n", {"suites": summary, "tasks": list(tasks.values())}


def plan(args) -> list[tuple[str, int, list[int]]]:
    from vla_gym.data.experts.libero_tasks import SUPPORTED
    from vla_gym.tasks.libero import suite_tasks

    per_task = []
    for suite in args.suites:
        if suite not in ENV_IDS:
            raise SystemExit(f"unknown suite {suite!r}; choose from {list(ENV_IDS)}")
        tasks = suite_tasks(suite)
        # without --tasks: the suite's tasks that have an expert (LIBERO-Goal and LIBERO-90 have some)
        with_expert = [t.index for t in tasks if (suite, t.name) in SUPPORTED]
        task_ids = args.tasks if args.tasks is not None else with_expert[:2] if args.quick else with_expert
        for task_id in task_ids:
            if not 0 <= task_id < len(tasks):
                raise SystemExit(f"--tasks {task_id} is out of range: {suite} has {len(tasks)} tasks")
            if (suite, tasks[task_id].name) not in SUPPORTED:
                raise SystemExit(f"--tasks {task_id}: {suite}/{tasks[task_id].name} has no scripted expert; "
                                 f"leave out --tasks to run every task of {suite} that has one")
            ids = args.init_states or list(range(2 if args.quick else tasks[task_id].num_init_states))
            if ids[-1] >= tasks[task_id].num_init_states:
                raise SystemExit(f"--init-states: {suite} task {task_id} has init states 0-{tasks[task_id].num_init_states - 1}")
            per_task.append([(suite, task_id, ids[i:i + args.batch]) for i in range(0, len(ids), args.batch)])
    # round robin over tasks (each task's first slice, then each task's second, ...) so that a run
    # stopped early still covers every task
    rounds = max((len(slices) for slices in per_task), default=0)
    return [slices[r] for r in range(rounds) for slices in per_task if r < len(slices)]


def main(argv: list[str] | None = None) -> dict:
    parser = parser_with_examples(None, __doc__.split("\n\n")[0], [
        "python experiments/scripted_experts/measure_libero_experts.py --quick",
        "python experiments/scripted_experts/measure_libero_experts.py --suites libero_object --tasks 0 3 "
        "--init-states 0-9 --workers 2",
        "python experiments/scripted_experts/measure_libero_experts.py --workers 2 --batch 5 "
        "--out runs/libero_experts_full",
    ])
    parser.add_argument("--suites", nargs="+", default=["libero_object", "libero_spatial"])
    add_tasks(parser, "task ids within each suite (default: every task with an expert)")
    add_init_states(parser, "initial states of each task (default: all 50)")
    parser.add_argument("--quick", action="store_true", help="2 tasks x 2 init states per suite")
    parser.add_argument("--workers", type=int, default=2, help="processes, each with its own envs")
    parser.add_argument("--batch", type=int, default=10, help="init states per work item")
    parser.add_argument("--out", default="runs/libero_experts")
    args = parser.parse_args(argv)

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "episodes.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    done = {(r["suite"], r["task_id"], r["init_state_id"]) for r in rows}
    batches = [(s, t, [i for i in ids if (s, t, i) not in done]) for s, t, ids in plan(args)]
    batches = [b for b in batches if b[2]]
    planned = {(s, t, i) for s, t, ids in plan(args) for i in ids}
    print(f"{sum(len(b[2]) for b in batches)} episodes to run ({len(done)} already in {log}), "
          f"{args.workers} workers", flush=True)

    def write() -> dict:
        markdown, data = table([r for r in rows if (r["suite"], r["task_id"], r["init_state_id"]) in planned])
        data["command"] = "python experiments/scripted_experts/measure_libero_experts.py " + " ".join(
            argv if argv is not None else sys.argv[1:])
        (out / "table.md").write_text(markdown)
        (out / "table.json").write_text(json.dumps(data, indent=1) + "\n")
        return data

    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool, log.open("a") as sink:
        for batch_rows in pool.imap_unordered(run_batch, batches):
            for row in batch_rows:
                sink.write(json.dumps(row) + "\n")
            sink.flush()
            rows.extend(batch_rows)
            data = write()
            first = batch_rows[0]
            print(f"[{time.perf_counter() - start:7.0f} s] {first['suite']} task {first['task_id']}: "
                  f"{sum(r['success'] for r in batch_rows)}/{len(batch_rows)}", flush=True)
    data = write()
    print((out / "table.md").read_text())
    return data


if __name__ == "__main__":
    main()
