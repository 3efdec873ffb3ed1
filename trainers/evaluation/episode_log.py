"""A killed evaluation resumes: each finished episode is logged as it ends, and the same command plays only the rest.

    log = EpisodeLog.open(out / "partial", plan, rank=dist.rank, reset=dist.is_main and not same_plan)
    results = runner.run(specs, skip=log.done(), on_result=log.append) + list(log.results.values())
    log.remove()                                     # once the report is written

``trainers/eval.py`` keeps ``<out>/partial/``: ``plan.json`` (what the evaluation is: checkpoint hash, env, wrappers,
settings, the episode selection and the number of processes) and one ``rank<R>.jsonl`` per process, a line per
finished episode (its index in the rank's episodes and its result). A run started with the same plan reads them back
and plays only the episodes not in them, with the same per-episode generators (the indices are kept), so the report
equals an uninterrupted one; a run with another plan starts afresh. A line half written by a kill is ignored.

    >>> import tempfile, pathlib
    >>> from vla_gym.trainers.rollout.episode_plan import EpisodeResult, EpisodeSpec
    >>> folder = pathlib.Path(tempfile.mkdtemp()) / "partial"
    >>> log = EpisodeLog.open(folder, {"checkpoint": "abc"}, rank=0, reset=True)
    >>> log.append(EpisodeResult(1.0, 20, True, index=3, spec=EpisodeSpec(seed=3, task_id=0, init_state_id=3)))
    >>> again = EpisodeLog.open(folder, {"checkpoint": "abc"}, rank=0, reset=False)
    >>> again.done(), again.results[3].spec.init_state_id, again.results[3].success
    ({3}, 3, True)
    >>> EpisodeLog.matches(folder, {"checkpoint": "other"})
    False
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
from typing import Any

from vla_gym.trainers.rollout.episode_plan import EpisodeResult, EpisodeSpec
from vla_gym.trainers.runtime.checkpoint import atomic_write_text

PLAN = "plan.json"


class EpisodeLog:
    """The finished episodes of one process of one evaluation (module docstring)."""

    def __init__(self, path: pathlib.Path, plan: dict[str, Any], results: dict[int, EpisodeResult]):
        self.path, self.plan, self.results = path, plan, results

    @staticmethod
    def matches(directory: str | pathlib.Path, plan: dict[str, Any]) -> bool:
        """Whether ``directory`` holds a log of this ``plan``."""
        path = pathlib.Path(directory) / PLAN
        try:
            return json.loads(path.read_text()) == json.loads(json.dumps(plan))
        except (OSError, ValueError):
            return False

    @classmethod
    def open(cls, directory: str | pathlib.Path, plan: dict[str, Any], rank: int, reset: bool) -> EpisodeLog:
        """The log of process ``rank``; ``reset`` (the main process, when the plan differs) clears the folder first
        (call it before the other processes open theirs). Nothing is written before the first episode ends, so an
        evaluation that fails to start leaves nothing behind."""
        directory = pathlib.Path(directory)
        if reset:
            shutil.rmtree(directory, ignore_errors=True)
        path = directory / f"rank{rank}.jsonl"
        results = {}
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    result = result_from_dict(json.loads(line))
                except (ValueError, TypeError, KeyError):
                    continue  # a line cut by a kill
                results[result.index] = result
        return cls(path, plan, results)

    def done(self) -> set[int]:
        """Indices of the episodes already played."""
        return set(self.results)

    def append(self, result: EpisodeResult) -> None:
        """Log one finished episode (a line, flushed to the OS before the next episode goes on)."""
        self.results[result.index] = result
        if not (self.path.parent / PLAN).is_file():  # every process writes the same plan, atomically
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path.parent / PLAN, json.dumps(self.plan, indent=1))
        with self.path.open("a") as stream:
            stream.write(json.dumps(result_to_dict(result)) + "\n")

    def remove(self) -> None:
        """Forget the log (the report is written)."""
        shutil.rmtree(self.path.parent, ignore_errors=True)


def result_to_dict(result: EpisodeResult) -> dict[str, Any]:
    return dict(dataclasses.asdict(result), spec=dataclasses.asdict(result.spec))


def result_from_dict(data: dict[str, Any]) -> EpisodeResult:
    return EpisodeResult(**{**data, "spec": EpisodeSpec(**data["spec"])})
