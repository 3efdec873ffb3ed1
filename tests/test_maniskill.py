"""The ManiSkill3 backend on the real simulator (SAPIEN, Vulkan; lavapipe on CPU machines).

One images env and one state-only env are shared per module: the first ManiSkill env of a process
takes several seconds (shader compilation), later ones about a second.
"""
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import yaml

import vla_gym
from vla_gym.core import schema
from vla_gym.tasks.maniskill import MULTI_TASK_ID, TABLETOP, TASKS, env_id, task_specs

pytest.importorskip("mani_skill", reason='ManiSkill3 is not installed: pip install -e ".[maniskill]"')

from vla_gym.backends.maniskill import env as maniskill

SIZE = 64  # small images keep the suite fast; 224 is the default and is covered by test_default_size
PICK = env_id("PickCube")
#: the VLAEnv/schema change for camera-less envs (gymnasium rejects an empty Dict space) is requested from
#: the lead; state-only tests run once it is in.
ZERO_CAMERAS = "images" not in schema.observation_space((), (1, 1), 1).spaces
needs_zero_cameras = pytest.mark.skipif(
    not ZERO_CAMERAS, reason="state-only envs need VLAEnv/schema to drop 'images' when there are no cameras"
)


def run_python(code: str, env: dict | None = None) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env,
                            check=False)
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def env():
    env = gym.make(PICK, image_size=SIZE, render_mode="rgb_array")
    yield env
    env.close()


@pytest.fixture(scope="module")
def state_env():
    if not ZERO_CAMERAS:
        pytest.skip("state-only envs need VLAEnv/schema to drop 'images' when there are no cameras")
    env = gym.make(PICK, obs_mode="state")
    yield env
    env.close()


MISSING = "--- making a ManiSkill env without ManiSkill:"


@pytest.fixture(scope="module")
def without_maniskill() -> tuple[list[str], str]:
    """One fresh interpreter: the ids vla_gym registers and whether that imported ManiSkill (or SAPIEN), then what
    making a ManiSkill env says when ManiSkill cannot be imported (its module is then made unimportable)."""
    code = ("import sys, vla_gym\n"
            "print(sorted(i for i in vla_gym.ENTRIES if 'ManiSkill' in i))\n"
            "print('mani_skill' in sys.modules, 'sapien' in sys.modules)\n"
            "sys.modules['mani_skill'] = None\n"
            "import gymnasium as gym\n"
            f"print({MISSING!r})\n"
            "try:\n    gym.make('VLA/ManiSkill-PickCube-v0')\n"
            "except ImportError as e:\n    print(e)\n")
    imported, _, missing = run_python(code).partition(MISSING)
    return imported.strip().splitlines(), missing


# ---------------------------------------------------------------------------------------- catalog
def test_ids_registered_without_importing_maniskill(without_maniskill):
    out = without_maniskill[0]
    assert out[-1] == "False False"
    assert eval(out[-2]) == sorted([env_id(name) for name in TASKS] + [MULTI_TASK_ID])
    assert {"PickCube", "PushCube", "PullCube", "StackCube", "PokeCube", "PlaceSphere", "LiftPegUpright",
            "PegInsertionSide", "PullCubeTool", "PlugCharger", "StackPyramid", "RollBall"} == set(TABLETOP)


def test_every_task_has_an_instruction_and_paraphrases():
    for spec in task_specs(list(TASKS)):
        texts = (spec.instruction, *spec.paraphrases)
        assert len(spec.paraphrases) >= 2 and len(set(texts)) == len(texts)
        assert all(set(text) <= set(schema.INSTRUCTION_CHARSET) for text in texts), spec.name


