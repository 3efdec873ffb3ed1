"""``OnPolicyAlgorithm``: what PPO and GRPO share on top of :class:`~vla_gym.trainers.runtime.trainer.Trainer`.

    model = PPO("mlp", "CartPole-v1", num_envs=8)      # or PPO.from_config(cfg, dist); see sb3_api.py
    model.learn(100_000, callback=lambda algo, metrics: print(metrics["train/loss"]))   # or a Callback

One update (:meth:`OnPolicyAlgorithm.update`): the subclass fills a buffer (:meth:`collect_rollouts`), then
:meth:`_optimise` runs ``n_epochs`` passes over its minibatches with the subclass's :meth:`loss`, gradient clipping,
the learning-rate schedule and the optional target-KL stop, and the policy updates its running statistics. Metrics
are averaged over ranks (rank 0 logs them). The loop, callbacks, checkpoints, resume and evaluation are
``Trainer``'s; :mod:`vla_gym.trainers.algorithms.sb3_api` adds the keyword constructor, ``from_config``, ``save``,
``load`` and ``predict``.

A subclass sets ``algo`` (its config section) and provides :meth:`collect_rollouts` and :meth:`loss`;
the other hooks are optional.
"""
from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from vla_gym.runtime.memory import proc_status, release_freed_memory, worker_rss_mb
from vla_gym.trainers.algorithms.sb3_api import SB3Interface
from vla_gym.trainers.algorithms.schedules import schedule
from vla_gym.trainers.policies import make_policy
from vla_gym.trainers.rollout.batch import index
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.rollout.pipeline import PipelineError, check_stages
from vla_gym.trainers.runtime.callbacks import Callback
from vla_gym.trainers.runtime.contract import ContractError, contract_of, env_contract
from vla_gym.trainers.runtime.envs import make_envs, worker_restarts
from vla_gym.trainers.runtime.trainer import Trainer

#: metrics every update reports (averaged over minibatches and ranks)
TRAIN_KEYS = (
    "train/actor/approx_kl", "train/actor/clip_fraction", "train/actor/clipped_ratio", "train/actor/grad_norm",
    "train/actor/policy_loss", "train/entropy_loss", "train/loss",
)
#: the probability-ratio statistics, computed before a minibatch's step
_RATIO_KEYS = ("train/actor/approx_kl", "train/actor/clip_fraction", "train/actor/clipped_ratio")


