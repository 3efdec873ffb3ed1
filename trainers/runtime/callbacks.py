"""Callbacks: what happens around a trainer's updates, shared by PPO, GRPO, SFT and residual RL (Stable-Baselines3's
habit).

:meth:`Trainer.learn <vla_gym.trainers.runtime.trainer.Trainer.learn>`, the one loop, calls three hooks on a
:class:`CallbackList`:
``on_training_start`` once (after a resume), ``on_update_end`` after every update (returning False stops the
run) and ``on_training_end`` once. Logging, checkpoints and evaluation are callbacks, so every trainer gets the
same cadence from the same config keys (``logging.log_interval``, ``checkpoint.every``, ``eval.every``)::

    >>> from vla_gym.trainers.runtime.callbacks import Callback, CallbackList
    >>> class PrintLoss(Callback):
    ...     def on_update_end(self, trainer, metrics):
    ...         print(f"update {trainer.num_updates}: loss {metrics['train/loss']:.2f}")
    >>> class Fake:                       # any object with num_updates works for this one
    ...     num_updates = 3
    >>> CallbackList([PrintLoss()]).on_update_end(Fake(), {"train/loss": 0.5})
    update 3: loss 0.50
    True

    model.learn(100_000, callback=PrintLoss())                     # PPO / GRPO: one callback or a list
    model.learn(100_000, callback=lambda algo, metrics: None)      # a plain function is wrapped in FunctionCallback

What a trainer offers its callbacks: ``run`` (:class:`~vla_gym.trainers.runtime.run.TrainingRun`), ``cfg``,
``num_updates``, ``log_step`` (the x axis of its logs: env steps for RL, optimizer steps for SFT),
``evaluator`` and the collective methods ``save_checkpoint()``, ``evaluate(episodes, report_dir=None)`` and
``record_videos(episodes, directory)``. The built-in callbacks are collective where those methods are: every
rank runs the same callbacks at the same point.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from vla_gym.trainers.runtime.checkpoint import atomic_save


class Callback:
    """Base class: override the hooks you need; ``on_update_end`` returning False stops training."""

    def on_training_start(self, trainer: Any) -> None:
        """After the run directory is open (and a checkpoint resumed), before the first update."""

    def on_update_end(self, trainer: Any, metrics: dict[str, float]) -> bool | None:
        """After every update, with that update's metrics (reduced over ranks)."""
        return None

    def on_training_end(self, trainer: Any) -> None:
        """After the last update (budget reached, time limit, or a callback stopped the run)."""


class FunctionCallback(Callback):
    """``fn(trainer, metrics)`` after every update, the ``learn(callback=fn)`` form; False stops training."""

    def __init__(self, fn: Callable[[Any, dict[str, float]], Any]):
        self.fn = fn

    def on_update_end(self, trainer, metrics):
        return self.fn(trainer, metrics)


class CallbackList(Callback):
    """Several callbacks in order; an update stops training when any of them returns False."""

    def __init__(self, callbacks: Iterable[Callback] = ()):
        self.callbacks = list(callbacks)

    def on_training_start(self, trainer) -> None:
        for callback in self.callbacks:
            callback.on_training_start(trainer)

    def on_update_end(self, trainer, metrics) -> bool:
        results = [callback.on_update_end(trainer, metrics) for callback in self.callbacks]  # all of them run
        return all(result is not False for result in results)

    def on_training_end(self, trainer) -> None:
        for callback in self.callbacks:
            callback.on_training_end(trainer)


def as_callback(callback: Callback | Callable | Iterable | None) -> Callback | None:
    """A user's ``callback=`` argument as one Callback: None, a Callback, a function or a list of either."""
    if callback is None or isinstance(callback, Callback):
        return callback
    if callable(callback):
        return FunctionCallback(callback)
    return CallbackList(as_callback(item) for item in callback)


class LogUpdates(Callback):
    """Every update to the run's logger (TensorBoard / W&B every ``logging.log_interval`` updates, the bar always)."""

    def on_update_end(self, trainer, metrics):
        trainer.run.report_update(metrics, trainer.num_updates, trainer.log_step)


class SaveCheckpoints(Callback):
    """A checkpoint every ``checkpoint.every`` updates and one at the end; ``final_copy`` (SFT's ``final.pt``)
    also writes the final weights into the run directory under that name (the trainer's ``state_dict()``,
    without the RNG states a resume needs: the file to hand on)."""

    def __init__(self, final_copy: str | None = None):
        self.final_copy = final_copy

    def on_update_end(self, trainer, metrics):
        if trainer.run.checkpoint_due(trainer.num_updates):
            trainer.save_checkpoint()

    def on_training_end(self, trainer):
        if trainer.run.checkpointer is None:
            return
        path = trainer.save_checkpoint()  # collective; rank 0 gets the path
        if path is not None and self.final_copy:
            atomic_save(trainer.state_dict(), trainer.run.path / self.final_copy)


class Evaluate(Callback):
    """``eval.episodes`` episodes every ``eval.every`` updates; at the end, the report into ``{run}/eval`` and
    ``eval.video_episodes`` videos when ``eval.video`` (only for runs that write files)."""

    def on_update_end(self, trainer, metrics):
        if trainer.evaluator.due(trainer.num_updates):
            trainer.evaluate(trainer.cfg.eval.episodes)

    def on_training_end(self, trainer):
        cfg, run = trainer.cfg, trainer.run
        if run.path is None or cfg.eval.episodes <= 0:
            return
        with trainer.dist.gathered(trainer.policy):  # fsdp: whole parameters, so rank 0 alone can play the videos
            trainer.evaluate(cfg.eval.episodes, report_dir=run.path / "eval")
            if cfg.eval.video and trainer.dist.is_main:
                trainer.last_eval["videos"] = trainer.record_videos(cfg.eval.video_episodes,
                                                                    run.path / "eval" / "videos")


def default_callbacks(final_copy: str | None = None) -> list[Callback]:
    """What every trainer runs, in this order: log the update, checkpoint, evaluate."""
    return [LogUpdates(), SaveCheckpoints(final_copy), Evaluate()]


__all__ = ["Callback", "CallbackList", "Evaluate", "FunctionCallback", "LogUpdates", "SaveCheckpoints",
           "as_callback", "default_callbacks"]