# ----------------------------------------------------------------------------------- observations
def test_observation_schema(env):
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert env.action_space == gym.spaces.Box(-1, 1, (7,), np.float32)
    assert set(obs["images"]) == {"main", "wrist"}
    for image in obs["images"].values():
        assert image.shape == (SIZE, SIZE, 3) and image.dtype == np.uint8 and image.flags.c_contiguous
        assert image.std() > 10  # a real rendered scene, not a constant frame
    assert not np.array_equal(obs["images"]["main"], obs["images"]["wrist"])
    assert obs["state"].shape == (8,) and obs["state"].dtype == np.float32
    assert obs["instruction"] == "pick up the red cube and move it to the green sphere"
    assert info["success"] is False and info["task_name"] == "PickCube" and info["suite"] == "maniskill"
    assert env.metadata["render_fps"] == 20
    np.testing.assert_array_equal(env.render(), obs["images"]["main"])


def test_main_image_is_right_side_up(env):
    """The base camera looks down at the wooden (red-brown) table: it fills the bottom, not the top."""
    obs, _ = env.reset(seed=0)
    image = obs["images"]["main"].astype(np.float32)
    redness = image[..., 0] - image[..., 2]
    assert redness[-SIZE // 4:].mean() > redness[: SIZE // 8].mean() + 30


def test_state_is_tcp_pose_and_fingers(env):
    obs, _ = env.reset(seed=1)
    agent = env.unwrapped.backend._env.agent
    np.testing.assert_allclose(obs["state"][:3], agent.tcp_pose.p[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(obs["state"][6:], agent.robot.get_qpos()[0, -2:].numpy(), atol=1e-6)
    assert 0 < np.linalg.norm(obs["state"][3:6]) <= np.pi  # axis-angle of the downward-facing gripper


def test_images_are_fresh_copies(env):
    first, _ = env.reset(seed=0)
    second, *_ = env.step(np.zeros(7))
    for role in first["images"]:
        assert not np.shares_memory(first["images"][role], second["images"][role])
    assert not np.shares_memory(first["state"], second["state"])


def test_unobserved_steps_skip_rendering(env, monkeypatch):
    obs, _ = env.reset(seed=0)
    action = np.array([0.5, 0, 0, 0, 0, 0, -1], np.float32)
    monkeypatch.setattr(maniskill, "capture_images", lambda *a: pytest.fail("rendered an unobserved step"))
    blind, _, _, _, info = env.unwrapped.step(action, observe=False)
    monkeypatch.undo()
    assert info["observed"] is False
    assert np.array_equal(blind["images"]["main"], obs["images"]["main"])  # previous frame, not re-rendered,
    assert not np.shares_memory(blind["images"]["main"], obs["images"]["main"])  # in new arrays
    assert not np.array_equal(blind["state"], obs["state"])  # physics moved
    seen, _, _, _, info = env.unwrapped.step(action)
    assert info["observed"] is True and not np.array_equal(seen["images"]["wrist"], obs["images"]["wrist"])


# ----------------------------------------------------------------------------------- actions
def test_gripper_sign_plus_one_closes(env):
    env.reset(seed=0)
    for _ in range(10):
        obs, *_ = env.step(np.array([0, 0, 0, 0, 0, 0, 1.0]))
    closed = obs["state"][6:]
    for _ in range(10):
        obs, *_ = env.step(np.array([0, 0, 0, 0, 0, 0, -1.0]))
    opened = obs["state"][6:]
    assert np.all(closed < 0.005) and np.all(opened > 0.035)  # panda fingers: 0 closed .. 0.04 open


def test_position_action_moves_the_tcp(env):
    obs, _ = env.reset(seed=0)
    start = obs["state"][:3].copy()
    for _ in range(5):
        obs, *_ = env.step(np.array([0, 0, 1.0, 0, 0, 0, -1]))
    assert obs["state"][2] - start[2] > 0.05  # +z moves up (0.1 m per step at most)


def test_bad_actions_leave_env_usable(env):
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(7,\)"):
        env.step(np.zeros(6))
    with pytest.raises(ValueError, match="NaN or inf"):
        env.step(np.array([np.nan, 0, 0, 0, 0, 0, 0]))
    obs, *_ = env.step(np.zeros(7))
    assert np.all(np.isfinite(obs["state"]))


def test_other_control_mode_keeps_maniskill_layout():
    env = gym.make(PICK, control_mode="pd_joint_delta_pos", cameras=("main",), image_size=32)
    assert env.action_space.shape == (8,)  # 7 joints + gripper
    assert env.unwrapped.backend.flip_gripper is False
    obs, _ = env.reset(seed=0)
    for _ in range(10):
        obs, *_ = env.step(np.array([0] * 7 + [1.0]))  # ManiSkill's sign: +1 opens
    assert np.all(obs["state"][6:] > 0.035) and set(obs["images"]) == {"main"}
    env.close()


# ----------------------------------------------------------------------------------- episodes
def test_reset_with_seed_is_repeatable_and_soft(env):
    actions = np.random.default_rng(0).uniform(-1, 1, (3, 7))

    def rollout(seed):
        obs, _ = env.reset(seed=seed)
        frames = [obs]
        frames += [env.step(action)[0] for action in actions]
        return frames

    sim_env = env.unwrapped.backend._env
    first, again, other = rollout(123), rollout(123), rollout(124)
    assert env.unwrapped.backend._env is sim_env, "same-task reset must not rebuild the simulator"
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a["state"], b["state"])
        for role in a["images"]:
            np.testing.assert_array_equal(a["images"][role], b["images"][role])
    assert not np.array_equal(first[0]["images"]["main"], other[0]["images"]["main"])


def test_time_limit_reward_and_sparse_mode():
    env = gym.make(PICK, cameras=("wrist",), image_size=32, reward_mode="sparse", max_episode_steps=3)
    env.reset(seed=0)
    for step in range(3):
        _obs, reward, terminated, truncated, info = env.step(np.zeros(7))
        assert reward == 0.0 and terminated is False and info["success"] is False
        assert truncated is (step == 2)
    env.close()
    dense = gym.make(PICK, cameras=("wrist",), image_size=32)
    dense.reset(seed=0)
    reward = dense.step(np.zeros(7))[1]
    assert 0.0 < reward < 1.0  # normalized dense: reaching reward, no success yet
    dense.close()


def test_check_env_passes_with_images(env):
    from gymnasium.utils.env_checker import check_env

    check_env(env.unwrapped)  # nothing skipped, render included


# ----------------------------------------------------------------------------------- state only
def test_state_only_renders_nothing(state_env, monkeypatch):
    monkeypatch.setattr(maniskill, "capture_images", lambda *a: pytest.fail("state-only env rendered"))
    obs, _ = state_env.reset(seed=0)
    obs, *_ = state_env.step(np.zeros(7))
    backend = state_env.unwrapped.backend
    assert "images" not in obs and backend.camera_roles == ()
    assert obs["state"].shape == backend._env.single_observation_space.shape == (42,)
    assert obs["state"].dtype == np.float32 and state_env.observation_space.contains(obs)
    assert state_env.metadata["render_modes"] == []


def test_maniskill_steps_without_autograd_and_its_tensors_stay_usable(state_env, monkeypatch):
    """The backend calls ManiSkill under torch.inference_mode (its batch-1 torch pose algebra is cheaper there);
    the caller's grad mode is untouched, and perturbing the scene between steps (in-place changes to ManiSkill's
    tensors) still works."""
    import torch

    backend = state_env.unwrapped.backend
    state_env.reset(seed=0)
    modes, step = [], backend._env.step
    monkeypatch.setattr(backend._env, "step",
                        lambda action: modes.append(torch.is_inference_mode_enabled()) or step(action))
    state_env.step(np.zeros(7))
    assert modes == [True] and not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    backend.scene_controls().offset_robot_joints(np.full(7, 0.01))
    obs, *_ = state_env.step(np.zeros(7))
    assert modes == [True, True] and np.isfinite(obs["state"]).all()


@needs_zero_cameras
def test_check_env_passes_state_only(state_env):
    from gymnasium.utils.env_checker import check_env

    check_env(state_env.unwrapped)


@needs_zero_cameras
def test_state_only_has_no_frame_to_render():
    with pytest.raises(ValueError, match="needs a camera"):
        gym.make(PICK, obs_mode="state", render_mode="rgb_array")


def test_state_mode_with_cameras_renders_beside_the_privileged_state():
    """What evaluation videos of a state policy use: privileged state plus rendered frames."""
    env = gym.make(env_id("PushCube"), obs_mode="state", cameras=("main",), image_size=64, render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    assert obs["state"].shape == (35,) and obs["images"]["main"].shape == (64, 64, 3)
    assert obs["images"]["main"].std() > 5 and env.render().shape == (64, 64, 3)
    env.close()


@needs_zero_cameras
def test_state_only_multi_task_needs_a_task_id():
    with pytest.raises(ValueError, match="pass task_id="):
        gym.make(MULTI_TASK_ID, obs_mode="state")
    env = gym.make(MULTI_TASK_ID, obs_mode="state", task_id=TABLETOP.index("PushCube"))
    obs, info = env.reset(seed=0)
    assert info["task_name"] == "PushCube" and obs["state"].shape == env.observation_space["state"].shape
    env.close()


# ----------------------------------------------------------------------------------- tasks
def test_multi_task_id_switches_tasks_and_keeps_them_built():
    env = gym.make(MULTI_TASK_ID, cameras=("main",), image_size=32)
    unwrapped = env.unwrapped
    assert [t.name for t in unwrapped.tasks] == list(TABLETOP)
    assert {t.max_episode_steps for t in unwrapped.tasks} == {50, 80, 100, 200, 250}
    for name in ("StackCube", "PlugCharger", "StackCube"):
        obs, info = env.reset(seed=0, options={"task_id": TABLETOP.index(name)})
        assert info["task_name"] == name and obs["instruction"] == unwrapped.task.instruction
        reward = env.step(env.action_space.sample())[1]
        assert name != "PlugCharger" or reward == 0.0  # no dense reward in ManiSkill: sparse
    # PickCube (task 0, built at construction), StackCube and PlugCharger: switching back reused StackCube
    assert set(unwrapped.backend._envs) == {"PickCube-v1", "StackCube-v1", "PlugCharger-v1"}
    drawn = set()
    for seed in range(6):
        drawn.add(env.reset(seed=seed)[1]["task_name"])
    assert len(drawn) > 1
    env.close()


def test_paraphrases_drawn_per_reset_only_on_request(env):
    spec = env.unwrapped.tasks[0]
    assert {env.reset(seed=s)[0]["instruction"] for s in range(5)} == {spec.instruction}
    para = gym.make(PICK, cameras=("wrist",), image_size=32, paraphrase_instructions=True)
    seen = {para.reset(seed=s)[0]["instruction"] for s in range(12)}
    assert seen <= {spec.instruction, *spec.paraphrases} and len(seen) > 1
    para.close()


def test_missing_assets_say_how_to_download(monkeypatch):
    import builtins

    from mani_skill.utils import assets

    if assets.is_data_source_downloaded("ycb"):
        pytest.skip("the YCB assets are downloaded on this machine")
    monkeypatch.setattr(builtins, "input", lambda *a: pytest.fail("input() was called"))
    with pytest.raises(maniskill.MissingAssetsError, match="download_asset PickSingleYCB-v1"):
        gym.make(env_id("PickSingleYCB"))


def test_unknown_tasks_and_bad_arguments():
    with pytest.raises(vla_gym.core.registry.UnknownEnvError, match="Did you mean: VLA/ManiSkill-PickCube-v0"):
        vla_gym.make("VLA/ManiSkill-PickCub-v0")
    with pytest.raises(ValueError, match=r"unknown ManiSkill tasks \['Nope'\]"):
        maniskill.ManiSkillEnv(tasks=("Nope",))
    for kwargs, match in [
        ({"cameras": ("front",)}, r"unknown ManiSkill camera roles \['front'\]"),
        ({"obs_mode": "rgb"}, "obs_mode must be one of"),
        ({"reward_mode": "shaped"}, "reward_mode must be one of"),
        ({"control_mode": "pd_joint_pos"}, "unnormalized actions"),
        ({"control_mode": "bogus"}, "bogus not in supported modes"),
        ({"task_id": 1}, r"task_id=1 is out of range: valid values are 0\.\.0"),
    ]:
        with pytest.raises(ValueError, match=match):
            gym.make(PICK, image_size=32, **kwargs)


def test_default_size_and_close_twice():
    env = gym.make(env_id("PushCube"), cameras=("main",))
    obs, _ = env.reset(seed=0)
    assert obs["images"]["main"].shape == (224, 224, 3)
    env.close()
    assert env.unwrapped.backend._env is None and not env.unwrapped.backend._envs
    env.close()


# ----------------------------------------------------------------------------------- missing pieces
def test_no_vulkan_device_names_the_fix():
    code = ("import gymnasium as gym, vla_gym\n"
            "from vla_gym.core.errors import RenderingUnavailableError\n"
            "try:\n    gym.make('VLA/ManiSkill-PickCube-v0')\n"
            "except RenderingUnavailableError as e:\n    print('RenderingUnavailableError:', e)\n")
    out = run_python(code, env={**os.environ, "VK_ICD_FILENAMES": "/nonexistent/icd.json"})
    assert "RenderingUnavailableError: SAPIEN (ManiSkill3) found no usable Vulkan device" in out
    assert "apt-get install" in out


def test_missing_maniskill_names_the_extra(without_maniskill):
    error = without_maniskill[1]
    assert "ManiSkill3 is not installed" in error and "vla-gym[maniskill]" in error


# ----------------------------------------------------------------------------------- GPU-batched path
def test_batched_env_schema_and_same_step_autoreset():
    """The GPU vector env's code, run on ManiSkill's CPU simulation (num_envs=1) so that it runs here."""
    import torch

    from vla_gym.backends.maniskill.gpu import make_gpu_vector_env

    envs = make_gpu_vector_env(PICK, 1, device="cpu", image_size=32, max_episode_steps=2)
    obs, info = envs.reset(seed=0)
    assert envs.observation_space["images"]["main"].shape == (1, 32, 32, 3)
    assert obs["images"]["wrist"].shape == (1, 32, 32, 3) and obs["images"]["wrist"].dtype == torch.uint8
    assert obs["state"].shape == (1, 8) and obs["instruction"] == (envs.task.instruction,)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    with pytest.raises(ValueError, match=r"shape \(1, 7\)"):
        envs.step(torch.zeros(7))
    with pytest.raises(ValueError, match="NaN or inf"):
        envs.step(torch.full((1, 7), float("nan")))
    up = torch.tensor([[0, 0, 1.0, 0, 0, 0, -1]])
    first = envs.step(up)
    assert first[3].tolist() == [False] and "final_obs" not in first[4]
    obs, _reward, _terminated, truncated, info = envs.step(up)
    assert truncated.tolist() == [True] and info["_final_obs"].tolist() == [True]
    final_z, first_z, new_z = info["final_obs"][0]["state"][2], first[0]["state"][0, 2], obs["state"][0, 2]
    assert final_z > first_z > new_z  # kept rising until the end; the returned obs starts a new episode
    assert info["final_obs"][0]["images"]["main"].shape == (32, 32, 3)  # gymnasium's layout: one obs per sub-env
    assert info["final_info"]["elapsed_steps"].tolist() == [2] and info["elapsed_steps"].tolist() == [0]
    assert isinstance(_reward, np.ndarray) and truncated.dtype == bool  # control signals as numpy, as gymnasium's
    envs.close()


def test_batched_state_matches_the_cpu_formula():
    from vla_gym.backends.maniskill.gpu import make_gpu_vector_env
    from vla_gym.core.geometry import quat_to_axis_angle

    envs = make_gpu_vector_env(PICK, 1, device="cpu", obs_mode="state")
    assert "images" not in envs.reset(seed=0)[0] and envs.observation_space["state"].shape == (1, 42)
    envs.close()
    envs = make_gpu_vector_env(PICK, 1, device="cpu", cameras=("main",), image_size=32)
    obs, _ = envs.reset(seed=7)
    pose = envs._env.agent.tcp_pose.raw_pose[0].numpy()
    np.testing.assert_allclose(obs["state"][0, :3].numpy(), pose[:3])
    np.testing.assert_allclose(obs["state"][0, 3:6].numpy(), quat_to_axis_angle(pose[3:], scalar_first=True), atol=1e-5)
    envs.close()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU (ManiSkill GPU simulation)")
def test_gpu_vector_env_on_cuda():
    import torch

    envs = vla_gym.make_vec(PICK, 8, device="cuda", image_size=64)
    obs, _ = envs.reset(seed=0)
    assert obs["images"]["main"].shape == (8, 64, 64, 3) and obs["images"]["main"].is_cuda
    assert obs["state"].shape == (8, 8) and len(obs["instruction"]) == 8
    obs, reward, _terminated, _truncated, info = envs.step(torch.zeros(8, 7, device="cuda"))
    assert obs["state"].is_cuda and reward.shape == (8,) and info["success"].shape == (8,)  # control signals: numpy
    envs.close()
    # sub-env i gets ManiSkill's seed s + i: the batched env is ManiSkill's GPU env reset with that seed list
    import mani_skill.envs  # noqa: F401

    raw = gym.make("PickCube-v1", num_envs=8, robot_uids="panda_wristcam", control_mode="pd_ee_delta_pose",
                   reward_mode="normalized_dense", obs_mode="state", sim_backend="gpu")
    expected = raw.unwrapped.reset(seed=list(range(5, 13)))[0]
    raw.close()
    envs = vla_gym.make_vec(PICK, 8, device="cuda", obs_mode="state")
    torch.testing.assert_close(envs.reset(seed=5)[0]["state"], expected.to(torch.float32), rtol=0, atol=1e-6)
    envs.close()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the error on machines without CUDA")
def test_gpu_request_without_cuda_says_so():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        vla_gym.make_vec(PICK, 4, device="cuda")


def test_yaml_matches_catalog():
    from importlib import resources

    table = yaml.safe_load(resources.files("vla_gym.assets").joinpath("maniskill_instructions.yaml").read_text())
    assert set(table) == {maniskill_id for maniskill_id, _, _ in TASKS.values()}


# ----------------------------------------------------------------------------------- one contract, three vector envs
def contract_envs(kind: str, **kwargs):
    """PushCube (state) behind make_vec's Sync / Async env (2 sub-envs) or the batched env (CPU simulation, 1)."""
    from vla_gym.backends.maniskill.gpu import make_gpu_vector_env

    if kind == "batched":
        return make_gpu_vector_env(env_id("PushCube"), 1, device="cpu", **kwargs)
    return vla_gym.make_vec(env_id("PushCube"), 2, vectorization=kind, **kwargs)


def test_rollout_and_episode_runner_take_every_vector_env():
    """RolloutCollector and EpisodeRunner over gymnasium's Sync and Async envs and the batched env: the same
    episodes for the same seeds, truncations bootstrapped from final_obs, partial resets with options."""
    from vla_gym.trainers.policies import make_policy
    from vla_gym.trainers.rollout.buffer import RolloutBuffer
    from vla_gym.trainers.rollout.collector import RolloutCollector
    from vla_gym.trainers.rollout.episode_plan import EpisodeSpec
    from vla_gym.trainers.rollout.episode_runner import EpisodeRunner

    torch = pytest.importorskip("torch")
    specs = [EpisodeSpec(seed=s, task_id=0) for s in (3, 4, 5)]
    first_states = {}
    for kind in ("sync", "async", "batched"):
        envs = contract_envs(kind, obs_mode="state", max_episode_steps=5)
        torch.manual_seed(0)
        policy = make_policy("mlp", envs.single_observation_space, envs.single_action_space, hidden_sizes=[16])
        buffer = RolloutBuffer(12, envs.num_envs)
        collector = RolloutCollector(envs, policy, buffer, gamma=0.9, gae_lambda=0.95)
        collector.reset(list(range(envs.num_envs)))
        collector.collect()
        assert bool(buffer.valid.all()) and buffer.dones.sum(0).tolist() == [2] * envs.num_envs, kind  # 5, 10

        firsts = {}

        def record(obs, actions, log_probs, jobs, firsts=firsts):
            for i, job in enumerate(jobs):
                if job >= 0 and int(job) not in firsts:
                    firsts[int(job)] = obs["state"][i].clone()

        results = EpisodeRunner(envs, policy).run(specs, recorder=record)
        assert [(r.length, r.task_name, r.success is not None) for r in results] == [(5, "PushCube", True)] * 3, kind
        first_states[kind] = torch.stack([firsts[k] for k in range(3)])
        envs.close()
    torch.testing.assert_close(first_states["async"], first_states["sync"], rtol=0, atol=0)
    torch.testing.assert_close(first_states["batched"], first_states["sync"], rtol=0, atol=0)


def test_ppo_trains_through_the_batched_env(tmp_path):
    from vla_gym.trainers import PPO
    from vla_gym.trainers.runtime.config import Config

    envs = contract_envs("batched", obs_mode="state", max_episode_steps=6)
    config = Config()
    config.eval.episodes = 0  # evaluation envs come from config.env, not from the env passed in
    model = PPO("mlp", env=envs, config=config, n_steps=12, batch_size=12, n_epochs=1,
                policy_kwargs={"hidden_sizes": [16]}, run_dir=str(tmp_path), name="batched")
    metrics = []
    model.learn(24, callback=lambda algo, m: metrics.append(m))
    assert model.num_updates == 2 and metrics[-1]["env/episode_len"] == 6
    model.close()


def test_batched_env_partial_resets_seed_lists_and_options():
    envs = contract_envs("batched", obs_mode="state", paraphrase_instructions=True)
    obs, info = envs.reset(seed=[7], options={"task_id": 0})
    assert info["task_name"].tolist() == ["PushCube"] and info["_task_name"].tolist() == [True]
    again, _ = envs.reset(seed=7, options={"reset_mask": np.array([True])})
    np.testing.assert_array_equal(obs["state"].numpy(), again["state"].numpy())
    assert obs["instruction"] == again["instruction"]  # the paraphrase is drawn from the seeded generator
    kept, _ = envs.reset(options={"reset_mask": np.array([False])})  # nothing reset
    np.testing.assert_array_equal(kept["state"].numpy(), obs["state"].numpy())
    fresh, _ = envs.reset(options={"env_idx": [0]})  # unseeded: a new episode
    assert not np.array_equal(fresh["state"].numpy(), obs["state"].numpy())
    for options, match in [({"task_id": 1}, "task_id=1 is out of range"),
                           ({"reset_mask": np.array([1])}, "bool array of shape"),
                           ({"env_idx": [1]}, "out of range")]:
        with pytest.raises(ValueError, match=match):
            envs.reset(options=options)
    with pytest.raises(ValueError, match="one seed per sub-env"):
        envs.reset(seed=[1, 2])
    envs.close()
