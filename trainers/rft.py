"""Rejection-sampling fine-tuning (RFT; filtered behaviour cloning, expert iteration) on a policy's own successes.

    python trainers/rft.py --sft-config experiments/libero_miniature/configs/libero_object_miniature_sft.yaml \
        --demos runs/libero_rl/demos_object_3 --init-checkpoint runs/libero_rl/sft3_object_s0/final.pt \
        --init-states 0-3 --rounds 2 --samples-per-start 4 --std 0.05 --out runs/libero_rl/rft_object_s0
    python trainers/rft.py ... --seed 1 sft.epochs=10        # a second training seed; key=value: SFT overrides
    python trainers/rft.py ... --temperature 1.6 policy.kwargs.head=tokens   # an action-token policy
    python trainers/rft.py ... --temperature 1.6 --hold-entropy policy.kwargs.head=tokens   # the same width each round

Each round is three product commands, called in this process one after the other:

1. **sample**: ``trainers/eval.py --checkpoint CURRENT --stochastic --std STD --noise step --record-dataset ...
   --successes-only`` plays every (task, init state) ``--samples-per-start`` times with exploration noise (a new
   seed each time) and keeps the successful episodes, with the actions the env executed as labels; an action-token
   policy (``policy.kwargs.head=tokens``) samples its tokens at ``--temperature T`` instead (the anchors' 1.6);
2. **fit**: ``trainers/sft.py --config SFT_CONFIG sft.dataset=DEMOS,ROLLOUTS...`` clones the demos plus every
   success kept so far (all rounds), from the SFT config's fresh initialisation as the first SFT did, or with
   ``--fit continue`` from the policy that sampled the round (``sft.init_checkpoint``);
3. **evaluate**: ``trainers/eval.py --checkpoint OUT/round_R/sft/final.pt`` greedy, on the same starts. With
   ``--keep-greedy-successes`` this evaluation also records its successes (``round_R/eval_rollouts``), and the next
   round fits them too: the greedy policy's own successes come for free, as one more sample per start
   (``--samples-per-start 0``: the only one; the round's ``env_steps`` count that evaluation's steps).

With ``--sample-failed-only`` step 1 plays only the starts the current policy failed in its last greedy
evaluation (``eval.py --only-failed-in``): with ``--keep-greedy-successes`` every start then contributes one success
when the policy has one, the solved ones from the greedy play and the failed ones from sampling (RIPT-VLA's skip of
solved starts), and the sampling budget goes where the policy fails.

A policy cloned from its own samples at a temperature above 1 learns their flattened distribution, so at the same
temperature the next round samples wider still (``vla_gym.trainers.policies.token_entropy``); ``--hold-entropy``
samples each round after the first at the temperature that gives its policy the initial checkpoint's entropy per
token at ``--temperature`` on the demos' frames (``round_R/temperature.json``; each row records its temperature).

The new policy samples the next round. With a 0/1 success reward this is the policy-improvement step that
REINFORCE with a zero baseline takes, but fitted to convergence instead of one small on-policy step; it needs no
critic, no ratio and no trust region (GRPO's group baseline only matters for the failed episodes, which RFT drops).

A step whose output exists (``eval.json``, ``final.pt``) is read, not run again, so a stopped run resumes with the
same command; ``OUT/rft.json`` holds one row per round (sampled and greedy success, successes kept, env steps,
minutes of sampling and fitting from ``round_R/minutes.json``), round 0 being the initial checkpoint's greedy
evaluation.
"""
from __future__ import annotations

import importlib
import json
import pathlib
import subprocess
import sys
import time
from typing import Any

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.evaluation.replay import failed_starts
from vla_gym.trainers.runtime.results import write_results

ROOT = pathlib.Path(__file__).resolve().parent.parent


#: the product commands an RFT round calls, by script, and the module whose ``main(argv)`` each is
ENTRY_POINTS = {"trainers/eval.py": "vla_gym.trainers.eval", "trainers/sft.py": "vla_gym.trainers.sft"}


def run(command: list[str], allowed: tuple[int, ...] = (0,)) -> int:
    """Run one product command (``[python, script, *argv]``) as its own process from the repository root, echoed;
    stop with its exit code unless ``allowed``. The step runner of experiments/libero_miniature/campaign.py."""
    print("running:", " ".join(command[1:]), flush=True)
    code = subprocess.run(command, cwd=ROOT).returncode
    return _checked(command[1:], code, allowed)


