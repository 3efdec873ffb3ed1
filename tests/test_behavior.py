"""The BEHAVIOR-1K backend, without Isaac Sim: pure conversions for real, simulator calls against a FAKE.

Isaac Sim (and so OmniGibson) needs an NVIDIA RTX GPU and cannot be installed on the machines this
suite runs on. So:

- the pure parts run for real: the task table (against bddl 3.x when importable), the ids, the
  keyword path for all 1,016 activities, the spaces, and ``vla_gym.backends.behavior.r1pro`` (the 23-D / 14-D
  action mappings, the conversion of OmniGibson observation dicts built with OmniGibson's key names,
  dtypes and shapes, the OmniGibson config, the scene lookup) and the errors;
- the OmniGibson calls of ``vla_gym.backends.behavior.env`` run against ``tests/fake_omnigibson.py``, a
  FAKE ``omnigibson`` module that records every call and checks it against OmniGibson's API as read
  in its source (it simulates nothing). It is put in ``sys.modules`` for one test at a time;
- ``test_real_omnigibson_episode`` runs only where OmniGibson is installed (marker ``gpu``).
"""
import importlib.util
import json
import os
import pathlib
import random
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from fake_omnigibson import FakeOmniGibson

import vla_gym
from vla_gym.backends.behavior import env as B
from vla_gym.backends.behavior import r1pro as R
from vla_gym.core import schema
from vla_gym.core.errors import MissingSimulatorError
from vla_gym.tasks import behavior as T

ROOT = pathlib.Path(__file__).resolve().parents[1]
TABLE = ROOT / "assets" / "behavior_tasks.json"
HAS_OMNIGIBSON = importlib.util.find_spec("omnigibson") is not None
needs_no_omnigibson = pytest.mark.skipif(HAS_OMNIGIBSON, reason="OmniGibson is installed: no missing-simulator error")


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_behavior_tasks", ROOT / "scripts" / "gen_behavior_tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _load_generator()
ROWS = json.loads(TABLE.read_text())["activities"]


def _bddl3_version():
    try:
        found = version("bddl")
    except PackageNotFoundError:
        return None
    return found if found.startswith("3.") else None


# ------------------------------------------------------------------------------------ task table
def test_table_invariants():
    names = [row["name"] for row in ROWS]
    assert len(ROWS) == 1016 and len(set(names)) == 1016 and names == sorted(names)
    for row in ROWS:
        for text in (row["instruction"], row["goal_text"]):
            assert text and text.strip() == text and set(text) <= set(schema.INSTRUCTION_CHARSET), row["name"]
        assert isinstance(row["max_episode_steps"], int) and row["max_episode_steps"] > 0
        assert row["rooms"] == sorted(set(row["rooms"]))
    challenge = sorted((row for row in ROWS if row["challenge_id"] is not None), key=lambda row: row["challenge_id"])
    assert [row["challenge_id"] for row in challenge] == list(range(50))


def test_challenge_tasks_order_limits_and_instructions():
    """The official 50 in task-id order; limit = 2x mean demo length at 30 Hz; hand-written instructions."""
    assert T.challenge_activities() == tuple(name for name, _ in GEN.CHALLENGE_TASKS)
    assert T.challenge_activities()[:2] == ("turning_on_radio", "picking_up_trash")
    written = yaml.safe_load((ROOT / "assets" / "behavior_instructions.yaml").read_text())
    assert list(written) == list(T.challenge_activities())
    by_name = {row["name"]: row for row in ROWS}
    for name, seconds in GEN.CHALLENGE_TASKS:
        assert by_name[name]["max_episode_steps"] == 2 * 30 * seconds
        assert by_name[name]["instruction"] == " ".join(written[name].split())
    others = [row for row in ROWS if row["challenge_id"] is None]
    assert all(row["max_episode_steps"] == GEN.DEFAULT_MAX_STEPS and row["instruction"] == row["goal_text"]
               for row in others)


