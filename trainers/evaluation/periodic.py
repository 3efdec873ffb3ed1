"""``TrainingEvaluator``: the evaluations of a training run: ``eval.episodes`` fixed-seed episodes every
``eval.every`` updates and at the end, their ``eval/*`` metrics and report, and the end-of-run videos.

    evaluator = TrainingEvaluator(cfg, dist, run)               # eval envs are made at the first evaluation
    if evaluator.due(num_updates):
        summary = evaluator.evaluate(policy, cfg.eval.episodes, num_updates, num_timesteps)
    evaluator.evaluate(policy, 20, num_updates, num_timesteps, report_dir=run_dir / "eval")   # eval.md + json
    videos = evaluator.record_videos(policy, 2, run_dir / "eval" / "videos")                  # MP4 paths
    evaluator.close()

Each evaluation logs ``eval/success_rate`` with its episode count ``eval/episodes`` and 95 % Wilson interval
(``eval/success_ci95_low`` / ``_high``), per task too (``eval/success_rate/<task>``, ...) when it played several
tasks, and prints them (:func:`eval_message`).

Every evaluation plays the same seeds (``10**9 + cfg.seed + k``, split over the ranks: ``evaluate`` is
collective), so evaluations at different updates compare like with like. The policy at one update is not
played twice: an evaluation right after another with the same arguments reuses its episodes (and only
writes the report). Evaluating a checkpoint over a suite's tasks x initial states is ``trainers/eval.py``.
"""
from __future__ import annotations

import pathlib
from typing import Any

from gymnasium.vector import VectorEnv

from vla_gym.trainers.evaluation.report import summarize, write_report
from vla_gym.trainers.evaluation.stats import interval_text
from vla_gym.trainers.policies import Policy
from vla_gym.trainers.rollout.episode_plan import EpisodeSpec
from vla_gym.trainers.rollout.episode_runner import EpisodeRunner
from vla_gym.trainers.runtime.config import Config
from vla_gym.trainers.runtime.distributed import Distributed
from vla_gym.trainers.runtime.envs import make_envs
from vla_gym.trainers.runtime.run import TrainingRun


class TrainingEvaluator:
    def __init__(self, cfg: Config, dist: Distributed, run: TrainingRun):
        self.cfg, self.dist, self.run = cfg, dist, run
        self.envs: VectorEnv | None = None
        self._last: tuple[tuple, list] | None = None  # (num_updates, episodes, deterministic), gathered results

    def due(self, num_updates: int) -> bool:
        """Whether a periodic evaluation falls after update ``num_updates`` (``eval.every``)."""
        every, episodes = self.cfg.eval.every, self.cfg.eval.episodes
        return bool(every) and episodes > 0 and num_updates % every == 0

    def specs(self, episodes: int) -> list[EpisodeSpec]:
        return [EpisodeSpec(seed=10**9 + self.cfg.seed + k) for k in range(episodes)]

    def evaluate(self, policy: Policy, episodes: int, num_updates: int, num_timesteps: int,
                 report_dir: pathlib.Path | None = None, deterministic: bool | None = None) -> dict[str, Any]:
        """Collective: play ``episodes`` episodes over the ranks, log ``eval/*`` and return the summary
        (:func:`~vla_gym.trainers.evaluation.report.summarize`); rank 0 writes the report to ``report_dir``."""
        header = f"# {self.cfg.name}: {self.cfg.env.id} at {num_timesteps} env steps"
        key = (num_updates, episodes, deterministic)
        if self._last is not None and self._last[0] == key:
            gathered = self._last[1]
            if self.dist.is_main and report_dir is not None:
                write_report(gathered, report_dir, header=header)
            return summarize(gathered)
        if self.envs is None:
            self.envs = make_envs(self.cfg.env, self.cfg.eval.num_envs, kwargs=self.cfg.eval.env_kwargs)
        mine = self.specs(episodes)[self.dist.rank::self.dist.world_size]
        deterministic = self.cfg.eval.deterministic if deterministic is None else deterministic
        results = EpisodeRunner(self.envs, policy).run(mine, deterministic=deterministic)
        gathered = [r for rank_results in self.dist.gather_objects(results) for r in rank_results]
        self._last = (key, gathered)
        summary = summarize(gathered)
        if self.dist.is_main:
            overall = summary["overall"]
            self.run.log({"eval/success_rate": overall["success_rate"], "eval/return": overall["mean_return"],
                          "eval/episode_len": overall["mean_length"], "eval/elapsed_s": self.run.elapsed_s(),
                          "eval/episodes": overall["episodes"], **interval_scalars(summary)}, num_timesteps)
            if self.run.logger is not None:
                self.run.say(eval_message(summary, num_timesteps))
            if report_dir is not None:
                write_report(gathered, report_dir, header=header)
        return summary

    def record_videos(self, policy: Policy, episodes: int, directory: pathlib.Path) -> list[str]:
        """Play the first ``episodes`` evaluation episodes again in an env made with ``eval.video_env_kwargs``
        (cameras for state-only envs, ``render_mode``) and write one MP4 each; returns their paths.

        A video is a by-product: if the env cannot give frames, say why and go on without it.
        """
        kwargs = {**self.cfg.eval.env_kwargs, **self.cfg.eval.video_env_kwargs}
        envs = None
        try:
            envs = make_envs(self.cfg.env, 1, kwargs=kwargs)
            results = EpisodeRunner(envs, policy).run(
                self.specs(episodes), deterministic=self.cfg.eval.deterministic, video_dir=directory,
                video_episodes=episodes)
        except Exception as exc:  # noqa: BLE001 - any failure to render costs the video only, and is reported
            self.run.say(f"no evaluation video ({self.cfg.env.id} with {kwargs}): {type(exc).__name__}: {exc}. "
                         "Set eval.video_env_kwargs so that the env has cameras or renders (render_mode=rgb_array).")
            return []
        finally:
            if envs is not None:
                envs.close()
        return [r.video for r in results if r.video]

    def close(self) -> None:
        if self.envs is not None:
            self.envs.close()
            self.envs = None


