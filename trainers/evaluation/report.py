"""Evaluation reports: per-task success rate (with its 95 % Wilson interval), mean return and mean length of
played episodes.

    summary = summarize(results)                 # {"overall": {...}, "tasks": {name: {...}}}
    print(markdown_table(summary))               # | task | episodes | success rate | 95 % CI | mean return | ...
    write_report(results, "eval/")               # eval.md + eval.json, each written atomically

:func:`summarize` applies :func:`vla_gym.core.episodes.summarize` overall and per task, to
:class:`~vla_gym.trainers.rollout.episode_plan.EpisodeResult` (or any :class:`~vla_gym.core.episodes.Episode`).
Each entry also holds ``successes``, ``success_episodes`` (the episodes that reported success: all of them for
envs that report it) and ``ci95``, the 95 % Wilson score interval ``[low, high]`` of the success rate (None when
no episode reported success; :mod:`vla_gym.trainers.evaluation.stats`), ``replayed_after_fault`` (plays cut by a
failed env worker and played again: never counted as policy failures) and ``cut_by_fault`` (episodes still cut
after their replays: left out of the success rate and the means; docs/reliability.md). ``vla-gym compare A/eval.json
B/eval.json`` compares two reports episode by episode (:mod:`vla_gym.trainers.evaluation.compare`).
"""
from __future__ import annotations

import collections
import json
import math
import os
import pathlib
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from vla_gym.core import episodes
from vla_gym.core.episodes import Episode
from vla_gym.trainers.evaluation.stats import interval_text, success_counts, wilson_interval
from vla_gym.trainers.rollout.episode_plan import EpisodeResult
from vla_gym.trainers.runtime.checkpoint import atomic_write_text


def summarize(results: Sequence[Episode]) -> dict[str, Any]:
    """Overall and per-task success rate, mean return and mean length (:func:`vla_gym.core.episodes.summarize`),
    with the success counts and the 95 % Wilson interval ``ci95`` of the success rate."""
    def stats(rows: Sequence[Episode]) -> dict[str, Any]:
        means = episodes.summarize(rows)
        nan = float("nan")
        judged = [bool(row.success) for row in rows if row.success is not None and row.env_failure is None]
        return {
            "episodes": len(rows),
            "success_rate": means.get(episodes.SUCCESS_ONCE, nan),
            "mean_return": means.get(episodes.RETURN, nan),
            "mean_length": means.get(episodes.LENGTH, nan),
            "successes": sum(judged),
            "success_episodes": len(judged),
            "ci95": list(wilson_interval(sum(judged), len(judged))) if judged else None,
            "replayed_after_fault": sum(getattr(row, "replays", 0) for row in rows),
            "cut_by_fault": sum(row.env_failure is not None for row in rows),
        }

    by_task: dict[str, list[Episode]] = collections.defaultdict(list)
    for result in results:
        if result.task_name:
            by_task[result.task_name].append(result)
    return {"overall": stats(results), "tasks": {name: stats(rows) for name, rows in sorted(by_task.items())}}


def markdown_table(summary: dict[str, Any]) -> str:
    """The per-task table of a :func:`summarize` result, with an **all** row last: episodes, success rate and its
    95 % Wilson interval (a summary from before the intervals were stored gets them from its counts)."""
    lines = ["| task | episodes | success rate | 95 % CI | mean return | mean length |", "|---|---:|---:|---:|---:|---:|"]
    rows = list(summary["tasks"].items()) + [("**all**", summary["overall"])]
    for name, s in rows:
        rate = "n/a" if math.isnan(s["success_rate"]) else f"{s['success_rate']:.3f}"
        lines.append(f"| {name} | {s['episodes']} | {rate} | {interval_text(success_interval(s))} | "
                     f"{s['mean_return']:.3f} | {s['mean_length']:.1f} |")
    lines.append("")
    lines.append("95 % CI: Wilson score interval of the success rate over the episodes of the row "
                 "(docs/evaluation.md#statistics).")
    overall = summary["overall"]
    if overall.get("replayed_after_fault") or overall.get("cut_by_fault"):
        lines.append("")
        lines.append(f"Env faults: {overall.get('replayed_after_fault', 0)} plays cut by a failed env worker were "
                     f"played again; {overall.get('cut_by_fault', 0)} episodes stayed cut and are left out of the "
                     "success rate (docs/reliability.md).")
    return "\n".join(lines) + "\n"


def success_interval(stats: dict[str, Any]) -> tuple[float, float] | None:
    """The 95 % Wilson interval of a summary entry: its ``ci95``, or one from its counts (older summaries)."""
    if stats.get("ci95") is not None:
        return tuple(stats["ci95"])
    counts = success_counts(stats)
    return None if counts is None else wilson_interval(*counts)


def write_report(results: Sequence[EpisodeResult], directory: str | os.PathLike, header: str = "",
                 receipt: dict[str, Any] | None = None, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``eval.md`` (per-task table) and ``eval.json`` (summary + every episode played: its spec, outcome and
    instruction; with the ``receipt`` (:mod:`vla_gym.runtime.receipt`) and the evaluation ``settings`` that
    ``trainers/eval.py --replay`` plays again); returns the summary."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    summary = summarize(results)
    played = [dict(asdict(r), spec=asdict(r.spec)) for r in results]
    report = {"summary": summary, "episodes": played}
    if receipt is not None:
        report = {"receipt": receipt, "settings": settings or {}, **report}
    atomic_write_text(directory / "eval.json", json.dumps(report, indent=2))
    atomic_write_text(directory / "eval.md", (f"{header}\n\n" if header else "") + markdown_table(summary))
    return summary
