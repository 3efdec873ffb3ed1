"""Evaluate a checkpoint over a suite's tasks x initial states: per-task success table and videos.

    python trainers/eval.py --checkpoint runs/pushcube/checkpoints/ckpt_00000100.pt --episodes-per-task 50
    python trainers/eval.py --checkpoint CKPT --num-envs 4 --tasks 0,3 --video-episodes 2 env.id=VLA/LiberoSpatial-v0
    python trainers/eval.py --checkpoint CKPT --init-states 40-49                            # states 40..49 only
    torchrun --nproc_per_node=2 trainers/eval.py --checkpoint CKPT --num-envs 2     # episodes split over ranks
    python trainers/eval.py --checkpoint CKPT --ood          # + every seeded perturbation: the OOD table (docs/ood.md)
    python trainers/eval.py --checkpoint CKPT --ood --libero-plus 20   # + a row per LIBERO-Plus dimension, 20 variants each

The env is the checkpoint's training env (``env.*`` of its config, with ``eval.env_kwargs`` applied, and
``eval.video_env_kwargs`` too when videos are asked for);
``key.sub=value`` arguments override that config (e.g. another suite, ``env.kwargs.render_mode=rgb_array``).
Episodes: every (task, init state) of a vla_gym env, at most ``--episodes-per-task`` per task; envs without
a task list play ``--episodes-per-task`` seeds. ``--num-envs 1`` evaluates the suite in a loop; more envs play
that many episodes at a time. Writes ``eval.md`` (Markdown table), ``eval.json`` and ``videos/*.mp4`` to
``--out`` (default: ``<run dir>/eval-<checkpoint name>``) and prints the table. ``--ood`` evaluates the same
episodes in distribution and under each perturbation (:mod:`vla_gym.trainers.evaluation.ood`): ``ood.md``, ``ood.json``
and one report directory per row (one video each unless ``--video-episodes`` says otherwise).

Every ``eval.json`` carries a receipt (:mod:`vla_gym.runtime.receipt`: package versions, the vla_gym commit, the
env id, keyword arguments, wrappers and cameras, the checkpoint's SHA-256), the settings and every episode played
(task, init state, seed, outcome, the instruction the policy read). ``--replay A/eval.json`` plays the same
episodes with the same checkpoint, env and settings again, writes the new report to ``--out`` (default
``A/replay``) and prints what changed: package versions and each episode whose outcome differs (exit 1 if any).
An episode cut short by a failed env worker (hung, died or raised: ``env.on_worker_failure=respawn``, the default for
``env.vectorization=async``) is played again from the same task, init state and seed, and never counted as a policy
failure; ``eval.json``'s summary says how many were (``replayed_after_fault``; docs/reliability.md).
``--record-dataset DIR [--successes-only]`` also writes the evaluated episodes as a LeRobot v3 dataset, the
layout of ``vla-gym demos`` with the policy's actions as labels, which ``trainers/sft.py`` reads
(:mod:`vla_gym.trainers.evaluation.rollout_dataset`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shutil
import sys

import torch

from vla_gym.core.registry import check_env_id
from vla_gym.data.record import ROBOT_TYPES
from vla_gym.runtime.cli_args import (
    add_init_states,
    add_legacy_first_init_state,
    add_tasks,
    parser_with_examples,
)
from vla_gym.runtime.receipt import camera_contract, file_sha256, receipt
from vla_gym.trainers.evaluation.episode_log import EpisodeLog
from vla_gym.trainers.evaluation.ood import (
    LIBERO_PLUS_SAMPLE,
    libero_plus_rows,
    libero_pro_rows,
    observes_images,
    ood_markdown,
    parse_rows,
    run_ood,
)
from vla_gym.trainers.evaluation.replay import (
    ReplayError,
    ReplayPlan,
    load_replay,
    replay_differences,
)
from vla_gym.trainers.evaluation.report import markdown_table, write_report
from vla_gym.trainers.evaluation.request import EvalRequest, UsageError, request_from_args
from vla_gym.trainers.evaluation.rollout_dataset import (
    EmptyDatasetError,
    recording_wrappers,
    write_rollout_dataset,
)
from vla_gym.trainers.policies.distributions import NOISE_SHAPES
from vla_gym.trainers.rollout.episode_plan import EpisodeSpec, suite_specs
from vla_gym.trainers.rollout.episode_runner import EpisodeRunner
from vla_gym.trainers.runtime.checkpoint import CheckpointError, load_checkpoint, load_policy
from vla_gym.trainers.runtime.config import ConfigError, config_from_checkpoint
from vla_gym.trainers.runtime.config_checks import check_config, explain_setup_error
from vla_gym.trainers.runtime.contract import ContractError, check_contract, checkpoint_contract, env_contract
from vla_gym.trainers.runtime.distributed import Distributed
from vla_gym.trainers.runtime.envs import env_attr, make_envs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = parser_with_examples(None, "Evaluate a vla_gym trainer checkpoint (see docs/trainers.md)", [
        "python trainers/eval.py --checkpoint runs/maniskill_pushcube_ppo/checkpoints/ckpt_00000264.pt --num-envs 4",
        "python trainers/eval.py --checkpoint runs/libero_small_sft/final.pt --init-states 40-49 --out runs/eval_sft",
        "python trainers/eval.py --checkpoint runs/libero_small_sft/final.pt --tasks 0-3 --init-states 0-9 --stochastic",
        "torchrun --nproc_per_node=2 trainers/eval.py --checkpoint CKPT --ood lighting,paraphrase --init-states 40-42",
        "python trainers/eval.py --replay runs/eval_sft/eval.json           # same episodes again: what differs?",
        "python trainers/eval.py --checkpoint CKPT --init-states 0-9 --record-dataset runs/rollouts --successes-only",
    ])
    parser.add_argument("--checkpoint", help="the checkpoint to evaluate (with --replay: the report's by default)")
    parser.add_argument("--replay", metavar="EVAL_JSON",
                        help="play the episodes of this report again (its env, settings and checkpoint) and print "
                             "the episodes whose outcome differs")
    parser.add_argument("--out", help="report directory (default: <run dir>/eval-<checkpoint name>)")
    parser.add_argument("--num-envs", type=int, default=1, help="envs per process")
    parser.add_argument("--episodes-per-task", type=int, default=None,
                        help="init states (or seeds) per task; default: all init states, or 10 seeds")
    add_tasks(parser)
    add_init_states(parser, "initial states of each task (default: all; e.g. 40-49, states no demo used)")
    add_legacy_first_init_state(parser)
    parser.add_argument("--only-failed-in", metavar="EVAL_JSON",
                        help="of the selected episodes, play only the (task, init state) pairs that failed in this "
                             "report (e.g. sample where the greedy policy fails)")
    parser.add_argument("--video-episodes", type=int, default=None,
                        help="record videos of the first N episodes (default 0; with --ood 1 per row)")
    parser.add_argument("--ood", nargs="?", const="all", default=None, metavar="KIND[=STRENGTH],...",
                        help="also evaluate under each seeded perturbation ('all' when no list is given, e.g. "
                             "lighting=0.8,paraphrase,action_noise) and write the OOD table ood.md/ood.json")
    parser.add_argument("--libero-pro", action="store_true",
                        help="with --ood on a LIBERO suite: also a row per LIBERO-PRO suite of it (swap, lan, ...)")
    parser.add_argument("--libero-plus", nargs="?", type=int, const=LIBERO_PLUS_SAMPLE, default=None, metavar="K",
                        help="with --ood on a LIBERO suite: also a row per LIBERO-Plus dimension of it (camera, robot, "
                             f"language, ...), each K variants drawn with --seed, one episode each (default K "
                             f"{LIBERO_PLUS_SAMPLE})")
    parser.add_argument("--record-dataset", metavar="DIR",
                        help="also write the evaluated episodes as a LeRobot v3 dataset (the policy's actions as "
                             "labels), which trainers/sft.py reads as sft.dataset")
    parser.add_argument("--successes-only", action="store_true", help="with --record-dataset: only the successes")
    parser.add_argument("--allow-render-shift", action="store_true",
                        help="evaluate even when the env's image flip or texture look differs from the checkpoint's "
                             "(a deliberate shift, e.g. another MuJoCo's frames): printed and kept in eval.json")
    parser.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the mode")
    parser.add_argument("--std", type=float, default=None,
                        help="with --stochastic: sample with this std in every action dimension, not the checkpoint's")
    parser.add_argument("--noise", choices=NOISE_SHAPES, default=None,
                        help="with --stochastic: draw the noise per step or once per action chunk (default: the "
                        "checkpoint's policy.kwargs.noise)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="with --stochastic and a token head (policy.kwargs.head=tokens): sample at this "
                             "temperature, not the checkpoint's (the anchors' rollouts: 1.6)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="with --stochastic: play each (task, init state) N times, so that a start's successes "
                             "out of N estimate its success probability (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="overrides of the checkpoint's config")
    return parser.parse_args(argv)


def ood_rows(args: argparse.Namespace, env_id: str) -> list | None:
    """The OOD report's rows (``--ood``, ``--libero-pro``, ``--libero-plus``), None without ``--ood``."""
    if args.ood is None:
        return None
    try:
        rows = parse_rows(args.ood)
        if args.libero_pro:
            rows += libero_pro_rows(env_id)
        if args.libero_plus is not None:
            rows += libero_plus_rows(env_id, args.libero_plus, seed=args.seed)
    except ValueError as exc:
        raise UsageError(f"--ood: {exc}") from None
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        plan = load_replay(args.replay) if args.replay else None
    except ReplayError as exc:
        print(f"--replay: {exc}", file=sys.stderr)
        return 2
    try:
        request = request_from_args(args, plan)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    dist = Distributed.from_env(args.device)
    try:
        state = load_checkpoint(request.checkpoint, map_location=dist.device)
        cfg = config_from_checkpoint(state["config"], args.overrides)
        check_config(cfg, None)  # env id, the checkpoint's policy and its pretrained model, before anything is built
        rows = ood_rows(args, cfg.env.id)
    except (FileNotFoundError, CheckpointError) as exc:
        print(f"--checkpoint: {exc}. Pick another checkpoint (runs/<name>/checkpoints/ keeps the last "
              "checkpoint.keep_last of them)", file=sys.stderr)
        dist.close()
        return 2
    except (ConfigError, UsageError) as exc:
        print(f"config error: {exc}" if isinstance(exc, ConfigError) else exc, file=sys.stderr)
        dist.close()
        return 2
    completed = False  # every rank got to the end: they tear the process group down together
    try:
        code = evaluate_checkpoint(request, state, cfg, rows, plan, dist)
        completed = True
        return code
    except (ContractError, UsageError) as exc:
        print(exc, file=sys.stderr)
        return 2
    except EmptyDatasetError as exc:  # the evaluation's report is written; the dataset would be empty
        print(f"--record-dataset: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # an env or policy the (overridden) config cannot build: one line, not a traceback
        line = explain_setup_error(exc, cfg)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
    finally:
        dist.close(synchronize=completed)


def evaluate_checkpoint(request: EvalRequest, state: dict, cfg, rows: list | None, plan: ReplayPlan | None,
                        dist: Distributed) -> int:
    """Play the request in the checkpoint's env: one report, a replay's comparison (exit 1 when an outcome
    differs) or the OOD report's rows."""
    video_episodes = request.video_episodes if request.video_episodes is not None else (1 if rows else 0)
    kwargs = dict(cfg.eval.env_kwargs)
    if plan is not None:  # the report's env exactly: its kwargs already hold eval.env_kwargs
        cfg.env.id, cfg.env.kwargs, kwargs = plan.env_id, plan.env_kwargs, {}
        if plan.env_wrappers is not None:
            cfg.env.wrappers = plan.env_wrappers
    if video_episodes:  # e.g. cameras for a state-only env; the policy reads what it was trained on
        kwargs.update(cfg.eval.video_env_kwargs)
    if cfg.torch_threads:  # the run's own setting, as the trainers apply it (more threads than cores spin)
        torch.set_num_threads(cfg.torch_threads)
    policy = load_policy(state, dist.device)
    if request.std is not None or request.noise is not None or request.temperature is not None:
        try:
            policy.set_exploration(request.std, request.noise, temperature=request.temperature)
        except (ValueError, TypeError) as exc:  # e.g. a temperature for a Gaussian head
            raise UsageError(f"trainers/eval.py: {exc}") from None

    def evaluate(env_cfg, directory: pathlib.Path, header: str, **selection):
        return evaluate_episodes(env_cfg, kwargs, policy, dataclasses.replace(request, **selection), video_episodes,
                                 dist, directory, header, specs=None if plan is None else plan.specs,
                                 contract=checkpoint_contract(state))

    out, title = request.out, f"{cfg.env.id}: {request.checkpoint}"
    if plan is not None:
        return replay_outcome(plan, evaluate(cfg.env, out, f"# replay of {request.replay}: {request.checkpoint}"), out)
    if rows is None:
        evaluate(cfg.env, out, f"# {title}")
        return 0
    report = run_ood(evaluate, cfg.env, rows, out, title, observes_images({**cfg.env.kwargs, **cfg.eval.env_kwargs}),
                     settings=report_settings(request, dist.world_size), dist=dist,
                     receipt=receipt(cfg.env.id, checkpoint=request.checkpoint) if dist.is_main else None)
    if report is not None:
        print(ood_markdown(report), end="")
        print(f"OOD report: {out / 'ood.md'}, {out / 'ood.json'}")
    return 0


def report_settings(request: EvalRequest, world_size: int) -> dict:
    """What decides an evaluation's episodes besides its env: the checkpoint's content (its SHA-256, not its path or
    file time, so a report committed half played resumes in a fresh clone, wherever it lies) and the episode
    selection. A killed evaluation, or an OOD row, with the same settings resumes (is kept) when run again."""
    settings = {"checkpoint_sha256": file_sha256(request.checkpoint),
                "episodes_per_task": request.episodes_per_task, "tasks": request.tasks,
                "first_init_state": request.first_init_state, "seed": request.seed, "stochastic": request.stochastic,
                "std": request.std, "noise": request.noise, "processes": world_size}
    if request.repeats != 1:  # only then: a killed evaluation logged before --repeats existed still resumes
        settings["repeats"] = request.repeats
    if request.temperature is not None:  # likewise
        settings["temperature"] = request.temperature
    return settings


def replay_outcome(plan: ReplayPlan, summary: dict | None, out: pathlib.Path) -> int:
    """Print what differs between the replayed report and the new one in ``out`` (main rank: ``summary`` is not
    None); 1 if an outcome differs."""
    if summary is None:
        return 0
    with open(out / "eval.json") as handle:
        new = json.load(handle)
    lines = replay_differences(plan, new["receipt"], new["episodes"])
    outcomes = [line for line in lines if line.startswith("episode ")]
    for line in lines:
        print(line)
    print(f"replay: {len(plan.episodes) - len(outcomes)} of {len(plan.episodes)} episodes as reported"
          f"{'' if outcomes else ' (all)'}; new report {out / 'eval.json'}")
    return 1 if outcomes else 0


def evaluate_episodes(env_cfg, kwargs: dict, policy, args: EvalRequest, video_episodes: int,
                      dist: Distributed, out: pathlib.Path, header: str,
                      specs: list[EpisodeSpec] | None = None, contract: dict | None = None) -> dict | None:
    """Play the chosen episodes (``specs``, or the suite's tasks x init states that the request ``args`` selects) in
    ``env_cfg``'s envs and write ``eval.md``, ``eval.json`` (with the receipt) and videos to ``out``; returns the
    summary on the main rank (None elsewhere). ``contract``: the checkpoint's, checked against the env first
    (:class:`~vla_gym.trainers.runtime.contract.ContractError` naming the fix)."""
    wrappers = env_cfg.wrappers  # the receipt's: without the recorder
    only_failed = None if args.failed_starts is None else sorted(map(list, args.failed_starts), key=str)
    # a killed evaluation of the same plan resumes: its finished episodes (and their recordings) are kept
    plan = {**report_settings(args, dist.world_size), "env": {"id": env_cfg.id, "kwargs": {**env_cfg.kwargs, **kwargs},
                                                              "wrappers": wrappers},
            "num_envs": args.num_envs, "video_episodes": video_episodes, "record_dataset": args.record_dataset,
            "successes_only": args.successes_only, "specs": None if specs is None else [dataclasses.asdict(s) for s in specs],
            "only_failed_in": only_failed}
    resume = EpisodeLog.matches(out / "partial", plan)
    dist.barrier()  # every rank has read the plan before the main one may start afresh
    log = EpisodeLog.open(out / "partial", plan, dist.rank, reset=not resume) if dist.is_main else None
    staging = pathlib.Path(args.record_dataset) / ".staging" if args.record_dataset else None
    if staging is not None and dist.is_main and not resume:
        shutil.rmtree(staging, ignore_errors=True)  # a killed recording of another plan
    dist.barrier()
    log = log or EpisodeLog.open(out / "partial", plan, dist.rank, reset=False)
    if staging is not None:
        env_cfg = dataclasses.replace(env_cfg, wrappers=recording_wrappers(staging, env_cfg.wrappers,
                                                                           successes_only=args.successes_only))
    envs = make_envs(env_cfg, args.num_envs, kwargs=kwargs)
    try:
        waived = []
        if contract is not None:
            waived = check_contract(contract, env_contract(envs), "trainers/eval.py",
                                    waive=("flip", "textures") if args.allow_render_shift else ())
            for problem in waived if dist.is_main else ():
                print(f"eval.py: --allow-render-shift: the checkpoint was trained on {problem}", file=sys.stderr)
        if specs is None:
            specs = suite_specs(envs, args.episodes_per_task, args.tasks, seed=args.seed,
                                first_init_state=args.first_init_state, repeats=args.repeats)
            if args.failed_starts is not None:  # each kept episode keeps the seed it has in the full plan
                specs = [s for s in specs if (s.task_id, s.init_state_id) in args.failed_starts]
                if not specs:
                    raise SystemExit("trainers/eval.py: --only-failed-in: every selected (task, init state) "
                                     "succeeded in that report: nothing to play")
        mine = specs[dist.rank::dist.world_size]
        if log.results:
            print(f"eval.py: resuming: {len(log.results)} of this process's {len(mine)} episodes were played "
                  f"({log.path})", flush=True)
        video_dir = out / "videos" if dist.is_main and video_episodes else None
        # sampled actions: each episode's generator is drawn from this seed (and the rank), so a sampled report
        # plays the same noise again (a replay, a resumed run) with the same number of processes
        torch.manual_seed(args.seed * 65537 + dist.rank)
        EpisodeRunner(envs, policy).run(mine, deterministic=not args.stochastic, video_dir=video_dir,
                                        video_episodes=video_episodes, skip=log.done(), on_result=log.append)
        results = [log.results[k] for k in sorted(log.results)]
        gathered = [r for part in dist.gather_objects(results) for r in part]
        if not dist.is_main:
            return None
        env_kwargs = {**env_cfg.kwargs, **kwargs}
        stamp = receipt(env_cfg.id, env_kwargs, args.checkpoint, camera_contract(
            envs.single_observation_space, env_kwargs, env_attr(envs, "texture_colorspace")))
        stamp["env"]["wrappers"] = wrappers
        settings = {"checkpoint": str(args.checkpoint), "deterministic": not args.stochastic, "std": args.std,
                    "noise": args.noise, "temperature": args.temperature, "repeats": args.repeats, "seed": args.seed, "num_envs": args.num_envs, "processes": dist.world_size,
                    "render_shift": waived, "only_failed_in": only_failed}
        summary = write_report(gathered, out, header=f"{header} ({len(gathered)} episodes)", receipt=stamp,
                               settings=settings)
        print(markdown_table(summary), end="")
        print(f"report: {out / 'eval.md'}, {out / 'eval.json'}")
        if staging is not None:
            written = write_rollout_dataset(staging, args.record_dataset, gathered, args.successes_only, stamp,
                                            settings, ROBOT_TYPES.get(check_env_id(env_cfg.id).backend)
                                            if env_cfg.id.startswith("VLA/") else None)
            print(f"dataset: {args.record_dataset} ({written['episodes']} episodes, {written['frames']} frames; "
                  f"sft.dataset={args.record_dataset})")
        log.remove()  # the report (and dataset) are written: a rerun evaluates afresh
        for result in results:
            if result.video:
                print(f"video: {result.video}")
        return summary
    finally:
        envs.close()


if __name__ == "__main__":
    sys.exit(main())
