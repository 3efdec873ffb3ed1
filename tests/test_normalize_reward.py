"""NormalizeRewardPerTask on the real Meta-World MT10 env: one return estimate per task, rewards divided by it."""
import gymnasium as gym
import numpy as np
import pytest

from vla_gym.wrappers import NormalizeRewardPerTask
from vla_gym.wrappers.normalize_reward import RunningMeanVar

pytestmark = pytest.mark.quick


class RawReward(gym.Wrapper):
    """Keeps the reward the wrapper above scales, to compare."""

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.last_reward = float(reward)
        return obs, reward, terminated, truncated, info


def test_running_mean_var_matches_numpy():
    values = np.random.default_rng(0).normal(2.0, 3.0, size=500)
    stats = RunningMeanVar()
    for value in values:
        stats.update(value)
    assert stats.count == 500
    assert stats.mean == pytest.approx(values.mean())
    assert stats.var == pytest.approx(values.var())


def test_each_task_keeps_its_own_return_scale():
    pytest.importorskip("metaworld")
    raw = RawReward(gym.make("VLA/MetaWorldMT10-v0", obs_mode="state", max_episode_steps=20))
    env = NormalizeRewardPerTask(raw, gamma=0.9)
    rng = np.random.default_rng(0)
    tasks_seen = set()
    for episode in range(12):
        _, info = env.reset(seed=episode)
        tasks_seen.add(info["task_id"])
        for _ in range(20):
            std_before = env.std(info["task_id"])
            _, reward, terminated, truncated, info = env.step(rng.uniform(-1, 1, size=4).astype(np.float32))
            # the divisor is the task's std after this step's return entered its statistics
            assert reward == pytest.approx(raw.last_reward / env.std(info["task_id"]))
            assert std_before > 0
            if terminated or truncated:
                break
    assert set(env.returns) == tasks_seen and len(tasks_seen) > 1
    scales = {task: env.std(task) for task in tasks_seen}
    assert len({round(scale, 6) for scale in scales.values()}) == len(scales), scales  # not one shared scale


def test_without_a_task_id_it_is_one_estimate():
    env = NormalizeRewardPerTask(gym.make("Pendulum-v1"), gamma=0.99)
    env.reset(seed=0)
    for _ in range(10):
        env.step(env.action_space.sample())
    assert list(env.returns) == [None] and env.returns[None].count == 10


def test_bad_gamma_names_the_range():
    with pytest.raises(ValueError, match=r"gamma=1.5 must be in \[0, 1\]"):
        NormalizeRewardPerTask(gym.make("Pendulum-v1"), gamma=1.5)
