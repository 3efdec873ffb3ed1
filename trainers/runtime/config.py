"""Run configuration: YAML file + ``key.sub=value`` overrides, validated against dataclasses.

    >>> cfg = load_config("examples/configs/cartpole_ppo.yaml", ["ppo.learning_rate=1e-3", "env.num_envs=4"])  # doctest: +SKIP
    >>> cfg.ppo.learning_rate                                                                                   # doctest: +SKIP
    0.001

Every key must exist in the schema below and every value must have the field's type; otherwise
:class:`ConfigError` names the key (with the closest valid names). ``env.kwargs`` and
``policy.kwargs`` are free-form dicts: the first goes to the env constructor, the second is checked
against the policy's constructor. Override values are parsed as YAML (``a.b=[64,64]``,
``a.b=null``, ``a.b=true``). ``save_config`` writes the resolved config that a run used.
"""
from __future__ import annotations

import dataclasses
import difflib
import pathlib
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import yaml

from vla_gym.vector.wrapper_spec import WrapperSpecError, check_wrapper_specs


class ConfigError(ValueError):
    """A config key or value is invalid; the message names the key."""


def _at_least_one(section: str, values: dict[str, int | None]) -> None:
    """Counts that must be 1 or more (None: unset, allowed)."""
    for key, value in values.items():
        if value is not None and value < 1:
            raise ConfigError(f"{section}.{key}={value}: must be at least 1")


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
        _at_least_one("env", {"num_envs": self.num_envs})
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
class PPOConfig:
    #: vector steps per rollout (each env contributes n_steps transitions)
    n_steps: int = 128
    #: minibatch size over all ranks; n_steps * env.num_envs / batch_size minibatches per epoch
    batch_size: int = 64
    n_epochs: int = 10
    learning_rate: float = 3e-4
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    clip_range: float = 0.2
    clip_schedule: Literal["constant", "linear", "cosine"] = "constant"
    #: value clipping around the rollout's values; null disables it
    clip_range_vf: float | None = None
    gamma: float = 0.99
    gae_lambda: float = 0.95
    #: bootstrap V(final obs) at terminations too, as at truncations: for envs that terminate on success with a
    #: dense reward (ManiSkill), so that succeeding is worth as much as staying successful (ManiSkill's PPO does so)
    bootstrap_terminated: bool = False
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float | None = 0.5
    normalize_advantage: bool = True
    #: stop an update's epochs early once the (all-ranks) approx KL exceeds this; null disables it
    target_kl: float | None = None
    adam_eps: float = 1e-5
    #: checkpoint (SFT, PPO or GRPO) whose actor to start from; a critic it lacks starts fresh
    init_checkpoint: str | None = None
    #: the first N updates train the critic only (the actor takes no step): a fresh value head on an SFT actor
    critic_warmup_updates: int = 0
    #: sample with this std in every action dimension from the start (after ``init_checkpoint``); null: the policy's
    exploration_std: float | None = None
    #: where the probability ratio lives, as GRPO's ``ratio_level``: chunk (one per action), step (per env step of a
    #: chunk) or dim (per action dimension; clip and approx_kl/target_kl per dimension). step and dim need a policy
    #: with per-dimension log-probs (``per_dim``, trainers/policies/base.py)
    ratio_level: Literal["chunk", "step", "dim"] = "chunk"

    def __post_init__(self):
        _at_least_one("ppo", {"n_steps": self.n_steps, "batch_size": self.batch_size, "n_epochs": self.n_epochs})
        if self.exploration_std is not None and not self.exploration_std > 0:
            raise ConfigError(f"ppo.exploration_std={self.exploration_std}: must be positive")
        if self.critic_warmup_updates < 0:
            raise ConfigError(f"ppo.critic_warmup_updates={self.critic_warmup_updates}: must be 0 (off) or positive")


