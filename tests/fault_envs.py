"""A tiny env that hangs, dies or raises on demand, for tests/test_vector_faults.py (importable by worker processes).

``FaultyEnv(fault=..., at=k)`` fails at step ``k`` of every episode; ``reset(options={"fault": ..., "at": k})`` makes
only that episode fail; ``fault_seeds={seed: ...}`` makes the episodes reset with those seeds fail, once each when
``once_dir`` is given (a marker file there remembers that the fault happened, across worker processes). Faults:
``"hang"`` (sleeps ``hang_s``), ``"kill"`` (SIGKILL to itself), ``"raise"`` (RuntimeError); ``"hang_reset"`` /
``"raise_reset"`` fail in ``reset`` itself.

Observation: ``[steps taken in the episode, the episode's seed or -1]``; reward 1 per step; ``success`` at the last
step; truncated after ``length`` steps.

:func:`chunked_vla_env`: a vla_gym env (no simulator) under :class:`~vla_gym.wrappers.ActionChunk` whose backend
dies or hangs in the middle of a chunk.
"""
from __future__ import annotations

import os
import pathlib
import signal
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vla_gym.backends.base import Backend, TaskSpec
from vla_gym.core.env import VLAEnv


class FaultyEnv(gym.Env):
    observation_space = spaces.Box(-1, 1e6, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, fault: str | None = None, at: int = 1, length: int = 50, hang_s: float = 60.0,
                 fault_seeds: dict[int, str] | None = None, once_dir: str | None = None):
        self.fault, self.at, self.length, self.hang_s = fault, at, length, hang_s
        self.fault_seeds, self.once_dir = dict(fault_seeds or {}), once_dir
        self.episode_fault, self.episode_at, self.seed, self.t = None, at, -1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        options = options or {}
        self.seed = -1 if seed is None else int(seed)
        self.episode_fault = options.get("fault", self.fault_seeds.get(self.seed, self.fault))
        self.episode_at = options.get("at", self.at)
        if self.episode_fault in ("hang_reset", "raise_reset") and self._first_time():
            self._fail(self.episode_fault.removesuffix("_reset"))
        self.t = 0
        return self._obs(), {"task_name": "faulty", "init_state_id": options.get("init_state_id"), "pid": os.getpid()}

    def step(self, action):
        self.t += 1
        if self.episode_fault in ("hang", "kill", "raise") and self.t == self.episode_at and self._first_time():
            self._fail(self.episode_fault)
        return self._obs(), 1.0, False, self.t >= self.length, {"success": self.t >= self.length, "pid": os.getpid()}

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.seed], np.float32)

    def _first_time(self) -> bool:
        """True unless ``once_dir`` says this episode's fault already happened (then it plays cleanly)."""
        if self.once_dir is None:
            return True
        marker = pathlib.Path(self.once_dir) / f"fault-{self.seed}"
        if marker.exists():
            return False
        marker.touch()
        return True

    def _fail(self, fault: str) -> None:
        fail(fault, self.hang_s, self.t)


def fail(fault: str, hang_s: float, step: int) -> None:
    if fault == "hang":
        time.sleep(hang_s)
    elif fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "raise":
        raise RuntimeError(f"simulated simulator error at step {step}")
    else:
        raise ValueError(f"unknown fault {fault!r}")


# ----------------------------------------------------------------------- a vla_gym env (for ActionChunk)
TASKS = [TaskSpec(k, "toy", f"task{k}", f"do task {k}", max_episode_steps=40, num_init_states=5) for k in range(2)]


class FaultyBackend(Backend):
    """No simulator: the sub-step ``at`` of every episode from init state ``fault_init_state`` dies (SIGKILL) or
    hangs, once per ``once_dir`` marker."""

    control_hz, state_dim = 10.0, 2

    def __init__(self, fault: str = "kill", fault_init_state: int = 3, at: int = 6, once_dir: str | None = None):
        super().__init__(camera_roles=(), image_size=(8, 8))
        self.fault, self.fault_init_state, self.at, self.once_dir = fault, fault_init_state, at, once_dir

    def load(self, task):
        self.task = task

    def reset(self, init_state_id, seed):
        self.init, self.t = init_state_id, 0

    def step(self, action):
        self.t += 1
        if self.init == self.fault_init_state and self.t == self.at:
            marker = None if self.once_dir is None else pathlib.Path(self.once_dir) / f"vla-{self.task.index}"
            if marker is None or not marker.exists():
                if marker is not None:
                    marker.touch()
                fail(self.fault, 60.0, self.t)
        return 0.0, False

    def state(self):
        return np.array([self.task.index, self.t], np.float32)

    def render(self):
        return {}


def chunked_vla_env(chunk_size: int = 4, **backend_kwargs) -> gym.Env:
    """``ActionChunk(VLAEnv(FaultyBackend))``: the fault strikes inside a chunk, in the worker."""
    from vla_gym.wrappers import ActionChunk

    return ActionChunk(VLAEnv(FaultyBackend(**backend_kwargs), TASKS), chunk_size=chunk_size)
