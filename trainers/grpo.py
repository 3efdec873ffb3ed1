"""GRPO: group-relative advantages, PPO's clipped objective, no critic; a class and a torchrun entry point.

    torchrun --nproc_per_node=2 trainers/grpo.py --config examples/configs/maniskill_pushcube_grpo.yaml
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=HOST:29500 trainers/grpo.py --config ...

Per update, ``grpo.groups_per_update`` groups (split over the ranks, so a group never spans two) of
``grpo.group_size`` episodes each. The episodes of a group start from the same initial state: the same
``reset(seed=..., options={"task_id": ..., "init_state_id": ...})``. Each episode gets a score (1.0 if it
succeeded at any step, or its return: ``grpo.score``); the advantage of every action of an episode is its
score minus the group's mean score (divided by the group's std with ``normalize_std``). The loss is PPO's
clipped surrogate over those actions, minus an entropy bonus, plus ``kl_coef`` times a KL estimate to the
frozen initial policy. Episodes run to their end in ``env.num_envs`` envs per rank, handed out as envs free up
(:class:`~vla_gym.trainers.rollout.episode_runner.EpisodeRunner`).

``grpo.init_checkpoint`` starts from a PPO (or GRPO) checkpoint: its actor weights are loaded, its critic dropped.
"""
from __future__ import annotations

import inspect
import math
import sys
import warnings

import numpy as np
import torch

from vla_gym.core.episodes import episode_sums
from vla_gym.trainers.algorithms.advantages import group_advantages
from vla_gym.trainers.algorithms.losses import clipped_policy_loss, kl_to_reference
from vla_gym.trainers.algorithms.on_policy import OnPolicyAlgorithm
from vla_gym.trainers.policies import policy_class
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.rollout.episode_plan import EpisodeSpec
from vla_gym.trainers.rollout.episode_runner import EpisodeRunner
from vla_gym.trainers.runtime.checkpoint import load_actor_weights
from vla_gym.trainers.runtime.envs import env_attr