def interval_scalars(summary: dict[str, Any]) -> dict[str, float]:
    """The ``eval/*`` scalars of the success intervals: overall, and per task when there are several tasks.

    >>> s = {"overall": {"success_rate": 0.5, "episodes": 4, "ci95": [0.15, 0.85]}, "tasks": {}}
    >>> interval_scalars(s)
    {'eval/success_ci95_low': 0.15, 'eval/success_ci95_high': 0.85}
    """
    entries = [("", summary["overall"])]
    if len(summary.get("tasks", {})) > 1:
        entries += [(f"/{name}", stats) for name, stats in summary["tasks"].items()]
    scalars = {}
    for suffix, stats in entries:
        if suffix:
            scalars[f"eval/success_rate{suffix}"] = stats["success_rate"]
        if stats.get("ci95") is not None:
            scalars[f"eval/success_ci95_low{suffix}"], scalars[f"eval/success_ci95_high{suffix}"] = stats["ci95"]
    return scalars


def eval_message(summary: dict[str, Any], num_timesteps: int) -> str:
    """The printed lines of an evaluation: success with its count and 95 % Wilson interval, and per task.

    >>> s = {"overall": {"success_rate": 0.5, "successes": 2, "success_episodes": 4, "episodes": 4,
    ...                  "mean_return": 1.0, "ci95": [0.15, 0.85]}, "tasks": {}}
    >>> eval_message(s, 100)
    'eval @ 100 steps: success 0.500 (2/4, 95 % CI [0.150, 0.850]), return 1.00 over 4 episodes'
    """
    overall = summary["overall"]
    lines = [f"eval @ {num_timesteps} steps: {_success_text(overall)}return {overall['mean_return']:.2f} over "
             f"{overall['episodes']} episodes"]
    tasks = summary.get("tasks", {})
    if len(tasks) > 1:
        lines += [f"  {name}: {_success_text(stats).rstrip(', ')}" for name, stats in tasks.items()
                  if stats.get("ci95") is not None]
    return "\n".join(lines)


def _success_text(stats: dict[str, Any]) -> str:
    if stats.get("ci95") is None:
        return ""  # the env reports no success
    return (f"success {stats['success_rate']:.3f} ({stats['successes']}/{stats['success_episodes']}, "
            f"95 % CI {interval_text(stats['ci95'])}), ")
