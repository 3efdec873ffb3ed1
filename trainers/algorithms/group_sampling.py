"""GRPO's group bookkeeping: which groups carry signal, when an update has sampled enough, which starts are solved.

    >>> outcome = group_outcomes(torch.tensor([1., 0., 1., 1., 0., 0.]), group_size=2, success=True)
    >>> outcome.mixed.tolist(), outcome.all_success.tolist(), outcome.all_fail.tolist()
    ([True, False, False], [False, True, False], [False, False, True])
    >>> sampling_done(mixed=1, rounds=1, min_mixed=2, max_rounds=4), sampling_done(mixed=2, rounds=1, min_mixed=2, max_rounds=4)
    (False, True)
    >>> solved = SolvedTracker(after=2)
    >>> for all_success in (True, True): solved.record((0, 7), all_success)
    >>> solved.solved((0, 7)), solved.solved((0, 8))
    (True, False)

A group is *mixed* when its scores differ (nonzero advantages: signal), *uniform* otherwise; with the success
score a uniform group is all-success or all-fail. Dynamic sampling (``grpo.min_mixed_groups``) plays rounds of
``groups_per_update`` groups until the update holds enough mixed groups over all ranks (:func:`sampling_done`,
called with the all-ranks sum so that every rank stops after the same round). ``grpo.skip_solved_after = K``
skips a (task, init state) pair whose last ``K`` groups were all-success (:class:`SolvedTracker`, kept the same on
every rank from the gathered outcomes of each round, and saved in checkpoints).
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


def group_outcomes(scores: torch.Tensor, group_size: int, success: bool) -> GroupOutcomes:
    """Outcomes of consecutive groups of ``group_size`` scores (``success``: scores are 1.0 / 0.0 successes)."""
    grouped = scores.reshape(-1, group_size)
    uniform = (grouped == grouped[:, :1]).all(dim=1)
    if success:
        all_success = uniform & (grouped[:, 0] > 0)
        all_fail = uniform & (grouped[:, 0] <= 0)
    else:
        all_success = all_fail = torch.zeros_like(uniform)
    return GroupOutcomes(mixed=~uniform, all_success=all_success, all_fail=all_fail)


def sampling_done(mixed: int, rounds: int, min_mixed: int, max_rounds: int) -> bool:
    """Whether an update stops sampling after ``rounds`` rounds that found ``mixed`` mixed groups (all ranks)."""
    return min_mixed <= 0 or mixed >= min_mixed or rounds >= max_rounds


class SolvedTracker:
    """The last ``after`` group outcomes (all-success or not) of each (task, init state) pair."""

    def __init__(self, after: int):
        self.after = int(after)
        self.history: dict[Hashable, list[bool]] = {}

    def record(self, key: Hashable | None, all_success: bool) -> None:
        if key is None or self.after <= 0:
            return
        history = self.history.setdefault(key, [])
        history.append(bool(all_success))
        del history[:-self.after]

    def solved(self, key: Hashable | None) -> bool:
        """True when the pair's last ``after`` groups all succeeded."""
        history = self.history.get(key) if key is not None and self.after > 0 else None
        return history is not None and len(history) >= self.after and all(history)

    def num_solved(self) -> int:
        return sum(self.solved(key) for key in self.history)

    def state_dict(self) -> dict[str, Any]:
        return {"after": self.after, "history": [[list(key), list(history)] for key, history in self.history.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = {tuple(key): [bool(x) for x in history][-self.after:] for key, history in state["history"]}


def draw_unsolved(draw, solved: SolvedTracker | None, max_attempts: int = 64):
    """``draw(attempt) -> (key, spec)`` until a key that is not solved (at most ``max_attempts`` draws; then the last
    one); returns (spec, number of draws skipped as solved)."""
    skipped = 0
    for attempt in range(max_attempts):
        key, spec = draw(attempt)
        if solved is None or not solved.solved(key):
            return spec, skipped
        skipped += 1
    return spec, skipped
