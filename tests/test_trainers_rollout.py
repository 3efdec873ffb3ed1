"""PPO's rollout across auto-resets: terminations are not bootstrapped, truncations are, in both autoreset modes."""
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.rollout.episode_runner import EpisodeRunner, EpisodeSpec
from vla_gym.trainers.policies.base import Policy
from vla_gym.trainers.rollout.collector import RolloutCollector

GAMMA = 0.5


class Counter(gym.Env):
    """obs = steps taken; reward 1 per step; terminates after 3 steps (``terminate``) or is truncated after 4."""

    observation_space = spaces.Box(0, 100, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, terminate: bool):
        self.terminate = terminate

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], np.float32), {}

    def step(self, action):
        self.t += 1
        terminated = self.terminate and self.t == 3
        truncated = not self.terminate and self.t == 4
        return np.array([self.t], np.float32), 1.0, terminated, truncated, {"success": self.t == 3}


class ValueIsTenTimesObs(Policy):
    def __init__(self):
        super().__init__(Counter.observation_space, Counter.action_space)
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def value(self, obs):
        return 10.0 * obs[:, 0]

    def act(self, obs, deterministic=False):
        return torch.zeros(obs.shape[0], dtype=torch.long), torch.zeros(obs.shape[0]), self.value(obs)


def transitions(mode: AutoresetMode, n_steps: int = 12):
    envs = SyncVectorEnv([lambda: Counter(True), lambda: Counter(False)], autoreset_mode=mode)
    buffer = RolloutBuffer(n_steps, 2)
    collector = RolloutCollector(envs, ValueIsTenTimesObs(), buffer, gamma=GAMMA, gae_lambda=1.0)
    collector.reset([0, 1])
    collector.collect()
    rows = {}
    for env in range(2):
        keep = buffer.valid[:, env]
        rows[env] = list(zip(buffer.obs.data[keep, env, 0].tolist(), buffer.rewards[keep, env].tolist(),
                             buffer.dones[keep, env].tolist(), buffer.returns[keep, env].tolist()))
    return rows, buffer, collector


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_truncation_is_bootstrapped_and_termination_is_not(mode):
    rows, _, collector = transitions(mode)
    terminating, truncating = rows[0], rows[1]
    assert [r[:3] for r in terminating[:4]] == [(0, 1, False), (1, 1, False), (2, 1, True), (0, 1, False)]
    # the truncating step gets reward + gamma * V(final obs = 4) = 1 + 0.5 * 40
    assert [r[:3] for r in truncating[:5]] == [(0, 1, False), (1, 1, False), (2, 1, False), (3, 21, True),
                                               (0, 1, False)]
    # lambda = 1: returns are discounted sums that stop at episode ends
    assert terminating[0][3] == pytest.approx(1 + GAMMA + GAMMA**2)
    assert truncating[0][3] == pytest.approx(1 + GAMMA + GAMMA**2 + GAMMA**3 * 21)
    sums, counts = collector.tracker.pop()
    assert counts["env/episode_len"] >= 4 and sums["env/success_once"] == counts["env/success_once"]


def test_both_autoreset_modes_give_the_same_transitions():
    same, _, _ = transitions(AutoresetMode.SAME_STEP, 12)
    nxt, buffer, _ = transitions(AutoresetMode.NEXT_STEP, 12)
    for env in range(2):
        shared = min(len(same[env]), len(nxt[env]))
        assert [r[:3] for r in same[env][:shared]] == [r[:3] for r in nxt[env][:shared]]
        # returns agree for the first episode, which ends inside both rollouts
        assert same[env][0][3] == pytest.approx(nxt[env][0][3])
    # NEXT_STEP spends one invalid (reset-only) step after every episode end
    assert (~buffer.valid).sum().item() == 3 + 2  # episodes end at t=2, 6, 10 (env 0) and t=3, 8 (env 1)


@pytest.mark.parametrize("mode, lengths", [(AutoresetMode.SAME_STEP, [3, 3, 3, 3, 4, 4, 4]),
                                           (AutoresetMode.NEXT_STEP, [3, 3, 3, 4, 4])])  # a reset step per end
def test_episode_metrics_per_env(mode, lengths):
    _, _, collector = transitions(mode, 12)
    finished = collector.tracker.finished
    assert sorted(episode.length for episode in finished) == lengths
    assert {episode.success for episode in finished} == {True}
    assert all(episode.episode_return == episode.length for episode in finished)
    sums, counts = collector.tracker.pop()
    assert sums["env/episode_len"] == sum(lengths) and counts["env/success_once"] == len(lengths)
    assert collector.tracker.finished == []


def test_bootstrap_needs_a_critic():
    class NoCritic(ValueIsTenTimesObs):
        has_critic = False

    envs = SyncVectorEnv([lambda: Counter(True)], autoreset_mode=AutoresetMode.SAME_STEP)
    with pytest.raises(ValueError, match="critic"):
        RolloutCollector(envs, NoCritic(), RolloutBuffer(2, 1), 0.9, 0.9)


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
@pytest.mark.parametrize("num_envs", [1, 3])
def test_episode_runner_plays_every_spec_once_with_its_seed(num_envs, mode):
    class SeededLength(Counter):
        """Terminates after 1 + seed % 4 steps, so the seed is visible in the episode length."""

        def reset(self, *, seed=None, options=None):
            if seed is not None:
                self.length = 1 + seed % 4
            return super().reset(seed=seed, options=options)

        def step(self, action):
            obs, reward, _, _, info = super().step(action)
            return obs, reward, self.t >= self.length, False, info

    envs = SyncVectorEnv([lambda: SeededLength(True) for _ in range(num_envs)], autoreset_mode=mode)
    specs = [EpisodeSpec(seed=s) for s in (0, 1, 2, 3, 5, 7, 11)]
    steps = []
    results = EpisodeRunner(envs, ValueIsTenTimesObs()).run(specs, recorder=lambda *step: steps.append(step))
    assert [r.index for r in results] == list(range(len(specs)))
    assert [r.length for r in results] == [1 + s.seed % 4 for s in specs]
    assert [r.success for r in results] == [1 + s.seed % 4 >= 3 for s in specs]
    recorded = sum(int((jobs >= 0).sum()) for *_, jobs in steps)
    assert recorded == sum(r.length for r in results)


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_bootstrap_terminated_option_bootstraps_terminations_too(mode):
    envs = SyncVectorEnv([lambda: Counter(True)], autoreset_mode=mode)
    buffer = RolloutBuffer(4, 1)
    collector = RolloutCollector(envs, ValueIsTenTimesObs(), buffer, GAMMA, 1.0, bootstrap_terminated=True)
    collector.reset([0])
    collector.collect()
    assert buffer.rewards[:3, 0].tolist() == [1, 1, 1 + GAMMA * 30]  # V(final obs = 3) = 30
