"""GRPO's group bookkeeping: which groups carry signal, when an update has sampled enough, which starts to skip.

    >>> outcome = group_outcomes(torch.tensor([1., 0., 1., 1., 0., 0.]), group_size=2, success=True)
    >>> outcome.mixed.tolist(), outcome.all_success.tolist(), outcome.all_fail.tolist()
    ([True, False, False], [False, True, False], [False, False, True])
    >>> sampling_done(mixed=1, rounds=1, min_mixed=2, max_rounds=4), sampling_done(mixed=2, rounds=1, min_mixed=2, max_rounds=4)
    (False, True)
    >>> starts = StartTracker(after=2, failed_after=3)
    >>> for all_success in (True, True): starts.record((0, 7), all_success)
    >>> for _ in range(3): starts.record((0, 9), all_success=False, all_fail=True)
    >>> starts.solved((0, 7)), starts.solved((0, 8)), starts.hopeless((0, 9)), starts.skip((0, 9))
    (True, False, True, True)

A group is *mixed* when its scores differ (nonzero advantages: signal), *uniform* otherwise; with the success
score a uniform group is all-success or all-fail. Dynamic sampling (``grpo.min_mixed_groups``) plays rounds of
``groups_per_update`` groups until the update holds enough mixed groups over all ranks (:func:`sampling_done`,
called with the all-ranks sum so that every rank stops after the same round). ``grpo.skip_solved_after = K``
skips a (task, init state) pair whose last ``K`` groups were all-success, ``grpo.skip_failed_after = K`` one whose
last ``K`` were all-fail (:class:`StartTracker`, kept the same on every rank from the gathered outcomes of each
round, and saved in checkpoints): the update's episodes go to starts that can still give mixed groups.
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class GroupOutcomes:
    """Per group (``[G]`` bool): scores differ (mixed), all succeeded, all failed (the last two: success score)."""

    mixed: torch.Tensor
    all_success: torch.Tensor
    all_fail: torch.Tensor

    @property
    def uniform(self) -> torch.Tensor:
        return ~self.mixed


def group_outcomes(scores: torch.Tensor, group_size: int, success: bool,
                   judged: torch.Tensor | None = None) -> GroupOutcomes:
    """Outcomes of consecutive groups of ``group_size`` scores (``success``: scores are 1.0 / 0.0 successes).

    ``judged`` (bool per score) leaves out the episodes cut by a failed env worker: a group is mixed only when its
    judged scores differ, and all-success / all-fail by its judged scores (a group with none judged is neither).

    >>> cut = torch.tensor([True, False, True, True])        # the 0 of the cut episode is no failure
    >>> group_outcomes(torch.tensor([1., 0., 1., 1.]), 4, True, judged=cut).all_success.tolist()
    [True]
    """
    grouped = scores.reshape(-1, group_size)
    judged = torch.ones_like(grouped, dtype=torch.bool) if judged is None else judged.reshape(-1, group_size)
    high = torch.where(judged, grouped, torch.full_like(grouped, -torch.inf)).amax(dim=1)
    low = torch.where(judged, grouped, torch.full_like(grouped, torch.inf)).amin(dim=1)
    any_judged = judged.any(dim=1)
    uniform = ~any_judged | (high == low)
    if success:
        all_success = uniform & any_judged & (low > 0)
        all_fail = uniform & any_judged & (high <= 0)
    else:
        all_success = all_fail = torch.zeros_like(uniform)
    return GroupOutcomes(mixed=~uniform, all_success=all_success, all_fail=all_fail)


def sampling_done(mixed: int, rounds: int, min_mixed: int, max_rounds: int) -> bool:
    """Whether an update stops sampling after ``rounds`` rounds that found ``mixed`` mixed groups (all ranks)."""
    return min_mixed <= 0 or mixed >= min_mixed or rounds >= max_rounds


class StartTracker:
    """The last group outcomes of each (task, init state) start: ``after`` all-success groups in a row make it
    solved, ``failed_after`` all-fail groups in a row hopeless (0: never); :meth:`skip` is either."""

    def __init__(self, after: int = 0, failed_after: int = 0):
        self.after, self.failed_after = int(after), int(failed_after)
        self.history: dict[Hashable, list[str]] = {}  # "success" | "fail" | "mixed", oldest first

    def record(self, key: Hashable | None, all_success: bool, all_fail: bool = False) -> None:
        keep = max(self.after, self.failed_after)
        if key is None or keep <= 0:
            return
        history = self.history.setdefault(key, [])
        history.append("success" if all_success else "fail" if all_fail else "mixed")
        del history[:-keep]

    def _last_all(self, key: Hashable | None, count: int, outcome: str) -> bool:
        history = self.history.get(key) if key is not None and count > 0 else None
        return history is not None and len(history) >= count and all(h == outcome for h in history[-count:])

    def solved(self, key: Hashable | None) -> bool:
        """True when the start's last ``after`` groups all succeeded."""
        return self._last_all(key, self.after, "success")

    def hopeless(self, key: Hashable | None) -> bool:
        """True when the start's last ``failed_after`` groups all failed."""
        return self._last_all(key, self.failed_after, "fail")

    def skip(self, key: Hashable | None) -> bool:
        return self.solved(key) or self.hopeless(key)

    def num_solved(self) -> int:
        return sum(self.solved(key) for key in self.history)

    def num_hopeless(self) -> int:
        return sum(self.hopeless(key) for key in self.history)

    def state_dict(self) -> dict[str, Any]:
        return {"after": self.after, "failed_after": self.failed_after,
                "history": [[list(key), list(history)] for key, history in self.history.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        keep = max(self.after, self.failed_after)
        # checkpoints before failed_after stored True (all-success) / False (not) per group
        read = lambda h: h if isinstance(h, str) else ("success" if h else "mixed")
        self.history = {tuple(key): [read(h) for h in history][-keep:] for key, history in state["history"]}


def draw_unsolved(draw, tracker: StartTracker | None, max_attempts: int = 64):
    """``draw(attempt) -> (key, spec)`` until a key that is neither solved nor hopeless (at most ``max_attempts``
    draws; then the last one); returns (spec, number of draws skipped)."""
    skipped = 0
    for attempt in range(max_attempts):
        key, spec = draw(attempt)
        if tracker is None or not tracker.skip(key):
            return spec, skipped
        skipped += 1
    return spec, skipped


def start_key(spec) -> tuple[int, int] | None:
    """The (task, init state) an :class:`~vla_gym.trainers.rollout.episode_plan.EpisodeSpec` starts from (the key
    :class:`StartTracker` counts), None when the env has no fixed init states."""
    if spec.init_state_id is None:
        return None
    return (-1 if spec.task_id is None else int(spec.task_id), int(spec.init_state_id))


def episode_scores(results, success: bool) -> torch.Tensor:
    """Per episode: 1.0 / 0.0 success (a cut episode that reported none: 0.0, left out by :func:`judged`) or the
    return."""
    return torch.tensor([float(bool(r.success)) if success else r.episode_return for r in results])


def judged(results) -> torch.Tensor:
    """Per episode: the env judged it (not cut by a failed env worker, ``info["env_failure"]``)."""
    return torch.tensor([r.env_failure is None for r in results], dtype=torch.bool)