def test_goal_writer_reproduces_the_table_without_bddl():
    """can_meat's goal conditions as bddl 3.6.0 parses them -> the table's generated text."""
    objects = {"hinged_jar.n.01": ["hinged_jar.n.01_1", "hinged_jar.n.01_2"], "cabinet.n.01": ["cabinet.n.01_1"],
               "bratwurst.n.01": [f"bratwurst.n.01_{i}" for i in range(1, 5)], "agent.n.01": ["agent.n.01_1"]}
    goal = [
        ["forall", ["?hinged_jar.n.01", "-", "hinged_jar.n.01"], ["inside", "?hinged_jar.n.01", "?cabinet.n.01_1"]],
        ["forall", ["?hinged_jar.n.01", "-", "hinged_jar.n.01"], ["not", ["open", "?hinged_jar.n.01"]]],
        ["forall", ["?hinged_jar.n.01", "-", "hinged_jar.n.01"],
         ["forn", ["2"], ["?bratwurst.n.01", "-", "bratwurst.n.01"],
          ["inside", "?bratwurst.n.01", "?hinged_jar.n.01"]]],
        ["not", ["open", "?cabinet.n.01_1"]],
    ]
    text = GEN.GoalWriter(objects).sentence(goal)
    assert text == next(row["goal_text"] for row in ROWS if row["name"] == "can_meat")
    assert text == ("Put every hinged jar inside the cabinet, close every hinged jar, "
                    "put exactly 2 bratwursts inside every hinged jar and close the cabinet.")


@pytest.mark.skipif(_bddl3_version() is None,
                    reason="bddl 3.x is not importable (LIBERO pins bddl 1.0.1); compare in a venv with "
                           "bddl==3.6.0: python scripts/gen_behavior_tasks.py --check")
def test_table_matches_bddl():
    table = GEN.build_table()
    assert table["bddl_version"] == _bddl3_version()
    assert GEN.render(table) == TABLE.read_text()


# ----------------------------------------------------------------------------------------- ids
def test_ids_registered():
    entries = {k: e for k, e in vla_gym.ENTRIES.items() if e.backend == "behavior"}
    challenge_ids = {T.env_id(name) for name in T.challenge_activities()}
    assert set(entries) == challenge_ids | {"VLA/Behavior50-v0", "VLA/Behavior-v0"} and len(challenge_ids) == 50
    for env_id, entry in entries.items():
        assert env_id in gym.registry
        assert entry.requires == "omnigibson" and entry.extra == "behavior"
        assert entry.entry_point == "vla_gym.backends.behavior.env:BehaviorEnv"
        assert entry.available() == HAS_OMNIGIBSON
    assert entries["VLA/Behavior-can_meat-v0"].kwargs == {"activity": "can_meat"}
    assert entries["VLA/Behavior50-v0"].kwargs == {"activity": "challenge"}
    assert entries["VLA/Behavior50-v0"].num_tasks == 50
    assert entries["VLA/Behavior-v0"].num_tasks == 1016


def test_keyword_path_specs_for_all_activities():
    """Every activity yields its spec, instruction and spaces without OmniGibson."""
    names = T.activities()
    assert len(names) == 1016
    for name in names:
        (task,) = T.activity_tasks(name)
        assert task.name == name and task.instruction and task.max_episode_steps > 0 and task.suite == "behavior"
    tasks = T.activity_tasks(list(names))
    assert [t.index for t in tasks] == list(range(1016))
    observation_space, action_space = B.behavior_spaces(list(names))
    assert all(len(t.instruction) <= observation_space["instruction"].max_length for t in tasks)
    assert action_space.shape == (23,)
    assert "omnigibson" not in sys.modules


@needs_no_omnigibson
def test_gym_make_raises_missing_simulator_for_every_id():
    for env_id in [T.env_id(name) for name in T.challenge_activities()] + ["VLA/Behavior50-v0"]:
        with pytest.raises(B.BehaviorUnavailableError):
            gym.make(env_id)
    for name in T.activities():
        with pytest.raises(B.BehaviorUnavailableError):
            gym.make("VLA/Behavior-v0", activity=name)


def test_task_specs_challenge_and_paraphrases():
    tasks = T.activity_tasks("challenge")
    assert [t.name for t in tasks] == list(T.challenge_activities()) and [t.index for t in tasks] == list(range(50))
    radio = tasks[0]
    assert radio.instruction == "Turn on the radio on the living room table."
    assert radio.paraphrases == ("Turn on the radio receiver.",)
    assert radio.max_episode_steps == 4320 and radio.extra == {"challenge_id": 0, "rooms": ("living_room",)}
    assert T.activity_tasks("adding_chemicals_to_hot_tub")[0].paraphrases == ()
    with pytest.raises(T.UnknownActivityError, match="Did you mean: can_meat"):
        T.activity_tasks("can_meet")
    with pytest.raises(ValueError, match="at least one"):
        T.activity_tasks([])


# -------------------------------------------------------------------------------------- spaces
@pytest.mark.parametrize("mode, dim", [("joint", 23), ("two_arms", 14)])
def test_spaces(mode, dim):
    observation_space, action_space = B.behavior_spaces("challenge", control_mode=mode)
    assert action_space == schema.action_space(dim)
    assert set(observation_space["images"]) == {"main", "left_wrist", "right_wrist"}
    for space in observation_space["images"].values():
        assert space.shape == (224, 224, 3) and space.dtype == np.uint8
    assert observation_space["state"].shape == (R.STATE_DIM,)
    small, _ = B.behavior_spaces("can_meat", cameras=("main",), image_size=(96, 128))
    assert set(small["images"]) == {"main"} and small["images"]["main"].shape == (96, 128, 3)