class GRPO(OnPolicyAlgorithm):
    algo = "grpo"
    extra_train_keys = ("train/actor/kl_ref",)

    def _policy_kwargs(self):
        kwargs = dict(self.cfg.policy.kwargs)
        if "critic" in _init_params(policy_class(self.cfg.policy.name)):
            kwargs.setdefault("critic", False)
        return kwargs

    def _find_unused_parameters(self) -> bool:
        return self.policy.has_critic  # a critic the loss never touches

    def prepare_policy(self) -> None:
        if self.hp.init_checkpoint:
            dropped = load_actor_weights(self.policy, self.hp.init_checkpoint, "grpo.init_checkpoint", self.device)
            if dropped and self.dist.is_main:
                print(f"grpo.init_checkpoint: loaded actor weights, dropped {len(dropped)} critic tensors", flush=True)
        if self.policy.has_critic and self.dist.is_main:
            warnings.warn("GRPO ignores the policy's critic; pass policy.kwargs.critic=false to drop it", stacklevel=2)
        self.reference = None
        if self.hp.kl_coef > 0:
            self.reference = self.policy.frozen_copy()

    def extra_state(self):
        return {"reference": self.reference.state_dict()} if self.reference is not None else {}

    def load_extra_state(self, state):
        if self.reference is not None and "reference" in state:
            self.reference.load_state_dict(state["reference"])

    # ------------------------------------------------------------------------------------- rollouts
    def start_rollouts(self, seeds: list[int]) -> None:
        if self.hp.train_init_states is not None and self.hp.train_init_states < 1:
            raise ValueError(f"grpo.train_init_states={self.hp.train_init_states}: give a positive number of "
                             "initial states (or null for all)")
        if self.hp.groups_per_update % self.dist.world_size:
            raise ValueError(f"grpo.groups_per_update={self.hp.groups_per_update} must be a multiple of the "
                             f"number of processes ({self.dist.world_size}) so that a group never spans ranks")
        self.runner = EpisodeRunner(self.envs, self.policy, self.cfg.rollout.pipeline_stages)
        self.tasks = env_attr(self.envs, "tasks") or []
        self.fixed_task = env_attr(self.envs, "task_id")

    def group_specs(self) -> list[EpisodeSpec]:
        """This rank's groups for the current update: ``group_size`` identical specs per group."""
        per_rank = self.hp.groups_per_update // self.dist.world_size
        specs = []
        for j in range(per_rank):
            group = self.num_updates * self.hp.groups_per_update + self.dist.rank * per_rank + j
            rng = np.random.default_rng([self.cfg.seed, group])
            task_id = init_state_id = None
            if self.tasks:
                task_id = self.fixed_task if self.fixed_task is not None else int(rng.integers(len(self.tasks)))
                count = self.tasks[task_id].num_init_states
                if count:
                    init_state_id = int(rng.integers(min(count, self.hp.train_init_states or count)))
            spec = EpisodeSpec(seed=int(rng.integers(2**31 - 1)), task_id=task_id, init_state_id=init_state_id)
            specs += [spec] * self.hp.group_size
        return specs

    def collect_rollouts(self):
        hp = self.hp
        steps: list[tuple] = []
        specs = self.group_specs()
        results = self.runner.run(specs, deterministic=False, recorder=lambda *step: steps.append(step))
        if hp.score == "success" and any(r.success is None for r in results):
            raise ValueError(f"{self.cfg.env.id} does not report info['success']: use grpo.score=return")
        scores = torch.tensor([float(r.success) if hp.score == "success" else r.episode_return for r in results])
        advantages = group_advantages(scores, hp.group_size, hp.normalize_std)
        grouped = scores.reshape(-1, hp.group_size)
        uniform = (grouped == grouped[:, :1]).all(dim=1)
        keep = torch.ones(len(specs), dtype=torch.bool)
        if hp.filter_uniform_groups:
            keep = (~uniform).repeat_interleave(hp.group_size)

        width = len(steps[0][3]) if steps else self.num_envs  # a pipeline stage's envs per record
        buffer = RolloutBuffer(len(steps), width, self.device)
        for obs, actions, log_probs, jobs in steps:
            jobs = torch.as_tensor(jobs)
            valid = jobs >= 0
            valid[valid.clone()] = keep[jobs[valid]]
            step_advantages = torch.where(valid, advantages[jobs.clamp(min=0)], 0.0)  # its episode's advantage
            buffer.add(obs, actions, log_probs, valid=valid, advantages=step_advantages)

        sums, counts = episode_sums(results, [task.name for task in self.tasks])  # env/... as PPO logs them
        lengths, returns = sums["env/episode_len"], sums["env/return"]
        sums.update({"rollout/rewards": returns, "rollout/score_mean": scores.sum().item(),
                     "rollout/uniform_groups": uniform.float().sum().item()})
        counts.update({"rollout/rewards": lengths, "rollout/score_mean": len(results),
                       "rollout/uniform_groups": len(grouped)})
        valid_adv = buffer.advantages[buffer.valid]
        sums["rollout/advantages_mean"], counts["rollout/advantages_mean"] = valid_adv.sum().item(), valid_adv.numel()
        metrics = self.dist.weighted_mean(sums, counts)
        metrics["rollout/advantages_max"] = self.dist.max(valid_adv.max().item() if valid_adv.numel() else -1e30)
        metrics["rollout/advantages_min"] = self.dist.min(valid_adv.min().item() if valid_adv.numel() else 1e30)
        totals = self.dist.sum_tensor(torch.tensor([lengths, int(buffer.valid.sum())], dtype=torch.float64)).tolist()
        self.num_timesteps += int(totals[0])
        num_minibatches = math.ceil(totals[1] / hp.batch_size)  # 0 when every group of every rank was uniform
        return buffer, num_minibatches, metrics

    # ----------------------------------------------------------------------------------------- loss
    def loss(self, batch):
        hp = self.hp
        log_probs, entropy, _ = self.model(batch["obs"], batch["actions"])
        policy_loss, stats = clipped_policy_loss(log_probs, batch["log_probs"], batch["advantages"], hp.clip_range)
        entropy_mean = entropy.mean()
        loss = policy_loss
        if hp.ent_coef:
            loss = loss - hp.ent_coef * entropy_mean
        if self.reference is not None:
            with torch.no_grad():
                ref_log_probs, _, _ = self.reference.evaluate(batch["obs"], batch["actions"])
            kl = kl_to_reference(log_probs, ref_log_probs).mean()
            loss = loss + hp.kl_coef * kl
            stats["train/actor/kl_ref"] = kl.item()
        stats.update({"train/actor/policy_loss": policy_loss.item(), "train/entropy_loss": entropy_mean.item()})
        return loss, stats


def _init_params(cls) -> set[str]:
    return set(inspect.signature(cls.__init__).parameters)


def main(argv: list[str] | None = None) -> int:
    from vla_gym.trainers.runtime.launch import train_main

    return train_main(GRPO, argv)


if __name__ == "__main__":
    sys.exit(main())
