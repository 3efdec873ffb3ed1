"""PPO (clipped surrogate, GAE, value clipping, entropy bonus), as a class and a torchrun entry point.

    torchrun --nproc_per_node=2 trainers/ppo.py --config examples/configs/maniskill_pushcube_ppo.yaml
    python trainers/ppo.py --config examples/configs/cartpole_ppo.yaml ppo.learning_rate=1e-3 name=lr1e-3

    >>> from vla_gym.trainers import PPO
    >>> model = PPO("mlp", "CartPole-v1", num_envs=8, n_steps=32, batch_size=256, n_epochs=20)  # doctest: +SKIP
    >>> model.learn(100_000).save("cartpole.pt")                                                 # doctest: +SKIP

Hyperparameters are the fields of :class:`~vla_gym.trainers.runtime.config.PPOConfig` (Stable-Baselines3's names).
Per update: one rollout of ``n_steps`` vector steps (``env.num_envs`` envs over all ranks), GAE, then
``n_epochs`` passes over ``n_steps * num_envs / batch_size`` shuffled minibatches with advantage
normalisation per minibatch, gradient clipping and an optional target-KL stop. ``critic_warmup_updates``: the first
N updates fit only the critic (the actor takes no step), so that a fresh value head on an SFT actor
(``init_checkpoint``) gives sensible advantages before the actor moves (RL4VLA's PPO for VLAs).
``exploration_std`` sets the policy's sampling std after ``init_checkpoint``; ``ratio_level`` (``chunk``, ``step`` or
``dim``) puts the ratio, its clip and approx_kl per action chunk, per env step or per action dimension, as GRPO's
(:mod:`vla_gym.trainers.algorithms.ratio_levels`): the rollout's per-dimension log-probs are taken once after the
rollout from the policy that played it, before the update moves it.

Reading order: :meth:`PPO.collect_rollouts`, :meth:`PPO.loss` with :func:`clipped_policy_loss` and
:func:`value_loss` below it, then :meth:`OnPolicyAlgorithm._optimise` (the epochs, minibatches and Adam steps).
"""
from __future__ import annotations

import sys

import torch

from vla_gym.trainers.algorithms.losses import explained_variance
from vla_gym.trainers.algorithms.on_policy import OnPolicyAlgorithm
from vla_gym.trainers.algorithms.ratio_levels import (
    PER_DIM_KEYS,
    chunk_view,
    level_log_probs,
    per_dim_ratio_stats,
    ratio_stats,
)
from vla_gym.trainers.algorithms.schedules import schedule
from vla_gym.trainers.policies.base import log_prob_options
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.rollout.collector import RolloutCollector
from vla_gym.trainers.runtime.checkpoint import load_actor_weights
from vla_gym.trainers.runtime.config import ConfigError

#: rows per forward pass when the rollout's per-dimension log-probs are taken (ratio_level step/dim)
_OLD_LOG_PROB_ROWS = 1024