# ------------------------------------------- r1pro: observation conversion on OmniGibson-shaped dicts
HEAD = "robot_r1:zed_link:Camera:0"
LEFT = "robot_r1:left_realsense_link:Camera:0"
RIGHT = "robot_r1:right_realsense_link:Camera:0"


def _rgba(height, width, seed):
    """An RGBA uint8 frame like VisionSensor's "rgb" modality (torch tensor, alpha 255)."""
    generator = torch.Generator().manual_seed(seed)
    image = torch.randint(0, 256, (height, width, 4), dtype=torch.uint8, generator=generator)
    image[..., 3] = 255
    return image


def _proprio_parts():
    half = np.sqrt(0.5)
    return {
        "base_qvel": [0.1, -0.2, 0.3], "trunk_qpos": list(R.TORSO_START),
        "arm_left_qpos": [0.01 * i for i in range(7)], "gripper_left_qpos": [0.05, 0.05],
        "eef_left_pos": [0.4, 0.3, 1.1], "eef_left_quat": [0.0, 0.0, half, half],      # 90 deg about z (xyzw)
        "arm_right_qpos": [-0.01 * i for i in range(7)], "gripper_right_qpos": [0.0, 0.0],
        "eef_right_pos": [0.4, -0.3, 1.0], "eef_right_quat": [0.0, 0.0, 0.0, 1.0],     # identity
    }


def _omnigibson_obs(head=(720, 720), wrist=(480, 480)):
    """A nested obs as og.Environment.step returns it: obs["robot_r1"][sensor]["rgb"], obs["robot_r1"]["proprio"]."""
    proprio = torch.tensor(np.concatenate([_proprio_parts()[name] for name, _ in R.PROPRIO]), dtype=torch.float32)
    return {"robot_r1": {HEAD: {"rgb": _rgba(*head, 0)}, LEFT: {"rgb": _rgba(*wrist, 1)},
                         RIGHT: {"rgb": _rgba(*wrist, 2)}, "proprio": proprio}}


def test_observation_images_from_challenge_resolution():
    obs = _omnigibson_obs()
    images = R.observation_images(obs, ("main", "left_wrist", "right_wrist"), (224, 224))
    for role, key in (("main", HEAD), ("left_wrist", LEFT), ("right_wrist", RIGHT)):
        source = obs["robot_r1"][key]["rgb"].numpy()
        image = images[role]
        assert image.shape == (224, 224, 3) and image.dtype == np.uint8 and image.flags.c_contiguous
        rows = np.arange(224) * source.shape[0] // 224
        np.testing.assert_array_equal(image, source[rows][:, rows, :3])
    observation_space, _ = B.behavior_spaces("can_meat")
    assert all(observation_space["images"][role].contains(image) for role, image in images.items())


def test_observation_images_exact_size_flat_keys_and_numpy():
    """The evaluator's flattened keys ("robot_r1::<sensor>::rgb") and numpy arrays work too; no resize at 224."""
    nested = _omnigibson_obs(head=(224, 224), wrist=(224, 224))
    flat = R.flatten_observation(nested)
    assert f"robot_r1::{HEAD}::rgb" in flat and "robot_r1::proprio" in flat
    flat = {key: value.numpy() for key, value in flat.items()}
    images = R.observation_images(flat, ("left_wrist",), (224, 224))
    np.testing.assert_array_equal(images["left_wrist"], flat[f"robot_r1::{LEFT}::rgb"][..., :3])
    images["left_wrist"][:] = 0  # fresh arrays: editing one leaves the source alone
    assert flat[f"robot_r1::{LEFT}::rgb"].any()


def test_roles_give_the_behavior_video_layout():
    """Head 448x448 on the right, left wrist above right wrist (224x224) on the left: 448x672 frames."""
    video = pytest.importorskip("vla_gym.core.video")
    images = R.observation_images(_omnigibson_obs(), ("main", "left_wrist", "right_wrist"), (224, 224))
    frame = video.compose_frame(images)
    assert frame.shape == (448, 672, 3)
    np.testing.assert_array_equal(frame[:224, :224], images["left_wrist"])
    np.testing.assert_array_equal(frame[224:, :224], images["right_wrist"])