@dataclass
class GRPOConfig:
    #: rollouts per group; all start from the same initial state (same seed / task / init state)
    group_size: int = 8
    #: groups per update over all ranks (a multiple of the number of processes); a group never spans ranks
    groups_per_update: int = 4
    #: trajectory score: 1.0 if success at any step, or the episode return
    score: Literal["success", "return"] = "success"
    #: divide by the group's standard deviation (GRPO); false gives a plain group baseline (Dr. GRPO)
    normalize_std: bool = False
    #: skip groups whose scores are all equal (zero advantage, no signal)
    filter_uniform_groups: bool = False
    n_epochs: int = 4
    #: minibatch size (transitions, over all ranks)
    batch_size: int = 1024
    learning_rate: float = 1e-4
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    clip_range: float = 0.2
    ent_coef: float = 0.0
    #: weight of the KL(policy || frozen initial policy) penalty; 0 disables the reference policy
    kl_coef: float = 0.0
    max_grad_norm: float | None = 1.0
    target_kl: float | None = None
    adam_eps: float = 1e-5
    #: checkpoint (SFT, PPO or GRPO) whose actor to start from; its critic, if any, is dropped
    init_checkpoint: str | None = None
    #: sample with this std in every action dimension from the start (after ``init_checkpoint``, whose SFT by MSE
    #: never trained the log std); null: the policy's own. The noise's shape is ``policy.kwargs.noise``
    exploration_std: float | None = None
    #: draw each group's fixed initial state among the first N of its task's (null: all), so that the states
    #: from N on stay held out for evaluation (``trainers/eval.py --first-init-state N``)
    train_init_states: int | None = None
    #: where PPO's probability ratio lives (the clip, approx_kl, target_kl and the KL term follow it): chunk, one per
    #: action (chunk): the joint log-prob of its K x A dims; step, one per env step of a chunk (its A dims summed);
    #: dim, one per action dimension (RLinf / SimpleVLA-RL: per action token). step and dim need a policy that
    #: gives per-dimension log-probs (``per_dim``, trainers/policies/base.py)
    ratio_level: Literal["chunk", "step", "dim"] = "chunk"
    #: asymmetric clipping of the ratio to [1 - low, 1 + high] (DAPO's clip-higher: 0.2 / 0.28); null: clip_range
    clip_range_low: float | None = None
    clip_range_high: float | None = None
    #: leave the sub-actions of a chunk that the env did not run (after the episode ended inside the chunk,
    #: ActionChunk's info["chunk_steps"]) out of the log-probs and ratios (needs a per_dim policy)
    mask_unexecuted: bool = False
    #: store and score the action clipped to the action space (what the env executed) instead of the sampled one,
    #: at the rollout and the update alike (needs a policy whose act takes executed=True)
    logprob_of_executed: bool = False
    #: transition: the loss is a mean over transitions (long episodes weigh more); episode: each episode's
    #: transitions weigh 1 / its number of transitions, so that every episode counts the same
    loss_weighting: Literal["transition", "episode"] = "transition"
    #: dynamic sampling: play rounds of groups_per_update new groups until the update holds this many mixed groups
    #: (over all ranks) or max_sampling_rounds rounds ran; 0: one round (off). Needs filter_uniform_groups
    min_mixed_groups: int = 0
    max_sampling_rounds: int = 4
    #: skip (task, init state) pairs whose last K groups all succeeded (score=success); 0: off
    skip_solved_after: int = 0
    #: skip (task, init state) pairs whose last K groups all failed (score=success); 0: off
    skip_failed_after: int = 0
    #: learning-signal metrics every update (trainers/grpo.py): per-dim ratio statistics, mean shift, KL to the
    #: initial policy, gradient cosine of two half batches (two extra backward passes on one minibatch)
    signal_metrics: bool = True

    def __post_init__(self):
        _positive = {"group_size": self.group_size, "groups_per_update": self.groups_per_update,
                     "n_epochs": self.n_epochs, "batch_size": self.batch_size,
                     "max_sampling_rounds": self.max_sampling_rounds}
        for key, value in _positive.items():
            if value < 1:
                raise ConfigError(f"grpo.{key}={value}: must be at least 1")
        for key in ("clip_range", "clip_range_low", "clip_range_high", "exploration_std"):
            value = getattr(self, key)
            if value is not None and not value > 0:
                raise ConfigError(f"grpo.{key}={value}: must be positive")
        if self.clip_range_low is not None and self.clip_range_low >= 1:
            raise ConfigError(f"grpo.clip_range_low={self.clip_range_low}: must be below 1 (the ratio's lower "
                              "bound is 1 - clip_range_low)")
        for key in ("min_mixed_groups", "skip_solved_after", "skip_failed_after"):
            if getattr(self, key) < 0:
                raise ConfigError(f"grpo.{key}={getattr(self, key)}: must be 0 (off) or positive")
        if self.min_mixed_groups and not self.filter_uniform_groups:
            raise ConfigError(f"grpo.min_mixed_groups={self.min_mixed_groups} samples until enough mixed groups: "
                              "set grpo.filter_uniform_groups=true too (the uniform groups it plays are dropped)")
        if self.min_mixed_groups > self.groups_per_update * self.max_sampling_rounds:
            raise ConfigError(f"grpo.min_mixed_groups={self.min_mixed_groups} can never be reached with "
                              f"groups_per_update={self.groups_per_update} x max_sampling_rounds="
                              f"{self.max_sampling_rounds} groups per update")
        for key in ("skip_solved_after", "skip_failed_after"):
            if getattr(self, key) and self.score != "success":
                raise ConfigError(f"grpo.{key} counts all-success / all-fail groups: it needs grpo.score=success")

    @property
    def clip_bounds(self) -> tuple[float, float]:
        """(low, high): the ratio is clipped to [1 - low, 1 + high]."""
        low = self.clip_range if self.clip_range_low is None else self.clip_range_low
        high = self.clip_range if self.clip_range_high is None else self.clip_range_high
        return low, high


