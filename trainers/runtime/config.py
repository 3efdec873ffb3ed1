"""Run configuration: YAML file + ``key.sub=value`` overrides, validated against dataclasses.

    >>> cfg = load_config("examples/configs/cartpole_ppo.yaml", ["ppo.learning_rate=1e-3", "env.num_envs=4"])  # doctest: +SKIP
    >>> cfg.ppo.learning_rate                                                                                   # doctest: +SKIP
    0.001

Every key must exist in the schema and every value must have the field's type; otherwise :class:`ConfigError`
names the key (with the closest valid names). The run's sections are here (env, policy, logging, checkpoint,
eval, rollout, distributed); each algorithm's settings are next to it (``trainers/algorithms/<algo>_config.py``),
and a run writes only its own algorithm's section (:func:`config_dict`). ``env.kwargs`` and ``policy.kwargs`` are
free-form dicts: the first goes to the env constructor, the second is checked against the policy's constructor.
Override values are parsed as YAML (``a.b=[64,64]``, ``a.b=null``, ``a.b=true``). ``save_config`` writes the
resolved config that a run used; :func:`config_from_checkpoint` reads any older run's.
"""
from __future__ import annotations

import dataclasses
import pathlib
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from vla_gym.trainers.algorithms.grpo_config import GRPOConfig
from vla_gym.trainers.algorithms.ppo_config import PPOConfig
from vla_gym.trainers.algorithms.residual_config import ResidualConfig
from vla_gym.trainers.algorithms.sft_config import SFTConfig
from vla_gym.trainers.runtime.schema import ConfigError, apply_overrides, at_least_one, build, known_keys, yaml_problem
from vla_gym.vector.wrapper_spec import WrapperSpecError, check_wrapper_specs

__all__ = ["Config", "ConfigError", "EnvConfig", "PolicyConfig", "PPOConfig", "GRPOConfig", "SFTConfig",
           "ResidualConfig", "LoggingConfig", "CheckpointConfig", "EvalConfig", "RolloutConfig", "DistributedConfig",
           "ALGORITHMS", "config_dict", "config_from_dict", "config_from_checkpoint", "load_config", "save_config"]

#: the algorithms' sections of a run config
ALGORITHMS = ("ppo", "grpo", "sft", "residual")


@dataclass
class EnvConfig:
    id: str = "CartPole-v1"
    #: environments in all, split evenly over the ranks
    num_envs: int = 8
    vectorization: Literal["sync", "async"] = "sync"
    #: keyword arguments of the env constructor (e.g. obs_mode, task_id, max_episode_steps)
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: wrapper specs handed to vla_gym.make_vec (vla_gym env ids only), innermost first: EpisodeMetrics,
    #: package.module:Class or {name: ActionChunk, kwargs: {chunk_size: 8}} (vla_gym/vector/wrapper_spec.py)
    wrappers: list[Any] = field(default_factory=list)
    #: vectorization async: seconds a sub-env's step or reset may take before its worker counts as failed (null: no
    #: limit); docs/reliability.md
    step_timeout: float | None = 120.0
    #: vectorization async: "respawn" restarts a failed (hung, dead, raising) worker and ends its episode as truncated
    #: with info["env_failure"]; "raise" stops the run (WorkerCrashedError)
    on_worker_failure: Literal["respawn", "raise"] = "respawn"
    #: with respawn: a sub-env that fails more often than this in a row stops the run
    max_worker_restarts: int = 3

    def __post_init__(self):
        at_least_one("env", {"num_envs": self.num_envs})
        if self.step_timeout is not None and not self.step_timeout > 0:
            raise ConfigError(f"env.step_timeout={self.step_timeout}: must be a positive number of seconds, or null")
        if self.max_worker_restarts < 0:
            raise ConfigError(f"env.max_worker_restarts={self.max_worker_restarts}: must be at least 0")


@dataclass
class PolicyConfig:
    #: a registered name (mlp, cnn, ...) or "package.module:Class"
    name: str = "mlp"
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class WandbConfig:
    enabled: bool = False
    project: str = "vla_gym"
    entity: str | None = None
    mode: Literal["online", "offline", "disabled"] = "online"


@dataclass
class LoggingConfig:
    #: log scalars every this many updates
    log_interval: int = 1
    tensorboard: bool = True
    progress_bar: bool = True
    wandb: WandbConfig = field(default_factory=WandbConfig)

    def __post_init__(self):
        at_least_one("logging", {"log_interval": self.log_interval})


@dataclass
class CheckpointConfig:
    #: save every this many updates (0: only at the end)
    every: int = 10
    keep_last: int = 3
    #: null: start fresh; "auto": latest checkpoint in the run dir if any; or a checkpoint path
    resume: str | None = "auto"

    def __post_init__(self):
        at_least_one("checkpoint", {"keep_last": self.keep_last})
        if self.every < 0:
            raise ConfigError(f"checkpoint.every={self.every}: must be 0 (only at the end) or positive")


