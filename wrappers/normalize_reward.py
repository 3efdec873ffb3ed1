"""``NormalizeRewardPerTask``: scale rewards by a running std of the discounted return, kept per task.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.wrappers import NormalizeRewardPerTask
    >>> env = NormalizeRewardPerTask(gym.make("VLA/MetaWorldMT10-v0", obs_mode="state"), gamma=0.99)  # doctest: +SKIP

In a config: ``env.wrappers: [{name: NormalizeRewardPerTask, kwargs: {gamma: 0.99}}]``.

Gymnasium's ``NormalizeReward`` (and SB3's ``VecNormalize``) divide every reward by one running estimate of the
discounted return's std. On a multi-task id whose sub-env draws a task per reset that estimate mixes all tasks, and
Meta-World's dense returns differ about tenfold between tasks (an MT10 expert episode of button-press-topdown
returns about 140, one of reach about 1,800), so a few tasks' advantages dominate the shared actor's update.
This wrapper keeps one estimate per ``info["task_id"]``, as Meta-World's own MT vector env does by giving each
sub-env one task (``reward_normalization_method="gymnasium"``): each task's rewards are divided by the std of its
own discounted returns, so every task's returns land on a similar scale.

The discounted return restarts at every reset; a task's rewards are divided by 1 until its statistics hold two
values. ``info["task_id"]`` missing means one task
(key ``None``), which makes this gymnasium's ``NormalizeReward``. Like it, the env's success and
``EpisodeMetrics`` below see the raw reward; wrappers above see the scaled one (put ``EpisodeMetrics`` below this
one to log raw returns).
"""
from __future__ import annotations

import math

import gymnasium as gym


class RunningMeanVar:
    """Mean and variance of a stream of numbers (Chan et al.'s parallel update, one value at a time)."""

    def __init__(self):
        self.count, self.mean, self.var = 0, 0.0, 0.0

    def update(self, value: float) -> None:
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self.var += (delta * (value - self.mean) - self.var) / self.count


class NormalizeRewardPerTask(gym.Wrapper):
    """Reward / std of the discounted return of the current task (module docstring)."""

    def __init__(self, env: gym.Env, gamma: float = 0.99, epsilon: float = 1e-8):
        super().__init__(env)
        if not 0 <= gamma <= 1:
            raise ValueError(f"NormalizeRewardPerTask: gamma={gamma} must be in [0, 1]")
        self.gamma, self.epsilon = gamma, epsilon
        self.returns: dict = {}  # task id -> RunningMeanVar of its discounted returns
        self._discounted = 0.0

    def reset(self, **kwargs):
        self._discounted = 0.0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._discounted = self._discounted * self.gamma + float(reward)
        task = info.get("task_id")
        self.returns.setdefault(task, RunningMeanVar()).update(self._discounted)
        return obs, float(reward) / self.std(task), terminated, truncated, info

    def std(self, task_id=None) -> float:
        """The current divisor of ``task_id``'s rewards: the std of its discounted returns so far (1 before two)."""
        stats = self.returns.get(task_id)
        return math.sqrt(stats.var + self.epsilon) if stats is not None and stats.count >= 2 else 1.0
