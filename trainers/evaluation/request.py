"""What ``trainers/eval.py``'s command line asks for, checked once: :class:`EvalRequest`.

    request = request_from_args(parse_args(["--checkpoint", "runs/x/final.pt", "--init-states", "40-49"]))
    request.episodes_per_task, request.first_init_state      # (10, 40)

Every combination of flags that cannot run raises :class:`UsageError` naming the flag to change, before a
checkpoint is loaded or an env built.
"""
from __future__ import annotations

import argparse
import dataclasses
import pathlib

from vla_gym.runtime.cli_args import init_state_range
from vla_gym.trainers.evaluation.replay import ReplayError, ReplayPlan
from vla_gym.trainers.evaluation.replay import failed_starts as failed_starts_in


def default_report_dir(checkpoint: pathlib.Path) -> pathlib.Path:
    """``<run dir>/eval-<checkpoint name>``: the run dir holds ``checkpoints/`` (PPO/GRPO) or the file (SFT's final.pt)."""
    run_dir = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    return run_dir / f"eval-{checkpoint.stem}"


class UsageError(ValueError):
    """A command line that cannot run as given; the message names the flag to change (exit code 2)."""


@dataclasses.dataclass(frozen=True)
class EvalRequest:
    """What the command line asks for, checked once: the checkpoint, which episodes, how actions are chosen, where
    the report goes. A LIBERO-Plus row of ``--ood`` plays its own episodes: ``dataclasses.replace(request, tasks=...,
    episodes_per_task=..., first_init_state=...)``."""

    checkpoint: str
    out: pathlib.Path
    episodes_per_task: int | None
    tasks: str | None
    first_init_state: int
    seed: int = 0
    stochastic: bool = False
    std: float | None = None
    noise: str | None = None
    #: with a token head: sample at this temperature, not the checkpoint's (None: the checkpoint's)
    temperature: float | None = None
    repeats: int = 1
    num_envs: int = 1
    #: the (task, init state) pairs ``--only-failed-in`` keeps (None: every selected one)
    failed_starts: frozenset | None = None
    record_dataset: str | None = None
    successes_only: bool = False
    allow_render_shift: bool = False
    video_episodes: int | None = None
    #: ``--replay``: the report played again
    replay: str | None = None


def request_from_args(args: argparse.Namespace, plan: ReplayPlan | None = None) -> EvalRequest:
    """The command line as an :class:`EvalRequest` (with ``--replay``, the report's own checkpoint and sampling);
    :class:`UsageError` naming the flag to change otherwise."""
    checkpoint, stochastic, std, noise, temperature = (args.checkpoint, args.stochastic, args.std, args.noise,
                                                       args.temperature)
    allow_render_shift, out = args.allow_render_shift, args.out
    if plan is not None:
        if (args.ood is not None or args.stochastic or args.std is not None or args.noise is not None
                or args.temperature is not None or args.only_failed_in or args.repeats != 1):
            raise UsageError("--replay plays the report's own episodes and settings: drop "
                             "--ood/--stochastic/--std/--noise/--temperature/--only-failed-in/--repeats")
        checkpoint = checkpoint or plan.checkpoint
        stochastic = not plan.settings.get("deterministic", True)
        std, noise, temperature = (plan.settings.get(key) for key in ("std", "noise", "temperature"))
        allow_render_shift = allow_render_shift or bool(plan.settings.get("render_shift"))  # as it was played
        out = out or str(pathlib.Path(args.replay).parent / "replay")
    problems = [
        (not checkpoint, "pass --checkpoint CKPT (or --replay EVAL_JSON)"),
        (args.successes_only and not args.record_dataset, "--successes-only filters the dataset: add --record-dataset DIR"),
        (args.record_dataset and args.ood is not None, "--record-dataset records one evaluation: drop --ood"),
        (args.only_failed_in and args.ood is not None,
         "--only-failed-in selects episodes of one evaluation: drop --ood"),
        ((std is not None or noise is not None or temperature is not None) and not stochastic,
         "--std, --noise and --temperature set how actions are sampled: add --stochastic"),
        (temperature is not None and not temperature > 0, f"--temperature must be > 0, got {temperature}"),
        (args.repeats < 1, f"--repeats must be >= 1, got {args.repeats}"),
        (args.repeats > 1 and not stochastic,
         "--repeats plays each start again, and a greedy episode replays exactly: add --stochastic"),
        (args.num_envs < 1, f"--num-envs must be >= 1, got {args.num_envs}"),
        (std is not None and not std > 0, f"--std must be > 0, got {std}"),
        (args.libero_pro and args.ood is None,
         "--ood: --libero-pro adds rows to the OOD report: add --ood (or --ood KIND,...)"),
        (args.libero_plus is not None and args.ood is None,
         "--ood: --libero-plus adds rows to the OOD report: add --ood (or --ood KIND,...)"),
    ]
    policy_overrides = [item for item in args.overrides if item.startswith("policy.")]
    if policy_overrides:
        problems.append((True, f"{' '.join(policy_overrides)}: the policy is the checkpoint's own (its policy.name "
                               "and policy.kwargs); drop the policy.* overrides"))
    for failed, message in problems:
        if failed:
            raise UsageError(message if message.startswith("--ood") else f"trainers/eval.py: {message}")
    failed_starts = None
    if args.only_failed_in:
        try:
            failed_starts = frozenset(failed_starts_in(args.only_failed_in))
        except ReplayError as exc:
            raise UsageError(f"--only-failed-in: {exc}") from None
    try:
        episodes_per_task, first_init_state = init_state_range(args.init_states, args.first_init_state,
                                                               args.episodes_per_task)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"trainers/eval.py: {exc}") from None
    return EvalRequest(
        checkpoint=checkpoint, out=pathlib.Path(out) if out else default_report_dir(pathlib.Path(checkpoint)),
        episodes_per_task=episodes_per_task, tasks=args.tasks, first_init_state=first_init_state, seed=args.seed,
        stochastic=stochastic, std=std, noise=noise, temperature=temperature, repeats=args.repeats, num_envs=args.num_envs,
        failed_starts=failed_starts, record_dataset=args.record_dataset, successes_only=args.successes_only,
        allow_render_shift=allow_render_shift, video_episodes=args.video_episodes, replay=args.replay)
