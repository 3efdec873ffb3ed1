"""make_vec on real simulators: seeds, SAME_STEP auto-reset, episode metrics, wrappers inside
sub-envs (cameras, video), and a killed worker process (clear error, no hang).

ManiSkill state (fast physics) drives the async tests; LIBERO (fast rendering on CPU) the image ones.
"""
import functools
import os
import signal

import imageio.v2 as imageio
import numpy as np
import pytest

import vla_gym
from vla_gym.core.registry import UnknownEnvError
from vla_gym.vector.envs import WorkerCrashedError
from vla_gym.wrappers import EpisodeMetrics, MultiCamera, RecordEpisodeVideo, finished_episodes

#: state-only ManiSkill envs
MANISKILL_STATE = {"obs_mode": "state"}


@pytest.fixture(scope="module")
def async_envs():
    pytest.importorskip("mani_skill", reason='ManiSkill is not installed: pip install -e ".[maniskill]"')
    envs = vla_gym.make_vec("VLA/ManiSkill-PickCube-v0", 2, wrappers=[EpisodeMetrics], **MANISKILL_STATE)
    yield envs
    envs.close()


def test_per_sub_env_seeds(async_envs):
    first, _ = async_envs.reset(seed=7)
    again, _ = async_envs.reset(seed=7)
    other, _ = async_envs.reset(seed=8)
    assert np.array_equal(first["state"], again["state"])
    assert not np.allclose(first["state"][0], first["state"][1])     # sub-envs get seeds 7 and 8
    assert np.allclose(other["state"][0], first["state"][1])         # so seed 8 + 0 == seed 7 + 1
    assert first["instruction"] == ("pick up the red cube and move it to the green sphere",) * 2


def test_same_step_autoreset_and_finished_episodes(async_envs):
    obs, _ = async_envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for step in range(1, 200):
        obs, _, terminated, truncated, infos = async_envs.step(rng.uniform(-1, 1, (2, 7)))
        done = terminated | truncated
        if done.any():
            break
    episodes = finished_episodes(infos)
    assert [episode["env_index"] for episode in episodes] == list(np.flatnonzero(done))
    for episode in episodes:
        index = episode["env_index"]
        assert episode["env/episode_len"] == step and episode["task_name"] == "PickCube"
        assert infos["_final_obs"][index]
        final_state = infos["final_obs"][index]["state"]
        assert final_state.shape == obs["state"][index].shape and not np.allclose(final_state, obs["state"][index])
        assert infos["elapsed_steps"][index] == 0                   # the top level is the new episode's reset info


@pytest.mark.timeout(60)
def test_killed_worker_raises_naming_the_sub_env(async_envs):
    async_envs.reset(seed=0)
    os.kill(async_envs.processes[1].pid, signal.SIGKILL)
    with pytest.raises(WorkerCrashedError, match=r"sub-env 1 .*task 'PickCube'.*SIGKILL.*during step\(\)"):
        async_envs.step(np.zeros((2, 7)))
    assert async_envs.closed and not any(process.is_alive() for process in async_envs.processes)


def test_make_vec_argument_errors():
    with pytest.raises(UnknownEnvError, match="Did you mean"):
        vla_gym.make_vec("VLA/Libero10-v1", 2)
    with pytest.raises(ValueError, match="vectorization"):
        vla_gym.make_vec("VLA/Libero10-v0", 2, vectorization="threads")
    with pytest.raises(ValueError, match="one dict per sub-env"):
        vla_gym.make_vec("VLA/Libero10-v0", 2, per_env_kwargs=[{}])
    with pytest.raises(ValueError, match="unknown wrapper 'Chunks'.*ActionChunk, EpisodeMetrics"):
        vla_gym.make_vec("VLA/Libero10-v0", 2, wrappers=["Chunks"])
    with pytest.raises(ValueError, match="GPU backend"):
        vla_gym.make_vec("VLA/ManiSkill-PickCube-v0", 2, device="cuda", wrappers=[EpisodeMetrics])


def test_sync_libero_cameras_and_video_per_sub_env(tmp_path):
    pytest.importorskip("libero.libero", reason='LIBERO is not installed: pip install -e ".[libero]"')
    wrappers = [
        {"name": "ActionChunk", "kwargs": {"chunk_size": 4}},  # the form configs use
        functools.partial(RecordEpisodeVideo, video_folder=str(tmp_path)),
        functools.partial(MultiCamera, layout="vla", size=224),
    ]
    envs = vla_gym.make_vec("VLA/Libero10-v0", 2, vectorization="sync", wrappers=wrappers, image_size=64,
                            per_env_kwargs=[{"task_id": 0}, {"task_id": 1}])
    try:
        obs, infos = envs.reset(seed=0)
        assert obs["images"]["main"].shape == (2, 3, 224, 224) and obs["images"]["wrists"].shape == (2, 1, 3, 224, 224)
        assert list(infos["task_id"]) == [0, 1]
        *_, infos = envs.step(np.zeros((2, 4, 7)))
        assert list(infos["chunk_steps"]) == [4, 4] and infos["chunk_rewards"].shape == (2, 4)
    finally:
        envs.close()  # ends the episodes: each sub-env saves its video
    assert sorted(os.listdir(tmp_path)) == ["episode-env0-00000.mp4", "episode-env1-00000.mp4"]
    reader = imageio.get_reader(str(tmp_path / "episode-env1-00000.mp4"))
    frames = [frame for frame in reader]
    assert len(frames) == 2 and frames[0].shape == (448, 672, 3)


def test_async_libero_resets_each_sub_env_into_its_own_episode_in_one_call():
    """``reset(options={"per_env": [...]})``: one call pins each sub-env's task and initial state (the episode
    runner's refills), a masked call resets only the masked sub-envs; ``keep_task`` holds the task at autoresets."""
    pytest.importorskip("libero.libero", reason='LIBERO is not installed: pip install -e ".[libero]"')
    envs = vla_gym.make_vec("VLA/LiberoObject-v0", 2, cameras=["main"], image_size=32, max_episode_steps=1)
    try:
        obs, infos = envs.reset(seed=[0, 1], options={"per_env": [
            {"task_id": 3, "init_state_id": 7, "keep_task": True}, {"task_id": 5, "init_state_id": 2}]})
        assert list(infos["task_id"]) == [3, 5] and list(infos["init_state_id"]) == [7, 2]
        states = obs["state"].copy()
        obs, infos = envs.reset(seed=[None, 9], options={
            "per_env": [None, {"task_id": 5, "init_state_id": 2}], "reset_mask": np.array([False, True])})
        assert list(infos["_task_id"]) == [False, True] and infos["task_id"][1] == 5
        np.testing.assert_allclose(obs["state"], states, atol=1e-6)  # same (task, init state): same start
        *_, truncated, infos = envs.step(np.zeros((2, 7)))  # 1-step episodes: both autoreset
        assert truncated.all() and infos["task_id"][0] == 3  # keep_task: sub-env 0 stays on its task
    finally:
        envs.close()
