"""ActionChunk, EpisodeMetrics, MultiCamera and RecordEpisodeVideo on the real LIBERO simulator.

One LIBERO env (64x64 images, 10-step episodes) is built once for the module (~10-15 s) and
re-wrapped by each test; wrappers are never closed here so the shared env stays usable.
"""
import os

import gymnasium as gym
import imageio.v2 as imageio
import numpy as np
import pytest

from vla_gym.wrappers import ActionChunk, EpisodeMetrics, MultiCamera, RecordEpisodeVideo, SB3Compat, finished_episodes

pytest.importorskip("libero.libero", reason='LIBERO is not installed: pip install -e ".[libero]"')

SIZE, LIMIT, K = 64, 10, 4


@pytest.fixture(scope="module")
def base():
    from vla_gym.backends.libero.env import LiberoEnv

    env = LiberoEnv("libero_10", task_id=0, image_size=SIZE, max_episode_steps=LIMIT)
    env.render_calls = 0
    render = env.backend.render

    def counting_render():  # the real render, counted
        env.render_calls += 1
        return render()

    env.backend.render = counting_render
    yield env
    env.close()


def small_actions(n, seed=0):
    actions = np.random.default_rng(seed).uniform(-0.3, 0.3, size=(n, 7))
    actions[:, -1] = -1.0
    return actions


# --------------------------------------------------------------------------------------- ActionChunk
def test_chunk_renders_once_and_reports_sub_steps(base):
    env = ActionChunk(base, K)
    assert env.action_space.shape == (K, 7) and env.metadata["render_fps"] == 20 / K
    env.reset(seed=0)
    calls = base.render_calls
    obs, reward, terminated, truncated, info = env.step(small_actions(K))
    assert base.render_calls == calls + 1
    assert info["chunk_steps"] == K and info["elapsed_steps"] == K and info["observed"] is True
    assert info["chunk_rewards"].shape == (K,) and reward == pytest.approx(info["chunk_rewards"].sum())
    assert not terminated and not truncated
    assert env.observation_space.contains(obs)


def test_chunk_equals_the_same_actions_stepped_one_by_one(base):
    actions = small_actions(K, seed=1)
    base.reset(seed=3)
    for action in actions:
        single_obs, *_ = base.step(action)
    env = ActionChunk(base, K)
    env.reset(seed=3)
    chunk_obs, *_ = env.step(actions)
    assert np.allclose(single_obs["state"], chunk_obs["state"], atol=1e-6)
    assert np.array_equal(single_obs["images"]["main"], chunk_obs["images"]["main"])


def test_chunk_stops_at_truncation_and_renders_the_final_observation(base):
    env = ActionChunk(base, K)
    env.reset(seed=0)
    env.step(small_actions(K))
    env.step(small_actions(K))                       # 8 of 10 steps
    calls = base.render_calls
    obs, _, _, truncated, info = env.step(small_actions(K))
    assert truncated and info["chunk_steps"] == LIMIT - 2 * K and info["elapsed_steps"] == LIMIT
    assert np.all(info["chunk_rewards"][LIMIT - 2 * K:] == 0)
    assert info["observed"] is True and base.render_calls == calls + 1
    assert np.array_equal(obs["images"]["wrist"], base.backend.render()["wrist"])  # fresh, not stale


def test_shorter_chunk_and_errors(base):
    env = ActionChunk(base, K)
    env.reset(seed=0)
    *_, info = env.step(small_actions(2))
    assert info["chunk_steps"] == 2 and info["elapsed_steps"] == 2
    with pytest.raises(ValueError, match=r"shape \(k, 7\).*action\[None\]"):
        env.step(np.zeros(7))
    with pytest.raises(ValueError, match="1 <= k <= 4"):
        env.step(np.zeros((K + 1, 7)))
    with pytest.raises(ValueError, match="positive"):
        ActionChunk(base, 0)


def test_chunk_needs_a_vla_env():
    with pytest.raises(TypeError, match="VLAEnv"):
        ActionChunk(gym.make("CartPole-v1").unwrapped, K)


class CountSteps(gym.Wrapper):
    """A plain wrapper placed below ActionChunk: records every step it passes on and whether it was rendered."""

    def __init__(self, env):
        super().__init__(env)
        self.actions, self.observed, self.images = [], [], []

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.actions.append(np.asarray(action))
        self.observed.append(info["observed"])
        self.images.append(obs["images"]["main"])
        return obs, reward, terminated, truncated, info


