"""Observation batches as trees: numpy from a vector env -> torch, stacking, indexing.

An observation batch is a tensor (Box envs), a list of strings (instructions), or a dict of those
(nested for ``images``). These helpers walk that tree so nothing else has to care about its shape::

    obs = to_torch(vector_obs, device)          # numpy arrays -> tensors, tuples of str -> lists
    sub = index(obs, torch.tensor([0, 2]))      # the same tree for rows 0 and 2
    obs = to_torch(stack([o1, o2]), device)     # per-env observations (e.g. final_obs) -> a batch
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def to_torch(obs: Any, device: torch.device | str = "cpu") -> Any:
    """numpy -> torch (float64 becomes float32, uint8 stays uint8); strings become a list."""
    if isinstance(obs, dict):
        return {key: to_torch(value, device) for key, value in obs.items()}
    if isinstance(obs, (tuple, list)) or (isinstance(obs, np.ndarray) and obs.dtype.kind in "OUS"):
        return [str(text) for text in obs]
    # tensors as they are: the GPU-batched ManiSkill env's observations stay on their device
    tensor = obs if isinstance(obs, torch.Tensor) else torch.as_tensor(np.asarray(obs))
    if tensor.dtype == torch.float64:
        tensor = tensor.float()
    return tensor.to(device, non_blocking=True)


def stack(observations: Sequence[Any]) -> Any:
    """Per-env numpy observations -> one batched numpy tree."""
    first = observations[0]
    if isinstance(first, dict):
        return {key: stack([o[key] for o in observations]) for key in first}
    if isinstance(first, str):
        return list(observations)
    if isinstance(first, torch.Tensor):  # rows of the GPU-batched env's final_obs
        return torch.stack(list(observations))
    return np.stack([np.asarray(o) for o in observations])


def index(obs: Any, rows: torch.Tensor) -> Any:
    """Select batch rows of a torch observation tree."""
    if isinstance(obs, dict):
        return {key: index(value, rows) for key, value in obs.items()}
    if isinstance(obs, list):
        return [obs[i] for i in rows.tolist()]
    return obs[rows.to(obs.device)]


def to_device(obs: Any, device: torch.device | str) -> Any:
    if isinstance(obs, dict):
        return {key: to_device(value, device) for key, value in obs.items()}
    if isinstance(obs, list):
        return obs
    return obs.to(device, non_blocking=True)


class ObsStorage:
    """A ``[T, N]`` store for observation trees, allocated from the first observation written.

    >>> store = ObsStorage(128, 8, "cpu"); store.write(0, obs)   # doctest: +SKIP
    >>> store.flat()                                              # rows t * N + n   # doctest: +SKIP
    """

    def __init__(self, n_steps: int, num_envs: int, device: torch.device | str):
        self.n_steps, self.num_envs, self.device = n_steps, num_envs, device
        self.data: Any = None

    def _allocate(self, obs: Any) -> Any:
        if isinstance(obs, dict):
            return {key: self._allocate(value) for key, value in obs.items()}
        if isinstance(obs, list):
            return [[""] * self.num_envs for _ in range(self.n_steps)]
        return torch.zeros((self.n_steps, *obs.shape), dtype=obs.dtype, device=self.device)

    def write(self, step: int, obs: Any) -> None:
        if self.data is None:
            with torch.inference_mode(False):  # normal tensors: the update takes views of them into autograd
                self.data = self._allocate(obs)
        self._write(self.data, step, obs)

    def _write(self, store: Any, step: int, obs: Any) -> None:
        if isinstance(obs, dict):
            for key, value in obs.items():
                self._write(store[key], step, value)
        elif isinstance(obs, list):
            store[step] = list(obs)
        else:
            store[step].copy_(obs)

    def flat(self) -> Any:
        """The whole store as one batch of ``T * N`` rows (row ``t * N + n``)."""
        return self._flat(self.data)

    def _flat(self, store: Any) -> Any:
        if isinstance(store, dict):
            return {key: self._flat(value) for key, value in store.items()}
        if isinstance(store, list):
            return [text for row in store for text in row]
        return store.reshape(-1, *store.shape[2:])
