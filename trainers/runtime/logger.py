"""Where a run's numbers go: TensorBoard scalars, an optional Weights & Biases run, a progress bar.

    logger = RunLogger(cfg.logging, run_path, enabled=dist.is_main, total_steps=cfg.total_timesteps)
    logger.log({"train/loss": 0.3, "env/success_once": 0.5}, step=num_timesteps)
    logger.progress(num_timesteps, {"fps": 1800, "success": 0.5})
    logger.close()

Only rank 0 logs (``enabled=False`` elsewhere makes every call a no-op). A resumed run passes
``initial_step`` (the checkpoint's step): TensorBoard then hides the steps after it that the stopped run had
logged, and keeps the checkpoint's own. ``wandb`` is imported only
when ``logging.wandb.enabled`` is true; a missing package is an error that says how to install it.
"""
from __future__ import annotations

import math
import pathlib
from typing import Any

from vla_gym.trainers.runtime.config import LoggingConfig


class RunLogger:
    def __init__(
        self, cfg: LoggingConfig, run_path: str | pathlib.Path, enabled: bool = True, total_steps: int | None = None,
        initial_step: int = 0, run_name: str = "run", config: dict[str, Any] | None = None,
    ):
        self.enabled = enabled
        self.writer = self.wandb = self.bar = None
        if not enabled:
            return
        run_path = pathlib.Path(run_path)
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # a resumed run hides what an earlier run logged *after* its checkpoint (the updates it did not keep);
            # the record at initial_step itself is the checkpoint's own last update and stays (TensorBoard keeps
            # the steps below purge_step)
            self.writer = SummaryWriter(str(run_path / "tensorboard"), purge_step=initial_step + 1 if initial_step else None)
        if cfg.wandb.enabled:
            try:
                import wandb
            except ImportError as exc:
                raise ImportError("logging.wandb.enabled is true but wandb is not installed: pip install wandb") from exc
            self.wandb = wandb.init(
                project=cfg.wandb.project, entity=cfg.wandb.entity, name=run_name, mode=cfg.wandb.mode,
                dir=str(run_path), config=config, resume="allow", id=run_name,
            )
        if cfg.progress_bar:
            from tqdm import tqdm

            self.bar = tqdm(total=total_steps, initial=initial_step, unit="step", dynamic_ncols=True, smoothing=0.1)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if not self.enabled:
            return
        finite = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
        if self.writer is not None:
            for key, value in finite.items():
                self.writer.add_scalar(key, value, step)
        if self.wandb is not None:
            self.wandb.log(finite, step=step)

    def progress(self, step: int, postfix: dict[str, Any]) -> None:
        if self.bar is None:
            return
        self.bar.update(step - self.bar.n)
        self.bar.set_postfix({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in postfix.items()}, refresh=False)

    def write(self, message: str) -> None:
        """Print above the progress bar (rank 0 only)."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(message)
        else:
            print(message, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.writer is not None:
            self.writer.close()
        if self.wandb is not None:
            self.wandb.finish()
        self.writer = self.wandb = self.bar = None
