"""The Meta-World MT10 SFT -> RL table: evaluate both checkpoints on training and held-out goals, write the rows
to this study's results.json, and print the table (or render it into the study's README).

    nice -n 19 python experiments/metaworld_mt10/table.py measure --seed 0 --method ppo \
        --sft-checkpoint runs/metaworld_rl/sft/final.pt --rl-run runs/metaworld_rl/ppo \
        --train-goals 0-39 --heldout-goals 40-49 --modes greedy sampled --num-envs 2 \
        --evals runs/metaworld_rl/evals --export-dir experiments/metaworld_mt10/models
    python experiments/metaworld_mt10/table.py measure --seed 0 --method grpo --modes sampled --num-envs 4 \
        --sft-checkpoint experiments/metaworld_mt10/models/metaworld_mt10_seed0_sft.pt \
        --rl-checkpoint experiments/metaworld_mt10/models/metaworld_mt10_seed0_grpo.pt --evals runs/metaworld_rl/evals
    python experiments/metaworld_mt10/table.py table              # the Markdown table
    python experiments/metaworld_mt10/table.py readme [--check]   # ... into the study's README (or compare)

The second form measures committed models again (here in the sampled mode) on a machine without their run: the
RL budget (env steps, wall minutes) is taken from their rows already in the results.

Goals are the init states of ``fixed_goals=50`` (init state i: the object and goal positions Meta-World draws
from ``env.seed(i)``; docs/metaworld.md). ``measure`` runs ``trainers/eval.py --init-states GOALS`` on the SFT
and the RL checkpoint for each split (train, heldout) and mode (greedy: the Gaussian's mean; sampled: each
checkpoint's own std) into ``--evals``, then adds one row per (split, mode), in the row format of the LIBERO
miniature study's results.json: suite ``mt10``, seed, method, split, mode, ``init_states`` (the goal ids),
episodes, ``sft`` and ``rl`` success, the RL run's env steps and wall minutes, the commit (``-dirty`` when the
checkout had uncommitted changes) and the checkpoints. A row with the same (suite, seed, method, variant, split,
mode) replaces the old one. Reports already finished in ``--evals`` (same checkpoint and mode) are kept: a stopped
``measure`` resumes. When ``--out`` is this study's results.json, ``measure`` renders the README's table again;
``readme --check`` only compares it with the JSON (exit 1 when they differ).

    >>> goal_range("40-49")
    [40, 41, 42, 43, 44, 45, 46, 47, 48, 49]
    >>> table({"rows": [{"suite": "mt10", "seed": 0, "method": "grpo", "split": "train", "mode": "greedy",
    ...                  "episodes": 400, "sft": 0.6375, "rl": 0.645, "env_steps": 531933, "wall_minutes": 18.4}]
    ...        }).splitlines()[2]
    '| mt10 | 0 | grpo | train | greedy | 400 | 63.7 % [58.9, 68.3] | 64.5 % [59.7, 69.0] | +0.8 | 531,933 | 18 |'
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

from vla_gym.runtime.cli_args import parse_ids, script_parser
from vla_gym.runtime.receipt import source_revision
from vla_gym.trainers.evaluation.stats import wilson_interval
from vla_gym.trainers.runtime.results import git_commit, render_block, repo_relative, write_results

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results.json"
README = HERE / "README.md"
SUITE = "mt10"
SPLITS = ("train", "heldout")
MODES = ("greedy", "sampled")
KEY = ("suite", "seed", "method", "variant", "split", "mode")


def load(path: pathlib.Path = RESULTS) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"rows": []}


def key(row: dict) -> tuple:
    return tuple(row.get(k, "") for k in KEY)


def read_eval(directory: pathlib.Path) -> tuple[float, list[tuple], int]:
    """(success rate, the played (task, init state, seed) list, episodes) of a trainers/eval.py report."""
    data = json.loads((directory / "eval.json").read_text())
    played = sorted((e["spec"]["task_id"], e["spec"]["init_state_id"], e["spec"]["seed"]) for e in data["episodes"])
    return float(data["summary"]["overall"]["success_rate"]), played, len(played)


def rl_checkpoints(run: pathlib.Path) -> list[pathlib.Path]:
    """A PPO or GRPO run's checkpoints, oldest first."""
    return sorted((run / "checkpoints").glob("ckpt_*.pt"))


