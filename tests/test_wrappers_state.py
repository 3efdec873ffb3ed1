"""Wrappers on real state-only ManiSkill envs: EpisodeMetrics success with a scripted pusher, SB3Compat
(Stable-Baselines3's check_env and a short PPO run; 2,000 steps with ``-m slow``), and the image wrappers refusing a
state-only env. One PickCube and one PushCube env serve the whole module.
"""
import gymnasium as gym
import numpy as np
import pytest

import vla_gym  # noqa: F401  (registers the ids)
from vla_gym.wrappers import EpisodeMetrics, MultiCamera, RecordEpisodeVideo, SB3Compat, summarize_episodes

pytest.importorskip("mani_skill", reason='ManiSkill is not installed: pip install -e ".[maniskill]"')

#: state-only ManiSkill envs
STATE = {"obs_mode": "state"}


@pytest.fixture(scope="module")
def state_env():
    env = SB3Compat(EpisodeMetrics(gym.make("VLA/ManiSkill-PickCube-v0", **STATE)))
    yield env
    env.close()


@pytest.fixture(scope="module")
def pushcube():
    """One state-only PushCube env for the module; each test wraps it anew (a wrapper's state starts at its reset)."""
    env = gym.make("VLA/ManiSkill-PushCube-v0", **STATE)
    yield env
    env.close()


def push_cube(state):
    """Scripted PushCube policy on ManiSkill's state (tcp pose 18:25, goal 25:28, cube pose 28:35):
    lower the closed gripper behind the cube, then push it along +x to the goal."""
    tcp, goal, cube = state[18:21], state[25:28], state[28:31]
    if tcp[2] > 0.03 or abs(tcp[1] - cube[1]) > 0.01:
        target = np.array([cube[0] - 0.05, cube[1], 0.02])
    else:
        target = np.array([goal[0], cube[1], 0.02])
    return np.concatenate([np.clip((target - tcp) / 0.1, -1, 1), np.zeros(3), [1.0]])


def test_episode_metrics_success_once_and_per_task_summary(pushcube):
    env = EpisodeMetrics(pushcube)
    episodes, steps = [], []
    # the scripted pusher solves seed 0 in about 8 steps; standing still never does (the whole 50-step episode)
    for seed, policy in ((0, push_cube), (3, lambda state: np.zeros(7))):
        obs, _ = env.reset(seed=seed)
        terminated = truncated = False
        total = 0.0
        while not (terminated or truncated):
            obs, reward, terminated, truncated, info = env.step(policy(obs["state"]))
            total += reward
        episodes.append(info["episode_metrics"])
        steps.append(info["elapsed_steps"])
        assert info["episode_metrics"]["env/return"] == pytest.approx(total)
    solved, missed = episodes
    assert solved["env/success_once"] == 1.0 and solved["env/episode_len"] == steps[0] < 20
    assert missed["env/success_once"] == 0.0 and missed["env/episode_len"] == steps[1] == 50
    summary = summarize_episodes(episodes)
    assert summary["env/success_once"] == 0.5 and summary["env/success_once/PushCube"] == 0.5
    assert summary["env/episode_len"] == (steps[0] + 50) / 2 and summary["env/episodes"] == 2.0


def test_image_wrappers_refuse_a_state_only_env(state_env, tmp_path):
    with pytest.raises(ValueError, match="camera images"):
        RecordEpisodeVideo(state_env.env, str(tmp_path))
    with pytest.raises(ValueError, match="camera images"):
        MultiCamera(state_env.env)


# ---------------------------------------------------------------------------------- Stable-Baselines3
@pytest.fixture(scope="module")
def check_env():
    pytest.importorskip("stable_baselines3", reason='pip install -e ".[sb3]"')
    from stable_baselines3.common.env_checker import check_env

    return check_env


def test_state_only_env_is_a_box_and_passes_check_env(state_env, check_env):
    assert isinstance(state_env.observation_space, gym.spaces.Box)
    check_env(state_env)


def test_hashed_instruction_gives_a_dict_of_boxes(state_env, check_env):
    env = SB3Compat(state_env.env, instruction="hash", instruction_dim=16)
    assert set(env.observation_space.spaces) == {"state", "instruction"}
    check_env(env)
    obs, _ = env.reset(seed=0)
    assert obs["instruction"].shape == (16,) and np.isclose(np.linalg.norm(obs["instruction"]), 1.0)