def call(script: str, argv: list[str], allowed: tuple[int, ...] = (0,)) -> int:
    """Call one product command in this process (``trainers/eval.py`` or ``trainers/sft.py``: its ``main(argv)``),
    echoed as a command line; stop with its exit code unless ``allowed``.

    >>> call("trainers/eval.py", ["--help"])   # doctest: +SKIP
    """
    print("running:", script, " ".join(argv), flush=True)
    try:
        code = importlib.import_module(ENTRY_POINTS[script]).main(argv)
    except SystemExit as exc:  # argparse's exit, or a command that exits instead of returning
        code = exc.code if isinstance(exc.code, int) else 1
    return _checked([script, *argv], code or 0, allowed)


def _checked(command: list[str], code: int, allowed: tuple[int, ...]) -> int:
    if code not in allowed:
        raise SystemExit(f"`{' '.join(command)}` failed with exit code {code}")
    return code


def played(report_dir: pathlib.Path) -> dict[str, Any]:
    """Episodes, successes and env steps of one evaluation report."""
    report = json.loads((report_dir / "eval.json").read_text())
    episodes = report.get("episodes") or []
    overall = report["summary"]["overall"]
    steps = sum(int(e.get("length", 0)) for e in episodes) if episodes else int(overall["mean_length"] *
                                                                              overall["episodes"])
    return {"episodes": overall["episodes"], "successes": overall["successes"], "env_steps": steps}


def train_minutes(round_dir: pathlib.Path, kept_greedy: bool = False) -> float | None:
    """Minutes a round spent sampling and fitting (not evaluating; with ``kept_greedy`` also the previous round's
    greedy evaluation, whose successes it fitted), None when a step's time was not recorded."""
    path = round_dir / "minutes.json"
    minutes = json.loads(path.read_text()) if path.is_file() else {}
    spent = [v for k, v in minutes.items() if k.startswith("sample_") or k == "sft"]
    if kept_greedy:
        before = round_dir.parent / f"round_{int(round_dir.name.split('_')[1]) - 1}" / "minutes.json"
        spent.append(json.loads(before.read_text()).get("eval", 0.0) if before.is_file() else 0.0)
    return round(sum(spent), 2) if spent and "sft" in minutes else None


def fitted_steps(checkpoint: str) -> int:
    """Optimizer steps the round's SFT took (its checkpoint's counter; overrides may change between rounds)."""
    import torch

    return int(torch.load(checkpoint, map_location="cpu", weights_only=False)["counters"]["num_updates"])


def fitted_datasets(round_dir: pathlib.Path) -> list[str]:
    """The datasets a round's SFT was fitted on (``sft.dataset`` of its run's config.yaml)."""
    import yaml

    config = yaml.safe_load((round_dir / "sft" / "config.yaml").read_text())
    return [part for part in config["sft"]["dataset"].split(",") if part]


def successes_in(datasets: list[str]) -> int:
    """Episodes in the recorded-rollout datasets among ``datasets`` (the successes kept; demos not counted)."""
    summaries = [pathlib.Path(d) / "meta" / "vla_gym_rollouts.json" for d in datasets]
    return sum(int(json.loads(p.read_text())["episodes"]) for p in summaries if p.is_file())


def sampled_temperature(round_dir: pathlib.Path, ids: list[int]) -> float | None:
    """The temperature a round's sampled episodes were played at (their reports' settings), None for a Gaussian head
    or a round that sampled nothing."""
    for k in ids:
        path = round_dir / f"sample_{k}" / "eval.json"
        if path.is_file():
            return json.loads(path.read_text())["settings"].get("temperature")
    return None


def sample_seed(seed: int, round_index: int, sample: int) -> int:
    """The env/noise seed of sampled evaluation ``sample`` of round ``round_index`` in a run of training seed
    ``seed``: distinct across samples, rounds and training seeds (seed 0 keeps the original 1000 * r + k)."""
    return 100_000 * seed + 1000 * round_index + sample


