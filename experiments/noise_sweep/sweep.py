"""Sampled success of one checkpoint under several exploration noises (shape and std): the noise an RL run should use.

    python experiments/noise_sweep/sweep.py --checkpoint runs/libero_rl/sft_object_s0/final.pt \
        --settings step:0.1 step:0.05 chunk:0.035 chunk:0.07 --out runs/libero_rl/noise \
        --json experiments/noise_sweep/results.json -- --init-states 0-3 --num-envs 2 env.vectorization=async
    python experiments/noise_sweep/sweep.py --checkpoint CKPT --settings step:0.1 --out /tmp/noise -- --episodes-per-task 1
    python experiments/noise_sweep/sweep.py readme [--check]   # results.json's table into the study's README

Each setting ``SHAPE:STD`` is one ``trainers/eval.py --checkpoint CKPT --stochastic --noise SHAPE --std STD
--out OUT/SHAPE_STD`` (arguments after ``--`` are passed to every one, e.g. the episodes), plus one greedy
evaluation (``OUT/greedy``) for reference. A setting whose ``eval.json`` exists is read, not played again, so a
stopped sweep resumes. ``--json`` writes ``{"checkpoint", "eval_args", "rows": [{"noise", "std", "episodes",
"success"}]}`` (the greedy row has noise ``greedy`` and std 0). With per-step noise a chunk of K steps gets K x A
independent draws; with chunk noise A draws shared by its K steps (trainers/policies/distributions.py).
When ``--json`` is this study's ``results.json``, its table is rendered into the study's README too; ``readme``
renders it alone, ``readme --check`` only compares (exit 1 when the README differs from the JSON).

    >>> table({"rows": [{"noise": "greedy", "std": 0.0, "episodes": 40, "success": 0.175},
    ...                 {"noise": "step", "std": 0.05, "episodes": 40, "success": 0.1}]}).splitlines()[3]
    '| per step | 0.05 | 40 | 10.0 % [4.0, 23.1] |'
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.evaluation.stats import rate_with_interval
from vla_gym.trainers.runtime.results import render_block, write_results

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results.json"
README = HERE / "README.md"
NOISE = {"greedy": "none (greedy)", "step": "per step", "chunk": "per chunk"}


def parse_setting(text: str) -> tuple[str, float]:
    shape, _, std = text.partition(":")
    if shape not in ("step", "chunk") or not std:
        raise ValueError(f"setting {text!r}: write SHAPE:STD with SHAPE step or chunk, e.g. step:0.05")
    return shape, float(std)


def evaluate(checkpoint: str, out: pathlib.Path, eval_args: list[str], setting: tuple[str, float] | None) -> dict:
    """Play (or read back) one setting's episodes; returns its row."""
    report = out / "eval.json"
    if not report.is_file():
        sampling = ["--stochastic", "--noise", setting[0], "--std", str(setting[1])] if setting else []
        command = [sys.executable, "trainers/eval.py", "--checkpoint", checkpoint, "--out", str(out), *sampling,
                   *eval_args]
        print("running:", " ".join(command[1:]), flush=True)
        subprocess.run(command, cwd=ROOT, check=True)
    overall = json.loads(report.read_text())["summary"]["overall"]
    noise, std = setting if setting else ("greedy", 0.0)
    return {"noise": noise, "std": std, "episodes": overall["episodes"], "success": overall["success_rate"]}


def table(data: dict) -> str:
    """One line per setting: the noise, its std, the episodes and the sampled success (95 % Wilson interval)."""
    lines = ["| noise | std | episodes | success [95 % CI] |", "|---|---:|---:|---:|"]
    for row in data["rows"]:
        lines.append(f"| {NOISE.get(row['noise'], row['noise'])} | {row['std']:g} | {row['episodes']} | "
                     f"{rate_with_interval(round(row['success'] * row['episodes']), row['episodes'])} |")
    return "\n".join(lines) + "\n"


def readme(argv: list[str]) -> int:
    """``readme [--check]``: render ``results.json``'s table into the study's README (or only compare)."""
    parser = script_parser(__doc__, prog="sweep.py readme")
    parser.add_argument("--json", default=str(RESULTS), help="the rows")
    parser.add_argument("--readme", default=str(README))
    parser.add_argument("--check", action="store_true", help="only compare: exit 1 when the README differs")
    args = parser.parse_args(argv)
    same = render_block(args.readme, "results", table(json.loads(pathlib.Path(args.json).read_text())),
                        check=args.check)
    if args.check and not same:
        print(f"{args.readme}'s results table differs from {args.json}: run "
              "python experiments/noise_sweep/sweep.py readme", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["readme"]:
        return readme(argv[1:])
    eval_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = script_parser(__doc__)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--settings", nargs="+", required=True, help="SHAPE:STD each, e.g. step:0.05 chunk:0.035")
    parser.add_argument("--out", required=True, help="one evaluation directory per setting under it")
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args(argv)
    try:
        settings = [parse_setting(text) for text in args.settings]
    except ValueError as error:
        parser.error(str(error))
    out = pathlib.Path(args.out)
    rows = [evaluate(args.checkpoint, out / "greedy", eval_args, None)]
    rows += [evaluate(args.checkpoint, out / f"{shape}_{std:g}", eval_args, (shape, std)) for shape, std in settings]
    for row in rows:
        print(f"{row['noise']:>6} std {row['std']:<6g} success {row['success']:.3f} ({row['episodes']} episodes)")
    if args.json:
        data = {"checkpoint": args.checkpoint, "eval_args": eval_args, "rows": rows}
        path = write_results(args.json, data)
        print(f"wrote {path}")
        if pathlib.Path(path).resolve() == RESULTS and README.is_file():
            render_block(README, "results", table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
