"""The seeds' recipe in miniature, as the product's four commands: demos -> SFT -> GRPO -> evaluation, on a CPU.

    python examples/sft_then_rl.py --out runs/sft_then_rl          # PushCube, small pretrained VLA, ~30 min on 2 cores

This script only drives the commands a user would type (it prints each one before running it):

1. ``vla-gym demos ENV --episodes-per-task N --noise 0.3 ...``: a scripted expert that reads the simulator's
   privileged state records ``--demos`` episodes (DART noise on the executed actions, clean labels) into a LeRobot
   v3 dataset; the ones it solves are kept.
2. ``python trainers/sft.py --config examples/configs/maniskill_small_sft.yaml ...``: behaviour cloning of the small
   pretrained policy (EfficientNet-Lite0 + MiniLM, frozen; trained heads) from the main camera, proprioception and
   the instruction.
3. ``python trainers/eval.py --checkpoint .../sft/final.pt``: greedy success on ``--eval-episodes`` fixed seeds
   that no demo used (demos start at seed 10000).
4. ``python trainers/grpo.py --config examples/configs/maniskill_small_grpo.yaml grpo.init_checkpoint=.../final.pt``:
   GRPO (groups of episodes from one initial state, success as the score, no critic) from the SFT weights. The RL
   reward is ``--reward-mode`` (``sparse`` by default: the objective is the success the table reports).
5. ``trainers/eval.py`` again on the GRPO checkpoint, same seeds.

``{out}/results.md`` holds the before/after table, ``{out}/results.json`` the numbers and ``{out}/curve.png`` GRPO's
training curve (from its TensorBoard log). Stages are cached in ``--out``: the demos resume, SFT is skipped once
``sft/final.pt`` exists, evaluations once their ``eval.json`` exists, and GRPO resumes from its last checkpoint.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pathlib
import shlex
import time

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.evaluation.stats import rate_with_interval, success_counts

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIGS = pathlib.Path("examples/configs")  # commands run in the repository root


def parse_args(argv=None) -> argparse.Namespace:
    parser = script_parser(__doc__)
    parser.add_argument("--env", default="VLA/ManiSkill-PushCube-v0")
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--demos", type=int, default=34, help="expert episodes attempted (the solved ones are kept)")
    parser.add_argument("--noise", type=float, default=0.3, help="DART noise on the executed expert actions")
    parser.add_argument("--workers", type=int, default=1, help="processes recording demos")
    parser.add_argument("--bc-epochs", type=int, default=60)
    parser.add_argument("--eval-episodes", type=int, default=40)
    parser.add_argument("--reward-mode", default="sparse", help="the env's reward during RL (sparse: success)")
    parser.add_argument("--rl-steps", type=int, default=8000, help="environment steps of RL")
    parser.add_argument("--rl-minutes", type=float, default=None, help="stop RL after this wall-clock time")
    parser.add_argument("--group-size", type=int, default=4, help="GRPO: episodes per initial state")
    parser.add_argument("--groups", type=int, default=4, help="GRPO: groups (initial states) per update")
    parser.add_argument("--lr", type=float, default=5e-5, help="RL learning rate (Adam moves the small heads fast)")
    parser.add_argument("--num-envs", type=int, default=2, help="envs, each in its own worker process")
    parser.add_argument("--max-episode-steps", type=int, default=None,
                        help="cut SFT's, GRPO's and the evaluations' episodes to this many steps (a short form; the "
                             "demos keep the whole episodes the expert needs)")
    parser.add_argument("--log-std", type=float, default=-1.6, help="exploration noise (log std) for RL")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/sft_then_rl")
    return parser.parse_args(argv)


def commands(args: argparse.Namespace, out: pathlib.Path) -> dict[str, list[str]]:
    """The product commands of each stage (argv as a user types them; ``python`` is this interpreter)."""
    size = args.image_size
    vectorization = "async" if args.num_envs > 1 else "sync"  # one env: no worker process to start
    same_env_and_policy = [f"env.id={args.env}", f"env.kwargs.image_size={size}", "policy.kwargs.image_size=null",
                           f"seed={args.seed}", f"run_dir={out}", "checkpoint.resume=auto",
                           *([f"env.kwargs.max_episode_steps={args.max_episode_steps}"] if args.max_episode_steps else [])]
    evaluate = ["python", "trainers/eval.py", "--episodes-per-task", str(args.eval_episodes), "--num-envs",
                str(args.num_envs), f"env.vectorization={vectorization}", "env.kwargs.reward_mode=normalized_dense"]
    return {
        "demos": ["vla-gym", "demos", args.env, "--episodes-per-task", str(args.demos), "--noise", str(args.noise),
                  "--cameras", "main", "--image-size", str(size), "--seed", str(10_000 + args.seed),
                  "--workers", str(args.workers), "--out", str(out / "demos")],
        "sft": ["python", "trainers/sft.py", "--config", str(CONFIGS / "maniskill_small_sft.yaml"), "name=sft",
                f"sft.dataset={out / 'demos'}", f"sft.epochs={args.bc_epochs}", "eval.episodes=0",
                f"policy.kwargs.log_std_init={args.log_std}", *same_env_and_policy],
        "eval_sft": [*evaluate, "--checkpoint", str(out / "sft" / "final.pt"), "--out", str(out / "eval_sft")],
        "grpo": ["python", "trainers/grpo.py", "--config", str(CONFIGS / "maniskill_small_grpo.yaml"), "name=grpo",
                 f"grpo.init_checkpoint={out / 'sft' / 'final.pt'}", f"total_timesteps={args.rl_steps}",
                 f"time_limit_s={'null' if args.rl_minutes is None else args.rl_minutes * 60}",
                 f"env.num_envs={args.num_envs}", f"env.vectorization={vectorization}",
                 f"env.kwargs.reward_mode={args.reward_mode}", f"grpo.group_size={args.group_size}",
                 f"grpo.groups_per_update={args.groups}", f"grpo.learning_rate={args.lr}", "grpo.n_epochs=4",
                 "grpo.batch_size=128", "grpo.target_kl=0.03", "grpo.filter_uniform_groups=true",
                 "checkpoint.every=1", "eval.episodes=0", *same_env_and_policy],
        "eval_grpo": [*evaluate, "--out", str(out / "eval_grpo")],  # --checkpoint added once GRPO has run
    }


#: each command's entry point: ``main(argv)`` of the module the command line runs
ENTRY_POINTS = {"vla-gym": "vla_gym.cli", "trainers/sft.py": "vla_gym.trainers.sft",
                "trainers/grpo.py": "vla_gym.trainers.grpo", "trainers/eval.py": "vla_gym.trainers.eval"}


def run(argv: list[str]) -> float:
    """Print one command and run it: its entry point's ``main(argv)`` in this process (what the command line runs,
    without a new interpreter, torch import and model load per command); returns its wall-clock seconds."""
    print("$ " + " ".join(shlex.quote(a) for a in argv), flush=True)
    command, args = (argv[0], argv[1:]) if argv[0] == "vla-gym" else (argv[1], argv[2:])
    t0 = time.perf_counter()
    code = importlib.import_module(ENTRY_POINTS[command]).main(args)
    if code:
        raise SystemExit(f"`{' '.join(argv)}` failed with exit code {code}")
    return time.perf_counter() - t0


def overall(eval_dir: pathlib.Path) -> dict:
    return json.loads((eval_dir / "eval.json").read_text())["summary"]["overall"]


def grpo_curve(run_dir: pathlib.Path) -> list[dict]:
    """GRPO's per-update scalars from its TensorBoard log: [{"steps", "env/success_once", "env/return",
    "time/elapsed_s"}] (the tags the log has)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    rows: dict[int, dict] = {}
    for tag in ("env/success_once", "env/return", "time/elapsed_s"):
        if tag in events.Tags().get("scalars", []):
            for event in events.Scalars(tag):
                rows.setdefault(event.step, {"steps": event.step})[tag] = event.value
    return [rows[step] for step in sorted(rows)]


