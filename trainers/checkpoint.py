"""Atomic checkpoints that keep the last N, plus the RNG states a resumed run needs.

    ckpt = Checkpointer(run_path / "checkpoints", keep_last=3)
    path = ckpt.save(state, update=40)            # writes ckpt_00000040.pt.tmp, fsyncs, renames
    state = load_checkpoint(ckpt.latest())        # or None when there is none

A checkpoint is written to a temporary file in the same directory and renamed with ``os.replace``,
so a run killed at any moment leaves either the previous checkpoint or the new one, never half a
file. Stray ``*.tmp`` files of a killed save are ignored and cleaned up by the next save.
"""
from __future__ import annotations

import os
import pathlib
import random
import re
from typing import Any

import numpy as np
import torch

PATTERN = re.compile(r"^ckpt_(\d+)\.pt$")


class Checkpointer:
    def __init__(self, directory: str | os.PathLike, keep_last: int = 3):
        if keep_last < 1:
            raise ValueError(f"checkpoint.keep_last must be >= 1, got {keep_last}")
        self.directory = pathlib.Path(directory)
        self.keep_last = keep_last

    def paths(self) -> list[pathlib.Path]:
        """Complete checkpoints, oldest first."""
        if not self.directory.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.directory.iterdir() if (m := PATTERN.match(p.name))]
        return [p for _, p in sorted(found)]

    def latest(self) -> pathlib.Path | None:
        paths = self.paths()
        return paths[-1] if paths else None

    def save(self, state: dict[str, Any], update: int) -> pathlib.Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = atomic_save(state, self.directory / f"ckpt_{update:08d}.pt")
        self._prune()
        return path

    def _prune(self) -> None:
        for old in self.paths()[: -self.keep_last]:
            old.unlink(missing_ok=True)
        for stray in self.directory.glob("*.pt.tmp"):
            stray.unlink(missing_ok=True)


def atomic_save(state: dict[str, Any], path: str | os.PathLike) -> pathlib.Path:
    """``torch.save`` to ``path.tmp``, fsync, then rename over ``path``."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by :class:`Checkpointer` (it holds gym spaces, hence weights_only=False)."""
    return torch.load(path, map_location=map_location, weights_only=False)


def load_policy(checkpoint: str | os.PathLike | dict[str, Any], device: str | torch.device = "cpu"):
    """The policy of a PPO/GRPO checkpoint, rebuilt from the spaces and policy options it stores.

    >>> policy = load_policy("runs/pushcube/checkpoints/ckpt_00000100.pt")   # doctest: +SKIP
    >>> actions, _, _ = policy.act(obs_batch, deterministic=True)           # doctest: +SKIP
    """
    from vla_gym.trainers.policies import make_policy

    state = checkpoint if isinstance(checkpoint, dict) else load_checkpoint(checkpoint, map_location=device)
    if state.get("policy_name") is None:
        raise ValueError("this checkpoint's policy was passed to the trainer as an instance: build it the same way "
                         "and call policy.load_state_dict(state['policy'])")
    policy = make_policy(state["policy_name"], state["observation_space"], state["action_space"], **state["policy_kwargs"])
    policy.load_state_dict(state["policy"])
    return policy.to(device).eval()


def rng_state(generators: dict[str, torch.Generator] | None = None) -> dict[str, Any]:
    """Python, numpy, torch (and CUDA) global RNG states plus named torch generators."""
    state = {
        "python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
        "generators": {name: g.get_state() for name, g in (generators or {}).items()},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], generators: dict[str, torch.Generator] | None = None) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    for name, g in (generators or {}).items():
        if name in state["generators"]:
            g.set_state(state["generators"][name])