def test_observation_state_layout():
    parts = _proprio_parts()
    state = R.observation_state(_omnigibson_obs())
    assert state.shape == (37,) and state.dtype == np.float32
    s = R.STATE_SLICES
    np.testing.assert_allclose(state[s["base_velocity"]], parts["base_qvel"], atol=1e-6)
    np.testing.assert_allclose(state[s["torso_qpos"]], R.TORSO_START, atol=1e-6)
    np.testing.assert_allclose(state[s["left_arm_qpos"]], parts["arm_left_qpos"], atol=1e-6)
    np.testing.assert_allclose(state[s["left_gripper_qpos"]], [0.05, 0.05], atol=1e-6)
    np.testing.assert_allclose(state[s["left_eef_pos"]], parts["eef_left_pos"], atol=1e-6)
    np.testing.assert_allclose(state[s["left_eef_axis_angle"]], [0, 0, np.pi / 2], atol=1e-6)
    np.testing.assert_allclose(state[s["right_arm_qpos"]], parts["arm_right_qpos"], atol=1e-6)
    np.testing.assert_allclose(state[s["right_eef_pos"]], parts["eef_right_pos"], atol=1e-6)
    np.testing.assert_allclose(state[s["right_eef_axis_angle"]], [0, 0, 0], atol=1e-6)
    assert sum(sl.stop - sl.start for sl in s.values()) == R.STATE_DIM == 37
    # proprioception given as a dict of named parts gives the same state
    as_dict = {"robot_r1": {"proprio": {name: torch.tensor(value) for name, value in parts.items()}}}
    np.testing.assert_array_equal(R.observation_state(as_dict), state)


def test_observation_errors_name_the_problem():
    obs = _omnigibson_obs(head=(8, 8), wrist=(8, 8))
    del obs["robot_r1"][LEFT]
    with pytest.raises(KeyError, match="left_realsense_link.*rgb keys found"):
        R.observation_images(obs, ("left_wrist",), (8, 8))
    obs["robot_r1"]["proprio"] = torch.zeros(256)  # the 2025 evaluator's full proprio vector
    with pytest.raises(ValueError, match="256 values.*39"):
        R.observation_state(obs)
    obs["robot_r1"][HEAD]["rgb"] = torch.zeros(8, 8, 4)  # float, not uint8
    with pytest.raises(ValueError, match="uint8"):
        R.observation_images(obs, ("main",), (8, 8))


def test_step_results_of_both_omnigibson_generations():
    """2025 single-env results (dict, float, bool) and newer batched ones (lists, (1,) tensors)."""
    info_2025 = {"done": {"success": True, "termination_conditions": {"predicate": {"done": True, "success": True}}}}
    assert R.success_from_info(info_2025) is True
    batched = [{"done": {"success": False}}]
    assert R.single(batched) is batched[0] and R.success_from_info(R.single(batched)) is False
    assert R.single(torch.tensor([0.25])) == 0.25 and R.single(torch.tensor([True])) is True
    assert R.single(0.5) == 0.5 and R.success_from_info({}) is False
    assert R.goal_progress({"satisfied": [0, 2], "unsatisfied": [1, 3]}) == 0.5
    assert R.goal_progress(None) is None and R.goal_progress({"satisfied": [], "unsatisfied": []}) is None


# ------------------------------------------------------------------------------- r1pro: actions
def test_action_slices():
    spans = [(s.start, s.stop) for s in R.ACTION_SLICES.values()]
    assert spans == [(0, 3), (3, 7), (7, 14), (14, 15), (15, 22), (22, 23)]
    assert list(R.ACTION_SLICES) == ["base", "torso", "left_arm", "left_gripper", "right_arm", "right_gripper"]
    assert [(s.start, s.stop) for s in R.TWO_ARMS_SLICES.values()] == [(0, 6), (6, 7), (7, 13), (13, 14)]
    assert R.CONTROL_MODES == {"joint": 23, "two_arms": 14}


def test_joint_action_mapping():
    s = R.ACTION_SLICES
    low = R.joint_action_to_robot(-np.ones(23))
    high = R.joint_action_to_robot(np.ones(23))
    for part in ("torso", "left_arm", "right_arm"):
        np.testing.assert_allclose(low[s[part]], R.JOINT_LIMITS[part][0])
        np.testing.assert_allclose(high[s[part]], R.JOINT_LIMITS[part][1])
    np.testing.assert_array_equal(high[s["base"]], [1, 1, 1])         # the base controller scales itself
    assert high[s["left_gripper"]][0] == -1 and low[s["right_gripper"]][0] == 1  # +1 close -> OmniGibson -1
    rng = np.random.default_rng(0)
    action = rng.uniform(-1, 1, 23)
    np.testing.assert_allclose(R.robot_to_joint_action(R.joint_action_to_robot(action)), action, atol=1e-12)
    np.testing.assert_allclose(R.joint_action_to_robot(np.full(23, 5.0)), high)  # clipped to the limits
    with pytest.raises(ValueError, match=r"shape \(23,\)"):
        R.joint_action_to_robot(np.zeros(14))