class OnPolicyAlgorithm(SB3Interface, Trainer):
    #: loss stats a subclass adds to TRAIN_KEYS
    extra_train_keys: tuple[str, ...] = ()
    #: set-up errors whose message names the fix: the command line prints them without a traceback (exit 2)
    setup_errors: tuple[type[Exception], ...] = (PipelineError, ContractError)

    def _setup(self, cfg, dist, policy, envs, observation_space, action_space, write_run) -> None:
        """Policy, optimizer, counters and seeds (every constructor ends here)."""
        self.start_trainer(cfg, dist, write_run)
        self.envs = envs
        if envs is not None:  # a given vector env is this rank's shard
            cfg.env.num_envs = envs.num_envs * self.dist.world_size
        self.num_envs = self.dist.shard(cfg.env.num_envs)
        self.policy_from_config = policy is None
        if policy is None:
            if observation_space is None:
                if self.envs is None:
                    self.envs = make_envs(cfg.env, self.num_envs)
                observation_space, action_space = self.envs.single_observation_space, self.envs.single_action_space
            torch.manual_seed(cfg.seed)  # the same initial parameters on every rank
            policy = make_policy(cfg.policy.name, observation_space, action_space, **self._policy_kwargs())
        if self.envs is not None:  # fail before the run starts, not at the first rollout
            check_stages(self.envs, cfg.rollout.pipeline_stages)
        self.policy = policy.to(self.device)
        #: the observation/action contract checkpoints record and init_checkpoint / resume check
        self.contract = (env_contract(self.envs) if self.envs is not None else
                         contract_of(self.policy.observation_space, self.policy.action_space))
        self.prepare_policy()
        self.model = self.dist.wrap(self.policy, find_unused_parameters=self._find_unused_parameters(),
                                    strategy=cfg.distributed.strategy)
        self._params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = _adam(self._params, self.hp.learning_rate, self.hp.adam_eps)
        rank_seed = cfg.seed + 10_007 * self.dist.rank
        self.generator = torch.Generator().manual_seed(rank_seed)
        torch.manual_seed(rank_seed)
        np.random.seed(rank_seed % 2**32)
        random.seed(rank_seed)
        self._rollouts_started = False

    # --------------------------------------------------------------------------------- subclass API
    def _find_unused_parameters(self) -> bool:
        return False

    def prepare_policy(self) -> None:
        """Hook run once the policy is on its device, before DDP wraps it (GRPO: init weights, reference)."""

    def start_rollouts(self, seeds: list[int]) -> None:
        """Called before the first rollout of a learn() call (and after a resume)."""

    def collect_rollouts(self) -> tuple[RolloutBuffer, int, dict[str, float]]:
        """Fill a buffer; returns (buffer, num_minibatches, rollout metrics reduced over ranks).

        Must add the env steps taken (over all ranks) to ``self.num_timesteps``.
        """
        raise NotImplementedError

    def loss(self, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        """One minibatch's loss and its stats (keys of TRAIN_KEYS and extra_train_keys)."""
        raise NotImplementedError

    def post_update_metrics(self, buffer: RolloutBuffer) -> dict[str, float]:
        """Extra per-rank metrics after an update (averaged over ranks)."""
        return {}

    # ------------------------------------------------------------------------------------ the loop
    def learn(self, total_timesteps: int | None = None, callback: Callback | Callable | list | None = None):
        """Train until ``total_timesteps`` env steps (over all ranks, default ``cfg.total_timesteps``) have been
        taken; returns self. ``callback``: as :meth:`Trainer.learn`'s."""
        self.total_steps = total_timesteps or self.cfg.total_timesteps
        return super().learn(callback)

    def begin_run(self) -> None:
        """Envs, the run directory (and a resume), the logger, and the first episodes' seeds."""
        if self.envs is None:
            self.envs = make_envs(self.cfg.env, self.num_envs)
        super().begin_run()
        if not self._rollouts_started:
            # new episodes on every (re)start: seeds depend on rank and on how far training got
            base = self.cfg.seed + self.num_envs * self.dist.rank + 1_000_003 * self.num_updates
            self.start_rollouts([base + i for i in range(self.num_envs)])
            self._rollouts_started = True

    def update(self) -> dict[str, float]:
        """One rollout and its optimisation."""
        t0 = time.perf_counter()
        steps_before = self.num_timesteps
        with self.dist.gathered(self.policy):  # fsdp: whole parameters for the rollout
            buffer, num_minibatches, metrics = self.collect_rollouts()
        t1 = time.perf_counter()
        restarts = worker_restarts(self.envs)
        if restarts is not None:  # workers restarted so far (hung, dead or raising sub-envs), all ranks
            metrics["env/worker_restarts"] = self.dist.sum_tensor(torch.tensor([float(restarts)])).item()
        metrics.update(self._memory_metrics())
        metrics.update(self._optimise(buffer, num_minibatches))
        self._update_statistics(buffer)
        del buffer  # the rollout's arrays, freed before the trim (GRPO builds a new buffer every update)
        release_freed_memory()  # else glibc keeps that freed heap and RSS creeps up (docs/reliability.md)
        self.num_updates += 1
        t2 = time.perf_counter()
        metrics.update({"time/fps": (self.num_timesteps - steps_before) / (t2 - t0),
                        "time/rollout_s": t1 - t0, "time/update_s": t2 - t1})
        return metrics

    # ---------------------------------------------------------------------------------- the update
    def _optimise(self, buffer: RolloutBuffer, num_minibatches: int) -> dict[str, float]:
        """``n_epochs`` passes over the buffer's minibatches: loss, gradient clipping, Adam step, target-KL stop."""
        hp = self.hp
        lr = hp.learning_rate * schedule(hp.lr_schedule, self.progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        keys = TRAIN_KEYS + self.extra_train_keys
        sums, counts = dict.fromkeys(keys, 0.0), dict.fromkeys(keys, 0.0)
        max_norm = hp.max_grad_norm if hp.max_grad_norm is not None else math.inf
        epochs_done = optimizer_steps = 0
        # no rank has a sample (GRPO skipped every group as uniform): no step at all, since Adam's momentum would
        # still move the weights on zero gradients
        for _ in range(hp.n_epochs if num_minibatches > 0 else 0):
            stop = False
            for batch in buffer.minibatches(num_minibatches, self.generator):
                loss, stats = self.loss(batch)
                weight = batch["weight"]
                if hp.target_kl is not None:
                    kl = stats["train/actor/approx_kl"]
                    kl = self.dist.weighted_mean({"kl": kl * weight}, {"kl": weight}).get("kl", 0.0)
                    if kl > 1.5 * hp.target_kl:
                        stop = True
                        if weight:  # the KL that stopped the update is logged too (as SB3 does), not hidden
                            for key in _RATIO_KEYS:
                                sums[key] += stats[key]
                                counts[key] += 1
                        break
                self.optimizer.zero_grad(set_to_none=True)
                (loss if weight == 1.0 else loss * weight).backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(self._params, max_norm, foreach=True)
                self.optimizer.step()
                optimizer_steps += 1
                if weight:
                    stats["train/actor/grad_norm"] = grad_norm.item()
                    stats["train/loss"] = loss.item()
                    for key, value in stats.items():
                        sums[key] += value
                        counts[key] += 1
            epochs_done += 1
            if stop:
                break
        metrics = self.dist.weighted_mean(sums, counts)
        metrics.update(self.dist.mean(self.post_update_metrics(buffer)))
        metrics["train/actor/lr"] = lr
        metrics["train/epochs"] = epochs_done
        metrics["train/optimizer_steps"] = optimizer_steps  # few with a tight target_kl: the update stopped early
        return metrics

    def _memory_metrics(self) -> dict[str, float]:
        """``proc/rss_mb``: the largest trainer process's resident memory, ``env/worker_rss_mb``: the largest env
        worker's (all ranks; absent without worker processes), in MB: a long run's memory curve
        (docs/reliability.md)."""
        metrics = {"proc/rss_mb": self.dist.max(proc_status().get("VmRSS", 0.0))}
        workers = worker_rss_mb(self.envs)
        if workers is not None:
            metrics["env/worker_rss_mb"] = self.dist.max(workers)
        return metrics

    def _update_statistics(self, buffer: RolloutBuffer) -> None:
        """Let the policy update running statistics (observation normalisation) from this rollout."""
        rows = torch.nonzero(buffer.valid.flatten()).squeeze(-1).cpu()
        with torch.no_grad():
            self.policy.update_statistics(index(buffer.obs.flat(), rows), self.dist.sum_tensor)

    # ------------------------------------------------------------------------------- state
    def policy_state(self) -> dict[str, Any]:
        """Collective under ``distributed.strategy: fsdp`` (the whole parameters are gathered on rank 0)."""
        return self.dist.full_state_dict(self.policy)

    def load_policy_state(self, state: dict[str, Any]) -> None:
        self.dist.load_full_state_dict(self.policy, state)

    def optimizer_state(self) -> dict[str, Any]:
        return self.dist.full_optimizer_state_dict(self.policy, self.optimizer)

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.dist.load_full_optimizer_state_dict(self.policy, self.optimizer, state)

    def rng_generators(self) -> dict[str, torch.Generator]:
        return {"minibatch": self.generator}



def _adam(params: list[torch.nn.Parameter], lr: float, eps: float) -> torch.optim.Adam:
    """Adam with the fused kernel (one op per step) where torch has it."""
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr, eps=eps)
