"""``OnPolicyAlgorithm``: the update loop PPO and GRPO share.

    model = PPO("mlp", "CartPole-v1", num_envs=8)      # or PPO.from_config(cfg, dist); see sb3_api.py
    model.learn(100_000, callback=lambda algo, metrics: print(metrics["train/loss"]))   # or a Callback

One update: the subclass fills a buffer (:meth:`collect_rollouts`), then this class runs ``n_epochs``
passes over its minibatches with the subclass's :meth:`loss`, gradient clipping, the learning-rate
schedule and the optional target-KL stop, and lets the policy update its running statistics. Metrics are
averaged over ranks (rank 0 logs them). Around the loop, one module per job:

- :mod:`vla_gym.trainers.algorithms.sb3_api`: keyword constructor, ``from_config``, ``save``, ``load``, ``predict`` (the base class);
- :mod:`vla_gym.trainers.runtime.run`: run directory, ``config.yaml``, resume, logger, time budget (``self.run``);
- :mod:`vla_gym.trainers.runtime.callbacks`: logging, checkpoints and evaluation after each update and at the
  end, the same callbacks as SFT's;
- :mod:`vla_gym.trainers.evaluation.periodic`: evaluation episodes, reports and videos (``self.evaluator``).

A subclass sets ``algo`` (its config section) and provides :meth:`collect_rollouts` and :meth:`loss`;
the other hooks are optional.
"""
from __future__ import annotations

import math
import pathlib
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from vla_gym.runtime.memory import proc_status, release_freed_memory, worker_rss_mb
from vla_gym.trainers.algorithms.sb3_api import SB3Interface
from vla_gym.trainers.algorithms.schedules import schedule
from vla_gym.trainers.evaluation.periodic import TrainingEvaluator
from vla_gym.trainers.policies import make_policy
from vla_gym.trainers.rollout.batch import index
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.rollout.pipeline import PipelineError, check_stages
from vla_gym.trainers.runtime.callbacks import Callback, CallbackList, as_callback, default_callbacks
from vla_gym.trainers.runtime.checkpoint import checkpoint_state, rng_state, set_rng_state
from vla_gym.trainers.runtime.contract import (
    ContractError,
    check_contract,
    checkpoint_contract,
    contract_of,
    env_contract,
)
from vla_gym.trainers.runtime.distributed import Distributed
from vla_gym.trainers.runtime.envs import make_envs, worker_restarts
from vla_gym.trainers.runtime.run import TrainingRun

#: metrics every update reports (averaged over minibatches and ranks)
TRAIN_KEYS = (
    "train/actor/approx_kl", "train/actor/clip_fraction", "train/actor/clipped_ratio", "train/actor/grad_norm",
    "train/actor/policy_loss", "train/entropy_loss", "train/loss",
)
#: the probability-ratio statistics, computed before a minibatch's step
_RATIO_KEYS = ("train/actor/approx_kl", "train/actor/clip_fraction", "train/actor/clipped_ratio")