@pytest.mark.parametrize("steps, n_steps", [(200, 100), pytest.param(2000, 500, marks=pytest.mark.slow)])
def test_ppo_trains(state_env, check_env, steps, n_steps):
    """SB3's PPO on the wrapped env: rollouts, updates and SB3's Monitor; 2 updates (2,000 steps with ``-m slow``)."""
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", state_env, n_steps=n_steps, batch_size=100, n_epochs=2, seed=0, device="cpu")
    model.learn(total_timesteps=steps)
    assert model.num_timesteps >= steps and model._n_updates == 2 * (steps // n_steps)  # n_epochs per rollout
    assert len(model.ep_info_buffer) >= steps // 50 - 1  # SB3's Monitor saw the 50-step episodes end


def test_wrappers_record_their_arguments_so_the_spec_rebuilds_the_stack():
    """gymnasium's convention: ``env.spec`` lists each wrapper with its arguments; ``gym.make(spec)`` rebuilds it."""
    from vla_gym.wrappers import ActionChunk

    env = EpisodeMetrics(ActionChunk(gym.make("VLA/ManiSkill-PushCube-v0", **STATE), chunk_size=4))
    try:
        spec = env.spec
        assert [(w.name, w.kwargs) for w in spec.additional_wrappers] == [("ActionChunk", {"chunk_size": 4}),
                                                                          ("EpisodeMetrics", {})]
        rebuilt = gym.make(spec)
        try:
            assert type(rebuilt) is EpisodeMetrics and isinstance(rebuilt.env, ActionChunk)
            assert rebuilt.env.chunk_size == 4 and rebuilt.action_space.shape == (4, 7)
        finally:
            rebuilt.close()
    finally:
        env.close()


def test_episode_statistics_in_gymnasium_record_episode_statistics_form(pushcube):
    """``info["episode"]`` carries r / l / t as gymnasium's RecordEpisodeStatistics does, beside our keys."""
    env = EpisodeMetrics(pushcube)
    env.reset(seed=3)
    total, steps, info = 0.0, 0, {}
    while "episode" not in info:
        _, reward, _, _, info = env.step(np.zeros(7))
        total, steps = total + reward, steps + 1
    assert set(info["episode"]) == {"r", "l", "t"}
    assert info["episode"]["r"] == pytest.approx(total) and info["episode"]["l"] == steps
    assert info["episode"]["t"] >= 0 and info["episode_metrics"]["env/episode_len"] == steps


def test_action_subset_lets_an_xyz_policy_push_with_the_fingers_held_closed(pushcube):
    """The main job's ActionSubset: the scripted pusher's xyz alone solves seed 0; the env gets the held rotation and
    gripper (the fingers close); the spec rebuilds it and a wrong shape names the expected one."""
    from vla_gym.wrappers import ActionSubset

    env = ActionSubset(pushcube, dims=[0, 1, 2], hold=[0, 0, 0, 0, 0, 0, 1])
    assert env.action_space.shape == (3,)
    assert env.action(np.array([0.5, -0.5, 1.0])).tolist() == [0.5, -0.5, 1.0, 0, 0, 0, 1]
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        obs, _, terminated, _, info = env.step(push_cube(obs["state"])[:3])
        if terminated:
            break
    assert info["success"]
    fingers = pushcube.unwrapped.backend.maniskill_env.agent.robot.get_qpos()[0, -2:]
    assert float(fingers.max()) < 0.01  # held at +1 (close): the fingers are one solid pusher, not 4 cm open
    assert [(w.name, w.kwargs) for w in env.spec.additional_wrappers] == [
        ("ActionSubset", {"dims": [0, 1, 2], "hold": [0, 0, 0, 0, 0, 0, 1]})]
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        env.step(np.zeros(7))
    with pytest.raises(ValueError, match="distinct indices"):
        ActionSubset(pushcube, dims=[0, 0])
    with pytest.raises(ValueError, match="full 7-D action"):
        ActionSubset(pushcube, dims=[0, 1, 2], hold=[0, 0, 1])
    with pytest.raises(ValueError, match="outside the action space"):
        ActionSubset(pushcube, dims=[0], hold=[0, 0, 0, 0, 0, 0, 2])