def test_two_arms_action_mapping():
    r = R.TWO_ARMS_ROBOT_SLICES
    action = np.arange(1, 15) / 20.0
    hold = [0.9, -1.3, -0.5, 0.1]
    command = R.two_arms_action_to_robot(action, torso_hold=hold)
    assert command.shape == (21,)
    np.testing.assert_array_equal(command[r["base"]], 0.0)
    np.testing.assert_allclose(command[r["torso"]], hold)
    np.testing.assert_allclose(command[r["left_arm"]], action[0:6])
    np.testing.assert_allclose(command[r["right_arm"]], action[7:13])
    assert command[r["left_gripper"]][0] == -action[6] and command[r["right_gripper"]][0] == -action[13]
    np.testing.assert_allclose(R.robot_command(action, "two_arms", hold), command)
    np.testing.assert_allclose(R.robot_command(np.zeros(23), "joint"), R.joint_action_to_robot(np.zeros(23)))
    with pytest.raises(ValueError, match=r"shape \(14,\)"):
        R.two_arms_action_to_robot(np.zeros(23))


# --------------------------------------------------------------------- r1pro: OmniGibson config
def test_omnigibson_config_joint():
    scene = {"scene_model": "house_single_floor", "robot_start_position": [1.0, 2.0, 0.0],
             "robot_start_orientation": [0.0, 0.0, 0.0, 1.0], "load_room_instances": None}
    config = R.omnigibson_config("can_meat", scene, image_size=(224, 224))
    json.dumps(config)  # plain data: no torch, no OmniGibson objects
    assert config["env"] == {"action_frequency": 30.0, "rendering_frequency": 30.0, "physics_frequency": 120.0}
    assert config["scene"]["type"] == "InteractiveTraversableScene"
    assert config["scene"]["scene_model"] == "house_single_floor"
    task = config["task"]
    assert task["type"] == "BehaviorTask" and task["activity_name"] == "can_meat" and not task["online_object_sampling"]
    assert task["use_presampled_robot_pose"] and task["termination_config"]["max_steps"] >= 10**9
    (robot,) = config["robots"]
    assert robot["type"] == "R1Pro" and robot["name"] == "robot_r1" and robot["position"] == [1.0, 2.0, 0.0]
    assert robot["proprio_obs"] == [name for name, _ in R.PROPRIO]
    assert set(robot["obs_modalities"]) == {"rgb", "proprio"}
    assert robot["sensor_config"]["VisionSensor"]["sensor_kwargs"] == {"image_height": 224, "image_width": 224}
    assert len(robot["reset_joint_pos"]) == 28 and robot["reset_joint_pos"][6:10] == list(R.TORSO_START)
    controllers = robot["controller_config"]
    assert {c["name"] for k, c in controllers.items() if k.startswith("arm")} == {"JointController"}
    assert controllers["base"]["command_output_limits"] == [[-0.75, -0.75, -1.0], [0.75, 0.75, 1.0]]


def test_omnigibson_config_two_arms_and_overrides():
    config = R.omnigibson_config("can_meat", {"scene_model": "Rs_int"}, control_mode="two_arms",
                                 ee_delta_limits=(0.02, 0.1),
                                 overrides={"scene": {"load_room_types": ["kitchen"]},
                                            "env": {"physics_frequency": 240.0}})
    arm = config["robots"][0]["controller_config"]["arm_left"]
    assert arm["name"] == "InverseKinematicsController" and arm["mode"] == "pose_delta_ori"
    assert arm["command_output_limits"][1] == [0.02, 0.02, 0.02, 0.1, 0.1, 0.1]
    assert config["scene"]["load_room_types"] == ["kitchen"] and config["scene"]["scene_model"] == "Rs_int"
    assert config["env"]["physics_frequency"] == 240.0 and config["env"]["action_frequency"] == 30.0
    assert "position" not in config["robots"][0]
    sampled = R.omnigibson_config("clean_tweed", {"scene_model": "Rs_int"}, online_object_sampling=True)["task"]
    assert sampled["online_object_sampling"] and not sampled["use_presampled_robot_pose"]


