"""Residual RL: a bounded correction on a frozen SFT policy, trained off-policy with critics on its features.

    python trainers/residual.py --config examples/configs/libero_small_residual.yaml \\
        policy.kwargs.base_checkpoint=experiments/libero_miniature/models/libero_object_seed0_sft_3demos_fitted.pt
    python trainers/eval.py --checkpoint runs/libero_residual/residual/final.pt --init-states 0-39

    >>> from vla_gym.trainers.residual import ResidualRL
    >>> trainer = ResidualRL.from_config(load_config("examples/configs/libero_small_residual.yaml"))  # doctest: +SKIP
    >>> trainer.learn().last_metrics["env/success_once"]                                                 # doctest: +SKIP

Why (experiments/libero_miniature/README.md): GRPO and refits of the whole small policy re-draw the outcome of about half the
starts the SFT solves at every update, and GRPO's episode-level signal per update is mostly noise (gradient cosine of
two half batches 0.03-0.05). Here the SFT policy stays frozen and a small actor adds at most ``policy.kwargs.scale``
per action dimension to its greedy chunk (:class:`~vla_gym.trainers.policies.residual.ResidualPolicy`, zero at the
start); twin critics on the SFT's own frozen features score each decision with n-step returns of the sparse success
reward, and every decision played is reused ``residual.updates_per_decision`` times from a replay
(:class:`~vla_gym.trainers.algorithms.replay.FeatureReplay`, :class:`~vla_gym.trainers.algorithms.residual_td3.
ResidualTD3`). ResFiT (Ankile et al. 2025) is this recipe on real robots.

A round: ``residual.episodes_per_round`` episodes from random (task, init state) pairs (init states below
``residual.train_init_states``) in ``env.num_envs`` envs, each decision's features, base action and executed action
into the replay as the episode ends (one cut by a failed env worker is left out), then ``updates_per_decision`` x
(decisions played) gradient steps once ``residual.warmup_episodes`` episodes are in; every round plays with
``residual.exploration_std``. The first ``residual.actor_warmup`` critic steps leave the actor at zero, so the critics
first learn the base's outcomes.

Rounds are the trainer's updates for the callbacks (``logging.log_interval``, ``checkpoint.every``, ``eval.every``);
the logs' x axis is env steps. Checkpoints hold the residual's parameters, critics, targets, optimizers, counters
and RNG states (``trainers/eval.py --checkpoint`` and ``load_policy`` take them: the base is rebuilt from its
path); the replay is written beside them as ``replay.pt`` (atomically, with each checkpoint), so a killed run
resumes with its data. One process (no torchrun yet).

Metrics per round: ``env/success_once`` (the round's sampled episodes), ``replay/decisions``,
``replay/success_episodes`` (fraction of the replay's episodes that succeeded), ``train/critic/loss``, ``q_mean``,
``target_mean``, ``success_auc`` (how well the critics' Q of the latest 2,000 decisions, scored before they were
trained on, ranks the decisions of successful episodes above those of failed ones: 0.5 is no better than chance),
``train/actor/q``, ``residual_abs`` (mean absolute correction), ``residual_max_frac`` (largest
correction over ``scale``), ``train/actor/q_gain`` and ``train/critic/best_gain`` (the Q gain over the base of the
actor's residual and of the best one within the bound, in units of mean|Q|: ``ResidualTD3.action_gains``),
``train/updates`` (critic steps so far) and ``time/*``.
"""
from __future__ import annotations

import collections
import dataclasses
import pathlib
import sys
import time
from typing import Any

import numpy as np
import torch

from vla_gym.core.episodes import episode_sums
from vla_gym.trainers.algorithms.replay import FeatureReplay
from vla_gym.trainers.algorithms.residual_td3 import ResidualTD3, TD3Settings
from vla_gym.trainers.evaluation.stats import rank_auc
from vla_gym.trainers.policies import make_policy, policy_class
from vla_gym.trainers.policies.residual import ResidualPolicy
from vla_gym.trainers.rollout.episode_plan import EpisodeSpec, draw_start
from vla_gym.trainers.rollout.episode_runner import EpisodeRunner
from vla_gym.trainers.runtime.checkpoint import atomic_save, load_checkpoint
from vla_gym.trainers.runtime.config import Config
from vla_gym.trainers.runtime.contract import env_contract
from vla_gym.trainers.runtime.distributed import Distributed
from vla_gym.trainers.runtime.envs import env_attr, make_envs
from vla_gym.trainers.runtime.launch import logs_and_evaluation_lines
from vla_gym.trainers.runtime.trainer import Trainer