def chunk_size(config: dict) -> int:
    """K of the run's ActionChunk wrapper (1 without one)."""
    for spec in config["env"].get("wrappers") or []:
        if isinstance(spec, dict) and spec.get("name") == "ActionChunk":
            return int(spec.get("kwargs", {}).get("chunk_size", 1))
    return 1


def run_budget(run: pathlib.Path, checkpoint: str) -> tuple[int, float]:
    """(env steps, wall minutes) of a training run up to ``checkpoint``: the checkpoint's counter and the sum over
    resumed segments of TensorBoard's ``time/elapsed_s`` (it restarts at each resume) logged at or before that many
    env steps."""
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    timesteps = int(state["counters"]["num_timesteps"])
    accumulator = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    values = [event.value for event in accumulator.Scalars("time/elapsed_s") if event.step <= timesteps]
    # PPO counts decisions (vector steps of an ActionChunk env), GRPO counts env steps: K env steps per decision
    env_steps = timesteps * chunk_size(state["config"]) if state.get("algo") == "ppo" else timesteps
    total, last = 0.0, 0.0
    for value in values:
        if value < last:  # a resume started a new segment
            total += last
        last = value
    return env_steps, round((total + last) / 60.0, 1)


def percent_interval(rate: float, episodes: int) -> str:
    """``63.7 % [58.9, 68.3]``: the rate and its 95 % Wilson interval, in percent."""
    low, high = wilson_interval(round(rate * episodes), episodes)
    return f"{100 * rate:.1f} % [{100 * low:.1f}, {100 * high:.1f}]"


def table(data: dict) -> str:
    """One line per row: SFT -> RL success (95 % Wilson intervals), the change in points, the RL budget."""
    lines = ["| suite | seed | method | split | mode | episodes | SFT | RL | change | env steps | minutes |",
             "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in data["rows"]:
        method = f"{r['method']} {r['variant']}" if r.get("variant") else r["method"]
        lines.append(f"| {r['suite']} | {r['seed']} | {method} | {r['split']} | {r['mode']} | {r['episodes']} | "
                     f"{percent_interval(r['sft'], r['episodes'])} | {percent_interval(r['rl'], r['episodes'])} | "
                     f"{100 * (r['rl'] - r['sft']):+.1f} | {r['env_steps']:,} | {r['wall_minutes']:.0f} |")
    return "\n".join(lines) + "\n"


def goal_range(text: str) -> list[int]:
    """``"0-39"`` -> the goal ids (one contiguous range: ``trainers/eval.py --init-states`` takes one)."""
    try:
        goals = parse_ids(text)
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"goals {text!r}: {exc}") from None
    if not goals or goals != list(range(goals[0], goals[-1] + 1)):
        raise SystemExit(f"goals {text!r}: give one contiguous range, e.g. 40-49")
    return goals


def commit() -> str:
    """The checked-out commit, ``-dirty`` when tracked files differ from it (the receipts' own check)."""
    return git_commit() + ("-dirty" if source_revision()["dirty"] else "")


def finished(out: pathlib.Path, checkpoint: str, mode: str, env_kwargs: dict) -> bool:
    """Whether ``out`` holds a finished report of ``checkpoint`` in ``mode`` with these env.kwargs overrides (a
    rerun keeps it: resume)."""
    if not (out / "eval.json").is_file():
        return False
    report = json.loads((out / "eval.json").read_text())
    settings, kwargs = report.get("settings", {}), report.get("receipt", {}).get("env", {}).get("kwargs", {})
    return (pathlib.Path(settings.get("checkpoint", "")).resolve() == pathlib.Path(checkpoint).resolve()
            and settings.get("deterministic") == (mode == "greedy")
            and all(kwargs.get(key) == value for key, value in env_kwargs.items()))


