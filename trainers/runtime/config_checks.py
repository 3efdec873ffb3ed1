"""What can be wrong with a config, found before anything is built or written, and the one line that names the
fix for an error raised while the env, policy or initial weights are built (``trainers/*.py``, ``trainers/eval.py``).

    check_config(cfg, "ppo")                     # ConfigError: env.id, policy.name/kwargs, model, init_checkpoint
    line = explain_setup_error(exc, cfg)         # "config error: env.kwargs.obs_mode=rgb: ... rejects it: ..."
"""
from __future__ import annotations

import inspect
import os
import pathlib
import re
from typing import Any

import gymnasium as gym
import torch
import yaml

from vla_gym.core.registry import UnknownEnvError, check_env_id
from vla_gym.trainers.policies import check_policy_kwargs, policy_class
from vla_gym.trainers.policies.pretrained import PretrainedModelError, require_pretrained
from vla_gym.trainers.runtime.checkpoint import CheckpointError, load_checkpoint
from vla_gym.trainers.runtime.config import Config, ConfigError, PolicyConfig


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