#: what residual RL's critics see of an action chunk (``residual.critic_action``; trainers/algorithms/residual_td3.py)
CRITIC_ACTIONS = ("executed", "offset")


@dataclass
class ResidualConfig:
    """Residual RL on a frozen base policy (trainers/residual.py; the base is ``policy.kwargs.base_checkpoint``)."""

    gamma: float = 0.99                 # per decision (action chunk)
    n_step: int = 3                     # n-step returns of the sparse success reward
    batch_size: int = 256
    buffer_size: int = 100_000          # decisions kept (features: about 7 KB each with the bootstrap's)
    episodes_per_round: int = 4         # episodes played between two rounds of gradient steps
    updates_per_decision: float = 2.0   # gradient steps per decision played (update-to-data ratio)
    warmup_episodes: int = 40           # episodes of the base (residual zero) before the first gradient step
    train_init_states: int | None = None  # draw init states 0..N-1 of each task (null: all)
    exploration_std: float = 0.05       # the rollouts' Gaussian noise on every action dimension
    warmup_exploration_std: float | None = None  # the warm-up episodes' noise (null: exploration_std); wider
    #   than the bound shows the critics actions beyond the base's (ResFiT: uniform +-0.2 for a bound of 0.1)
    demos: str | None = None            # a demo dataset of this env (e.g. the SFT's): its decisions in the batches
    demo_fraction: float = 0.5          # of every batch, from the demos (RLPD's symmetric sampling)
    critic_hidden_sizes: list[int] = field(default_factory=lambda: [512, 512])
    critic_lr: float = 3.0e-4
    actor_lr: float = 1.0e-4
    tau: float = 0.005
    actor_every: int = 2                # critic steps per actor step (TD3's delay)
    actor_warmup: int = 1000            # critic steps before the actor moves
    target_noise: float = 0.02          # target policy smoothing
    target_noise_clip: float = 0.05
    residual_l2: float = 0.0            # actor penalty on mean (residual / scale)^2, against Q / mean|Q|
    max_grad_norm: float = 10.0
    critic_action: str = "executed"     # the critics see the executed chunk, or "offset": the base's chunk and
    #   (action - base) / scale, the part the rollouts vary at unit scale
    critic_feature_dim: int | None = None  # squeeze the features to this many dims (Linear, LayerNorm, tanh)
    #   before the action joins them (RLPD: 50, SERL: 256); null: the full features
    num_critics: int = 2                # TD3's twins; more: REDQ's ensemble (targets: min of a random pair; actor:
    #   their mean), which makes it harder for the actor to find an action every critic over-values
    actor_pessimism: float = 0.0        # the actor climbs mean - this x std over the critics (a lower confidence
    #   bound: actions the critics disagree on cost; 0: TD3's first critic, or REDQ's mean)
    task_guard_every: int = 0           # >0: every N-th round once the actor moves plays the base alone (control
    #   episodes), and a task whose residual succeeds less often than the base keeps the base when the saved
    #   policy acts (trainers/algorithms/task_guard.py); 0: off
    task_guard_window: int = 16         # the residual's latest episodes per task that the guard compares
    task_guard_min_episodes: int = 8    # episodes of each side per task before the guard may close its gate

    def __post_init__(self):
        for key in ("n_step", "batch_size", "buffer_size", "episodes_per_round", "actor_every"):
            if getattr(self, key) < 1:
                raise ConfigError(f"residual.{key}={getattr(self, key)}: must be at least 1")
        if not 0 < self.gamma <= 1:
            raise ConfigError(f"residual.gamma={self.gamma}: must be in (0, 1]")
        for key in ("exploration_std", "critic_lr", "actor_lr", "tau"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"residual.{key}={getattr(self, key)}: must be positive")
        if not 0 <= self.demo_fraction < 1:
            raise ConfigError(f"residual.demo_fraction={self.demo_fraction}: must be in [0, 1) (the rest of each batch "
                              "comes from the rollouts)")
        if self.warmup_exploration_std is not None and not self.warmup_exploration_std > 0:
            raise ConfigError(f"residual.warmup_exploration_std={self.warmup_exploration_std}: must be positive "
                              "(or null: the warm-up plays with exploration_std)")
        if self.critic_action not in CRITIC_ACTIONS:
            raise ConfigError(f"residual.critic_action={self.critic_action!r}: executed (the chunk the env ran) or "
                              "offset (the base's chunk and the residual in units of the bound)")
        if self.critic_feature_dim is not None and self.critic_feature_dim < 1:
            raise ConfigError(f"residual.critic_feature_dim={self.critic_feature_dim}: must be at least 1 (or null: "
                              "the critics take the full features)")
        if self.num_critics < 2:
            raise ConfigError(f"residual.num_critics={self.num_critics}: must be at least 2 (a pessimistic target "
                              "takes the minimum of two)")
        if self.actor_pessimism < 0:
            raise ConfigError(f"residual.actor_pessimism={self.actor_pessimism}: must be >= 0 (0: no penalty on the "
                              "critics' disagreement)")
        if self.task_guard_every < 0 or self.task_guard_window < 1 or self.task_guard_min_episodes < 1:
            raise ConfigError(f"residual.task_guard_every={self.task_guard_every} (>= 0; 0: off), task_guard_window="
                              f"{self.task_guard_window} and task_guard_min_episodes={self.task_guard_min_episodes} "
                              "(>= 1)")
        if self.updates_per_decision < 0 or self.warmup_episodes < 0 or self.actor_warmup < 0:
            raise ConfigError("residual.updates_per_decision, warmup_episodes and actor_warmup must be >= 0")


