"""GRPO: group-relative advantages, PPO's clipped objective, no critic; a class and a torchrun entry point.

    torchrun --nproc_per_node=2 trainers/grpo.py --config examples/configs/maniskill_pushcube_grpo.yaml
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=HOST:29500 trainers/grpo.py --config ...

Per update, ``grpo.groups_per_update`` groups (split over the ranks, so a group never spans two) of
``grpo.group_size`` episodes each. The episodes of a group start from the same initial state: the same
``reset(seed=..., options={"task_id": ..., "init_state_id": ...})``. Each episode gets a score (1.0 if it
succeeded at any step, or its return: ``grpo.score``); the advantage of every action of an episode is its
score minus the group's mean score (divided by the group's std with ``normalize_std``). The loss is PPO's
clipped surrogate over those actions (per action chunk, env step or action dimension: ``ratio_level``), minus an
entropy bonus, plus ``kl_coef`` times a KL estimate to the frozen initial policy. Episodes run to their end in
``env.num_envs`` envs per rank, handed out as envs free up
(:class:`~vla_gym.trainers.rollout.episode_runner.EpisodeRunner`); dynamic sampling (``min_mixed_groups``) plays
more rounds of groups until the update holds enough groups with mixed outcomes.

``grpo.init_checkpoint`` starts from a PPO, GRPO or SFT checkpoint: its actor weights are loaded, its critic
dropped. The settings are :class:`~vla_gym.trainers.algorithms.grpo_config.GRPOConfig`; docs/trainers.md lists
each with the metrics an update logs. Reading order: :meth:`GRPO.collect_rollouts` (groups, scores, advantages),
:meth:`GRPO.loss` (the clipped token loss), then ``OnPolicyAlgorithm`` for the optimisation loop;
:class:`~vla_gym.trainers.algorithms.signal_metrics.SignalMetrics` adds the optional learning-signal metrics.
"""
from __future__ import annotations

import inspect
import math
import sys
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from vla_gym.core.episodes import episode_sums
from vla_gym.trainers.algorithms.advantages import group_advantages
from vla_gym.trainers.algorithms.group_sampling import (
    GroupOutcomes,
    StartTracker,
    draw_unsolved,
    episode_scores,
    group_outcomes,
    judged,
    sampling_done,
    start_key,
)
from vla_gym.trainers.algorithms.grpo_config import GRPOSetupError, log_prob_setup
from vla_gym.trainers.algorithms.losses import kl_to_reference
from vla_gym.trainers.algorithms.on_policy import OnPolicyAlgorithm
from vla_gym.trainers.algorithms.ratio_levels import (
    PER_DIM_KEYS,
    chunk_view,
    clipped_token_loss,
    executed_mask,
    level_log_probs,
    masked_row_mean,
    per_dim_ratio_stats,
)
from vla_gym.trainers.algorithms.signal_metrics import SignalMetrics
from vla_gym.trainers.policies import policy_class
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.rollout.episode_plan import EpisodeSpec, draw_start
from vla_gym.trainers.rollout.episode_runner import EpisodeRunner
from vla_gym.trainers.rollout.recorded_play import RecordedStep, play_recorded
from vla_gym.trainers.runtime.checkpoint import load_actor_weights
from vla_gym.trainers.runtime.envs import env_attr


@dataclass
class _Terms:
    """What the policy-loss pass computed: token log-probs and mask at the ratio level, entropy, and the per-dimension
    log-probs ``[B, K, A]`` (new, old) with the executed mask ``[B, K]`` (None without per-dim log-probs)."""

    new: torch.Tensor
    token_mask: torch.Tensor | None
    entropy: torch.Tensor
    new_dims: torch.Tensor | None = None
    old_dims: torch.Tensor | None = None
    mask: torch.Tensor | None = None