class RFTRun:
    """The rounds of one RFT run in ``out`` (the module docstring)."""

    def __init__(self, args):
        self.args, self.out = args, pathlib.Path(args.out)
        self.starts = [*(["--tasks", *args.tasks] if args.tasks else []), "--init-states", *args.init_states,
                       "--num-envs", str(args.num_envs), *([] if args.sync else ["env.vectorization=async"])]

    def timed(self, step: pathlib.Path, script: str, argv: list[str], allowed: tuple[int, ...] = (0,)) -> None:
        """Call one step's command and add its minutes to its round's ``minutes.json`` (the cost the table reports)."""
        started = time.monotonic()
        call(script, argv, allowed)
        path = step.parent / "minutes.json"
        minutes = json.loads(path.read_text()) if path.is_file() else {}
        minutes[step.name] = round((time.monotonic() - started) / 60.0, 2)
        write_results(path, minutes)

    def sampling(self, round_dir: pathlib.Path, current: str) -> list[str]:
        """How a round's sampled episodes explore: Gaussian noise per step, or the action tokens at ``--temperature``
        (with ``--hold-entropy`` from round 2 on the temperature that gives ``current`` the initial checkpoint's
        entropy at ``--temperature``, recorded in ``round_R/temperature.json`` before anything samples)."""
        args = self.args
        if args.temperature is None:
            return ["--std", str(args.std), "--noise", "step"]
        if not args.hold_entropy or current == args.init_checkpoint:
            return ["--temperature", str(args.temperature)]
        path = round_dir / "temperature.json"
        if not path.is_file():
            from vla_gym.trainers.policies.token_entropy import matched_temperature

            write_results(path, matched_temperature(current, args.demos, args.init_checkpoint, args.temperature))
        return ["--temperature", str(json.loads(path.read_text())["temperature"])]

    def evaluate(self, checkpoint: str, out: pathlib.Path, sampling: list[str] | None = None,
                 sampled_seed: int | None = None, record: pathlib.Path | None = None,
                 only_failed_in: pathlib.Path | None = None) -> dict[str, Any]:
        # played again when it must record now but was played without recording (the last round of a shorter run)
        unrecorded = sampled_seed is None and record is not None and not (out / "recorded").is_file()
        if not (out / "eval.json").is_file() or unrecorded:
            command = ["--checkpoint", checkpoint, "--out", str(out)]
            if sampled_seed is not None:
                command += ["--stochastic", *sampling, "--seed", str(sampled_seed)]
            if record is not None:
                command += ["--record-dataset", str(record), "--successes-only"]
            if only_failed_in is not None:
                command += ["--only-failed-in", str(only_failed_in)]
            # exit code 1 with --successes-only: no success to keep, the report is written all the same
            self.timed(out, "trainers/eval.py", command + self.starts, allowed=(0, 1) if record is not None else (0,))
            if record is not None:
                (out / "recorded").write_text(str(record) + "\n")
        return played(out)

    def fit(self, round_dir: pathlib.Path, datasets: list[str], current: str) -> str:
        final = round_dir / "sft" / "final.pt"
        if not final.is_file():
            start = [f"sft.init_checkpoint={current}"] if self.args.fit == "continue" else []
            self.timed(round_dir / "sft", "trainers/sft.py", [
                "--config", self.args.sft_config, f"run_dir={round_dir}", "name=sft", f"sft.dataset={','.join(datasets)}",
                f"seed={self.args.seed}", *start, *self.args.overrides])
        return str(final)

    def learn(self) -> list[dict[str, Any]]:
        args, started = self.args, time.monotonic()
        current = args.init_checkpoint
        rows = [{"round": 0, "checkpoint": current, "greedy": self.rate(self.evaluate(
            current, self.out / "round_0" / "eval", record=self.greedy_record(self.out / "round_0")))}]
        datasets = [args.demos]
        for r in range(1, args.rounds + 1):
            round_dir = self.out / f"round_{r}"
            ids = self.sample_ids(round_dir)
            before = self.out / f"round_{r - 1}"
            where = before / "eval" / "eval.json" if args.sample_failed_only else None
            if where is not None and not failed_starts(where):
                ids = []  # the current policy solves every start greedily: nothing to sample
            sampling = self.sampling(round_dir, current) if any(
                not (round_dir / f"sample_{k}" / "eval.json").is_file() for k in ids) else []
            samples = [self.evaluate(current, round_dir / f"sample_{k}", sampling, sample_seed(args.seed, r, k),
                                     round_dir / f"rollouts_{k}", where) for k in ids]
            new = [before / "eval_rollouts", *(round_dir / f"rollouts_{k}" for k in ids)]
            datasets += [str(path) for path in new if (path / "meta" / "info.json").is_file()]
            current = self.fit(round_dir, datasets, current)
            datasets = fitted_datasets(round_dir)  # what the round's SFT was given (a resumed run may differ)
            # the previous greedy evaluation's successes, when this round fitted them, were one more sample
            kept_greedy = [played(before / "eval")] if str(before / "eval_rollouts") in datasets else []
            greedy = self.evaluate(current, round_dir / "eval",
                                   record=self.greedy_record(round_dir) if r < args.rounds else None)
            sampled = self.total(samples)
            rows.append({"round": r, "checkpoint": current, "greedy": self.rate(greedy),
                         "sampled": self.rate(sampled) if samples else None, "sampled_episodes": sampled["episodes"],
                         "temperature": sampled_temperature(round_dir, ids),
                         "successes_kept": sampled["successes"],
                         "greedy_successes_kept": sum(g["successes"] for g in kept_greedy), "datasets": len(datasets),
                         "successes_fitted": successes_in(datasets),
                         "env_steps": self.total(samples + kept_greedy)["env_steps"],
                         "sft_steps": fitted_steps(current), "train_minutes": train_minutes(round_dir, bool(kept_greedy))})
            write_results(self.out / "rft.json", {"args": vars(args), "rows": rows,
                                                  "wall_minutes_this_segment": (time.monotonic() - started) / 60})
            print(f"round {r}: sampled {rows[-1]['sampled']}, kept {rows[-1]['successes_kept']} successes, "
                  f"greedy {rows[0]['greedy']:.3f} -> {rows[-1]['greedy']:.3f}", flush=True)
        return rows

    def greedy_record(self, round_dir: pathlib.Path) -> pathlib.Path | None:
        """Where a round's greedy evaluation records its successes (``--keep-greedy-successes``), else None. The last
        round's is not recorded (no round fits it); a run resumed with more rounds plays it again, recording."""
        return round_dir / "eval_rollouts" if self.args.keep_greedy_successes else None

    def sample_ids(self, round_dir: pathlib.Path) -> list[int]:
        """The sampled evaluations of a round: 1..--samples-per-start, or for a round already fitted the ones it
        has on disk (a stopped run resumed with another --samples-per-start keeps its history)."""
        if (round_dir / "sft" / "final.pt").is_file():
            return sorted(int(p.name.split("_")[1]) for p in round_dir.glob("sample_*") if (p / "eval.json").is_file())
        return list(range(1, self.args.samples_per_start + 1))  # none with --samples-per-start 0

    @staticmethod
    def total(results: list[dict[str, Any]]) -> dict[str, Any]:
        return {key: sum(r[key] for r in results) for key in ("episodes", "successes", "env_steps")}

    @staticmethod
    def rate(result: dict[str, Any]) -> float:
        return result["successes"] / max(1, result["episodes"])


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--sft-config", required=True, help="the SFT config of the initial checkpoint")
    parser.add_argument("--demos", required=True, help="the demos the initial checkpoint was cloned from")
    parser.add_argument("--init-checkpoint", required=True, help="the policy that samples round 1")
    parser.add_argument("--out", required=True, help="run directory (round_R/ per round, rft.json)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples-per-start", type=int, default=4,
                        help="sampled episodes per (task, init state); 0 with --keep-greedy-successes")
    parser.add_argument("--std", type=float, default=None,
                        help="exploration noise per step and action dimension of a Gaussian head (default 0.05)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="sample an action-token head (policy.kwargs.head=tokens) at this temperature instead")
    parser.add_argument("--hold-entropy", action="store_true",
                        help="with --temperature: sample each round after the first at the temperature that gives its "
                             "policy the initial checkpoint's entropy per token at --temperature (on the demos' "
                             "frames); a policy fitted on its own samples at T > 1 is flatter each round")
    parser.add_argument("--init-states", nargs="+", default=["0-3"], help="the starts trained (and evaluated) on")
    parser.add_argument("--tasks", nargs="+", default=None, help="only these task ids (default: all)")
    parser.add_argument("--fit", choices=("scratch", "continue"), default="scratch",
                        help="fit each round from the SFT config's fresh initialisation, or continue from the policy "
                             "that sampled it (sft.init_checkpoint; pair it with a lower sft.learning_rate)")
    parser.add_argument("--keep-greedy-successes", action="store_true",
                        help="record each greedy evaluation's successes and fit them in the next round")
    parser.add_argument("--sample-failed-only", action="store_true",
                        help="sample only the starts the round's policy failed greedily (its last evaluation; "
                             "eval.py --only-failed-in): pair it with --keep-greedy-successes, which keeps the rest")
    parser.add_argument("--seed", type=int, default=0,
                        help="training seed: each round's SFT fit (seed=N) and the sampled episodes' noise")
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--sync", action="store_true", help="envs in this process (default: one process each)")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="overrides of the SFT config")
    args = parser.parse_args(argv)
    if args.std is not None and args.temperature is not None:
        parser.error("--std samples a Gaussian head, --temperature an action-token head: give one of them")
    if args.hold_entropy and args.temperature is None:
        parser.error("--hold-entropy holds an action-token head's entropy: give --temperature (and "
                     "policy.kwargs.head=tokens)")
    if args.temperature is None and args.std is None:
        args.std = 0.05
    spread = args.std if args.temperature is None else args.temperature
    if args.rounds < 1 or args.samples_per_start < 0 or not spread > 0:
        parser.error("--rounds must be >= 1, --samples-per-start >= 0 and --std (or --temperature) > 0")
    if args.samples_per_start == 0 and not args.keep_greedy_successes:
        parser.error("--samples-per-start 0 samples nothing: add --keep-greedy-successes (the greedy evaluations' "
                     "successes are then each round's new data), or sample at least 1 episode per start")
    for name in ("sft_config", "init_checkpoint", "demos"):
        if not pathlib.Path(getattr(args, name)).exists():
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: no such file or directory")
    RFTRun(args).learn()
    return 0


if __name__ == "__main__":
    sys.exit(main())