def test_find_scene(tmp_path):
    """Challenge tasks: the task file's seed instance; others: a scene with a pre-sampled template."""
    tasks_file = tmp_path / R.CHALLENGE_TASKS_FILE
    tasks_file.parent.mkdir(parents=True)
    tasks_file.write_text(yaml.safe_dump({"can_meat": [
        {"scene_model": "house_double_floor_lower", "robot_start_position": [1, 2, 0],
         "robot_start_orientation": [0, 0, 0, 1]},
        {"scene_model": "other"}]}))
    template = tmp_path / "behavior-1k-assets/scenes/Rs_int/json/Rs_int_task_clean_tweed_0_0_template.json"
    template.parent.mkdir(parents=True)
    template.write_text("{}")
    assert R.find_scene("can_meat", str(tmp_path))["scene_model"] == "house_double_floor_lower"
    assert R.find_scene("clean_tweed", str(tmp_path)) == {"scene_model": "Rs_int"}
    assert R.find_scene("make_pizza", str(tmp_path)) is None


# ----------------------------------------------------- OmniGibson calls, against the FAKE omnigibson
#: the challenge task file's seed instances (scene, robot start pose, rooms) for two activities
SCENES = {
    "can_meat": {"scene_model": "house_double_floor_lower", "robot_start_position": [1.5, -2.0, 0.0],
                 "robot_start_orientation": [0.0, 0.0, 0.7071, 0.7071], "load_room_instances": ["kitchen_0"]},
    "turning_on_radio": {"scene_model": "house_single_floor", "robot_start_position": [-3.0, 1.0, 0.0],
                         "robot_start_orientation": [0.0, 0.0, 0.0, 1.0], "load_room_instances": None},
}


@pytest.fixture
def fake_og(tmp_path, monkeypatch):
    """The FAKE omnigibson (tests/fake_omnigibson.py) in sys.modules, its data path holding a challenge task file."""
    tasks_file = tmp_path / R.CHALLENGE_TASKS_FILE
    tasks_file.parent.mkdir(parents=True)
    tasks_file.write_text(yaml.safe_dump({name: [scene, {"scene_model": "another_instance"}]
                                          for name, scene in SCENES.items()}))
    for name in ("OMNIGIBSON_HEADLESS", "OMNI_KIT_ACCEPT_EULA"):  # absent during the test, as before it after
        monkeypatch.setenv(name, "restored-after-the-test")
        monkeypatch.delenv(name)
    return FakeOmniGibson(data_path=str(tmp_path)).install(monkeypatch)


@pytest.mark.parametrize("generation", ["2025", "batched"])
def test_episode_calls_against_the_fake(fake_og, generation):
    """Build, reset, step with a 23-D action, cameras, success from the goal predicates, close: the calls made."""
    fake_og.generation = generation
    fake_og.goal_schedule = [1, 2, 4]  # goal conditions satisfied after steps 1, 2, 3 (of 4)
    env = gym.make("VLA/Behavior-can_meat-v0", render_mode="rgb_array")
    assert fake_og.names() == ["gm.unlocked"]  # macros set when the env is made; nothing loaded before reset
    assert (fake_og.gm.ENABLE_OBJECT_STATES, fake_og.gm.ENABLE_TRANSITION_RULES, fake_og.gm.USE_GPU_DYNAMICS) == (
        True, True, False)
    assert (os.environ["OMNIGIBSON_HEADLESS"], os.environ["OMNI_KIT_ACCEPT_EULA"]) == ("1", "YES")

    obs, info = env.reset(seed=7)
    assert fake_og.names()[1:] == ["Environment", "scene.object_registry", "Environment.reset"]
    # build: og.Environment(configs=...) with the config r1pro writes for the challenge's seed instance
    assert fake_og.calls[1][1:] == ((), {"configs": R.omnigibson_config("can_meat", SCENES["can_meat"])})
    assert fake_og.calls[2][1] == ("name", "robot_r1")
    assert fake_og.calls[3][1:] == ((), {"env_indices": None, "get_obs": True})  # as the evaluator: no seed
    robot = fake_og.environments[0].robot
    assert robot.action_dim == 23 and robot.sensors[R.CAMERAS["main"]].horizontal_aperture == 40.0
    # observation: the cameras' RGB, the state from the proprioception the config asked for
    frames = fake_og.last_obs["robot_r1"]
    for role, sensor in R.CAMERAS.items():
        np.testing.assert_array_equal(obs["images"][role], frames[sensor]["rgb"][..., :3].numpy())
    np.testing.assert_allclose(obs["state"][R.STATE_SLICES["torso_qpos"]], R.TORSO_START, atol=1e-6)
    np.testing.assert_allclose(obs["state"][R.STATE_SLICES["left_eef_pos"]], [0.5, 0.25, 1.0], atol=1e-6)
    assert env.observation_space.contains(obs) and info["goal_progress"] is None

    action = np.random.default_rng(0).uniform(-1, 1, 23).astype(np.float32)
    progress = []
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(action)
        name, (sent,), kwargs = fake_og.calls[-1]
        assert name == "Environment.step" and kwargs == {"n_render_iterations": 1}
        assert sent.dtype == torch.float32 and sent.shape == (23,)  # the R1 Pro command, one control step
        np.testing.assert_allclose(sent.numpy(), R.joint_action_to_robot(action), atol=1e-6)
        progress.append((reward, terminated, truncated, info["success"], info["goal_progress"]))
    assert progress == [(0.0, False, False, False, 0.25), (0.0, False, False, False, 0.5),
                        (1.0, True, False, True, 1.0)]
    # joints under absolute position control reached their command: [-1, 1] spread over the joint limits
    np.testing.assert_allclose(obs["state"][R.STATE_SLICES["left_arm_qpos"]],
                               R.joint_action_to_robot(action)[R.ACTION_SLICES["left_arm"]], atol=1e-5)
    np.testing.assert_array_equal(env.render(), fake_og.last_obs["robot_r1"][R.CAMERAS["main"]]["rgb"][..., :3])

    env.close()
    assert fake_og.names()[-2:] == ["Environment.close", "clear"]
    env.close()
    assert fake_og.names().count("clear") == 1