def evaluate(checkpoint: str, goals: list[int], mode: str, out: pathlib.Path, num_envs: int,
             overrides: list[str]) -> pathlib.Path:
    """``trainers/eval.py`` on ``goals`` of every task into ``out``; returns ``out`` (its eval.json is the report).
    A finished report of the same checkpoint and mode there is kept (its goals are checked by :func:`make_row`)."""
    import yaml

    env_kwargs = {key.removeprefix("env.kwargs."): yaml.safe_load(value)
                  for key, _, value in (item.partition("=") for item in overrides)}
    if finished(out, checkpoint, mode, env_kwargs):
        print(f"{out.name}: kept (finished before)", flush=True)
        return out
    command = [sys.executable, "trainers/eval.py", "--checkpoint", checkpoint, "--init-states",
               f"{goals[0]}-{goals[-1]}", "--num-envs", str(num_envs), "--out", str(out),
               *(["--stochastic"] if mode == "sampled" else []), *overrides]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    overall = [line for line in result.stdout.splitlines() if line.startswith("| **all**")]
    print(f"{out.name}: {overall[0] if overall else result.stdout.strip().splitlines()[-1]}", flush=True)
    return out


def make_row(args, split: str, mode: str, goals: list[int], sft_eval: pathlib.Path, rl_eval: pathlib.Path,
             checkpoints: tuple[str, str], budget: tuple[int, float]) -> dict:
    """One table row from two eval reports of the same episodes (refused otherwise)."""
    sft, sft_played, episodes = read_eval(sft_eval)
    rl, rl_played, _ = read_eval(rl_eval)
    if sft_played != rl_played:
        raise SystemExit(f"{sft_eval} and {rl_eval} played different episodes")
    played_goals = sorted({init for _, init, _ in sft_played if init is not None})
    if played_goals != goals:
        raise SystemExit(f"{sft_eval} played goals {played_goals}, not {goals}: is fixed_goals set in the "
                         "checkpoint's env.kwargs?")
    return {
        "suite": SUITE, "seed": args.seed, "method": args.method, "variant": args.variant, "split": split,
        "mode": mode, "init_states": goals, "episodes": episodes, "sft": round(sft, 4), "rl": round(rl, 4),
        "env_steps": budget[0], "wall_minutes": budget[1], "commit": commit(),
        "sft_checkpoint": repo_relative(checkpoints[0]), "rl_checkpoint": repo_relative(checkpoints[1]),
    }


def recorded_budget(path: pathlib.Path, args) -> tuple[int, float]:
    """(env steps, wall minutes) of the RL run behind a row already in ``path`` with this suite, seed, method and
    variant: a committed model (``--rl-checkpoint`` without ``--rl-run``) measured again in another mode, on a
    machine that does not hold its run."""
    rows = [row for row in load(path)["rows"]
            if (row["suite"], row["seed"], row["method"], row.get("variant", "")) == (SUITE, args.seed, args.method, args.variant)]
    if not args.rl_checkpoint or not rows:
        raise SystemExit(f"give --rl-run (the RL run directory), or --rl-checkpoint of a model whose (seed {args.seed}, "
                         f"{args.method}{' ' + args.variant if args.variant else ''}) rows are already in {path}")
    return rows[0]["env_steps"], rows[0]["wall_minutes"]


