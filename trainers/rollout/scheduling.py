"""Task-affine scheduling of queued episodes over env slots (:class:`TaskAffinityQueue`).

Envs with a task list (e.g. ``VLA/Libero130-v0``) rebuild the scene in seconds on a task change, while a same-task
reset takes a fraction of one: a freed env takes the next queued episode of the task it has loaded; when that task
has none left, it takes the task with the most queued episodes per env already on it, so a GRPO group's episodes
stay on the env slots that loaded its scene. Specs without a task form one first-in-first-out queue.
"""
from __future__ import annotations

import collections
from collections.abc import Sequence

from vla_gym.trainers.rollout.episode_plan import EpisodeSpec


class TaskAffinityQueue:
    """Episodes (indices into ``specs``) waiting for an env, handed out with task affinity.

        >>> specs = [EpisodeSpec(task_id=t) for t in (0, 0, 0, 1, 1, 1)]
        >>> queue = TaskAffinityQueue(specs)
        >>> [queue.take(loaded_task=None) for _ in range(2)]   # two empty envs: one per task
        [0, 3]
        >>> queue.take(loaded_task=1), queue.take(loaded_task=0)   # freed envs keep their task
        (4, 1)

    ``take(loaded_task)`` returns the next episode of ``loaded_task`` if one is queued; else the first
    queued episode of the task with the most queued episodes per env working on it (ties: the task that
    comes first in ``specs``). ``done(task)`` tells it an env finished an episode of ``task``; ``put_back(index,
    task)`` queues an episode again. Specs
    without a task form one first-in-first-out queue.
    """

    def __init__(self, specs: Sequence[EpisodeSpec], indices: Sequence[int] | None = None):
        self.pending: dict[int | None, collections.deque] = {}
        for index in range(len(specs)) if indices is None else indices:  # indices: only these episodes
            self.pending.setdefault(specs[index].task_id, collections.deque()).append(index)
        self.working: collections.Counter = collections.Counter()

    def __bool__(self) -> bool:
        return bool(self.pending)

    def has(self, task: int | None) -> bool:
        return task in self.pending

    def take(self, loaded_task: int | None) -> int:
        task = loaded_task if loaded_task in self.pending else max(
            self.pending, key=lambda t: len(self.pending[t]) / (self.working[t] + 1))  # max: first of ties
        queue = self.pending[task]
        index = queue.popleft()
        if not queue:
            del self.pending[task]
        self.working[task] += 1
        return index

    def done(self, task: int | None) -> None:
        self.working[task] -= 1

    def put_back(self, index: int, task: int | None) -> None:
        """Queue episode ``index`` of ``task`` again, first in line (its play was cut by a failed env worker)."""
        self.pending.setdefault(task, collections.deque()).appendleft(index)