def test_wrapper_below_the_chunk_sees_every_sub_step_and_the_camera_renders_once(base):
    actions = small_actions(2 * K, seed=2)
    base.reset(seed=5)
    by_hand = [base.step(action) for action in actions]      # every step rendered
    counting = CountSteps(base)
    env = ActionChunk(counting, K)
    env.reset(seed=5)
    calls = base.render_calls
    for c in range(2):
        obs, reward, terminated, truncated, info = env.step(actions[c * K:(c + 1) * K])
        hand_obs, *_, hand_info = by_hand[(c + 1) * K - 1]
        assert np.allclose(obs["state"], hand_obs["state"], atol=1e-6)
        assert np.array_equal(obs["images"]["main"], hand_obs["images"]["main"])
        assert reward == pytest.approx(sum(step[1] for step in by_hand[c * K:(c + 1) * K]))
        assert info["elapsed_steps"] == hand_info["elapsed_steps"] == (c + 1) * K and not (terminated or truncated)
    assert base.render_calls == calls + 2                     # one render per chunk
    assert np.array_equal(np.stack(counting.actions), actions)
    assert counting.observed == ([False] * (K - 1) + [True]) * 2
    # a skipped step repeats the last rendered images in new arrays: no two observations share an object
    assert not any(np.shares_memory(a, b) for a, b in zip(counting.images, counting.images[1:]))


def test_time_limit_below_the_chunk_counts_sub_steps(base):
    counting = CountSteps(base)
    env = ActionChunk(gym.wrappers.TimeLimit(counting, max_episode_steps=K + 2), K)
    env.reset(seed=0)
    env.step(small_actions(K))
    calls = base.render_calls
    obs, _, _, truncated, info = env.step(small_actions(K))  # TimeLimit ends it after 2 of the 4 sub-steps
    assert truncated and info["chunk_steps"] == 2 and info["elapsed_steps"] == K + 2
    assert counting.observed[-1] is False                     # the VLAEnv skipped that render ...
    assert info["observed"] is True and base.render_calls == calls + 1  # ... so ActionChunk rendered once
    assert np.array_equal(obs["images"]["wrist"], base.backend.render()["wrist"])  # fresh, not stale


def test_perturbations_below_the_chunk_reach_the_fresh_final_observation(base):
    """Perturb below ActionChunk, where ``eval.py --ood`` puts it: paraphrase changes the observation space and
    image noise the pixels; both reach the observation ActionChunk renders when a chunk ends on a skipped step."""
    from vla_gym.wrappers import Perturb

    plain = base.reset(seed=0)[0]["instruction"]
    paraphrase = Perturb(base, "paraphrase")
    noisy = Perturb(paraphrase, "image_noise", strength=0.2)
    env = ActionChunk(gym.wrappers.TimeLimit(noisy, K + 2), K)
    try:
        obs, _ = env.reset(seed=0)
        assert obs["instruction"] != plain
        env.step(small_actions(K))
        final, _, _, truncated, info = env.step(small_actions(K))
        assert truncated and info["observed"] is True and final["instruction"] == obs["instruction"]
        fresh = base.backend.render()["wrist"].astype(int)
        difference = np.abs(final["images"]["wrist"].astype(int) - fresh).mean()
        assert 5 < difference < 60  # the fresh render, with this episode's noise on it
    finally:
        noisy.detach()
        paraphrase.detach()


def test_fresh_final_observation_passes_through_observation_wrappers_below(base):
    from vla_gym.core.video import resize_image

    env = ActionChunk(gym.wrappers.TimeLimit(MultiCamera(base, cameras=["wrist"], size=32), K + 2), K)
    env.reset(seed=0)
    env.step(small_actions(K))
    obs, _, _, truncated, _ = env.step(small_actions(K))
    assert truncated and list(obs["images"]) == ["wrist"]
    assert np.array_equal(obs["images"]["wrist"], resize_image(base.backend.render()["wrist"], (32, 32)))


