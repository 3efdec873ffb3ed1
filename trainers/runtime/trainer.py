"""``Trainer``: what every trainer shares (PPO, GRPO, SFT, residual RL): the run, the loop, callbacks, checkpoints,
resume, evaluation and teardown, written once (Stable-Baselines3's ``BaseAlgorithm`` is the model).

    class MyTrainer(Trainer):
        algo = "sft"                                   # its config section, written into config.yaml and checkpoints
        def __init__(self, cfg, dist=None, write_run=True):
            self.start_trainer(cfg, dist, write_run)   # hp, dist, device, counters, run directory, evaluator
            self.policy, self.optimizer, self.contract = ..., ..., ...
            self.total_steps = 1_000                   # in log_step units (env steps, or optimizer steps for SFT)
        def update(self) -> dict[str, float]:          # one update; adds to num_updates (and num_timesteps)
            ...
    MyTrainer(cfg).learn()

A subclass supplies ``update()`` (one update's work and metrics) and, where it has more than the policy, the
optimizer and the counters to keep, the hooks below: ``counters`` / ``load_counters``, ``extra_state`` /
``load_extra_state`` (the checkpoint's ``extra`` entry), ``rng_generators`` (named torch generators a resume
restores), ``save_alongside`` (files written before each checkpoint), ``begin_run`` (before the first update).
Around ``update()``, :meth:`learn` runs the callbacks of :mod:`vla_gym.trainers.runtime.callbacks` (logging,
checkpoints, evaluation, the user's), every rank at the same point; :class:`~vla_gym.trainers.runtime.run.TrainingRun`
owns the run directory, resume and logger. Checkpoints have one format
(:func:`~vla_gym.trainers.runtime.checkpoint.checkpoint_state`), so ``load_policy``, ``trainers/eval.py`` and the
``init_checkpoint`` keys take any trainer's.
"""
from __future__ import annotations

import contextlib
import pathlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from vla_gym.trainers.evaluation.periodic import TrainingEvaluator
from vla_gym.trainers.runtime.callbacks import Callback, CallbackList, as_callback, default_callbacks
from vla_gym.trainers.runtime.checkpoint import checkpoint_state, rng_state, set_rng_state
from vla_gym.trainers.runtime.config import Config
from vla_gym.trainers.runtime.contract import check_contract, checkpoint_contract
from vla_gym.trainers.runtime.distributed import Distributed
from vla_gym.trainers.runtime.run import TrainingRun