def test_two_arms_and_potential_reward_against_the_fake(fake_og):
    """14-D actions become the 21-D IK command with the torso held where reset left it; potential reward."""
    fake_og.goal_schedule = [1, 3]
    env = gym.make("VLA/Behavior-v0", activity="can_meat", control_mode="two_arms", reward_type="potential",
                   config_overrides={"scene": {"load_room_types": ["kitchen"]}})
    env.reset(seed=0)
    config = fake_og.calls[1][2]["configs"]
    assert config["scene"]["load_room_types"] == ["kitchen"]
    controllers = config["robots"][0]["controller_config"]
    assert {controllers[arm]["name"] for arm in ("arm_left", "arm_right")} == {"InverseKinematicsController"}
    assert fake_og.environments[0].robot.action_dim == 21
    action = np.linspace(-1, 1, 14).astype(np.float32)
    rewards = []
    for _ in range(2):
        _, reward, *_ = env.step(action)
        rewards.append(reward)
        sent = fake_og.calls[-1][1][0]
        np.testing.assert_allclose(sent.numpy(), R.two_arms_action_to_robot(action, R.TORSO_START), atol=1e-6)
    assert rewards == pytest.approx([0.25, 0.5])  # OmniGibson's potential reward: the change in goal progress
    env.close()


def test_reset_leaves_the_global_random_generators_alone(fake_og):
    """reset(seed=s) touches no global RNG; the pre-sampled instance is the same for every seed."""
    env = gym.make("VLA/Behavior-can_meat-v0")
    random.seed(11)
    np.random.seed(11)
    torch.manual_seed(11)
    before = random.getstate(), np.random.get_state(), torch.get_rng_state()
    first, _ = env.reset(seed=1)
    env.step(np.zeros(23, dtype=np.float32))
    second, _ = env.reset(seed=2)
    after = random.getstate(), np.random.get_state(), torch.get_rng_state()
    assert after[0] == before[0] and torch.equal(after[2], before[2])
    assert all(np.array_equal(a, b) for a, b in zip(after[1], before[1], strict=True))
    np.testing.assert_array_equal(first["state"], second["state"])
    assert [kwargs for name, _, kwargs in fake_og.calls if name == "Environment.reset"] == [
        {"env_indices": None, "get_obs": True}] * 2
    env.close()


def test_task_change_clears_the_scene_before_rebuilding(fake_og):
    env = gym.make("VLA/Behavior-v0", activity=["can_meat", "turning_on_radio"])
    for task_id in (0, 1, 1):
        _, info = env.reset(seed=0, options={"task_id": task_id})
    assert info["task_name"] == "turning_on_radio"
    builds = [(name, kwargs) for name, _, kwargs in fake_og.calls if name in ("Environment", "clear")]
    assert [name for name, _ in builds] == ["Environment", "clear", "Environment"]
    config = builds[-1][1]["configs"]
    assert config["task"]["activity_name"] == "turning_on_radio"
    assert config["scene"]["scene_model"] == "house_single_floor"
    assert config["robots"][0]["position"] == SCENES["turning_on_radio"]["robot_start_position"]
    env.close()


