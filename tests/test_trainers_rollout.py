"""PPO's rollout across auto-resets: terminations are not bootstrapped, truncations are, in both autoreset modes;
the episode runner's specs, and its per-episode (task, init state) pins through ``reset(options=...)`` alone."""
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from vla_gym.backends.base import Backend, TaskSpec
from vla_gym.core.env import VLAEnv
from vla_gym.trainers.policies import make_policy
from vla_gym.trainers.policies.base import Policy
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.rollout.collector import RolloutCollector
from vla_gym.trainers.rollout.episode_plan import EpisodeSpec
from vla_gym.trainers.rollout.episode_runner import EpisodeRunner
from vla_gym.vector.envs import VLAAsyncVectorEnv, VLASyncVectorEnv

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


# ------------------------------------------------------------------ per-env (task, init state) through reset options
TOY_TASKS = [TaskSpec(k, "toy", f"task{k}", f"do task {k}", max_episode_steps=20, num_init_states=5) for k in range(3)]


class ToyBackend(Backend):
    """No simulator: succeeds after ``1 + init_state_id`` steps (the episode length shows the init state)."""

    control_hz, state_dim = 10.0, 2

    def __init__(self):
        super().__init__(camera_roles=(), image_size=(8, 8))
        self.loads: list[int] = []

    def load(self, task):
        self.task = task
        self.loads.append(task.index)

    def reset(self, init_state_id, seed):
        self.init, self.t = init_state_id, 0

    def step(self, action):
        self.t += 1
        return 1.0, self.t >= 1 + self.init

    def state(self):
        return np.array([self.task.index, self.init], np.float32)

    def render(self):
        return {}


def toy_env() -> VLAEnv:
    return VLAEnv(ToyBackend(), TOY_TASKS)


def loads(envs) -> list[list[int]]:
    return [env.unwrapped.backend.loads for env in envs.envs]


@pytest.mark.parametrize("cls", [VLASyncVectorEnv, VLAAsyncVectorEnv])
def test_one_reset_call_pins_each_sub_env_task_and_init_state(cls):
    kwargs = {"context": "fork"} if cls is VLAAsyncVectorEnv else {}  # no simulator: fork is fine
    envs = cls([toy_env] * 3, autoreset_mode=AutoresetMode.SAME_STEP, **kwargs)
    try:
        obs, infos = envs.reset(seed=[10, 11, 12], options={"per_env": [
            {"task_id": 2, "init_state_id": 4}, {"task_id": 0, "init_state_id": 1}, None]})
        assert list(infos["task_id"][:2]) == [2, 0] and list(infos["init_state_id"][:2]) == [4, 1]
        assert infos["init_state_id"][2] == 12 % 5  # no options: the seed picks the init state
        assert obs["state"][:2].tolist() == [[2, 4], [0, 1]]
        # a partial reset: only sub-env 1, to its own episode; the others are not reset
        obs, infos = envs.reset(seed=[None, 3, None], options={
            "per_env": [{"task_id": 1}, {"task_id": 1, "init_state_id": 3}, None],
            "reset_mask": np.array([False, True, False])})
        assert obs["state"].tolist()[:2] == [[2, 4], [1, 3]] and list(infos["_task_id"]) == [False, True, False]
        with pytest.raises(ValueError, match="one options dict"):
            envs.reset(options={"per_env": [{"task_id": 0}]})
    finally:
        envs.close()


def test_keep_task_holds_the_task_across_autoresets_only():
    envs = VLASyncVectorEnv([toy_env] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    envs.reset(seed=[0, 1], options={"per_env": [{"task_id": 2, "init_state_id": 0, "keep_task": True},
                                                 {"task_id": 2, "init_state_id": 0}]})
    tasks = []
    for _ in range(8):  # every step ends both episodes (init state 0: success at once) and autoresets them
        *_, infos = envs.step(np.zeros((2, 7)))
        tasks.append(list(infos["task_id"]))
    assert [row[0] for row in tasks] == [2] * 8 and loads(envs)[0] == [2]  # one scene for all its autoresets
    assert {row[1] for row in tasks} != {2}  # without keep_task an autoreset draws the task
    envs.reset(seed=[5, 6])  # a reset with a seed (or options) ends keep_task
    envs.step(np.zeros((2, 7)))
    assert envs.envs[0].unwrapped._kept_task is None
    envs.close()


@pytest.mark.parametrize("stages", [1, 2])
def test_episode_runner_pins_episodes_through_reset_options_only(monkeypatch, stages):
    """No sub-env attribute is written (set_attr) and each refill of freed envs is one reset call."""
    envs = VLAAsyncVectorEnv([toy_env] * 2, autoreset_mode=AutoresetMode.SAME_STEP, context="fork")
    resets = []
    reset = envs.reset

    def counted_reset(**kwargs):
        resets.append(kwargs["options"])
        return reset(**kwargs)

    def no_set_attr(*args, **kwargs):
        raise AssertionError("the runner writes no sub-env attributes")

    monkeypatch.setattr(envs, "reset", counted_reset)
    monkeypatch.setattr(envs, "set_attr", no_set_attr)
    try:
        policy = make_policy("mlp", envs.single_observation_space, envs.single_action_space, critic=False)
        specs = [EpisodeSpec(seed=s, task_id=t, init_state_id=i)
                 for s, (t, i) in enumerate([(2, 4), (0, 1), (2, 0), (1, 3), (0, 2)])]
        results = EpisodeRunner(envs, policy, stages).run(specs)
        assert [r.spec for r in results] == specs
        assert [(r.task_id, r.length) for r in results] == [(s.task_id, 1 + s.init_state_id) for s in specs]
        assert all("per_env" in options for options in resets) and len(resets) <= len(specs)
        # keep_task: the autoreset at each episode end stays on the loaded task (no scene built for nothing)
        assert [backend.loads for backend in envs.get_attr("backend")] == [[2], [0, 1]]
        assert list(envs.get_attr("task_id")) == [None, None]  # nothing to restore
    finally:
        envs.close()
