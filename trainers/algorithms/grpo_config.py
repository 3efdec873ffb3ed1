"""GRPO's settings: the ``grpo:`` section of a run config (trainers/grpo.py), and what they need of a policy.

    >>> GRPOConfig(clip_range_high=0.28).clip_bounds
    (0.2, 0.28)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gymnasium import spaces

from vla_gym.trainers.policies.base import log_prob_options
from vla_gym.trainers.runtime.schema import ConfigError


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
    #: leave out groups whose scores are all equal (zero advantage: no signal, only noise in the batch statistics);
    #: every example config does
    filter_uniform_groups: bool = True
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
    #: learning-signal metrics every update (trainers/algorithms/signal_metrics.py): mean shift, KL to the initial
    #: policy, gradient cosine of two half batches; a diagnostic, off by default (two extra backward passes)
    signal_metrics: bool = False

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


class GRPOSetupError(ValueError):
    """The config asks for something the policy cannot do (the message names the keys to change)."""


@dataclass
class LogProbSetup:
    """How GRPO takes a policy's log-probs (:func:`log_prob_setup`)."""

    #: the policy gives per-dimension log-probs (``act/evaluate(per_dim=True)``): ratios per env step or dimension
    per_dim: bool
    #: the policy draws one noise per chunk (``policy.kwargs.noise=chunk``): only a chunk's first step carries it
    chunk_noise: bool
    #: K, the env steps of one action (1 for a flat action)
    steps: int
    #: keywords of ``policy.act`` in rollouts
    act_kwargs: dict[str, Any] = field(default_factory=dict)


def log_prob_setup(hp: GRPOConfig, policy) -> LogProbSetup:
    """What ``policy`` offers for the log-probs ``hp`` asks for; :class:`GRPOSetupError` naming the keys to change
    when it lacks per-dimension log-probs (``ratio_level`` step/dim, ``mask_unexecuted``) or executed actions
    (``logprob_of_executed``)."""
    options = log_prob_options(policy)
    name = type(policy).__name__
    per_dim = "per_dim" in options
    needs = [key for key, on in (("grpo.ratio_level=" + hp.ratio_level, hp.ratio_level != "chunk"),
                                 ("grpo.mask_unexecuted=true", hp.mask_unexecuted)) if on]
    if needs and not per_dim:
        raise GRPOSetupError(
            f"{' and '.join(needs)} need per-dimension log-probs, which {name} does not give (its act/evaluate "
            "take no per_dim keyword): set grpo.ratio_level=chunk and grpo.mask_unexecuted=false, or give the "
            "policy per_dim (trainers/policies/base.py)")
    if hp.logprob_of_executed and "executed" not in options:
        raise GRPOSetupError(
            f"grpo.logprob_of_executed=true needs a policy whose act takes executed=True (clip to the action "
            f"space before the log-prob); {name} does not: set grpo.logprob_of_executed=false")
    space = policy.action_space
    steps = int(space.shape[0]) if isinstance(space, spaces.Box) and len(space.shape) == 2 else 1
    act_kwargs = {key: True for key, on in (("per_dim", per_dim), ("executed", hp.logprob_of_executed)) if on}
    chunk_noise = getattr(getattr(policy, "action_head", None), "noise", "step") == "chunk"
    return LogProbSetup(per_dim, chunk_noise, steps, act_kwargs)
