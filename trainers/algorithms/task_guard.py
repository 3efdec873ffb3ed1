"""``TaskGuard``: keep the base policy on the tasks where the residual does worse than the base (residual RL).

A residual actor shared by every task can lift most of them and break one the base already solves (Object seed 0,
session 35: six tasks +7.5..+22.5 points, milk 57.5 -> 17.5 %). The guard compares, per task, the success of the
episodes the residual played with that of control episodes the base played alone (the warm-up and every
``residual.task_guard_every``-th round after it, ``trainers/residual.py``), and switches the residual off on a task
where its latest ``window`` episodes succeed less often than the base's do (all of them: the base never changes).
The gates go into the saved policy (``ResidualPolicy(task_gates=...)``), so evaluation acts with them; training
keeps playing the ungated residual, so the evidence keeps coming and a gate can open again.

    >>> guard = TaskGuard(window=4, min_episodes=2)
    >>> for success in (True, True, True, False):
    ...     guard.record("put the milk in the basket", success, base=True)
    >>> for success in (False, False, True, False):
    ...     guard.record("put the milk in the basket", success, base=False)
    >>> guard.record("put the soup in the basket", True, base=False)   # too little evidence: stays on
    >>> guard.gates()
    {'put the milk in the basket': 0.0, 'put the soup in the basket': 1.0}
"""
from __future__ import annotations

import collections


class TaskGuard:
    """Per-task outcomes of base (control) and residual episodes, and the gates they imply (module docstring)."""

    def __init__(self, window: int = 16, min_episodes: int = 8):
        if window < 1 or min_episodes < 1:
            raise ValueError(f"task guard: window={window} and min_episodes={min_episodes} must be at least 1")
        self.window, self.min_episodes = int(window), int(min_episodes)
        self.base: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])  # successes, episodes
        self.residual: dict[str, collections.deque] = {}

    def record(self, instruction: str, success: bool, base: bool) -> None:
        """One finished episode of the task ``instruction``, played by the base alone (``base``) or with the residual."""
        if base:
            counts = self.base[instruction]
            counts[0] += int(success)
            counts[1] += 1
        else:
            self.residual.setdefault(instruction, collections.deque(maxlen=self.window)).append(int(success))

    def rates(self, instruction: str) -> tuple[float | None, float | None]:
        """``(base success rate, residual success rate over the window)``; None where the evidence is too thin."""
        successes, episodes = self.base.get(instruction, (0, 0))
        recent = self.residual.get(instruction, ())
        base = successes / episodes if episodes >= self.min_episodes else None
        residual = sum(recent) / len(recent) if len(recent) >= self.min_episodes else None
        return base, residual

    def gates(self) -> dict[str, float]:
        """``{instruction: 0.0 or 1.0}`` for every task seen: 0 where the residual's recent success is below the
        base's, 1 elsewhere (also where either side has fewer than ``min_episodes`` episodes)."""
        gates = {}
        for instruction in sorted(set(self.base) | set(self.residual)):
            base, residual = self.rates(instruction)
            gates[instruction] = 0.0 if base is not None and residual is not None and residual < base else 1.0
        return gates

    def state_dict(self) -> dict:
        return {"base": {key: list(value) for key, value in self.base.items()},
                "residual": {key: list(value) for key, value in self.residual.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.base.clear()
        self.base.update({key: list(value) for key, value in state["base"].items()})
        self.residual = {key: collections.deque(value, maxlen=self.window) for key, value in state["residual"].items()}
