"""GRPO raises the success of a partly trained PPO policy on ManiSkill3 PushCube (state).

    python benchmarks/bench_grpo_maniskill.py                                  # PPO 4 min, GRPO 15 min, 2 evals
    python benchmarks/bench_grpo_maniskill.py --checkpoint runs/x/checkpoints/ckpt_00000040.pt
    python benchmarks/bench_grpo_maniskill.py --ppo-minutes 1 --grpo-minutes 1 --episodes 10   # a short run
    python benchmarks/bench_grpo_maniskill.py --quick                          # short form (CI), under a minute
    python benchmarks/bench_grpo_maniskill.py --plot docs/figures/grpo_maniskill_pushcube.png --json grpo.json

1. a partly trained policy: ``--checkpoint``, or PPO (examples/configs/maniskill_pushcube_ppo.yaml, 2 torchrun
   processes) stopped after ``--ppo-minutes``;
2. ``trainers/eval.py`` on it: ``--episodes`` fixed seeds, deterministic actions, 2 processes;
3. GRPO (examples/configs/maniskill_pushcube_grpo.yaml: groups of 8 episodes from one initial state, success as
   the score, no critic, KL to the initial policy) from that checkpoint for ``--grpo-minutes``, with an
   evaluation of 40 other seeds every 5 updates;
4. ``trainers/eval.py`` on GRPO's last checkpoint with the same seeds as step 2.

``--quick`` (CI: it runs and reports, nothing is claimed) runs the same four steps with the same entry points and
configs, each called in this process (``--in-process``: one interpreter, ManiSkill imported once, no torchrun) and
shrunk by overrides (``QUICK_PPO``, ``QUICK_GRPO``): 2 envs, two PPO updates, one GRPO update of one group of 2 with
one 2-episode evaluation, and 2 evaluation episodes before and after.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.evaluation.stats import rate_with_interval, success_counts

ROOT = pathlib.Path(__file__).resolve().parent.parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
#: --quick: the overrides that shrink each training run to a few seconds (after the script's own)
QUICK_PPO = ["env.num_envs=2", "ppo.n_steps=25", "ppo.batch_size=50", "ppo.n_epochs=1", "total_timesteps=100",
             "checkpoint.every=1"]
QUICK_GRPO = ["env.num_envs=2", "grpo.group_size=2", "grpo.groups_per_update=1", "grpo.batch_size=100",
              "grpo.n_epochs=1", "total_timesteps=1", "eval.every=1", "eval.episodes=2", "checkpoint.every=1"]


def run(command: list[str], in_process: bool = False) -> None:
    """``torchrun ... trainers/<name>.py ARGS``; ``in_process``: the same script's ``main(ARGS)`` in this process."""
    index = next(i for i, part in enumerate(command) if part.startswith("trainers/"))
    if not in_process:
        print("running:", " ".join(command[1:]), flush=True)
        subprocess.run(command, cwd=ROOT, check=True)
        return
    print("running in this process:", " ".join(command[index:]), flush=True)
    import importlib

    module = importlib.import_module("vla_gym.trainers." + pathlib.Path(command[index]).stem)
    code = module.main(command[index + 1:])
    if code:
        raise SystemExit(f"{command[index]} exited with {code}")


def evaluate(checkpoint: pathlib.Path, out: pathlib.Path, episodes: int, in_process: bool = False) -> dict:
    run([*TORCHRUN, "trainers/eval.py", "--checkpoint", str(checkpoint), "--out", str(out),
         "--episodes-per-task", str(episodes), "--num-envs", "2", "--seed", "500000"], in_process)
    return json.loads((out / "eval.json").read_text())["summary"]["overall"]


def eval_curve(run_dir: pathlib.Path) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    if "eval/success_rate" not in accumulator.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in accumulator.Scalars("eval/success_rate")]


