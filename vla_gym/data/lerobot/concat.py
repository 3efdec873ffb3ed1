"""Several LeRobot v3 datasets read as one, for behaviour cloning on demos plus recorded rollouts.

    >>> from vla_gym.data.lerobot.concat import ConcatDemoDataset
    >>> data = ConcatDemoDataset(["runs/demos", "runs/rollouts_round1"])          # doctest: +SKIP
    >>> len(data) == sum(len(part) for part in data.parts)                          # doctest: +SKIP
    True
    >>> obs, actions, mask = data.batch([0, len(data) - 1], chunk=8)   # rows from both parts  # doctest: +SKIP

Frames are numbered part after part. Every part must have the first part's cameras (with the same image shapes),
state size and action size; :class:`ValueError` names the part that differs. ``trainers/sft.py`` opens one when
``sft.dataset`` lists several directories.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vla_gym.data.lerobot.format import IMAGE_PREFIX
from vla_gym.data.lerobot.reader import DemoDataset


class ConcatDemoDataset:
    """The frames of ``parts`` (DemoDatasets or their directories) in order, with DemoDataset's reading interface
    (``len``, ``[i]``, ``batch``, ``cameras``, ``features``, ``state``, ``action_dim``, ``env_id``)."""

    def __init__(self, parts: Sequence[DemoDataset | str]):
        if not parts:
            raise ValueError("ConcatDemoDataset needs at least one dataset")
        self.parts = [p if isinstance(p, DemoDataset) else DemoDataset(p) for p in parts]
        first = self.parts[0]
        for part in self.parts[1:]:
            _check_same_layout(first, part)
        self.root = ",".join(str(p.root) for p in self.parts)
        self.cameras, self.features, self.fps = first.cameras, first.features, first.fps
        self.state = np.concatenate([p.state for p in self.parts])
        self.actions = np.concatenate([p.actions for p in self.parts])
        self._starts = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def num_episodes(self) -> int:
        return sum(p.num_episodes for p in self.parts)

    @property
    def action_dim(self) -> int:
        return self.parts[0].action_dim

    @property
    def env_id(self) -> str | None:
        """The first recorded env id among the parts (None when none carries a receipt)."""
        return next((p.env_id for p in self.parts if p.env_id), None)

    def decision_rows(self) -> np.ndarray:
        """:meth:`DemoDataset.decision_rows` of every part, as rows of this dataset."""
        return np.concatenate([start + part.decision_rows() for start, part in zip(self._starts, self.parts)])

    def locate(self, i: int) -> tuple[DemoDataset, int]:
        """The part holding frame ``i`` and the frame's index in it."""
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"frame {i} out of range for {len(self)} frames")
        k = int(np.searchsorted(self._starts, i, side="right")) - 1
        return self.parts[k], i - int(self._starts[k])

    def __getitem__(self, i: int) -> dict:
        part, j = self.locate(i)
        return part[j]

    def batch(self, indices: Sequence[int], chunk: int | None = None, cameras: Sequence[str] | None = None):
        """As :meth:`DemoDataset.batch`, over frames of any part (one read per part, rows in ``indices`` order)."""
        located = [self.locate(i) for i in indices]
        by_part: dict[int, list[int]] = {}
        for row, (part, _) in enumerate(located):
            by_part.setdefault(id(part), []).append(row)
        order = np.empty(len(located), dtype=np.int64)
        pieces, start = [], 0
        for rows in by_part.values():
            part = located[rows[0]][0]
            pieces.append(part.batch([located[r][1] for r in rows], chunk=chunk, cameras=cameras))
            order[rows] = np.arange(start, start + len(rows))
            start += len(rows)
        obs = {"images": {role: np.concatenate([o["images"][role] for o, _, _ in pieces])[order]
                          for role in pieces[0][0]["images"]},
               "state": np.concatenate([o["state"] for o, _, _ in pieces])[order]}
        texts = [text for o, _, _ in pieces for text in o["instruction"]]
        obs["instruction"] = [texts[k] for k in order]
        return obs, np.concatenate([a for _, a, _ in pieces])[order], np.concatenate([m for _, _, m in pieces])[order]

def _check_same_layout(first: DemoDataset, part: DemoDataset) -> None:
    shapes = {role: tuple(first.features[IMAGE_PREFIX + role]["shape"]) for role in first.cameras}
    theirs = {role: tuple(part.features[IMAGE_PREFIX + role]["shape"]) for role in part.cameras}
    if shapes != theirs:
        raise ValueError(f"{part.root} has cameras {theirs}, {first.root} has {shapes}: record every part with the "
                         "same --cameras and --image-size")
    if part.state.shape[1] != first.state.shape[1] or part.action_dim != first.action_dim:
        raise ValueError(f"{part.root}: state {part.state.shape[1]} / action {part.action_dim} dims, {first.root}: "
                         f"{first.state.shape[1]} / {first.action_dim}; every part must come from the same env")
