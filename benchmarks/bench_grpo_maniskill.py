"""GRPO raises the success of a partly trained PPO policy on ManiSkill3 PushCube (state).

    python benchmarks/bench_grpo_maniskill.py                                  # PPO 4 min, GRPO 15 min, 2 evals
    python benchmarks/bench_grpo_maniskill.py --checkpoint runs/x/checkpoints/ckpt_00000040.pt
    python benchmarks/bench_grpo_maniskill.py --ppo-minutes 1 --grpo-minutes 1 --episodes 10   # short form (CI)
    python benchmarks/bench_grpo_maniskill.py --plot docs/figures/grpo_maniskill_pushcube.png --json grpo.json

1. a partly trained policy: ``--checkpoint``, or PPO (examples/configs/maniskill_pushcube_ppo.yaml, 2 torchrun
   processes) stopped after ``--ppo-minutes``;
2. ``trainers/eval.py`` on it: ``--episodes`` fixed seeds, deterministic actions, 2 processes;
3. GRPO (examples/configs/maniskill_pushcube_grpo.yaml: groups of 8 episodes from one initial state, success as
   the score, no critic, KL to the initial policy) from that checkpoint for ``--grpo-minutes``, with an
   evaluation of 40 other seeds every 5 updates;
4. ``trainers/eval.py`` on GRPO's last checkpoint with the same seeds as step 2.
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


def run(command: list[str]) -> None:
    print("running:", " ".join(command[1:]), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)


def evaluate(checkpoint: pathlib.Path, out: pathlib.Path, episodes: int) -> dict:
    run([*TORCHRUN, "trainers/eval.py", "--checkpoint", str(checkpoint), "--out", str(out),
         "--episodes-per-task", str(episodes), "--num-envs", "2", "--seed", "500000"])
    return json.loads((out / "eval.json").read_text())["summary"]["overall"]


def eval_curve(run_dir: pathlib.Path) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    if "eval/success_rate" not in accumulator.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in accumulator.Scalars("eval/success_rate")]


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--checkpoint", help="start from this PPO checkpoint instead of training one")
    parser.add_argument("--ppo-minutes", type=float, default=4.0)
    parser.add_argument("--grpo-minutes", type=float, default=15.0)
    parser.add_argument("--episodes", type=int, default=100, help="evaluation episodes before and after")
    parser.add_argument("--workdir")
    parser.add_argument("--plot")
    parser.add_argument("--json")
    args = parser.parse_args()
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="bench_grpo_"))

    checkpoint = pathlib.Path(args.checkpoint) if args.checkpoint else None
    if checkpoint is None:
        run([*TORCHRUN, "trainers/ppo.py", "--config", "examples/configs/maniskill_pushcube_ppo.yaml",
             f"run_dir={workdir}", "name=ppo", f"time_limit_s={args.ppo_minutes * 60}", "eval.episodes=0",
             "checkpoint.resume=null", "logging.progress_bar=false"])
        checkpoint = max((workdir / "ppo" / "checkpoints").glob("ckpt_*.pt"))
    before = evaluate(checkpoint, workdir / "eval_before", args.episodes)

    run([*TORCHRUN, "trainers/grpo.py", "--config", "examples/configs/maniskill_pushcube_grpo.yaml",
         f"run_dir={workdir}", "name=grpo", f"grpo.init_checkpoint={checkpoint}", f"time_limit_s={args.grpo_minutes * 60}",
         "checkpoint.resume=null", "logging.progress_bar=false"])
    after_checkpoint = max((workdir / "grpo" / "checkpoints").glob("ckpt_*.pt"))
    after = evaluate(after_checkpoint, workdir / "eval_after", args.episodes)
    curve = eval_curve(workdir / "grpo")

    print(f"\n| PushCube, {before['episodes']} evaluation seeds (deterministic) | success rate [95 % CI] | "
          "mean return |")
    print("|---|---:|---:|")
    print(f"| PPO checkpoint ({checkpoint.name}) | {rate_with_interval(*(success_counts(before) or (0, 0)))} | "
          f"{before['mean_return']:.2f} |")
    print(f"| + GRPO, {args.grpo_minutes:g} min ({after_checkpoint.name}) | "
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


if __name__ == "__main__":
    main()
