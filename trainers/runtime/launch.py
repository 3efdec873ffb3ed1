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
import dataclasses
import inspect
import os
import pathlib
import re
import sys
from typing import Any

import gymnasium as gym
import torch
import yaml

from vla_gym.core.errors import MissingSimulatorError, RenderingUnavailableError
from vla_gym.core.registry import UnknownEnvError, check_env_id
from vla_gym.runtime.cli_args import parser_with_examples
from vla_gym.trainers.policies import check_policy_kwargs, policy_class
from vla_gym.trainers.policies.pretrained import PretrainedModelError, require_pretrained
from vla_gym.trainers.runtime.checkpoint import CheckpointError, load_checkpoint
from vla_gym.trainers.runtime.config import Config, ConfigError, PolicyConfig, load_config
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


def resolve_config(args: argparse.Namespace):
    """``(config, None)`` for a trainer's command line, or ``(None, exit code)`` once a config error or
    ``--print-config`` has been printed."""
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return None, 2
    if args.print_config:
        print(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
        return None, 0
    return cfg, None


def train_main(algo_cls, argv: list[str] | None = None) -> int:
    """The entry point of ``trainers/{ppo,grpo,sft}.py``. A trainer class may set ``cli_description``,
    ``setup_errors`` (exceptions of ``from_config`` whose message says what to do: exit code 2) and
    ``summary_lines(self)`` (what rank 0 prints at the end)."""
    description = getattr(algo_cls, "cli_description", f"Train with {algo_cls.__name__} (see docs/trainers.md)")
    script = f"trainers/{algo_cls.algo}.py"
    example = getattr(algo_cls, "cli_example_config", "examples/configs/cartpole_ppo.yaml")
    cfg, exit_code = resolve_config(parse_args(argv, description, script, example))
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
    try:
        algo.learn()
        if dist.is_main:
            print("\n".join(getattr(algo_cls, "summary_lines", run_summary_lines)(algo)), flush=True)
    except (ContractError, ConfigError, CheckpointError) as exc:  # checkpoint.resume into another env, ...
        _discard_unstarted(algo)
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except BaseException:
        _discard_unstarted(algo)
        raise
    finally:
        algo.close()
        dist.close()
    return 0


def _discard_unstarted(algo) -> None:
    """Remove the run directory of a run that failed before its first update (when this run made it)."""
    run = getattr(algo, "run", None)
    if run is not None and getattr(algo, "num_updates", 0) == 0:
        run.discard()


# ------------------------------------------------------------------------------------------- bad input
def check_config(cfg: Config, algo: str | None) -> None:
    """What can be checked before anything is built or written: ``env.id`` is registered, ``policy.name``
    resolves, ``policy.kwargs`` are its options (the required ones given, a pretrained ``model`` on disk or
    downloadable) and, for a trainer (``algo``: ``ppo``, ``grpo``, ``sft``), ``{algo}.init_checkpoint`` is a
    checkpoint of the same policy and ``checkpoint.resume`` exists. Raises :class:`ConfigError` naming the key and
    the fix."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but torch sees no CUDA device here: set device=cpu (or device=auto)")
    runs_here = _check_env_id(cfg.env.id)
    # without the env's simulator, building the env says what to install (exit 1) before any model is looked for
    cls = check_policy(cfg.policy, model=runs_here)
    if algo is None:  # evaluating a checkpoint: its training's init_checkpoint and resume do not matter
        return
    init = getattr(getattr(cfg, algo, None), "init_checkpoint", None)
    if init:
        _check_init_checkpoint(f"{algo}.init_checkpoint", init, cls, cfg.policy.name)
    resume = cfg.checkpoint.resume
    if resume and resume != "auto" and not pathlib.Path(resume).is_file():
        raise ConfigError(f"checkpoint.resume={resume}: no such file; pass a checkpoint file, checkpoint.resume=auto "
                          "(the newest in the run directory, if any) or checkpoint.resume=null (start afresh)")


def _check_env_id(env_id: str) -> bool:
    """ConfigError for an id nothing registers; False for a vla_gym id whose simulator is not installed here."""
    if env_id.startswith("VLA/"):
        try:
            return check_env_id(env_id).available()
        except UnknownEnvError as exc:
            raise ConfigError(f"env.id: {exc}") from None
    if ":" not in env_id:  # "package.module:Id" is imported by gymnasium.make; a plain id must be registered
        try:
            gym.spec(env_id)
        except gym.error.Error as exc:
            raise ConfigError(f"env.id={env_id}: {exc} Pass a gymnasium id (CartPole-v1) or a vla_gym id "
                              "(`vla-gym list`)") from None
    return True


def check_policy(policy: PolicyConfig, model: bool = True) -> type:
    """The policy class of ``policy.name``, after checking ``policy.kwargs`` against its constructor (unknown and
    missing options) and, with ``model``, that a pretrained ``policy.kwargs.model`` is on disk or downloadable;
    :class:`ConfigError` naming the key otherwise."""
    try:
        cls = policy_class(policy.name)
    except (KeyError, TypeError, ImportError, AttributeError) as exc:
        raise ConfigError(f"policy.name={policy.name}: {_text(exc)}") from None
    try:
        check_policy_kwargs(policy.name, policy.kwargs)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    params = inspect.signature(cls.__init__).parameters
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    missing = [key for key, param in params.items() if key not in ("self", "observation_space", "action_space")
               and param.kind in kinds and param.default is param.empty and key not in policy.kwargs]
    if missing:
        raise ConfigError(f"policy.kwargs.{missing[0]} is not set: policy {policy.name!r} needs it "
                          f"(policy.kwargs.{missing[0]}=...)")
    name = policy.kwargs.get("model")
    if model and "model" in params and isinstance(name, (str, os.PathLike)):
        try:
            require_pretrained(name, "policy.kwargs.model")
        except PretrainedModelError as exc:
            raise ConfigError(str(exc)) from None
    return cls


def _check_init_checkpoint(key: str, path: str, cls: type, name: str) -> None:
    """The file exists, reads, and holds a policy of the configured class (a subclass either way is fine)."""
    file = pathlib.Path(path)
    if not file.is_file():
        raise ConfigError(f"{key}={path}: no such file; pass a checkpoint of trainers/ppo.py, grpo.py or sft.py "
                          "(runs/<name>/checkpoints/ckpt_*.pt, or an SFT run's final.pt)")
    try:  # memory-mapped: the weights are not read
        state = torch.load(file, map_location="cpu", weights_only=False, mmap=True)
    except Exception:  # an older format or a damaged file: the plain load says which
        try:
            state = load_checkpoint(file)
        except CheckpointError as exc:
            raise ConfigError(f"{key}: {exc}") from None
    if not isinstance(state, dict) or "policy" not in state:
        raise ConfigError(f"{key}={path} is not a checkpoint of trainers/ppo.py, grpo.py or sft.py (it holds no "
                          "policy)")
    trained = state.get("policy_name")
    if trained is None:  # the policy was passed to the trainer as an instance: only its weights can say
        return
    try:
        trained_cls = policy_class(trained)
        same = issubclass(cls, trained_cls) or issubclass(trained_cls, cls)
    except (KeyError, TypeError, ImportError, AttributeError):
        same = trained == name
    if not same:
        kwargs = " ".join(f"policy.kwargs.{k}={_value(v)}" for k, v in (state.get("policy_kwargs") or {}).items())
        raise ConfigError(f"{key}={path} holds a {trained!r} policy, this config builds policy.name={name}: pass "
                          f"policy.name={trained}{' ' + kwargs if kwargs else ''}, or a checkpoint of a {name!r} policy")


#: where a config's values become objects: an error raised inside one of these is about the values they were given
_BUILDERS = {
    ("vla_gym.trainers.runtime.envs", "make_envs"): "env",
    ("vla_gym.trainers.policies", "make_policy"): "policy",
    ("vla_gym.trainers.runtime.checkpoint", "load_actor_weights"): "init_checkpoint",
}
#: the errors a builder raises about its input (others are bugs: their traceback is kept)
_INPUT_ERRORS = (ValueError, TypeError, KeyError, FileNotFoundError, NotImplementedError, gym.error.Error)


def explain_setup_error(exc: BaseException, cfg: Config) -> str | None:
    """One line naming the setting and the fix for an error raised while the trainer built its env, policy or
    initial weights from ``cfg`` (``config error: ...``), or None when ``exc`` is not such an error."""
    if isinstance(exc, (ConfigError, PretrainedModelError)):
        return f"config error: {_text(exc)}"
    if not isinstance(exc, _INPUT_ERRORS):
        return None
    builder, tb = None, exc.__traceback__
    while tb is not None and builder is None:
        frame = tb.tb_frame
        builder = _BUILDERS.get((frame.f_globals.get("__name__"), frame.f_code.co_name))
        tb = tb.tb_next
    if builder is None:
        return None
    text = _text(exc)
    if builder == "env":
        if re.search(r"\benv\.", text):  # the message names its setting already
            return f"config error: {text}"
        named = [key for key in cfg.env.kwargs if re.search(rf"\b{re.escape(str(key))}\b", text)]
        if named:
            given = " ".join(f"env.kwargs.{key}={_value(cfg.env.kwargs[key])}" for key in named)
            return (f"config error: {given}: {cfg.env.id} rejects it: {text} (fix or drop "
                    f"{', '.join(f'env.kwargs.{key}' for key in named)})")
        return f"config error: env.id={cfg.env.id} cannot be made: {text} (check env.id, env.kwargs, env.wrappers)"
    if builder == "policy" and not re.search(r"\bpolicy\.", text):
        return (f"config error: policy.name={cfg.policy.name} cannot be built for env.id={cfg.env.id}: {text} "
                "(check policy.kwargs)")
    return f"config error: {text}"


def _text(exc: BaseException) -> str:
    """An error's message on one line (a KeyError's without the quotes its str adds)."""
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str) else str(exc)
    text = text.split(" was raised from the environment creator for ")[0]  # gymnasium.make's long suffix
    return " ".join(text.split())


def _value(value: Any) -> str:
    """A value as it is written on the command line (``key=value``)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()
    return re.sub(r",\s+", ",", text)  # [64,64]: one command-line argument


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
