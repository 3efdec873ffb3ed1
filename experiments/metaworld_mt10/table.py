"""The Meta-World MT10 SFT -> RL table: evaluate both checkpoints on training and held-out goals, write the rows
to docs/results/metaworld_rl.json, and print the table.

    nice -n 19 python scripts/metaworld_rl_table.py measure --seed 0 --method ppo \
        --sft-checkpoint runs/metaworld_rl/sft/final.pt --rl-run runs/metaworld_rl/ppo \
        --train-goals 0-39 --heldout-goals 40-49 --modes greedy sampled --num-envs 2 \
        --evals runs/metaworld_rl/evals --export-dir docs/results/checkpoints
    python scripts/metaworld_rl_table.py measure --seed 0 --method grpo --modes sampled --num-envs 4 \
        --sft-checkpoint docs/results/checkpoints/metaworld_mt10_seed0_sft.pt \
        --rl-checkpoint docs/results/checkpoints/metaworld_mt10_seed0_grpo.pt --evals runs/metaworld_rl/evals
    python scripts/metaworld_rl_table.py table          # the Markdown table docs/metaworld.md shows

The second form measures committed models again (here in the sampled mode) on a machine without their run: the
RL budget (env steps, wall minutes) is taken from their rows already in the results.

Goals are the init states of ``fixed_goals=50`` (init state i: the object and goal positions Meta-World draws
from ``env.seed(i)``; docs/metaworld.md). ``measure`` runs ``trainers/eval.py --init-states GOALS`` on the SFT
and the RL checkpoint for each split (train, heldout) and mode (greedy: the Gaussian's mean; sampled: each
checkpoint's own std) into ``--evals``, then adds one row per (split, mode) in the row format of
docs/results/libero_rl.json (scripts/libero_rl_table.py, whose helpers this reuses): suite ``mt10``, seed,
method, split, mode, ``init_states`` (the goal ids), episodes, ``sft`` and ``rl`` success, the RL run's env
steps and wall minutes, the commit (``-dirty`` when the checkout had uncommitted changes) and the
checkpoints. A row with the same (suite, seed, method, variant, split, mode) replaces the old one. Reports
already finished in ``--evals`` (same checkpoint and mode) are kept: a stopped ``measure`` resumes.

    >>> goal_range("40-49")
    [40, 41, 42, 43, 44, 45, 46, 47, 48, 49]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # the LIBERO table's helpers, by import

import libero_rl_table as libero_table  # noqa: E402

from vla_gym.runtime.cli_args import parse_ids, script_parser  # noqa: E402
from vla_gym.runtime.receipt import source_revision  # noqa: E402
from vla_gym.trainers.runtime.results import git_commit, write_results  # noqa: E402

ROOT = libero_table.ROOT
RESULTS = ROOT / "docs" / "results" / "metaworld_rl.json"
SUITE = "mt10"
SPLITS = ("train", "heldout")
MODES = ("greedy", "sampled")


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
    sft, sft_played, episodes = libero_table.read_eval(sft_eval)
    rl, rl_played, _ = libero_table.read_eval(rl_eval)
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
        "sft_checkpoint": libero_table.relative(checkpoints[0]), "rl_checkpoint": libero_table.relative(checkpoints[1]),
    }


def recorded_budget(path: pathlib.Path, args) -> tuple[int, float]:
    """(env steps, wall minutes) of the RL run behind a row already in ``path`` with this suite, seed, method and
    variant: a committed model (``--rl-checkpoint`` without ``--rl-run``) measured again in another mode, on a
    machine that does not hold its run."""
    rows = [row for row in libero_table.load(path)["rows"]
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
        rl_checkpoint = args.rl_checkpoint or (str(libero_table.rl_checkpoints(run)[-1]) if libero_table.rl_checkpoints(run) else None)
        if rl_checkpoint is None:
            raise SystemExit(f"--rl-run {run}: no checkpoints/ckpt_*.pt")
        budget = libero_table.run_budget(run, rl_checkpoint)
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
            row["sft_checkpoint"], row["rl_checkpoint"] = libero_table.relative(str(sft_copy)), libero_table.relative(str(rl_copy))
    data = libero_table.load(path)
    keys = {libero_table.key(row) for row in new}
    data["rows"] = sorted([r for r in data["rows"] if libero_table.key(r) not in keys] + new,
                          key=lambda r: tuple(str(part) for part in libero_table.key(r)))
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
                                                "the rows at those copies, e.g. docs/results/checkpoints")
    measuring.add_argument("--out", default=str(RESULTS))
    showing = sub.add_parser("table", help="print the Markdown table")
    showing.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    if args.command == "measure":
        for row in measure(args):
            print(json.dumps(row))
    print(libero_table.table(libero_table.load(pathlib.Path(args.out))), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