class Trainer:
    #: the config section holding this trainer's settings ("ppo" | "grpo" | "sft" | "residual")
    algo: str = ""
    #: what ``log_step`` counts (the x axis of the logs and of ``total_steps``)
    log_unit = "env steps"
    #: the file the final weights are also copied to in the run directory (SFT and residual RL: ``final.pt``)
    final_copy: str | None = None
    #: set: a checkpoint of another algorithm cannot resume this one, and the error ends with this hint
    resume_hint: str | None = None

    def start_trainer(self, cfg: Config, dist: Distributed | None, write_run: bool) -> None:
        """Settings, process group, device, counters, the run directory (``write_run``) and the evaluator."""
        self.cfg, self.hp = cfg, getattr(cfg, self.algo)
        self.dist = dist or Distributed.from_env(cfg.device)
        self.device = self.dist.device
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        self.num_updates = 0
        self.num_timesteps = 0
        self.total_steps = cfg.total_timesteps
        self.envs = None
        self.optimizer: torch.optim.Optimizer | None = None
        #: whether the policy was built from ``policy.name`` (a checkpoint then records how to rebuild it)
        self.policy_from_config = True
        self.last_metrics: dict[str, float] = {}
        self.last_eval: dict[str, Any] | None = None
        self.run = TrainingRun(cfg, self.dist, cfg.path if write_run else None, self.algo)
        self.evaluator = TrainingEvaluator(cfg, self.dist, self.run)

    @classmethod
    def from_config(cls, cfg: Config, dist: Distributed | None = None, write_run: bool = True):
        """Build from a validated config (what ``trainers/<algo>.py --config ...`` does)."""
        return cls(cfg, dist, write_run)

    # ------------------------------------------------------------------------------- subclass API
    def update(self) -> dict[str, float]:
        """One update (a rollout and its optimisation, one SFT step, a residual round); its metrics."""
        raise NotImplementedError

    def begin_run(self) -> None:
        """Before the first update: open the run directory, resume the newest checkpoint, start the logger."""
        self.run.begin(self, self.total_steps, self.device)

    @property
    def log_step(self) -> int:
        """The x axis of the logs and what ``total_steps`` counts: env steps over all ranks (SFT: optimizer steps)."""
        return self.num_timesteps

    @property
    def throughput_count(self) -> int:
        """What ``time/total_fps`` counts per second: env steps (SFT: frames)."""
        return self.num_timesteps

    @property
    def progress(self) -> float:
        """The fraction of the run done, for the learning-rate and clip schedules."""
        return self.log_step / max(1, self.total_steps)

    @property
    def run_path(self) -> pathlib.Path | None:
        """``{run_dir}/{name}`` when this run writes files, else None."""
        return self.run.path

    def _policy_kwargs(self) -> dict[str, Any]:
        """``policy.kwargs`` as the policy is built with them (GRPO drops the critic)."""
        return dict(self.cfg.policy.kwargs)

    def counters(self) -> dict[str, int]:
        return {"num_timesteps": self.num_timesteps, "num_updates": self.num_updates}

    def load_counters(self, counters: dict[str, int]) -> None:
        self.num_timesteps = counters.get("num_timesteps", 0)
        self.num_updates = counters["num_updates"]

    def extra_state(self) -> dict[str, Any]:
        """The checkpoint's ``extra`` entry: what this algorithm keeps besides policy, optimizer and counters."""
        return {}

    def load_extra_state(self, extra: dict[str, Any]) -> None:
        pass

    def rng_generators(self) -> dict[str, torch.Generator]:
        """Named torch generators whose states a checkpoint keeps per rank (beside the global RNGs)."""
        return {}

    def save_alongside(self) -> None:
        """Rank 0, just before each checkpoint is written: files the checkpoint relies on (residual RL's replay)."""

    def policy_state(self) -> dict[str, Any]:
        return self.policy.state_dict()

    def load_policy_state(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state)

    def optimizer_state(self) -> dict[str, Any] | None:
        return None if self.optimizer is None else self.optimizer.state_dict()

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)

    # ------------------------------------------------------------------------------------ the loop
    def learn(self, callback: Callback | Callable | list | None = None):
        """Update until ``log_step`` reaches ``total_steps`` (or ``time_limit_s`` is spent); returns self.

        ``callback``: a :class:`~vla_gym.trainers.runtime.callbacks.Callback`, a list of them, or
        ``fn(trainer, metrics)`` run after every update; returning False stops training. It runs after the built-in
        callbacks (log, checkpoint, evaluate).
        """
        callbacks = CallbackList(default_callbacks(self.final_copy)
                                 + [c for c in [as_callback(callback)] if c is not None])
        start = self.run.start_clock()
        self.begin_run()
        first = self.throughput_count
        try:
            callbacks.on_training_start(self)
            while self.log_step < self.total_steps and not self.run.out_of_time():
                metrics = self.update()
                now = time.perf_counter()
                metrics["time/total_fps"] = (self.throughput_count - first) / max(now - start, 1e-9)
                metrics["time/elapsed_s"] = now - start
                self.last_metrics = metrics
                if callbacks.on_update_end(self, metrics) is False:
                    break
            callbacks.on_training_end(self)
        finally:
            self.run.stop_logging()
        return self

    # ------------------------------------------------------------------------------- checkpoints
    def state_dict(self, rng: list[Any] | None = None) -> dict[str, Any]:
        """Everything a checkpoint holds (``rng``: every rank's RNG states, for a resume)."""
        return checkpoint_state(
            self.algo, self.cfg, self.policy, policy_state=self.policy_state(), optimizer=self.optimizer_state(),
            counters=self.counters(), contract=self.contract,
            policy_name=self.cfg.policy.name if self.policy_from_config else None,
            policy_kwargs=self._policy_kwargs() if self.policy_from_config else None, rng=rng,
            extra=self.extra_state())

    def load_state(self, state: dict[str, Any], restore_rng: bool = False) -> None:
        """Restore policy, optimizer, counters, the algorithm's extras (and this rank's RNG states) from a
        checkpoint dict, whose env contract must match this run's
        (:class:`~vla_gym.trainers.runtime.contract.ContractError` otherwise)."""
        if self.resume_hint and state.get("algo") != self.algo:
            raise ValueError(f"checkpoint.resume: a {str(state.get('algo')).upper()} checkpoint cannot resume "
                             f"{self.algo.upper()}; {self.resume_hint}")
        check_contract(checkpoint_contract(state), self.contract, "checkpoint.resume")
        self.load_policy_state(state["policy"])
        if state.get("optimizer") is not None and self.optimizer is not None:  # None: a slimmed checkpoint
            self.load_optimizer_state(state["optimizer"])
        self.load_counters(state["counters"])
        self.load_extra_state(state.get("extra") or {})
        if restore_rng and state.get("rng"):
            ranks = state["rng"]
            set_rng_state(ranks[self.dist.rank % len(ranks)], self.rng_generators())

    def save_checkpoint(self) -> pathlib.Path | None:
        """Collective: gathers every rank's RNG states; rank 0 writes ``checkpoints/ckpt_<update>.pt`` atomically."""
        if self.run.checkpointer is None:
            return None
        rng = self.dist.gather_objects(rng_state(self.rng_generators()))
        state = self.state_dict(rng)  # every rank: fsdp gathers the parameters here
        if not self.dist.is_main:
            return None
        self.save_alongside()
        return self.run.checkpointer.save(state, self.num_updates)

    # -------------------------------------------------------------------------------- evaluation
    def evaluate(self, episodes: int, report_dir: pathlib.Path | None = None,
                 deterministic: bool | None = None) -> dict[str, Any]:
        """Collective: ``episodes`` episodes (``eval.*``) split over the ranks, the policy in eval mode; logs
        ``eval/*`` at the current ``log_step`` and returns the summary."""
        with self.dist.gathered(self.policy), _eval_mode(self.policy):
            self.last_eval = self.evaluator.evaluate(self.policy, episodes, self.num_updates, self.log_step,
                                                     report_dir=report_dir, deterministic=deterministic)
        return self.last_eval

    def record_videos(self, episodes: int, directory: pathlib.Path) -> list[str]:
        """MP4s of the first ``episodes`` evaluation episodes (:meth:`TrainingEvaluator.record_videos`)."""
        with _eval_mode(self.policy):
            return self.evaluator.record_videos(self.policy, episodes, directory)

    def close(self) -> None:
        if self.envs is not None:
            self.envs.close()
        self.envs = None
        self.evaluator.close()


@contextlib.contextmanager
def _eval_mode(policy: torch.nn.Module) -> Iterator[None]:
    """``with _eval_mode(policy):`` the policy in eval mode, then back in the mode it was in."""
    was_training = policy.training
    policy.eval()
    try:
        yield
    finally:
        policy.train(was_training)
