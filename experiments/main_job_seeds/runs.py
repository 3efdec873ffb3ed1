"""Run the README's main job once per seed and record each run in this study's ``results.json``.

    python experiments/main_job_seeds/runs.py            # seeds 10-14: about 45 minutes on 2 idle cores
    python experiments/main_job_seeds/runs.py --seeds 0 --out /tmp/main_job.json total_timesteps=1600 eval.episodes=2
    python experiments/main_job_seeds/runs.py readme [--check]   # results.json's table into README.md (or compare)

Each run is the README's command as a user types it (``torchrun --nproc_per_node=2 trainers/ppo.py --config
examples/configs/maniskill_pushcube_ppo.yaml``) plus ``seed=S`` and its own run directory; ``key=value`` arguments
after the flags are passed on to every run. Recorded per run: ``seed``, ``final_success`` (the run's closing
evaluation: the config's 50 deterministic episodes on new seeds), ``wall_minutes`` (the whole command, start-up and
evaluations included), ``env_steps_per_s`` (training env steps over the training time, from the run's TensorBoard
``time/total_fps``), ``env_steps`` and ``commit``; the file also records ``eval_episodes``, the closing evaluation's
size. Wall times depend on the machine's load: run it on an otherwise idle machine. The file is replaced when every
run has finished, and when it is this study's ``results.json`` (the default ``--out``) the table in its README is
rendered again from it.

``readme`` renders that table alone: one line per run, the final success with its 95 % Wilson interval over the
evaluation episodes (``eval.episodes`` of the config, or of the recorded overrides); ``--check`` only compares
(exit 1 when the README differs from the JSON).

    >>> table({"overrides": ["eval.episodes=20"], "runs": [{"seed": 0, "final_success": 0.9, "wall_minutes": 5.62,
    ...        "env_steps_per_s": 565.6, "env_steps": 180000, "commit": "a3ff6e4"}]}).splitlines()[2]
    '| 0 | **0.90** [0.70, 0.97] | 5.6 | 566 | 180,000 | a3ff6e4 |'
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.evaluation.stats import wilson_interval
from vla_gym.trainers.runtime.results import git_commit, render_block, write_results

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONFIG = "examples/configs/maniskill_pushcube_ppo.yaml"
DEFAULT_OUT = HERE / "results.json"
README = HERE / "README.md"


def last_scalar(run: pathlib.Path, key: str) -> tuple[int, float] | None:
    """(step, value) of the last ``key`` scalar in the run's TensorBoard log."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    if key not in accumulator.Tags()["scalars"]:
        return None
    event = accumulator.Scalars(key)[-1]
    return event.step, event.value


def run_seed(seed: int, workdir: pathlib.Path, overrides: list[str]) -> dict:
    name = f"main_job_seed{seed}"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "trainers/ppo.py",
               "--config", CONFIG, f"seed={seed}", f"run_dir={workdir}", f"name={name}", "checkpoint.resume=null",
               "logging.progress_bar=false", *overrides]
    print("running:", " ".join(["torchrun", *command[3:]]), flush=True)
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    minutes = (time.perf_counter() - start) / 60
    run = workdir / name
    final = json.loads((run / "eval" / "eval.json").read_text())["summary"]["overall"]["success_rate"]
    fps = last_scalar(run, "time/total_fps")
    row = {"seed": seed, "final_success": final, "wall_minutes": round(minutes, 2),
           "env_steps_per_s": round(fps[1], 1) if fps else None, "env_steps": fps[0] if fps else None,
           "commit": git_commit()}
    print(json.dumps(row), flush=True)
    return row


def eval_episodes(overrides: list[str]) -> int:
    """The episodes of a run's closing evaluation: ``eval.episodes`` of the config, or the override's."""
    import yaml

    episodes = yaml.safe_load((ROOT / CONFIG).read_text())["eval"]["episodes"]
    for item in overrides:
        key, _, value = item.partition("=")
        if key == "eval.episodes":
            episodes = int(value)
    return int(episodes)


def table(data: dict) -> str:
    """The README's table: one line per recorded run, seed order."""
    episodes = data.get("eval_episodes") or eval_episodes(data.get("overrides", []))
    lines = [f"| seed | final success ({episodes} episodes) [95 % CI] | wall minutes | env steps/s | env steps | commit |",
             "|---:|---:|---:|---:|---:|---|"]
    for run in sorted(data["runs"], key=lambda r: r["seed"]):
        low, high = wilson_interval(round(run["final_success"] * episodes), episodes)
        fps = "-" if run.get("env_steps_per_s") is None else f"{run['env_steps_per_s']:.0f}"
        steps = "-" if run.get("env_steps") is None else f"{run['env_steps']:,}"
        lines.append(f"| {run['seed']} | **{run['final_success']:.2f}** [{low:.2f}, {high:.2f}] | "
                     f"{run['wall_minutes']:.1f} | {fps} | {steps} | {run['commit']} |")
    return "\n".join(lines) + "\n"


def readme(argv: list[str]) -> int:
    """``readme [--check]``: render ``results.json``'s table into the README (or only compare)."""
    parser = script_parser(__doc__, prog="runs.py readme")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the results JSON")
    parser.add_argument("--readme", default=str(README))
    parser.add_argument("--check", action="store_true", help="only compare: exit 1 when the README differs")
    args = parser.parse_args(argv)
    same = render_block(args.readme, "results", table(json.loads(pathlib.Path(args.out).read_text())),
                        check=args.check)
    if args.check and not same:
        print(f"{args.readme}'s results table differs from {args.out}: run "
              "python experiments/main_job_seeds/runs.py readme", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["readme"]:
        return readme(argv[1:])
    parser = script_parser(__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[10, 11, 12, 13, 14],
                        help="training seeds (default: five the config was not tuned on)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the JSON file to write")
    parser.add_argument("--workdir", default=None, help="run directories (default: a temporary directory)")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="passed on to every run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        workdir = pathlib.Path(args.workdir or scratch)
        rows = [run_seed(seed, workdir, args.overrides) for seed in args.seeds]
    out = pathlib.Path(args.out)
    data = {"command": f"torchrun --nproc_per_node=2 trainers/ppo.py --config {CONFIG} seed=S",
            "overrides": args.overrides, "eval_episodes": eval_episodes(args.overrides), "runs": rows}
    write_results(out, data)
    for row in rows:
        print(f"seed {row['seed']}: final success {row['final_success']:.2f}, {row['wall_minutes']:.1f} min, "
              f"{row['env_steps_per_s']} env steps/s")
    print(f"wrote {out}")
    if out.resolve() == DEFAULT_OUT:
        render_block(README, "results", table(data))
        print(f"rendered its table into {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