class GRPO(SignalMetrics, OnPolicyAlgorithm):
    algo = "grpo"
    extra_train_keys = ("train/actor/kl_ref", *PER_DIM_KEYS)
    setup_errors = (*OnPolicyAlgorithm.setup_errors, GRPOSetupError)
    #: with kl_coef=0, keep a frozen copy of the initial policy for train/actor/kl_ref only when the policy has at most
    #: this many parameters (a copy of a small policy is cheap; a VLM's is not)
    diagnostic_reference_max_params = 50_000_000

    def _policy_kwargs(self):
        kwargs = dict(self.cfg.policy.kwargs)
        if "critic" in _init_params(policy_class(self.cfg.policy.name)):
            kwargs.setdefault("critic", False)
        return kwargs

    def _find_unused_parameters(self) -> bool:
        return self.policy.has_critic  # a critic the loss never touches

    def prepare_policy(self) -> None:
        hp = self.hp
        if hp.init_checkpoint:
            dropped = load_actor_weights(self.policy, hp.init_checkpoint, "grpo.init_checkpoint", self.device,
                                         self.contract)
            if dropped and self.dist.is_main:
                print(f"grpo.init_checkpoint: loaded actor weights, dropped {len(dropped)} critic tensors", flush=True)
        if hp.exploration_std is not None:
            self.policy.set_exploration(std=hp.exploration_std)
        if self.policy.has_critic and self.dist.is_main:
            warnings.warn("GRPO ignores the policy's critic; pass policy.kwargs.critic=false to drop it", stacklevel=2)
        setup = log_prob_setup(hp, self.policy)
        self._per_dim, self._chunk_noise, self._steps, self._act_kwargs = (
            setup.per_dim, setup.chunk_noise, setup.steps, setup.act_kwargs)
        self.reference = None
        if hp.kl_coef > 0:
            self.reference = self.policy.frozen_copy()
        elif hp.signal_metrics and sum(p.numel() for p in self.policy.parameters()) <= self.diagnostic_reference_max_params:
            self.reference = self.policy.frozen_copy()  # only for train/actor/kl_ref
        skips = hp.skip_solved_after or hp.skip_failed_after
        self.starts = StartTracker(hp.skip_solved_after, hp.skip_failed_after) if skips else None

    def extra_state(self):
        state = {}
        if self.reference is not None:
            state["reference"] = self.reference.state_dict()
        if self.starts is not None:
            state["starts"] = self.starts.state_dict()
        return state

    def load_extra_state(self, state):
        if self.reference is not None and "reference" in state:
            self.reference.load_state_dict(state["reference"])
        if self.starts is not None and ("starts" in state or "solved" in state):
            self.starts.load_state_dict(state.get("starts", state.get("solved")))

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
        self.last_skipped = 0

    def group_specs(self, sampling_round: int | None = None) -> list[EpisodeSpec]:
        """This rank's groups for the current update's sampling round (default: the one being played,
        ``self.sampling_round``): ``group_size`` identical specs per group.

        Group ``g`` is drawn from ``default_rng([seed, g])`` (pairs solved under ``skip_solved_after`` or hopeless under ``skip_failed_after`` are redrawn
        from ``[seed, g, attempt]``); ``g`` counts groups over updates, rounds and ranks, so every group is new."""
        hp = self.hp
        if sampling_round is None:
            sampling_round = getattr(self, "sampling_round", 0)
        per_rank = hp.groups_per_update // self.dist.world_size
        rounds_per_update = hp.max_sampling_rounds if hp.min_mixed_groups > 0 else 1
        first = ((self.num_updates * rounds_per_update + sampling_round) * hp.groups_per_update
                 + self.dist.rank * per_rank)
        specs, self.last_skipped = [], 0
        for j in range(per_rank):
            spec, skipped = draw_unsolved(lambda attempt, group=first + j: self._draw_group(group, attempt), self.starts)
            self.last_skipped += skipped
            specs += [spec] * hp.group_size
        return specs

    def _draw_group(self, group: int, attempt: int) -> tuple[tuple[int, int] | None, EpisodeSpec]:
        """((task, init state) or None, spec) of group number ``group``."""
        rng = np.random.default_rng([self.cfg.seed, group] if attempt == 0 else [self.cfg.seed, group, attempt])
        spec = draw_start(rng, self.tasks, self.hp.train_init_states, self.fixed_task)
        return start_key(spec), spec

    def _record_starts(self, specs: list[EpisodeSpec], outcome: GroupOutcomes) -> None:
        """Every rank's group outcomes of a round into the starts' history (the same on every rank)."""
        keys = [start_key(spec) for spec in specs[::self.hp.group_size]]
        local = list(zip(keys, outcome.all_success.tolist(), outcome.all_fail.tolist()))
        for part in self.dist.gather_objects(local):
            for key, all_success, all_fail in part:
                self.starts.record(key, all_success, all_fail)

    def collect_rollouts(self):
        """Groups of episodes (:meth:`_sample_groups`), their advantages, and the buffer of the steps that count."""
        hp = self.hp
        results, records, outcomes, rounds, skipped = self._sample_groups()
        scores, judged_ = episode_scores(results, hp.score == "success"), judged(results)
        # an episode cut by a failed env worker (info["env_failure"]) was not judged by the env: it is left out of
        # its group's mean and of the loss (its score 0 is no outcome)
        advantages = group_advantages(scores, hp.group_size, hp.normalize_std, judged=judged_)
        mixed = torch.cat([o.mixed for o in outcomes])
        keep = mixed.repeat_interleave(hp.group_size) if hp.filter_uniform_groups else torch.ones(len(results), dtype=torch.bool)
        keep &= judged_

        # which rows of each recorded step count: those of kept episodes
        valid_steps, rows_per_episode = [], torch.zeros(len(results))
        for step in records:
            jobs = torch.as_tensor(step.jobs)
            valid = jobs >= 0
            valid[valid.clone()] = keep[jobs[valid]]
            rows_per_episode += torch.bincount(jobs[valid], minlength=len(results)).float()
            valid_steps.append((step, jobs, valid))
        if hp.min_mixed_groups > 0:  # drop steps of the dropped groups (more rounds: more of them)
            valid_steps = [entry for entry in valid_steps if entry[2].any()] or valid_steps[:1]

        sums, counts = episode_sums(results, [task.name for task in self.tasks])  # env/... as PPO logs them
        sums.update({"rollout/rewards": sums["env/return"], "rollout/score_mean": scores.sum().item()})
        counts.update({"rollout/rewards": sums["env/episode_len"], "rollout/score_mean": len(results)})
        for name in ("uniform", "mixed", "all_success", "all_fail") if hp.score == "success" else ("uniform", "mixed"):
            sums[f"rollout/{name}_groups"] = torch.cat([getattr(o, name) for o in outcomes]).float().sum().item()
            counts[f"rollout/{name}_groups"] = len(mixed)
        valid_rows = sum(int(valid.sum()) for _, _, valid in valid_steps)
        totals = self.dist.sum_tensor(torch.tensor(
            [sums["env/episode_len"], valid_rows, int((rows_per_episode > 0).sum()), len(results), len(mixed),
             float(mixed.sum()), skipped], dtype=torch.float64)).tolist()
        env_steps, total_rows, total_kept, episodes_played, groups_played, mixed_total, skipped_total = totals

        weights = None
        if hp.loss_weighting == "episode":  # 1 / (the episode's transitions), mean 1 over all ranks' transitions
            weights = (total_rows / max(total_kept, 1.0)) / rows_per_episode.clamp(min=1.0)
        width = len(records[0].jobs) if records else self.num_envs  # a pipeline stage's envs per record
        buffer = RolloutBuffer(len(valid_steps), width, self.device)
        for step, jobs, valid in valid_steps:
            extras = {}
            if hp.mask_unexecuted:
                extras["sub_steps"] = torch.as_tensor(step.sub_steps)
            if weights is not None:
                extras["row_weights"] = torch.where(valid, weights[jobs.clamp(min=0)], 0.0)
            buffer.add(step.obs, step.actions, step.log_probs, valid=valid, extras=extras,
                       advantages=torch.where(valid, advantages[jobs.clamp(min=0)], 0.0))  # its episode's advantage

        valid_adv = buffer.advantages[buffer.valid]
        sums["rollout/advantages_mean"], counts["rollout/advantages_mean"] = valid_adv.sum().item(), valid_adv.numel()
        metrics = self.dist.weighted_mean(sums, counts)
        metrics["rollout/advantages_max"] = self.dist.max(valid_adv.max().item() if valid_adv.numel() else -1e30)
        metrics["rollout/advantages_min"] = self.dist.min(valid_adv.min().item() if valid_adv.numel() else 1e30)
        metrics.update({"rollout/groups": groups_played, "rollout/useful_groups": mixed_total,
                        "rollout/useful_episodes": mixed_total * hp.group_size, "rollout/sampling_rounds": rounds})
        if mixed_total:
            metrics["rollout/episodes_per_useful_group"] = episodes_played / mixed_total
        if self.starts is not None:
            metrics.update({"rollout/skipped_starts": skipped_total, "rollout/solved_pairs": self.starts.num_solved(),
                            "rollout/hopeless_pairs": self.starts.num_hopeless()})
        self.num_timesteps += int(env_steps)
        num_minibatches = math.ceil(total_rows / hp.batch_size)  # 0 when every group of every rank was uniform
        return buffer, num_minibatches, metrics

    def _sample_groups(self) -> tuple[list, list[RecordedStep], list[GroupOutcomes], int, int]:
        """Rounds of groups until the update holds ``min_mixed_groups`` mixed groups over all ranks (one round without
        dynamic sampling); returns (episodes, recorded steps, each round's outcomes, rounds, starts skipped)."""
        hp = self.hp
        success = hp.score == "success"
        results, records, outcomes = [], [], []
        rounds = mixed_found = skipped = 0
        while True:
            self.sampling_round = rounds
            specs = self.group_specs()
            skipped += self.last_skipped
            played, played_records = play_recorded(self.runner, specs, self._act_kwargs, offset=len(results))
            if success and any(r.success is None and r.env_failure is None for r in played):
                raise ValueError(f"{self.cfg.env.id} does not report info['success']: use grpo.score=return")
            outcome = group_outcomes(episode_scores(played, success), hp.group_size, success, judged=judged(played))
            if self.starts is not None:
                self._record_starts(specs, outcome)
            results += played
            records += played_records
            outcomes.append(outcome)
            rounds += 1
            if hp.min_mixed_groups > 0:  # the same sum on every rank: every rank stops after the same round
                mixed_found += int(self.dist.sum_tensor(torch.tensor([float(outcome.mixed.sum())])).item())
            if sampling_done(mixed_found, rounds, hp.min_mixed_groups, hp.max_sampling_rounds):
                return results, records, outcomes, rounds, skipped

    # ----------------------------------------------------------------------------------------- loss
    def _policy_terms(self, batch, model) -> tuple[torch.Tensor, dict[str, float], _Terms]:
        """The clipped surrogate at the configured ratio level (no entropy, no KL)."""
        hp = self.hp
        low, high = hp.clip_bounds
        obs, actions = batch["obs"], batch["actions"]
        if self._per_dim:
            new_dims, entropy, _ = model(obs, actions, per_dim=True)
            new_dims = chunk_view(new_dims, self._steps)
            old_dims = chunk_view(batch["log_probs"], self._steps)
            mask = self._noise_mask(batch.get("sub_steps"), new_dims)
            new, token_mask = level_log_probs(new_dims, hp.ratio_level, mask)
            old, _ = level_log_probs(old_dims, hp.ratio_level, mask)
            terms = _Terms(new, token_mask, entropy, new_dims, old_dims, mask)
        else:
            log_probs, entropy, _ = model(obs, actions)
            new, old = log_probs.reshape(-1, 1), batch["log_probs"].reshape(-1, 1)
            terms = _Terms(new, None, entropy)
        policy_loss, stats = clipped_token_loss(new, old, batch["advantages"], low, high, terms.token_mask,
                                                batch.get("row_weights"))
        return policy_loss, stats, terms

    def _noise_mask(self, sub_steps: torch.Tensor | None, per_dim: torch.Tensor) -> torch.Tensor | None:
        """``[B, K]`` steps of each chunk whose log-probs count: those the env ran (``mask_unexecuted``), and with
        chunk noise (``policy.kwargs.noise=chunk``) only the first, which holds the chunk's draw (None: all)."""
        mask = executed_mask(sub_steps, self._steps)
        if not self._chunk_noise:
            return mask
        first = torch.arange(self._steps, device=per_dim.device).expand(per_dim.shape[0], -1) == 0
        return first if mask is None else first & mask.to(first.device)

    def _level_tokens(self, policy, obs, actions, mask: torch.Tensor | None):
        """``policy``'s log-probs of the stored actions at the ratio level: (``[B, T]``, token mask or None)."""
        if self._per_dim:
            dims = chunk_view(policy.evaluate(obs, actions, per_dim=True)[0], self._steps)
            return level_log_probs(dims, self.hp.ratio_level, mask)
        return policy.evaluate(obs, actions)[0].reshape(-1, 1), None

    def loss(self, batch):
        hp = self.hp
        policy_loss, stats, terms = self._policy_terms(batch, self.model)
        if terms.new_dims is not None:
            stats.update(per_dim_ratio_stats(terms.new_dims, terms.old_dims, terms.mask, *hp.clip_bounds))
        entropy_mean = terms.entropy.mean()
        loss = policy_loss
        if hp.ent_coef:
            loss = loss - hp.ent_coef * entropy_mean
        if hp.kl_coef > 0:
            with torch.no_grad():
                ref_log_probs, _ = self._level_tokens(self.reference, batch["obs"], batch["actions"], terms.mask)
            kl = masked_row_mean(kl_to_reference(terms.new, ref_log_probs), terms.token_mask).mean()
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
