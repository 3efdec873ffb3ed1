"""The command line shared by ``trainers/ppo.py`` and ``trainers/grpo.py``.

    python trainers/ppo.py --config examples/configs/cartpole_ppo.yaml [key.sub=value ...] [--print-config]
    torchrun --nproc_per_node=2 trainers/ppo.py --config ...          # one process per rank
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=HOST:29500 trainers/grpo.py --config ...

Rank 0 prints where the run went: ``{run_dir}/{name}/`` holds ``config.yaml`` (resolved), ``tensorboard/``,
``checkpoints/ckpt_<update>.pt`` and, when ``eval.episodes > 0``, ``eval/eval.md``, ``eval/eval.json`` and
``eval/videos/*.mp4``.

Bad input ends the command with one line on stderr that names the setting and the fix, exit code 2 (1: the env's
simulator is not installed here), and nothing written: :func:`check_config` checks what needs nothing built (the
env id, the policy, its options and pretrained model, ``init_checkpoint``, ``checkpoint.resume``) before the
trainer starts; an error raised while the env, the policy or the initial weights are built from the config is
said in one line (:func:`explain_setup_error`); a run directory made by a run that fails before its first update
is removed.
"""
from __future__ import annotations

import argparse
import sys

import yaml

from vla_gym.core.errors import MissingSimulatorError, RenderingUnavailableError
from vla_gym.runtime.cli_args import parser_with_examples
from vla_gym.trainers.runtime.checkpoint import CheckpointError
from vla_gym.trainers.runtime.config import ConfigError, config_dict, load_config
from vla_gym.trainers.runtime.config_checks import check_config, explain_setup_error
from vla_gym.trainers.runtime.contract import ContractError
from vla_gym.trainers.runtime.distributed import Distributed


def parse_args(argv: list[str] | None, description: str, script: str = "trainers/ppo.py",
               example_config: str = "examples/configs/cartpole_ppo.yaml") -> argparse.Namespace:
    parser = parser_with_examples(None, description, [
        f"python {script} --config {example_config}",
        f"python {script} --config {example_config} seed=1 name=seed1      # overrides: key.sub=value",
        f"torchrun --nproc_per_node=2 {script} --config {example_config}",
        f"python {script} --config {example_config} --print-config",
    ])
    parser.add_argument("--config", help="YAML config (default: built-in defaults)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="config overrides")
    return parser.parse_args(argv)


def resolve_config(args: argparse.Namespace, algo: str | None = None):
    """``(config, None)`` for a trainer's command line, or ``(None, exit code)`` once a config error or
    ``--print-config`` has been printed (with only ``algo``'s section of the algorithms')."""
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return None, 2
    if args.print_config:
        print(yaml.safe_dump(config_dict(cfg, algo), sort_keys=False))
        return None, 0
    return cfg, None


def train_main(algo_cls, argv: list[str] | None = None) -> int:
    """The entry point of ``trainers/{ppo,grpo,sft}.py``. A trainer class may set ``cli_description``,
    ``setup_errors`` (exceptions of ``from_config`` whose message says what to do: exit code 2) and
    ``summary_lines(self)`` (what rank 0 prints at the end)."""
    description = getattr(algo_cls, "cli_description", f"Train with {algo_cls.__name__} (see docs/trainers.md)")
    script = f"trainers/{algo_cls.algo}.py"
    example = getattr(algo_cls, "cli_example_config", "examples/configs/cartpole_ppo.yaml")
    cfg, exit_code = resolve_config(parse_args(argv, description, script, example), algo_cls.algo)
    if cfg is None:
        return exit_code
    try:
        check_config(cfg, algo_cls.algo)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    name = algo_cls.__name__.lower()
    dist = Distributed.from_env(cfg.device)
    try:
        algo = algo_cls.from_config(cfg, dist=dist, write_run=True)
    except (MissingSimulatorError, RenderingUnavailableError) as exc:  # the message says what to install
        print(f"error: {cfg.env.id} cannot run on this machine.\n{exc}", file=sys.stderr)
        dist.close()
        return 1
    except Exception as exc:
        line = explain_setup_error(exc, cfg)
        if line is None and isinstance(exc, getattr(algo_cls, "setup_errors", ())):  # e.g. SFT without its dataset
            line = f"{name}: {exc}"
        dist.close()
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
    completed = False
    try:
        algo.learn()
        if dist.is_main:
            print("\n".join(getattr(algo_cls, "summary_lines", run_summary_lines)(algo)), flush=True)
        completed = True
    except (ContractError, ConfigError, CheckpointError) as exc:  # checkpoint.resume into another env, ...
        _discard_unstarted(algo)
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except BaseException:
        _discard_unstarted(algo)
        raise
    finally:
        algo.close()
        dist.close(synchronize=completed)
    return 0


def _discard_unstarted(algo) -> None:
    """Remove the run directory of a run that failed before its first update (when this run made it)."""
    run = getattr(algo, "run", None)
    if run is not None and getattr(algo, "num_updates", 0) == 0:
        run.discard()


def run_summary_lines(algo) -> list[str]:
    """Where a PPO/GRPO run went: directory, config, TensorBoard, last checkpoint, evaluation, videos."""
    run = algo.run_path
    lines = [f"run directory: {run}", f"  config:      {run / 'config.yaml'}"]
    if algo.cfg.logging.tensorboard:
        lines.append(f"  tensorboard: tensorboard --logdir {run / 'tensorboard'}")
    latest = algo.run.checkpointer.latest() if algo.run.checkpointer else None
    if latest:
        lines.append(f"  checkpoint:  {latest}")
    if algo.last_eval:
        overall = algo.last_eval["overall"]
        lines.append(f"  evaluation:  success {overall['success_rate']:.3f}, return {overall['mean_return']:.2f} "
                     f"over {overall['episodes']} episodes -> {run / 'eval' / 'eval.md'}".replace("success nan, ", ""))
        for video in algo.last_eval.get("videos", []):
            lines.append(f"  video:       {video}")
    return lines


def logs_and_evaluation_lines(algo) -> list[str]:
    """The end of a trainer's summary: where its TensorBoard is and its final evaluation's success (SFT, residual)."""
    lines = []
    if algo.run_path is not None and algo.cfg.logging.tensorboard:
        lines.append(f"  tensorboard: tensorboard --logdir {algo.run_path / 'tensorboard'}")
    if algo.last_eval:
        overall = algo.last_eval["overall"]
        lines.append(f"  evaluation:  success {overall['success_rate']:.3f} over {overall['episodes']} episodes")
    return lines
