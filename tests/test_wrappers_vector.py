"""make_vec on real simulators: seeds, SAME_STEP auto-reset, episode metrics, wrappers inside
sub-envs (cameras, video), and a killed worker process (clear error, no hang).

ManiSkill state (fast physics) drives the async tests; LIBERO (fast rendering on CPU) the image ones. The last
block checks vla_gym's own vector envs against gymnasium's SyncVectorEnv on CartPole, the gymnasium pin in setup.py
and that vla_gym/vector uses gymnasium's public API only.
"""
import ast
import functools
import os
import pathlib
import re
import signal

import gymnasium as gym
import imageio.v2 as imageio
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import vla_gym
from vla_gym.core.registry import UnknownEnvError
from vla_gym.vector.envs import VLAAsyncVectorEnv, VLASyncVectorEnv, WorkerCrashedError
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
    with pytest.raises(ValueError, match="unknown wrapper 'Chunks'.*ActionChunk, ActionSubset, EpisodeMetrics"):
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


# --------------------------------------------------------------------- vla_gym's own vector envs, no simulator
def cartpoles(n: int = 3) -> list:
    return [functools.partial(gym.make, "CartPole-v1")] * n


@pytest.mark.quick
def test_installed_gymnasium_is_inside_the_setup_pin():
    """setup.py pins gymnasium to the range CI tests; the vector envs run on the installed release (the newest)."""
    from packaging.requirements import Requirement

    setup_py = (pathlib.Path(__file__).resolve().parents[1] / "setup.py").read_text()
    [spec] = re.findall(r'"(gymnasium[<>=!~][^"]*)"', setup_py)
    requirement = Requirement(spec)
    assert requirement.specifier.contains(gym.__version__), (spec, gym.__version__)
    assert not requirement.specifier.contains("1.0.0") and not requirement.specifier.contains("2.0.0")


@pytest.mark.quick
def test_the_vector_modules_use_gymnasium_public_api_only():
    """No gymnasium internals (AsyncState, pipes, _add_info, ...): imports only from gymnasium's public modules, of
    public names, and no private attribute of gymnasium's classes or of multiprocessing's Process."""
    folder = pathlib.Path(vla_gym.__file__).parent / "vector"
    public = {"gymnasium", "gymnasium.spaces", "gymnasium.error", "gymnasium.vector", "gymnasium.vector.utils"}
    for path in sorted(folder.glob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gymnasium"):
                assert node.module in public, (path.name, node.module)
                assert not any(alias.name.startswith("_") for alias in node.names), (path.name, node.module)
        for private in ("parent_pipes", "_raise_if_errors", "AsyncState", "_add_info", "_assert_is_running",
                        "_check_spaces", "reset-noop", "_target", "_args", "error_queue", "_poll_pipe_envs"):
            assert private not in source, (path.name, private)


@pytest.mark.quick
@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
@pytest.mark.parametrize("kind", ["sync", "async", "async-pipes"])
def test_vla_gym_vector_envs_step_as_gymnasiums_own(kind, mode):
    """Same observations, rewards, ends, autoresets (final_obs / final_info) and info layout as gymnasium's
    SyncVectorEnv, in both autoreset modes, with and without shared memory; a VectorEnv with the metadata."""
    if kind == "sync":
        envs = VLASyncVectorEnv(cartpoles(), autoreset_mode=mode)
    else:
        envs = VLAAsyncVectorEnv(cartpoles(), autoreset_mode=mode, context="fork", shared_memory=kind == "async")
    reference = gym.vector.SyncVectorEnv(cartpoles(), autoreset_mode=mode)
    try:
        assert isinstance(envs, gym.vector.VectorEnv) and envs.metadata["autoreset_mode"] == mode
        assert envs.observation_space == reference.observation_space and envs.action_space == reference.action_space
        assert envs.single_observation_space == reference.single_observation_space and envs.num_envs == 3
        np.testing.assert_array_equal(envs.reset(seed=3)[0], reference.reset(seed=3)[0])
        rng, ends = np.random.default_rng(0), 0
        for _ in range(80):
            actions = rng.integers(0, 2, 3)
            got, expected = envs.step(actions), reference.step(actions)
            for one, two in zip(got[:4], expected[:4]):
                np.testing.assert_array_equal(one, two)
            assert got[4].keys() == expected[4].keys()
            for i in np.flatnonzero(expected[4].get("_final_obs", ())):
                np.testing.assert_array_equal(got[4]["final_obs"][i], expected[4]["final_obs"][i])
                assert got[4]["final_info"].keys() == expected[4]["final_info"].keys()
            ends += int((expected[2] | expected[3]).sum())
        assert ends
        # a masked reset: only sub-env 1, the others go on (a pending NEXT_STEP autoreset of sub-env 1 is dropped)
        mask = np.array([False, True, False])
        np.testing.assert_array_equal(envs.reset(seed=[None, 9, None], options={"reset_mask": mask})[0],
                                      reference.reset(seed=[None, 9, None], options={"reset_mask": mask.copy()})[0])
        assert envs.get_attr("spec")[0].id == "CartPole-v1" and envs.call("get_wrapper_attr", "length") == (0.5,) * 3
    finally:
        envs.close()
        reference.close()
    assert envs.closed


class _Talker(gym.Env):
    """A plain ``spaces.Text`` observation that changes every step (not vla_gym's InstructionText)."""

    observation_space = gym.spaces.Dict({"instruction": gym.spaces.Text(16, charset="aeprst 0123456789"),
                                         "t": gym.spaces.Box(0, 99, (1,))})
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {"instruction": "start", "t": np.zeros(1, np.float32)}, {}

    def step(self, action):
        self.t += 1
        return {"instruction": f"step {self.t}", "t": np.full(1, self.t, np.float32)}, 0.0, False, False, {}


@pytest.mark.quick
def test_text_observations_come_back_fresh_through_shared_memory():
    envs = VLAAsyncVectorEnv([_Talker] * 2, context="fork")
    try:
        assert envs.shared_memory and envs.reset(seed=0)[0]["instruction"] == ("start", "start")
        envs.step([0, 1])
        obs = envs.step([0, 1])[0]
        assert obs["instruction"] == ("step 2", "step 2") and obs["t"].tolist() == [[2.0], [2.0]]
        envs.step_rows_async([1], np.array([0]))
        assert envs.step_rows_wait([1])[0]["instruction"] == ("step 3",)
    finally:
        envs.close()
