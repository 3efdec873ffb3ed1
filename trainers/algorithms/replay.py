"""``FeatureReplay``: a ring buffer of whole episodes' decisions, kept as a frozen encoder's features, with n-step
returns of a sparse success reward (the off-policy replay of ``trainers/residual.py``).

    >>> replay = FeatureReplay(capacity=100, feature_dim=3, action_shape=(2,), gamma=0.5, n_step=2)
    >>> replay.add_episode(torch.zeros(3, 3), torch.zeros(3, 2), torch.ones(3, 2), success=True)
    3
    >>> replay.returns[:3].tolist(), replay.discounts[:3].tolist()   # reward 1 at the last decision, then the end
    ([0.0, 0.5, 1.0], [0.25, 0.0, 0.0])
    >>> batch = replay.sample(4, torch.Generator().manual_seed(0))
    >>> sorted(batch)
    ['actions', 'base_actions', 'discounts', 'features', 'next_base_actions', 'next_features', 'returns']

A decision ``t`` of an episode of ``T`` stores its features, the base policy's greedy action, the action executed,
the n-step return ``sum_{k<n} gamma^k r_{t+k}`` (``r`` is 1 at the decision where the episode succeeded, 0
elsewhere) and the bootstrap: the features and base action of decision ``t + n`` with discount ``gamma^n``, or
discount 0 when the episode ended before it. An episode ends when it succeeds or when its time runs out; both count
as the end here (no bootstrap past the episode's last decision): the value of a decision is then the discounted
chance of success within the episode's remaining time, which is what an evaluation of the same length scores.
Features are stored as float16 (a 1,736-d feature is 3.5 KB; 100,000 decisions with their bootstraps 700 MB).
"""
from __future__ import annotations

from typing import Any

import torch

#: the per-decision tensors of the buffer, in ``state_dict`` order
FIELDS = ("features", "base_actions", "actions", "returns", "discounts", "next_features", "next_base_actions")


class FeatureReplay:
    """A ring buffer of episode decisions with n-step returns (module docstring)."""

    def __init__(self, capacity: int, feature_dim: int, action_shape: tuple[int, ...], gamma: float, n_step: int):
        if capacity < 1 or n_step < 1 or not 0 < gamma <= 1:
            raise ValueError(f"replay: capacity {capacity} and n_step {n_step} must be >= 1, gamma {gamma} in (0, 1]")
        self.capacity, self.gamma, self.n_step = int(capacity), float(gamma), int(n_step)
        shape = tuple(action_shape)
        self.features = torch.zeros(capacity, feature_dim, dtype=torch.float16)
        self.next_features = torch.zeros(capacity, feature_dim, dtype=torch.float16)
        self.base_actions = torch.zeros(capacity, *shape)
        self.next_base_actions = torch.zeros(capacity, *shape)
        self.actions = torch.zeros(capacity, *shape)
        self.returns = torch.zeros(capacity)
        self.discounts = torch.zeros(capacity)
        self.size = 0       # rows holding data
        self.position = 0   # the next row written
        self.episodes = 0
        self.successes = 0

    def __len__(self) -> int:
        return self.size

    def n_step_targets(self, length: int, success: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For an episode of ``length`` decisions: (returns, discounts, bootstrap rows within the episode)."""
        rewards = torch.zeros(length)
        if success:
            rewards[-1] = 1.0
        steps = torch.arange(length)
        returns = torch.zeros(length)
        for k in range(self.n_step):
            inside = steps + k < length
            returns[inside] += self.gamma ** k * rewards[(steps + k)[inside]]
        bootstrap = steps + self.n_step
        has_next = bootstrap < length
        discounts = torch.where(has_next, torch.tensor(self.gamma ** self.n_step), torch.tensor(0.0))
        return returns, discounts, torch.where(has_next, bootstrap, steps)

    def add_episode(self, features: torch.Tensor, base_actions: torch.Tensor, actions: torch.Tensor,
                    success: bool) -> int:
        """Store one episode's decisions (``[T, F]``, ``[T, *A]``, ``[T, *A]``) in order; returns T."""
        length = features.shape[0]
        if not length:
            return 0
        returns, discounts, nxt = self.n_step_targets(length, success)
        rows = (self.position + torch.arange(length)) % self.capacity
        values = {"features": features.half(), "base_actions": base_actions.float(), "actions": actions.float(),
                  "returns": returns, "discounts": discounts, "next_features": features[nxt].half(),
                  "next_base_actions": base_actions[nxt].float()}
        for name, value in values.items():
            getattr(self, name)[rows] = value.cpu()
        self.position = int((self.position + length) % self.capacity)
        self.size = min(self.capacity, self.size + length)
        self.episodes += 1
        self.successes += int(bool(success))
        return length

    def sample(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """``batch_size`` random rows (with replacement), features as float32."""
        if not self.size:
            raise ValueError("replay: nothing to sample yet (add an episode first)")
        rows = torch.randint(self.size, (batch_size,), generator=generator)
        return {name: getattr(self, name)[rows].float() for name in FIELDS}

    def state_dict(self) -> dict[str, Any]:
        """The filled rows and counters (resume: a killed run keeps its replay)."""
        return {"size": self.size, "position": self.position, "episodes": self.episodes, "successes": self.successes,
                **{name: getattr(self, name)[:self.size].clone() for name in FIELDS}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        size = int(state["size"])
        if size > self.capacity or state["features"].shape[1:] != self.features.shape[1:]:
            raise ValueError(f"replay: a saved replay of {size} rows x {tuple(state['features'].shape[1:])} does not fit "
                             f"this one ({self.capacity} x {tuple(self.features.shape[1:])})")
        for name in FIELDS:
            getattr(self, name)[:size] = state[name]
        self.size, self.position = size, int(state["position"])
        self.episodes, self.successes = int(state["episodes"]), int(state["successes"])