def measure(args) -> list[dict]:
    """Evaluate, then add the rows to ``args.out`` (module docstring); returns the new rows."""
    path = pathlib.Path(args.out)
    if args.rl_run:
        run = pathlib.Path(args.rl_run)
        rl_checkpoint = args.rl_checkpoint or (str(rl_checkpoints(run)[-1]) if rl_checkpoints(run) else None)
        if rl_checkpoint is None:
            raise SystemExit(f"--rl-run {run}: no checkpoints/ckpt_*.pt")
        budget = run_budget(run, rl_checkpoint)
    else:
        rl_checkpoint, budget = args.rl_checkpoint, recorded_budget(path, args)
    splits = {"train": goal_range(args.train_goals), "heldout": goal_range(args.heldout_goals)}
    if set(splits["train"]) & set(splits["heldout"]):
        raise SystemExit("--train-goals and --heldout-goals overlap")
    evals = pathlib.Path(args.evals)
    overrides = [f"env.kwargs.{item}" for item in args.env_kwarg]
    new = []
    for split, goals in splits.items():
        for mode in args.modes:
            stem = f"s{args.seed}_{split}_{mode}"
            sft_eval = evaluate(args.sft_checkpoint, goals, mode, evals / f"sft_{stem}", args.num_envs, overrides)
            rl_eval = evaluate(rl_checkpoint, goals, mode, evals / f"{args.method}{args.variant}_{stem}",
                               args.num_envs, overrides)
            new.append(make_row(args, split, mode, goals, sft_eval, rl_eval, (args.sft_checkpoint, rl_checkpoint),
                                budget))
    if args.export_dir:  # the models themselves, trained parameters only, beside the results
        from vla_gym.trainers.runtime.checkpoint import export_policy

        stem = f"metaworld_{SUITE}_seed{args.seed}"
        sft_copy = export_policy(args.sft_checkpoint, args.export_dir, f"{stem}_sft.pt")
        rl_name = f"{stem}_{args.method}{'_' + args.variant if args.variant else ''}.pt"
        rl_copy = export_policy(rl_checkpoint, args.export_dir, rl_name)
        for row in new:
            row["sft_checkpoint"], row["rl_checkpoint"] = repo_relative(str(sft_copy)), repo_relative(str(rl_copy))
    data = load(path)
    keys = {key(row) for row in new}
    data["rows"] = sorted([r for r in data["rows"] if key(r) not in keys] + new,
                          key=lambda r: tuple(str(part) for part in key(r)))
    write_results(path, data)
    return new


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    measuring = sub.add_parser("measure", help="evaluate an SFT and an RL checkpoint and add their rows")
    measuring.add_argument("--seed", type=int, required=True, help="the training seed (of SFT and RL)")
    measuring.add_argument("--method", required=True, choices=("ppo", "grpo"))
    measuring.add_argument("--variant", default="", help="the RL config's version, for rows side by side")
    measuring.add_argument("--sft-checkpoint", required=True)
    measuring.add_argument("--rl-run", help="the RL run directory (checkpoints/, tensorboard/); without it, "
                                            "--rl-checkpoint's budget is the one its rows in --out record")
    measuring.add_argument("--rl-checkpoint", help="default: the run's newest checkpoint")
    measuring.add_argument("--train-goals", default="0-39", help="goals (init states) RL trained on")
    measuring.add_argument("--heldout-goals", default="40-49", help="goals no demo and no RL episode used")
    measuring.add_argument("--modes", nargs="+", choices=MODES, default=["greedy"])
    measuring.add_argument("--num-envs", type=int, default=2, help="trainers/eval.py --num-envs")
    measuring.add_argument("--evals", required=True, help="directory for the eval reports (one per checkpoint, "
                                                          "split and mode)")
    measuring.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE",
                           help="an env.kwargs override for the evaluations (e.g. max_episode_steps=20 for a "
                                "short form), repeatable")
    measuring.add_argument("--export-dir", help="also save both models there, trained parameters only, and point "
                                                "the rows at those copies, e.g. experiments/metaworld_mt10/models")
    measuring.add_argument("--out", default=str(RESULTS))
    showing = sub.add_parser("table", help="print the Markdown table")
    showing.add_argument("--out", default=str(RESULTS))
    rendering = sub.add_parser("readme", help="write the table into the study's README (--check: only compare)")
    rendering.add_argument("--out", default=str(RESULTS))
    rendering.add_argument("--readme", default=str(README))
    rendering.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    data_path = pathlib.Path(args.out)
    if args.command == "readme":
        same = render_block(args.readme, "results", table(load(data_path)), check=args.check)
        if args.check and not same:
            print(f"{args.readme}'s results table differs from {args.out}: run "
                  "python experiments/metaworld_mt10/table.py readme", file=sys.stderr)
            return 1
        return 0
    if args.command == "measure":
        for row in measure(args):
            print(json.dumps(row))
        if data_path.resolve() == RESULTS:
            render_block(README, "results", table(load(data_path)))
    print(table(load(data_path)), end="")
    return 0

if __name__ == "__main__":
    sys.exit(main())
