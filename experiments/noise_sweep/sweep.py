"""Sampled success of one checkpoint under several exploration noises (shape and std): the noise an RL run should use.

    python scripts/noise_sweep.py --checkpoint runs/libero_rl/sft_object_s0/final.pt \
        --settings step:0.1 step:0.05 chunk:0.035 chunk:0.07 --out runs/libero_rl/noise \
        --json docs/results/libero_noise.json -- --init-states 0-3 --num-envs 2 env.vectorization=async
    python scripts/noise_sweep.py --checkpoint CKPT --settings step:0.1 --out /tmp/noise -- --episodes-per-task 1

Each setting ``SHAPE:STD`` is one ``trainers/eval.py --checkpoint CKPT --stochastic --noise SHAPE --std STD
--out OUT/SHAPE_STD`` (arguments after ``--`` are passed to every one, e.g. the episodes), plus one greedy
evaluation (``OUT/greedy``) for reference. A setting whose ``eval.json`` exists is read, not played again, so a
stopped sweep resumes. ``--json`` writes ``{"checkpoint", "eval_args", "rows": [{"noise", "std", "episodes",
"success"}]}`` (the greedy row has noise ``greedy`` and std 0). With per-step noise a chunk of K steps gets K x A
independent draws; with chunk noise A draws shared by its K steps (trainers/policies/distributions.py).
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.runtime.results import write_results

ROOT = pathlib.Path(__file__).resolve().parent.parent


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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
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
        path = write_results(args.json, {"checkpoint": args.checkpoint, "eval_args": eval_args, "rows": rows})
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