def plot_curve(curve: list[dict], before: dict, after: dict, path: pathlib.Path, method: str = "GRPO",
               label: str | None = None) -> None:
    """``curve``'s ``env/success_once`` against env steps (``label`` names it: by default each round's sampled
    rollouts), with the greedy evaluations before and after RL as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    steps = [row["steps"] for row in curve if "env/success_once" in row]
    success = [row["env/success_once"] for row in curve if "env/success_once" in row]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, success, marker="o", alpha=0.5, label=label or f"{method}: success of each round's sampled rollouts")
    window = min(4, len(success))
    if 1 < window < len(success):  # a mean of more than one point
        smooth = np.convolve(success, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1:], smooth, color="tab:blue", linewidth=2.5, label=f"mean of the last {window} rounds")
    ax.axhline(before["success_rate"], color="gray", linestyle="--", label="eval after SFT (greedy)")
    ax.axhline(after["success_rate"], color="green", linestyle="--", label=f"eval after SFT+{method} (greedy)")
    ax.set_xlabel("RL environment steps")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)  # the commands name configs relative to the repository root, as typed there
    stages = commands(args, out)
    timings = {"demos_s": run(stages["demos"])}
    demos = json.loads((out / "demos" / "meta" / "vla_gym_demos.json").read_text())
    print(f"demos: {demos['episodes']} of {demos['attempts']} episodes solved, {demos['frames']} frames", flush=True)
    if not (out / "sft" / "final.pt").exists():
        timings["sft_s"] = run(stages["sft"])
    if not (out / "eval_sft" / "eval.json").exists():
        timings["eval_sft_s"] = run(stages["eval_sft"])
    before = overall(out / "eval_sft")
    print(f"after SFT: {before}", flush=True)
    timings["grpo_s"] = run(stages["grpo"])
    checkpoint = sorted((out / "grpo" / "checkpoints").glob("ckpt_*.pt"))[-1]
    evaluated = out / "eval_grpo" / "checkpoint.txt"  # which GRPO checkpoint eval_grpo/ holds
    if not evaluated.exists() or evaluated.read_text() != str(checkpoint):
        timings["eval_grpo_s"] = run([*stages["eval_grpo"], "--checkpoint", str(checkpoint)])
        evaluated.write_text(str(checkpoint))
    after = overall(out / "eval_grpo")
    print(f"after SFT + GRPO: {after}", flush=True)

    curve = grpo_curve(out / "grpo")
    rl_steps = curve[-1]["steps"] if curve else 0
    results = {"args": vars(args), "commands": {k: " ".join(map(shlex.quote, v)) for k, v in stages.items()},
               "demos": {"episodes": demos["episodes"], "attempts": demos["attempts"], "frames": demos["frames"]},
               "after_sft": before, "after_rl": after, "grpo_checkpoint": str(checkpoint), "curve": curve,
               "timings_s": timings}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    # each success with its 95 % Wilson interval (n/a: the env reports no success)
    success = {name: rate_with_interval(*(success_counts(stats) or (0, 0))) for name, stats in
               (("sft", before), ("rl", after))}
    table = (
        f"| {args.env} ({before['episodes']} fixed seeds, greedy) | success [95 % CI] | return | length |\n"
        "|---|---|---|---|\n"
        f"| SFT ({demos['episodes']} demos, {demos['frames']} steps) | {success['sft']} | "
        f"{before['mean_return']:.2f} | {before['mean_length']:.1f} |\n"
        f"| SFT + GRPO ({rl_steps} env steps) | {success['rl']} | {after['mean_return']:.2f} | "
        f"{after['mean_length']:.1f} |\n"
    )
    (out / "results.md").write_text(table)
    plot_curve(curve, before, after, out / "curve.png")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