POLICY = "vla_gym.trainers.policies.residual:ResidualPolicy"


class ResidualRL(Trainer):
    """Off-policy residual RL on a frozen base policy (module docstring)."""

    algo = "residual"
    final_copy = "final.pt"
    resume_hint = "its base goes into policy.kwargs.base_checkpoint (or set checkpoint.resume=null)"
    cli_description = "Residual RL on a frozen SFT policy: twin critics on its features, a bounded actor (docs/trainers.md)"
    cli_example_config = "examples/configs/libero_small_residual.yaml"
    setup_errors = (ValueError, FileNotFoundError, TypeError)

    def __init__(self, cfg: Config, dist: Distributed | None = None, write_run: bool = True):
        if not is_residual_policy(cfg.policy.name):  # before any env is built
            raise ValueError(f"policy.name={cfg.policy.name}: residual RL trains a {POLICY} (set policy.name to it "
                             "and policy.kwargs.base_checkpoint to the SFT checkpoint)")
        self.start_trainer(cfg, dist, write_run)
        if self.dist.world_size > 1:
            raise ValueError("trainers/residual.py runs in one process so far: start it with python, not torchrun")
        self.envs = make_envs(cfg.env, cfg.env.num_envs)
        self.contract = env_contract(self.envs)
        torch.manual_seed(cfg.seed)
        self.policy = make_policy(cfg.policy.name, self.envs.single_observation_space, self.envs.single_action_space,
                                  **cfg.policy.kwargs)
        self.policy.set_exploration(std=self.hp.exploration_std)
        settings = TD3Settings(**{f.name: getattr(self.hp, f.name) for f in dataclasses.fields(TD3Settings)})
        self.td3 = ResidualTD3(self.policy, settings, self.hp.critic_hidden_sizes)
        self.replay = FeatureReplay(self.hp.buffer_size, self.policy.feature_dim, self.policy.action_shape,
                                    self.hp.gamma, self.hp.n_step)
        self.runner = EpisodeRunner(self.envs, self.policy)
        self.tasks = env_attr(self.envs, "tasks") or []
        self.generator = torch.Generator().manual_seed(cfg.seed)
        #: (Q, the episode succeeded) of the latest decisions, scored as they arrived (train/critic/success_auc)
        self.critic_check: collections.deque = collections.deque(maxlen=2000)
        self.episodes = 0

    # ------------------------------------------------------------------------------------ rollouts
    def round_specs(self) -> list[EpisodeSpec]:
        """This round's episodes: (task, init state) pairs drawn from ``default_rng([seed, round])``."""
        rng = np.random.default_rng([self.cfg.seed, self.num_updates])
        return [draw_start(rng, self.tasks, self.hp.train_init_states) for _ in range(self.hp.episodes_per_round)]

    def collect(self) -> tuple[list, int]:
        """Play one round's episodes; their decisions go into the replay. Returns (results, decisions added)."""
        decisions: dict[int, list[tuple[torch.Tensor, ...]]] = collections.defaultdict(list)

        def record(obs, actions, log_probs, jobs) -> None:
            features, base_actions = self.policy.base_outputs(obs)
            for row in np.flatnonzero(np.asarray(jobs) >= 0):
                decisions[int(jobs[row])].append((features[row], base_actions[row], actions[row]))

        self.policy.set_exploration(std=self.hp.exploration_std)
        results = self.runner.run(self.round_specs(), deterministic=False, recorder=record,
                                  act_kwargs={"executed": True})
        added = 0
        for job, result in enumerate(results):
            if result.env_failure is not None or not decisions[job]:
                continue  # cut by a failed env worker: not judged, its decisions carry no outcome
            features, base_actions, actions = (torch.stack(part) for part in zip(*decisions[job]))
            if self.td3.critic_steps:  # before the critics train on it: an out-of-sample check of what they learned
                with torch.no_grad():
                    q = self.td3.values(features.half().float(), actions).mean(0)
                self.critic_check.extend((value, bool(result.success)) for value in q.tolist())
            added += self.replay.add_episode(features, base_actions, actions, success=bool(result.success))
        self.episodes += len(results)
        self.num_timesteps += sum(int(r.length) for r in results)
        return results, added

    def train_steps(self, decisions: int) -> dict[str, float]:
        """``updates_per_decision`` x ``decisions`` gradient steps (none during the warm-up); mean metrics."""
        if self.episodes < self.hp.warmup_episodes or len(self.replay) < 2:
            return {}
        steps = int(round(self.hp.updates_per_decision * decisions))
        sums: dict[str, float] = collections.defaultdict(float)
        counts: dict[str, int] = collections.Counter()
        self.policy.train()
        for _ in range(steps):
            batch = self.replay.sample(self.hp.batch_size, self.generator)
            for key, value in self.td3.update(batch, self.generator).items():
                sums[key] += value
                counts[key] += 1
        self.policy.eval()
        metrics = {key: sums[key] / counts[key] for key in sums}
        if self.td3.actor_steps:  # what the critic offers the actor (ResidualTD3.action_gains), once a round
            probe = torch.Generator().manual_seed(self.cfg.seed * 100_003 + self.num_updates)  # not the training's
            metrics.update(self.td3.action_gains(self.replay.sample(self.hp.batch_size, probe)))
        return metrics

    # ---------------------------------------------------------------------------------------- loop
    def begin_run(self) -> None:
        super().begin_run()
        self.policy.eval()

    def update(self) -> dict[str, float]:
        """One round: its episodes into the replay, then its gradient steps."""
        t0 = time.perf_counter()
        results, added = self.collect()
        t1 = time.perf_counter()
        metrics = self.train_steps(added)
        self.num_updates += 1
        sums, counts = episode_sums(results, [task.name for task in self.tasks])
        metrics.update({key: sums[key] / counts[key] for key in sums if counts.get(key)})
        auc = rank_auc(*zip(*self.critic_check)) if self.critic_check else None
        if auc is not None:
            metrics["train/critic/success_auc"] = auc
        metrics.update({
            "replay/decisions": len(self.replay),
            "replay/success_episodes": self.replay.successes / max(self.replay.episodes, 1),
            "train/updates": self.td3.critic_steps, "train/actor_updates": self.td3.actor_steps,
            "time/rollout_s": t1 - t0, "time/update_s": time.perf_counter() - t1,
        })
        return metrics

    # ------------------------------------------------------------------------------- checkpoints
    def counters(self) -> dict[str, int]:
        return {**super().counters(), "episodes": self.episodes}

    def load_counters(self, counters: dict[str, int]) -> None:
        super().load_counters(counters)
        self.episodes = counters["episodes"]

    def rng_generators(self) -> dict[str, torch.Generator]:
        return {"replay": self.generator}

    def extra_state(self) -> dict[str, Any]:
        """The critics, their targets and both optimizers (``td3``); the replay is written beside the checkpoint."""
        return {"td3": self.td3.state_dict()}

    def load_extra_state(self, extra: dict[str, Any]) -> None:
        if extra.get("td3") is not None:
            self.td3.load_state_dict(extra["td3"])
        else:  # a finished campaign run, slimmed for the repository (experiments/libero_miniature/campaign.py)
            self.run.say("the checkpoint holds no critics: they and the replay start afresh (and warm up again)")
        replay = self.replay_path()
        if replay is not None and replay.is_file():
            self.replay.load_state_dict(load_checkpoint(replay))
        elif self.num_updates:
            self.run.say(f"no {replay}: resuming with an empty replay")

    def replay_path(self) -> pathlib.Path | None:
        return None if self.run.path is None else self.run.path / "replay.pt"

    def save_alongside(self) -> None:
        """``replay.pt``, atomically, before its checkpoint: a checkpoint never points past its data."""
        atomic_save(self.replay.state_dict(), self.replay_path())

    def summary_lines(self) -> list[str]:
        lines = [f"run directory: {self.run_path}",
                 f"  env steps:   {self.num_timesteps:,} in {self.episodes:,} episodes, {self.td3.critic_steps:,} "
                 f"critic and {self.td3.actor_steps:,} actor steps"]
        latest = self.run.checkpointer.latest() if self.run.checkpointer else None
        if latest:
            lines.append(f"  checkpoint:  {latest}")
        if self.run_path is not None:
            lines.append(f"  model:       {self.run_path / 'final.pt'}   (trainers/eval.py --checkpoint ...)")
        return lines + logs_and_evaluation_lines(self)


def is_residual_policy(name: str) -> bool:
    """Whether ``policy.name`` names the residual policy (by its registered name or import path)."""
    try:
        return issubclass(policy_class(name), ResidualPolicy)
    except (KeyError, ValueError, ImportError, AttributeError, TypeError):
        return False


def main(argv: list[str] | None = None) -> int:
    from vla_gym.trainers.runtime.launch import train_main

    return train_main(ResidualRL, argv)


if __name__ == "__main__":
    sys.exit(main())