class PPO(OnPolicyAlgorithm):
    algo = "ppo"
    extra_train_keys = ("train/critic/value_loss", "train/critic/value_clip_ratio", *PER_DIM_KEYS)

    def prepare_policy(self) -> None:
        if self.hp.init_checkpoint:  # e.g. an SFT checkpoint: its actor, a fresh critic
            load_actor_weights(self.policy, self.hp.init_checkpoint, "ppo.init_checkpoint", self.device,
                               self.contract)
        if self.hp.exploration_std is not None:
            self.policy.set_exploration(std=self.hp.exploration_std)
        if self.hp.ratio_level != "chunk" and "per_dim" not in log_prob_options(self.policy):
            raise ConfigError(
                f"ppo.ratio_level={self.hp.ratio_level} needs per-dimension log-probs, which "
                f"{type(self.policy).__name__} does not give (its act/evaluate take no per_dim keyword): set "
                "ppo.ratio_level=chunk, or give the policy per_dim (trainers/policies/base.py)")

    def _find_unused_parameters(self) -> bool:
        return self.hp.critic_warmup_updates > 0  # the warm-up's loss leaves the actor out of the graph

    # ------------------------------------------------------------------------------------ rollouts
    def start_rollouts(self, seeds: list[int]) -> None:
        self.buffer = RolloutBuffer(self.hp.n_steps, self.num_envs, self.device)
        self.collector = RolloutCollector(self.envs, self.policy, self.buffer, self.hp.gamma, self.hp.gae_lambda,
                                          self.hp.bootstrap_terminated, self.cfg.rollout.pipeline_stages)
        self.collector.reset(seeds)

    def collect_rollouts(self):
        """``n_steps`` vector steps into the buffer, with GAE's advantages and returns (the collector's)."""
        self.buffer.extras.pop("old_dims", None)  # the last update's (ratio_level step/dim), not a rollout's field
        stats = self.collector.collect()
        buffer = self.buffer
        self.num_timesteps += buffer.n_steps * self.num_envs * self.dist.world_size
        sums, counts = self.collector.tracker.pop()
        valid = buffer.valid
        advantages = buffer.advantages[valid]
        sums.update({"rollout/rewards": stats["reward_sum"], "rollout/advantages_mean": advantages.sum().item()})
        counts.update({"rollout/rewards": stats["reward_count"], "rollout/advantages_mean": advantages.numel()})
        metrics = self.dist.weighted_mean(sums, counts)
        metrics["rollout/advantages_max"] = self.dist.max(advantages.max().item() if advantages.numel() else -1e30)
        metrics["rollout/advantages_min"] = self.dist.min(advantages.min().item() if advantages.numel() else 1e30)
        num_minibatches = max(1, buffer.n_steps * self.cfg.env.num_envs // self.hp.batch_size)
        if self.hp.ratio_level != "chunk":
            buffer.extras["old_dims"] = self._rollout_dims(buffer)
        return buffer, num_minibatches, metrics

    @torch.no_grad()
    def _rollout_dims(self, buffer: RolloutBuffer) -> torch.Tensor:
        """``[n_steps, num_envs, ...]`` per-dimension log-probs of the stored actions under the policy that played
        them (it has not moved since): the old side of a step- or dim-level ratio."""
        obs = buffer.obs.flat()
        parts = []
        for rows in torch.split(torch.arange(buffer.n_steps * buffer.num_envs), _OLD_LOG_PROB_ROWS):
            batch = buffer.batch(rows, obs=obs)
            parts.append(self.policy.evaluate(batch["obs"], batch["actions"], per_dim=True)[0])
        dims = torch.cat(parts)
        return dims.reshape(buffer.n_steps, buffer.num_envs, *dims.shape[1:])

    # ---------------------------------------------------------------------------------------- loss
    def loss(self, batch):
        """Clipped surrogate + ``vf_coef`` x value loss - ``ent_coef`` x entropy on one minibatch; during the
        critic warm-up (the first ``critic_warmup_updates`` updates) the value loss alone."""
        hp = self.hp
        advantages = batch["advantages"]
        if hp.normalize_advantage and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        clip_range = hp.clip_range * schedule(hp.clip_schedule, self.progress)
        stats: dict[str, float] = {}
        if hp.ratio_level == "chunk":  # one ratio per action (chunk): its joint log-prob
            new, entropy, values = self.model(batch["obs"], batch["actions"])
            old = batch["log_probs"]
        else:  # one ratio per env step of the chunk (step) or per action dimension (dim)
            new_dims, entropy, values = self.model(batch["obs"], batch["actions"], per_dim=True)
            new_dims, old_dims = chunk_view(new_dims, self._chunk_steps()), chunk_view(batch["old_dims"],
                                                                                      self._chunk_steps())
            new, old = level_log_probs(new_dims, hp.ratio_level)[0], level_log_probs(old_dims, hp.ratio_level)[0]
            stats.update(per_dim_ratio_stats(new_dims, old_dims, None, clip_range, clip_range))
        policy_loss, ratio_metrics = clipped_policy_loss(new, old, advantages, clip_range)
        critic_loss, critic_metrics = value_loss(values, batch["values"], batch["returns"], hp.clip_range_vf)
        entropy_mean = entropy.mean()
        loss = hp.vf_coef * critic_loss
        if self.num_updates >= hp.critic_warmup_updates:  # after the warm-up the actor learns too
            loss = loss + policy_loss
            if hp.ent_coef:  # left out of the graph otherwise: no backward pass through the entropy
                loss = loss - hp.ent_coef * entropy_mean
        stats.update(ratio_metrics)
        stats.update(critic_metrics)
        stats.update({
            "train/actor/policy_loss": policy_loss.item(), "train/critic/value_loss": critic_loss.item(),
            "train/entropy_loss": entropy_mean.item(),
        })
        return loss, stats

    def _chunk_steps(self) -> int:
        """K, the env steps of one action (1 for a flat action)."""
        shape = self.policy.action_space.shape
        return int(shape[0]) if len(shape) == 2 else 1

    def post_update_metrics(self, buffer: RolloutBuffer) -> dict[str, float]:
        valid = buffer.valid
        return {"train/critic/explained_variance": explained_variance(buffer.values[valid], buffer.returns[valid])}


def clipped_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                        clip_range: float) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate objective, negated to minimise: ``log_probs`` ``[B]`` (one ratio per sample) or
    ``[B, T]`` (T ratio tokens per sample, the sample's advantage on each), ``advantages`` ``[B]``.

    >>> loss, stats = clipped_policy_loss(torch.zeros(4), torch.zeros(4), torch.ones(4), clip_range=0.2)
    >>> loss.item(), sorted(stats)
    (-1.0, ['train/actor/approx_kl', 'train/actor/clip_fraction', 'train/actor/clipped_ratio'])
    """
    log_ratio = log_probs - old_log_probs
    ratio = log_ratio.exp()
    advantages = advantages.reshape(-1, *[1] * (ratio.dim() - 1))
    surrogate = torch.min(advantages * ratio, advantages * ratio.clamp(1.0 - clip_range, 1.0 + clip_range))
    approx_kl, clip_fraction, clipped_mean, _ = ratio_stats(log_ratio.detach(), None, clip_range, clip_range)
    return -surrogate.mean(), {"train/actor/approx_kl": approx_kl, "train/actor/clip_fraction": clip_fraction,
                               "train/actor/clipped_ratio": clipped_mean}


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               clip_range_vf: float | None) -> tuple[torch.Tensor, dict[str, float]]:
    """Squared error to the returns; with ``clip_range_vf`` the pessimum of the clipped and unclipped errors (the
    new value kept within ``clip_range_vf`` of the rollout's)."""
    loss = (values - returns).square()
    clip_ratio = 0.0
    if clip_range_vf is not None:
        delta = values - old_values
        clipped_values = old_values + delta.clamp(-clip_range_vf, clip_range_vf)
        loss = torch.max(loss, (clipped_values - returns).square())
        clip_ratio = (delta.detach().abs() > clip_range_vf).float().mean().item()
    return loss.mean(), {"train/critic/value_clip_ratio": clip_ratio}


def main(argv: list[str] | None = None) -> int:
    from vla_gym.trainers.runtime.launch import train_main

    return train_main(PPO, argv)


if __name__ == "__main__":
    sys.exit(main())
