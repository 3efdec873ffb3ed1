"""``TrainingRun``: where a training job writes and when: the run directory with ``config.yaml``, resume,
the logger (TensorBoard / W&B / progress bar), the checkpoint cadence and the wall-clock budget. The run
directory also gets ``receipt.json`` (:mod:`vla_gym.runtime.receipt`: versions, commit, env), one more per resume.

    run = TrainingRun(cfg, dist, path=cfg.path)    # path=None (the Python API's default): no files written
    run.start_clock()
    run.begin(trainer, total_steps, device)        # collective: directory, resume into trainer, logger
    run.report_update(metrics, num_updates, num_timesteps)   # every update: logs, moves the progress bar
    if run.checkpoint_due(num_updates): ...                  # checkpoint.every
    run.stop_logging()

The per-update calls are made by the callbacks of :mod:`vla_gym.trainers.runtime.callbacks`.

Resume (``checkpoint.resume``): ``auto`` continues from the newest checkpoint of the run directory that
can be read, saying which one and why a newer one was skipped (a file cut short by a full disk, say);
a path resumes from that file. Only rank 0 writes files and chooses the checkpoint; every rank calls
the collective methods (``open``, ``out_of_time``) at the same point.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import time
from typing import Any

import torch

from vla_gym.runtime.cli_args import first_missing_folder
from vla_gym.runtime.receipt import receipt
from vla_gym.trainers.runtime.checkpoint import Checkpointer, atomic_write_text, load_checkpoint
from vla_gym.trainers.runtime.config import Config, config_dict, save_config
from vla_gym.trainers.runtime.distributed import Distributed
from vla_gym.trainers.runtime.logger import RunLogger


class TrainingRun:
    def __init__(self, cfg: Config, dist: Distributed, path: pathlib.Path | None, algo: str | None = None):
        #: ``algo``: the algorithm whose section of the config the run writes (config.yaml, TensorBoard hparams)
        self.cfg, self.dist, self.path, self.algo = cfg, dist, path, algo
        self.checkpointer = Checkpointer(path / "checkpoints", cfg.checkpoint.keep_last) if path else None
        self.logger: RunLogger | None = None
        self.start_time = time.perf_counter()
        self._opened = False
        #: the topmost folder rank 0 made for the run directory (None: it existed, or nothing made yet)
        self._created: pathlib.Path | None = None

    # ------------------------------------------------------------------------------ clock
    def start_clock(self) -> float:
        self.start_time = time.perf_counter()
        return self.start_time

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.start_time

    def out_of_time(self) -> bool:
        """Collective: whether ``time_limit_s`` is used up (rank 0's clock decides, for every rank)."""
        if self.cfg.time_limit_s is None:
            return False
        return bool(self.dist.broadcast_object(self.elapsed_s() >= self.cfg.time_limit_s))

    # ------------------------------------------------------------------------ directory, resume
    def open(self, map_location: str | torch.device = "cpu") -> tuple[pathlib.Path, dict[str, Any]] | None:
        """Collective. The first call makes the run directory, writes ``config.yaml`` and returns the
        checkpoint to resume from, ``(path, state)`` (None: start afresh, or no run directory)."""
        if self.path is None or self._opened:
            return None
        self._write_start()
        return self._find_resume(map_location)

    def _write_start(self) -> None:
        """Rank 0: the run directory, ``config.yaml`` and a receipt (once)."""
        self._opened = True
        if self.dist.is_main:
            self._created = first_missing_folder(self.path)
            self.path.mkdir(parents=True, exist_ok=True)
            save_config(self.cfg, self.path / "config.yaml", self.algo)
            self._write_receipt()

    def _find_resume(self, map_location) -> tuple[pathlib.Path, dict[str, Any]] | None:
        """Collective: the checkpoint to resume from (rank 0 chooses, every rank loads it), or None."""
        found = self._choose_checkpoint(map_location) if self.dist.is_main else None
        path = self.dist.broadcast_object(str(found[0]) if found else None)
        if path is None:
            return None
        return found if found else (pathlib.Path(path), load_checkpoint(path, map_location=map_location))

    def discard(self) -> bool:
        """Rank 0: remove the run directory (and the folders above it that it made) when this run made it and
        saved no checkpoint: what a run that failed before its first update leaves. True when removed."""
        if self._created is None or not self.dist.is_main:
            return False
        if self.checkpointer is not None and self.checkpointer.paths():
            return False
        self.stop_logging()
        shutil.rmtree(self._created, ignore_errors=True)
        self._created = None
        return True

    def _write_receipt(self) -> None:
        """``receipt.json`` (:mod:`vla_gym.runtime.receipt`) for the run's start; a resumed run adds
        ``receipt-<n>.json`` beside the first, so a run that changed machines or versions shows it."""
        stamp = receipt(self.cfg.env.id, self.cfg.env.kwargs, checkpoint=None)
        stamp["env"]["wrappers"] = self.cfg.env.wrappers
        path, n = self.path / "receipt.json", 1
        while path.exists():
            path, n = self.path / f"receipt-{n}.json", n + 1
        atomic_write_text(path, json.dumps(stamp, indent=1))

    def _choose_checkpoint(self, map_location) -> tuple[pathlib.Path, dict[str, Any]] | None:
        choice = self.cfg.checkpoint.resume
        if not choice:
            return None
        if choice != "auto":
            path = pathlib.Path(choice)
            if not path.exists():
                raise FileNotFoundError(f"checkpoint.resume={choice!r}: no such file")
            return path, load_checkpoint(path, map_location=map_location)
        found = self.checkpointer.load_newest_readable(map_location)
        if found is None:
            return None
        path, state, skipped = found
        for error in skipped:
            self.say(f"{error}; resuming from {path}, the newest checkpoint that reads")
        return path, state

    def begin(self, trainer, total_steps: int, map_location: str | torch.device = "cpu") -> None:
        """Collective, what every trainer does before its first update: open the run directory, resume
        ``trainer`` from the newest readable checkpoint (``trainer.load_state(state, restore_rng=True)``) and
        start the logger at ``trainer.log_step`` (counted in ``trainer.log_unit``)."""
        resume = None
        if self.path is not None and not self._opened:
            # the checkpoint is chosen and loaded before anything is written: a resume that fails (a checkpoint of
            # another env, say) leaves the run directory as it was, config.yaml included
            resume = self._find_resume(map_location)
            if resume is not None:
                trainer.load_state(resume[1], restore_rng=True)
            self._write_start()
        if resume is not None:
            self.say(f"resumed from {resume[0]} at update {trainer.num_updates}, {trainer.log_step} {trainer.log_unit}")
        self.start_logging(total_steps, initial_step=trainer.log_step)

    # ---------------------------------------------------------------------------------- logging
    def start_logging(self, total_steps: int, initial_step: int) -> None:
        """The run's logger (TensorBoard / W&B into the run directory), or only a progress bar without one."""
        if self.logger is not None:
            return
        if self.path is not None:
            self.logger = RunLogger(
                self.cfg.logging, self.path, enabled=self.dist.is_main, total_steps=total_steps,
                initial_step=initial_step, run_name=self.cfg.name, config=config_dict(self.cfg, self.algo),
            )
        elif self.cfg.logging.progress_bar:
            quiet = dataclasses.replace(self.cfg.logging, tensorboard=False)
            quiet.wandb = dataclasses.replace(quiet.wandb, enabled=False)
            self.logger = RunLogger(quiet, ".", enabled=self.dist.is_main, total_steps=total_steps,
                                    initial_step=initial_step)

    def report_update(self, metrics: dict[str, float], num_updates: int, num_timesteps: int) -> None:
        """Log an update's metrics every ``logging.log_interval`` updates; move the progress bar."""
        if self.logger is None:
            return
        if num_updates % self.cfg.logging.log_interval == 0:
            self.logger.log(metrics, num_timesteps)
        postfix = {"fps": int(metrics["time/total_fps"])}
        for key, label in (("env/success_once", "success"), ("env/return", "return")):
            if key in metrics:
                postfix[label] = float(metrics[key])
        self.logger.progress(num_timesteps, postfix)

    def log(self, scalars: dict[str, float], step: int) -> None:
        if self.logger is not None:
            self.logger.log(scalars, step)

    def say(self, message: str) -> None:
        """A line for the user: through the logger (above the progress bar), else printed by rank 0."""
        if self.logger is not None:
            self.logger.write(message)
        elif self.dist.is_main:
            print(message, flush=True)

    def stop_logging(self) -> None:
        if self.logger is not None:
            self.logger.close()
            self.logger = None

    # -------------------------------------------------------------------------------- checkpoints
    def checkpoint_due(self, num_updates: int) -> bool:
        every = self.cfg.checkpoint.every
        return self.checkpointer is not None and bool(every) and num_updates % every == 0