class OnPolicyAlgorithm(SB3Interface):
    #: the config section holding this algorithm's hyperparameters ("ppo" | "grpo")
    algo: str = ""
    #: loss stats a subclass adds to TRAIN_KEYS
    extra_train_keys: tuple[str, ...] = ()
    #: set-up errors whose message names the fix: the command line prints them without a traceback (exit 2)
    setup_errors: tuple[type[Exception], ...] = (PipelineError, ContractError)

    def _setup(self, cfg, dist, policy, envs, observation_space, action_space, write_run) -> None:
        """Policy, optimizer, counters and seeds (every constructor ends here)."""
        self.cfg = cfg
        self.hp = getattr(cfg, self.algo)
        self.dist = dist or Distributed.from_env(cfg.device)
        self.device = self.dist.device
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        self.envs = envs
        if envs is not None:  # a given vector env is this rank's shard
            cfg.env.num_envs = envs.num_envs * self.dist.world_size
        self.num_envs = self.dist.shard(cfg.env.num_envs)
        self._policy_from_config = policy is None
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
        self.num_timesteps = 0
        self.num_updates = 0
        rank_seed = cfg.seed + 10_007 * self.dist.rank
        self.generator = torch.Generator().manual_seed(rank_seed)
        torch.manual_seed(rank_seed)
        np.random.seed(rank_seed % 2**32)
        random.seed(rank_seed)
        self._total_timesteps = cfg.total_timesteps
        self.run = TrainingRun(cfg, self.dist, cfg.path if write_run else None, self.algo)
        self.evaluator = TrainingEvaluator(cfg, self.dist, self.run)
        self.last_metrics: dict[str, float] = {}
        self.last_eval: dict[str, Any] | None = None
        self._rollouts_started = False

    # --------------------------------------------------------------------------------- subclass API
    def _policy_kwargs(self) -> dict[str, Any]:
        return dict(self.cfg.policy.kwargs)

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

    def extra_state(self) -> dict[str, Any]:
        """What a subclass adds to a checkpoint (GRPO: the reference policy)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    # ------------------------------------------------------------------------------------ the loop
    @property
    def progress(self) -> float:
        return self.num_timesteps / max(1, self._total_timesteps)

    #: what log_step counts
    log_unit = "env steps"

    @property
    def log_step(self) -> int:
        """The x axis of this trainer's logs: env steps over all ranks."""
        return self.num_timesteps

    @property
    def run_path(self) -> pathlib.Path | None:
        """``{run_dir}/{name}`` when this run writes files, else None."""
        return self.run.path

    def learn(self, total_timesteps: int | None = None, callback: Callback | Callable | list | None = None):
        """Train until ``total_timesteps`` env steps (over all ranks) have been taken; returns self.

        ``callback``: a :class:`~vla_gym.trainers.runtime.callbacks.Callback`, a list of them, or
        ``fn(algo, metrics)`` run after every update; returning False stops training. It runs after the built-in
        callbacks (log, checkpoint, evaluate).
        """
        self._total_timesteps = total_timesteps or self.cfg.total_timesteps
        callbacks = CallbackList(default_callbacks() + [c for c in [as_callback(callback)] if c is not None])
        start_time = self.run.start_clock()
        self._start_run()
        start_steps = self.num_timesteps
        try:
            callbacks.on_training_start(self)
            while self.num_timesteps < self._total_timesteps and not self.run.out_of_time():
                t0 = time.perf_counter()
                steps_before = self.num_timesteps
                with self.dist.gathered(self.policy):  # fsdp: whole parameters for the rollout
                    buffer, num_minibatches, metrics = self.collect_rollouts()
                t1 = time.perf_counter()
                restarts = worker_restarts(self.envs)
                if restarts is not None:  # workers restarted so far (hung, dead or raising sub-envs), all ranks
                    metrics["env/worker_restarts"] = self.dist.sum_tensor(torch.tensor([float(restarts)])).item()
                metrics.update(self._memory_metrics())
                metrics.update(self._update(buffer, num_minibatches))
                self._update_statistics(buffer)
                del buffer  # the rollout's arrays, freed before the trim (GRPO builds a new buffer every update)
                release_freed_memory()  # else glibc keeps that freed heap and RSS creeps up (docs/reliability.md)
                self.num_updates += 1
                t2 = time.perf_counter()
                metrics.update({
                    "time/fps": (self.num_timesteps - steps_before) / (t2 - t0),
                    "time/rollout_s": t1 - t0, "time/update_s": t2 - t1,
                    "time/total_fps": (self.num_timesteps - start_steps) / (t2 - start_time),
                    "time/elapsed_s": t2 - start_time,
                })
                self.last_metrics = metrics
                if callbacks.on_update_end(self, metrics) is False:
                    break
            callbacks.on_training_end(self)
        finally:
            self.run.stop_logging()
        return self

    def _start_run(self) -> None:
        """Envs, the run directory (and a resume), the logger, and the first episodes' seeds."""
        if self.envs is None:
            self.envs = make_envs(self.cfg.env, self.num_envs)
        self.run.begin(self, self._total_timesteps, self.device)
        if not self._rollouts_started:
            # new episodes on every (re)start: seeds depend on rank and on how far training got
            base = self.cfg.seed + self.num_envs * self.dist.rank + 1_000_003 * self.num_updates
            self.start_rollouts([base + i for i in range(self.num_envs)])
            self._rollouts_started = True

    # ---------------------------------------------------------------------------------- the update
    def _update(self, buffer: RolloutBuffer, num_minibatches: int) -> dict[str, float]:
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
    def state_dict(self, rng: list[Any] | None = None) -> dict[str, Any]:
        """Everything a checkpoint holds (``rng``: every rank's RNG states, for a resume). Collective under
        ``distributed.strategy: fsdp`` (the whole parameters and optimizer state are gathered on rank 0)."""
        return checkpoint_state(
            self.algo, self.cfg, self.policy, policy_state=self.dist.full_state_dict(self.policy),
            optimizer=self.dist.full_optimizer_state_dict(self.policy, self.optimizer),
            counters={"num_timesteps": self.num_timesteps, "num_updates": self.num_updates}, contract=self.contract,
            policy_name=self.cfg.policy.name if self._policy_from_config else None,
            policy_kwargs=self._policy_kwargs() if self._policy_from_config else None, rng=rng,
            extra=self.extra_state())

    def load_state(self, state: dict[str, Any], restore_rng: bool = False) -> None:
        """Restore policy, optimizer, counters (and this rank's RNG states) from a checkpoint dict (whose contract
        must match this run's env: :class:`~vla_gym.trainers.runtime.contract.ContractError` otherwise)."""
        check_contract(checkpoint_contract(state), self.contract, "checkpoint.resume")
        self.dist.load_full_state_dict(self.policy, state["policy"])
        if state["optimizer"] is not None:  # None: a finished run's slimmed checkpoint; Adam starts afresh
            self.dist.load_full_optimizer_state_dict(self.policy, self.optimizer, state["optimizer"])
        self.num_timesteps = state["counters"]["num_timesteps"]
        self.num_updates = state["counters"]["num_updates"]
        self.load_extra_state(state.get("extra") or {})
        if restore_rng and state.get("rng"):
            ranks = state["rng"]
            set_rng_state(ranks[self.dist.rank % len(ranks)], {"minibatch": self.generator})

    def save_checkpoint(self) -> pathlib.Path | None:
        """Collective: gathers every rank's RNG state; rank 0 writes ``checkpoints/ckpt_<update>.pt``."""
        if self.run.checkpointer is None:
            return None
        rng = self.dist.gather_objects(rng_state({"minibatch": self.generator}))
        state = self.state_dict(rng)  # every rank: fsdp gathers the parameters here
        if not self.dist.is_main:
            return None
        return self.run.checkpointer.save(state, self.num_updates)

    # ---------------------------------------------------------------------------------- evaluation
    def evaluate(self, episodes: int, report_dir: pathlib.Path | None = None,
                 deterministic: bool | None = None) -> dict[str, Any]:
        """Collective: ``episodes`` episodes split over the ranks; logs ``eval/*`` and returns the summary."""
        with self.dist.gathered(self.policy):
            self.last_eval = self.evaluator.evaluate(self.policy, episodes, self.num_updates, self.num_timesteps,
                                                     report_dir=report_dir, deterministic=deterministic)
        return self.last_eval

    def record_videos(self, episodes: int, directory: pathlib.Path) -> list[str]:
        """MP4s of the first ``episodes`` evaluation episodes (see :meth:`TrainingEvaluator.record_videos`)."""
        return self.evaluator.record_videos(self.policy, episodes, directory)

    def close(self) -> None:
        if self.envs is not None:
            self.envs.close()
        self.envs = None
        self.evaluator.close()


def _adam(params: list[torch.nn.Parameter], lr: float, eps: float) -> torch.optim.Adam:
    """Adam with the fused kernel (one op per step) where torch has it."""
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr, eps=eps)
