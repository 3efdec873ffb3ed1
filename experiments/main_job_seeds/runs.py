"""Run the README's main job once per seed and record each run in ``docs/results/main_job.json``.

    python scripts/main_job_runs.py                                  # seeds 0 1 2, about 20 minutes on 2 idle cores
    python scripts/main_job_runs.py --seeds 0 --out /tmp/main_job.json total_timesteps=1600 eval.episodes=2   # short

Each run is the README's command as a user types it (``torchrun --nproc_per_node=2 trainers/ppo.py --config
examples/configs/maniskill_pushcube_ppo.yaml``) plus ``seed=S`` and its own run directory; ``key=value`` arguments
after the flags are passed on to every run. Recorded per run: ``seed``,
``final_success`` (the run's closing evaluation: 20 deterministic episodes on new seeds), ``wall_minutes`` (the
whole command, start-up and evaluations included), ``env_steps_per_s`` (training env steps over the training
time, from the run's TensorBoard ``time/total_fps``), ``env_steps`` and ``commit``. Wall times depend on the
machine's load: run it on an otherwise idle machine. The file is replaced when every run has finished.
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
from vla_gym.trainers.runtime.results import git_commit, write_results

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = "examples/configs/maniskill_pushcube_ppo.yaml"
DEFAULT_OUT = ROOT / "docs" / "results" / "main_job.json"


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


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the JSON file to write")
    parser.add_argument("--workdir", default=None, help="run directories (default: a temporary directory)")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="passed on to every run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        workdir = pathlib.Path(args.workdir or scratch)
        rows = [run_seed(seed, workdir, args.overrides) for seed in args.seeds]
    out = pathlib.Path(args.out)
    data = {"command": f"torchrun --nproc_per_node=2 trainers/ppo.py --config {CONFIG} seed=S",
            "overrides": args.overrides, "runs": rows}
    write_results(out, data)
    for row in rows:
        print(f"seed {row['seed']}: final success {row['final_success']:.2f}, {row['wall_minutes']:.1f} min, "
              f"{row['env_steps_per_s']} env steps/s")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
