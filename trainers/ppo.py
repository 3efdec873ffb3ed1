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
"""
from __future__ import annotations

import sys

from vla_gym.trainers.algorithms.losses import clipped_policy_loss, explained_variance, value_loss
from vla_gym.trainers.algorithms.on_policy import OnPolicyAlgorithm
from vla_gym.trainers.algorithms.schedules import schedule
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.rollout.collector import RolloutCollector
from vla_gym.trainers.runtime.checkpoint import load_actor_weights


class PPO(OnPolicyAlgorithm):
    algo = "ppo"
    extra_train_keys = ("train/critic/value_loss", "train/critic/value_clip_ratio")

    def prepare_policy(self) -> None:
        if self.hp.init_checkpoint:  # e.g. an SFT checkpoint: its actor, a fresh critic
            load_actor_weights(self.policy, self.hp.init_checkpoint, "ppo.init_checkpoint", self.device)

    def start_rollouts(self, seeds: list[int]) -> None:
        self.buffer = RolloutBuffer(self.hp.n_steps, self.num_envs, self.device)
        self.collector = RolloutCollector(self.envs, self.policy, self.buffer, self.hp.gamma, self.hp.gae_lambda,
                                          self.hp.bootstrap_terminated, self.cfg.rollout.pipeline_stages)
        self.collector.reset(seeds)

    def collect_rollouts(self):
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
        return buffer, num_minibatches, metrics

    def loss(self, batch):
        hp = self.hp
        log_probs, entropy, values = self.model(batch["obs"], batch["actions"])
        advantages = batch["advantages"]
        if hp.normalize_advantage and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        clip_range = hp.clip_range * schedule(hp.clip_schedule, self.progress)
        policy_loss, stats = clipped_policy_loss(log_probs, batch["log_probs"], advantages, clip_range)
        critic_loss, critic_stats = value_loss(values, batch["values"], batch["returns"], hp.clip_range_vf)
        entropy_mean = entropy.mean()
        if self.num_updates < hp.critic_warmup_updates:
            # the actor stays in the graph with zero weight (DDP reduces every parameter's gradient) and, with
            # Adam's moments still zero, takes no step
            loss = 0.0 * policy_loss + hp.vf_coef * critic_loss
        else:
            loss = policy_loss + hp.vf_coef * critic_loss
            if hp.ent_coef:  # left out of the graph otherwise: no backward pass through the entropy
                loss = loss - hp.ent_coef * entropy_mean
        stats.update(critic_stats)
        stats.update({
            "train/actor/policy_loss": policy_loss.item(), "train/critic/value_loss": critic_loss.item(),
            "train/entropy_loss": entropy_mean.item(),
        })
        return loss, stats

    def post_update_metrics(self, buffer: RolloutBuffer) -> dict[str, float]:
        valid = buffer.valid
        return {"train/critic/explained_variance": explained_variance(buffer.values[valid], buffer.returns[valid])}


def main(argv: list[str] | None = None) -> int:
    from vla_gym.trainers.runtime.launch import train_main

    return train_main(PPO, argv)


if __name__ == "__main__":
    sys.exit(main())