def main(argv: list[str] | None = None) -> dict:
    parser = script_parser(__doc__)
    parser.add_argument("--checkpoint", help="start from this PPO checkpoint instead of training one")
    parser.add_argument("--ppo-minutes", type=float, default=4.0)
    parser.add_argument("--grpo-minutes", type=float, default=15.0)
    parser.add_argument("--episodes", type=int, default=100, help="evaluation episodes before and after")
    parser.add_argument("--workdir")
    parser.add_argument("--plot")
    parser.add_argument("--json")
    parser.add_argument("--in-process", action="store_true",
                        help="call each step's entry point in this process (one process) instead of under torchrun")
    parser.add_argument("--quick", action="store_true",
                        help="short form (CI): --in-process, tiny runs, 2 evaluation episodes; nothing is claimed")
    args = parser.parse_args(argv)
    if args.quick:
        args.in_process, args.episodes = True, 2
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="bench_grpo_"))
    if args.in_process:
        import torch

        torch.set_num_threads(1)  # as torchrun's OMP_NUM_THREADS=1 does for its ranks

    ppo_size, grpo_size = ((QUICK_PPO, QUICK_GRPO) if args.quick else
                           ([f"time_limit_s={args.ppo_minutes * 60}"], [f"time_limit_s={args.grpo_minutes * 60}"]))
    checkpoint = pathlib.Path(args.checkpoint) if args.checkpoint else None
    if checkpoint is None:
        run([*TORCHRUN, "trainers/ppo.py", "--config", "examples/configs/maniskill_pushcube_ppo.yaml",
             f"run_dir={workdir}", "name=ppo", *ppo_size, "eval.episodes=0", "checkpoint.resume=null",
             "logging.progress_bar=false"], args.in_process)
        checkpoint = max((workdir / "ppo" / "checkpoints").glob("ckpt_*.pt"))
    before = evaluate(checkpoint, workdir / "eval_before", args.episodes, args.in_process)

    run([*TORCHRUN, "trainers/grpo.py", "--config", "examples/configs/maniskill_pushcube_grpo.yaml",
         f"run_dir={workdir}", "name=grpo", f"grpo.init_checkpoint={checkpoint}", *grpo_size,
         "checkpoint.resume=null", "logging.progress_bar=false"], args.in_process)
    after_checkpoint = max((workdir / "grpo" / "checkpoints").glob("ckpt_*.pt"))
    after = evaluate(after_checkpoint, workdir / "eval_after", args.episodes, args.in_process)
    curve = eval_curve(workdir / "grpo")

    print(f"\n| PushCube, {before['episodes']} evaluation seeds (deterministic) | success rate [95 % CI] | "
          "mean return |")
    print("|---|---:|---:|")
    print(f"| PPO checkpoint ({checkpoint.name}) | {rate_with_interval(*(success_counts(before) or (0, 0)))} | "
          f"{before['mean_return']:.2f} |")
    grpo_run = "one quick update" if args.quick else f"{args.grpo_minutes:g} min"
    print(f"| + GRPO, {grpo_run} ({after_checkpoint.name}) | "
          f"{rate_with_interval(*(success_counts(after) or (0, 0)))} | {after['mean_return']:.2f} |")
    results = {"checkpoint": str(checkpoint), "before": before, "after": after, "grpo_eval_curve": curve,
               "workdir": str(workdir)}
    if args.plot and curve:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        steps, values = zip(*curve)
        ax.plot(steps, values, "o-", label="GRPO, evaluation every 5 updates (40 seeds)")
        ax.axhline(before["success_rate"], color="gray", ls="--", label=f"PPO checkpoint ({args.episodes} seeds)")
        ax.axhline(after["success_rate"], color="tab:green", ls=":", label=f"after GRPO ({args.episodes} seeds)")
        ax.set_xlabel("GRPO env steps")
        ax.set_ylabel("success rate")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title("GRPO from a partly trained PPO policy, PushCube")
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"curve: {args.plot}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