@dataclass
class SFTConfig:
    """Behaviour cloning (trainers/sft.py). An SFT update is one optimizer step: checkpoint.every, eval.every and
    logging.log_interval count them."""

    #: LeRobot v3 dataset directory (``vla-gym demos ENV_ID --out DIR``), or several comma-separated (demos plus
    #: ``trainers/eval.py --record-dataset`` rollouts), read as one
    dataset: str | None = None
    #: a PPO, GRPO or SFT checkpoint whose actor weights the policy starts from (null: the policy's fresh
    #: initialisation); its observation/action contract is checked against the env first
    init_checkpoint: str | None = None
    #: passes over the dataset
    epochs: int = 10
    #: stop after this many optimizer steps (null: epochs decide); short runs
    max_steps: int | None = None
    #: frames per optimizer step over all ranks (a multiple of the number of processes)
    batch_size: int = 64
    learning_rate: float = 1e-3
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    adam_eps: float = 1e-8
    #: which frames of recorded rollouts (``trainers/eval.py --record-dataset``) are trained on: ``all``, or
    #: ``decisions``, only those where the recording policy chose an action chunk (its own output is the label
    #: there; the frames between replay the chunk open loop). Demos always train on every frame
    rollout_frames: Literal["all", "decisions"] = "all"

    def __post_init__(self):
        _at_least_one("sft", {"epochs": self.epochs, "batch_size": self.batch_size, "max_steps": self.max_steps})


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
        _at_least_one("logging", {"log_interval": self.log_interval})