@dataclass
class EvalConfig:
    #: evaluate every this many updates (0: only at the end of training)
    every: int = 0
    #: episodes per evaluation
    episodes: int = 20
    num_envs: int = 1
    deterministic: bool = True
    #: after the final evaluation, record videos of its first video_episodes episodes (rank 0)
    video: bool = False
    video_episodes: int = 2
    #: env kwargs that update env.kwargs for evaluation
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: env kwargs that update those again for the video env (e.g. cameras=[main] or render_mode=rgb_array)
    video_env_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        at_least_one("eval", {"num_envs": self.num_envs})
        if self.episodes < 0:
            raise ConfigError(f"eval.episodes={self.episodes}: must be 0 (no evaluation) or positive")


@dataclass
class RolloutConfig:
    #: S: split each process's envs into S stages that step in turn while the policy infers for the next one
    #: (trainers/rollout/pipeline.py); S must divide the envs per process and needs env.vectorization=async; the same
    #: trajectories as 1 (docs/scale.md)
    pipeline_stages: int = 1

    def __post_init__(self):
        at_least_one("rollout", {"pipeline_stages": self.pipeline_stages})


@dataclass
class DistributedConfig:
    #: ddp: a whole policy per rank, gradients averaged (LoRA, models that fit once per device); fsdp: FSDP2 shards
    #: parameters, gradients and optimizer state over the ranks (full fine-tunes of models that do not fit)
    strategy: Literal["ddp", "fsdp"] = "ddp"


@dataclass
class Config:
    #: the run writes to {run_dir}/{name}/ (config.yaml, tensorboard/, checkpoints/, eval/)
    name: str = "run"
    run_dir: str = "runs"
    seed: int = 0
    #: environment steps in all (over all ranks)
    total_timesteps: int = 100_000
    #: stop training after this many seconds of learn() (then checkpoint and evaluate as usual); null: no limit
    time_limit_s: float | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    #: torch intra-op threads per process (0: leave torch's default)
    torch_threads: int = 1
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    residual: ResidualConfig = field(default_factory=ResidualConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)

    @property
    def path(self) -> pathlib.Path:
        return pathlib.Path(self.run_dir) / self.name


def config_from_dict(data: dict | None, overrides: list[str] = ()) -> Config:
    """Validate ``data`` (plus ``key.sub=value`` overrides) into a :class:`Config`."""
    cfg = build(Config, apply_overrides(data or {}, overrides))
    try:  # a bad wrapper entry fails here, before any env is built
        check_wrapper_specs(cfg.env.wrappers, key="env.wrappers")
    except WrapperSpecError as exc:
        raise ConfigError(str(exc)) from None
    return cfg


def config_from_checkpoint(data: dict | None, overrides: list[str] = ()) -> Config:
    """The config a checkpoint saved (plus ``key.sub=value`` overrides) in today's schema: keys an older vla_gym
    wrote and this one no longer has are dropped, as they were written by the program, not typed by a user (older
    checkpoints hold every algorithm's section and settings removed since). The overrides stay strict. This is the
    one migration of older configs.

    >>> config_from_checkpoint({"seed": 3, "residual": {"init_checkpoint": None}}).seed
    3
    """
    return config_from_dict(known_keys(Config, data or {}), overrides)


def load_config(path: str | pathlib.Path | None, overrides: list[str] = ()) -> Config:
    """Read a YAML file (or start from defaults with ``path=None``) and apply overrides."""
    data = {}
    if path is not None:
        path = pathlib.Path(path)
        if not path.is_file():
            raise ConfigError(f"--config {path}: no such file; pass a YAML config, e.g. --config "
                              "examples/configs/cartpole_ppo.yaml (the examples: ls examples/configs)")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"--config {path} is not valid YAML: {yaml_problem(exc)}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level of a config must be a mapping")
    return config_from_dict(data, overrides)


def config_dict(cfg: Config, algo: str | None = None) -> dict[str, Any]:
    """``cfg`` as plain data, with only ``algo``'s section of the algorithms' (all of them when ``algo`` is None):
    what a run's config.yaml and checkpoints hold.

    >>> sorted(set(config_dict(Config(), "grpo")) & set(ALGORITHMS))
    ['grpo']
    """
    data = dataclasses.asdict(cfg)
    return {key: value for key, value in data.items() if algo is None or key not in ALGORITHMS or key == algo}


def save_config(cfg: Config, path: str | pathlib.Path, algo: str | None = None) -> None:
    """The resolved config as YAML (only ``algo``'s algorithm section)."""
    pathlib.Path(path).write_text(yaml.safe_dump(config_dict(cfg, algo), sort_keys=False))