def test_wrapper_below_that_changes_observations_must_be_an_observation_wrapper(base):
    class StateOnly(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = env.observation_space["state"]

    with pytest.raises(ValueError, match="on top of ActionChunk"):
        ActionChunk(StateOnly(base), K)


# ------------------------------------------------------------------------------------ EpisodeMetrics
def test_episode_metrics_count_env_steps_through_chunks(base):
    env = EpisodeMetrics(ActionChunk(base, K))
    env.reset(seed=0)
    total, steps = 0.0, 0
    while True:
        _, reward, terminated, truncated, info = env.step(small_actions(K))
        total += reward
        steps += 1
        if terminated or truncated:
            break
        assert "episode_metrics" not in info
    metrics = info["episode_metrics"]
    assert steps == 3 and metrics["env/episode_len"] == LIMIT
    assert metrics["env/return"] == pytest.approx(total)
    assert metrics["env/reward"] == pytest.approx(total / LIMIT)
    assert metrics["env/success_once"] == 0.0
    assert metrics["task_id"] == 0 and metrics["task_name"] == base.tasks[0].name
    assert finished_episodes(info) == [dict(metrics, env_index=0)]


# --------------------------------------------------------------------------------------- MultiCamera
def test_multi_camera_select_resize_chw(base):
    env = MultiCamera(base, cameras=["wrist"], size=(32, 48), channels_first=True)
    obs, _ = env.reset(seed=0)
    assert list(obs["images"]) == ["wrist"] and obs["images"]["wrist"].shape == (3, 32, 48)
    assert env.observation_space.contains(obs) and obs["instruction"] == base.instruction
    with pytest.raises(ValueError, match=r"renders \['main', 'wrist'\]"):
        MultiCamera(base, cameras=["left_wrist"])


def test_multi_camera_vla_layout(base):
    env = MultiCamera(base, layout="vla")
    obs, _ = env.reset(seed=0)
    assert obs["images"]["main"].shape == (3, SIZE, SIZE) and obs["images"]["wrists"].shape == (1, 3, SIZE, SIZE)
    native = base.backend.render()
    assert np.array_equal(obs["images"]["main"], native["main"].transpose(2, 0, 1))
    assert np.array_equal(obs["images"]["wrists"][0], native["wrist"].transpose(2, 0, 1))
    assert env.observation_space.contains(obs)
    main_only = MultiCamera(base, cameras=["main"], layout="vla", size=32, channels_first=False)
    assert set(main_only.observation_space["images"].spaces) == {"main"}
    assert main_only.observation_space["images"]["main"].shape == (32, 32, 3)


# ------------------------------------------------------------------------------------------ SB3Compat
def test_sb3_dict_of_boxes_with_images_passes_check_env(base):
    checker = pytest.importorskip("stable_baselines3.common.env_checker", reason='pip install -e ".[sb3]"')
    env = SB3Compat(base, instruction="hash")
    assert set(env.observation_space.spaces) == {"state", "main", "wrist", "instruction"}
    checker.check_env(env)
    obs, _ = env.reset(seed=0)
    assert obs["main"].shape == (SIZE, SIZE, 3) and obs["main"].dtype == np.uint8


# ------------------------------------------------------------------------------------ RecordEpisodeVideo
def read_video(path):
    reader = imageio.get_reader(path)
    frames = [frame for frame in reader]
    fps = reader.get_meta_data()["fps"]
    reader.close()
    return frames, fps


def test_video_one_file_per_episode_from_observations(base, tmp_path):
    env = RecordEpisodeVideo(ActionChunk(base, 5), str(tmp_path))
    env.reset(seed=0)
    calls = base.render_calls
    env.step(small_actions(5))
    assert base.render_calls == calls + 1          # no second render for the video
    # mid-episode: at most the hidden temporary file (ffmpeg creates it lazily), never the final name
    assert all(name.startswith(".") and name.endswith(".partial.mp4") for name in os.listdir(tmp_path))
    *_, truncated, info = env.step(small_actions(5))
    assert truncated and info["video_path"] == str(tmp_path / "episode-00000.mp4")
    assert os.listdir(tmp_path) == ["episode-00000.mp4"]
    frames, fps = read_video(info["video_path"])
    assert len(frames) == 1 + LIMIT // 5            # reset frame + one per chunk
    assert frames[0].shape == (448, 672, 3) and fps == pytest.approx(20 / 5)


def test_video_every_n_episodes(base, tmp_path):
    env = RecordEpisodeVideo(ActionChunk(base, 5), str(tmp_path), every_n_episodes=2, env_index=3)
    for _ in range(3):
        env.reset(seed=0)
        env.step(small_actions(5))
    env._finish()  # what close() does, without closing the shared env
    assert sorted(os.listdir(tmp_path)) == ["episode-env3-00000.mp4", "episode-env3-00002.mp4"]
    frames, _ = read_video(str(tmp_path / "episode-env3-00002.mp4"))
    assert len(frames) == 2  # cut short by close(): saved as far as it went