def test_missing_pieces_behind_an_importable_omnigibson(tmp_path, monkeypatch):
    """An omnigibson without the R1 Pro, a missing data path, an activity without a scene: each says what to do."""
    FakeOmniGibson(str(tmp_path), registered_robots=("Fetch", "Tiago")).install(monkeypatch)
    with pytest.raises(B.BehaviorUnavailableError, match="omnigibson fake has no R1Pro robot"):
        gym.make("VLA/Behavior-can_meat-v0")
    FakeOmniGibson(str(tmp_path / "nowhere")).install(monkeypatch)
    with pytest.raises(B.BehaviorUnavailableError, match="does not exist; set OMNIGIBSON_DATA_PATH"):
        gym.make("VLA/Behavior-can_meat-v0")
    fake = FakeOmniGibson(str(tmp_path)).install(monkeypatch)
    env = gym.make("VLA/Behavior-v0", activity="make_pizza")
    with pytest.raises(ValueError, match="no pre-sampled scene.*scene_model=.*online_object_sampling=True"):
        env.reset(seed=0)
    assert "Environment" not in fake.names()


def test_the_fake_rejects_what_omnigibson_rejects(tmp_path, monkeypatch):
    """The fake's checks have teeth: each mistake below fails as OmniGibson fails (or would silently ignore)."""
    fake = FakeOmniGibson(str(tmp_path)).install(monkeypatch)
    og = sys.modules["omnigibson"]
    good = R.omnigibson_config("can_meat", SCENES["can_meat"])
    typo_proprio = R.merge(good, {})
    typo_proprio["robots"] = [dict(good["robots"][0], proprio_obs=["eef_left_position"])]
    for bad, message in [
        (R.merge(good, {"task": {"termination_config": {"max_step": 5}}}), "termination_config"),
        (R.merge(good, {"task": {"online_object_sampling": True}}), "presampled robot pose"),
        (R.merge(good, {"task": {"activity_nam": "can_meat"}}), "does not read"),
        (R.merge(good, {"env": {"physics_frequency": 100.0}}), "multiple"),
        (typo_proprio, "proprio_obs"),
    ]:
        with pytest.raises(AssertionError, match=message):
            og.Environment(configs=bad)
    env = og.Environment(configs=good)
    with pytest.raises(AssertionError, match="dimension 23"):
        env.step(torch.zeros(14))
    with pytest.raises(AssertionError, match="og.clear"):
        og.Environment(configs=good)
    og.clear()
    with pytest.raises(AssertionError, match="cleared"):
        env.reset()
    assert fake.gm.USE_GPU_DYNAMICS is True  # read once: OmniGibson then refuses a change outside unlocked()
    with pytest.raises(AssertionError, match="unlocked"):
        fake.gm.USE_GPU_DYNAMICS = False


# ------------------------------------------------------------------------------------- errors
@needs_no_omnigibson
def test_missing_simulator_message_lists_what_is_needed():
    with pytest.raises(MissingSimulatorError) as caught:
        gym.make("VLA/Behavior-can_meat-v0")
    message = str(caught.value)
    for needed in ("NVIDIA RTX", "driver", "Isaac Sim", "R1 Pro", "BEHAVIOR-1K", "OMNIGIBSON_DATA_PATH",
                   "./setup.sh", "docs/behavior.md"):
        assert needed in message, needed


def test_argument_errors_come_before_the_simulator_check():
    with pytest.raises(ValueError, match="camera roles"):
        gym.make("VLA/Behavior-can_meat-v0", cameras=("wrist",))
    with pytest.raises(ValueError, match="control_mode"):
        gym.make("VLA/Behavior-can_meat-v0", control_mode="ee")
    with pytest.raises(ValueError, match="activity='can_meat'"):
        gym.make("VLA/Behavior-v0")
    with pytest.raises(T.UnknownActivityError):
        gym.make("VLA/Behavior-v0", activity="make_pizzza")
    with pytest.raises(ValueError, match="one activity"):
        gym.make("VLA/Behavior50-v0", instruction="do it")


def test_imports_stay_light():
    code = ("import sys, vla_gym, vla_gym.tasks.behavior, vla_gym.backends.behavior.env, vla_gym.backends.behavior.r1pro;"
            "print(sorted(m for m in ('omnigibson', 'torch', 'bddl', 'isaacsim') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- real OmniGibson (GPU only)
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_OMNIGIBSON, reason="needs OmniGibson on Isaac Sim (NVIDIA RTX GPU)")
def test_real_omnigibson_episode():
    env = gym.make("VLA/Behavior-turning_on_radio-v0", render_mode="rgb_array")
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and info["task_name"] == "turning_on_radio"
    for _ in range(3):
        obs, _, _, truncated, info = env.step(np.zeros(23, dtype=np.float32))
    assert obs["state"].shape == (37,) and not truncated and "goal_progress" in info
    env.close()