@dataclass
class CheckpointConfig:
    #: save every this many updates (0: only at the end)
    every: int = 10
    keep_last: int = 3
    #: null: start fresh; "auto": latest checkpoint in the run dir if any; or a checkpoint path
    resume: str | None = "auto"

    def __post_init__(self):
        _at_least_one("checkpoint", {"keep_last": self.keep_last})
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
        _at_least_one("eval", {"num_envs": self.num_envs})
        if self.episodes < 0:
            raise ConfigError(f"eval.episodes={self.episodes}: must be 0 (no evaluation) or positive")


@dataclass
class RolloutConfig:
    #: S: split each process's envs into S stages that step in turn while the policy infers for the next one
    #: (trainers/rollout/pipeline.py); S must divide the envs per process and needs env.vectorization=async; the same
    #: trajectories as 1 (docs/scale.md)
    pipeline_stages: int = 1

    def __post_init__(self):
        _at_least_one("rollout", {"pipeline_stages": self.pipeline_stages})


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


# ----------------------------------------------------------------------------------- validation
def _check_value(key: str, value: Any, hint: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _check_value(key, value, inner[0])
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, key)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if hint is Any:
        return value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_check_value(f"{key}[{i}]", v, args[0]) for i, v in enumerate(value)] if args else list(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if hint in (bool, str):
        if not isinstance(value, hint):
            raise ConfigError(f"{key}: expected {'true or false' if hint is bool else 'a string'}, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, str):  # YAML 1.1 reads 3e-4 as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    raise TypeError(f"config field {key} has an unsupported type {hint!r}")


def _build(cls: type, data: Any, prefix: str = "") -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; valid keys: {', '.join(names)}"
            raise ConfigError(f"unknown config key {full!r}{hint}")
        values[key] = _check_value(full, value, hints[key])
    return cls(**values)


def _set(tree: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = tree.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted!r}: {part!r} is not a mapping")
        tree = node
    tree[parts[-1]] = value


def config_from_dict(data: dict | None, overrides: list[str] = ()) -> Config:
    """Validate ``data`` (plus ``key.sub=value`` overrides) into a :class:`Config`."""
    data = _deep_copy(data or {})
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like key.sub=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: the value is not valid YAML ({_yaml_problem(exc)}); quote it, "
                              f"e.g. {key}='{raw}'") from None
        _set(data, key.strip(), value)
    cfg = _build(Config, data)
    try:  # a bad wrapper entry fails here, before any env is built
        check_wrapper_specs(cfg.env.wrappers, key="env.wrappers")
    except WrapperSpecError as exc:
        raise ConfigError(str(exc)) from None
    return cfg


def config_from_checkpoint(data: dict | None, overrides: list[str] = ()) -> Config:
    """The config a checkpoint saved (plus ``key.sub=value`` overrides) in today's schema: keys an older vla_gym
    wrote and this one no longer has are dropped, as they were written by the program, not typed by a user (an SFT
    checkpoint of Nov 26 holds ``residual.init_checkpoint``, a key removed since). The overrides stay strict.

    >>> config_from_checkpoint({"seed": 3, "residual": {"init_checkpoint": None}}).seed
    3
    """
    return config_from_dict(_known_keys(Config, data or {}), overrides)


def _known_keys(cls: type, data: Any) -> Any:
    """``data`` without the keys ``cls`` (a config dataclass, checked section by section) does not have."""
    if not isinstance(data, dict):
        return data
    hints = typing.get_type_hints(cls)
    return {key: _known_keys(hints[key], value) if dataclasses.is_dataclass(hints[key]) else value
            for key, value in data.items() if key in hints}


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
            raise ConfigError(f"--config {path} is not valid YAML: {_yaml_problem(exc)}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level of a config must be a mapping")
    return config_from_dict(data, overrides)


def save_config(cfg: Config, path: str | pathlib.Path) -> None:
    pathlib.Path(path).write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: what and where (line, column)."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


def _deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {key: _deep_copy(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_deep_copy(value) for value in data]
    return data
