"""The R1 Pro in BEHAVIOR-1K, in pure numpy: what vla_gym sends to OmniGibson and reads back.

Nothing here imports OmniGibson, Isaac Sim or torch, so all of it runs (and is tested) anywhere.
:mod:`vla_gym.backends.behavior.env` makes the simulator calls and uses these functions for everything
between them:

- actions: :func:`joint_action_to_robot` (23-D ``joint`` mode), :func:`two_arms_action_to_robot`
  (14-D ``two_arms`` mode), :func:`robot_command` (either), :func:`robot_to_joint_action` (the
  challenge demonstrations' raw actions back to [-1, 1]);
- observations: :func:`observation_images` (cameras -> uint8 RGB at the env's size),
  :func:`observation_state` (proprioception -> the 37-D ``state``), both on OmniGibson's nested or
  ``::``-flattened dicts of torch tensors or numpy arrays;
- step results: :func:`single` (unbatch), :func:`success_from_info`, :func:`goal_progress`;
- configuration: :func:`omnigibson_config` (the ``og.Environment(configs=...)`` dict),
  :func:`robot_config`, :func:`controller_config`, and :func:`find_scene` (where an activity loads).

    >>> import numpy as np
    >>> command = joint_action_to_robot(np.zeros(23))        # joint positions mid-range, grippers at 0
    >>> command.shape, command[ACTION_SLICES["base"]]
    ((23,), array([0., 0., 0.]))
    >>> omnigibson_config("can_meat", {"scene_model": "Rs_int"})["robots"][0]["type"]
    'R1Pro'

Layouts (see docs/behavior.md): :data:`ACTION_SLICES` (23-D), :data:`TWO_ARMS_SLICES` (14-D),
:data:`STATE_SLICES` (37-D), :data:`CAMERAS` (role -> R1 Pro sensor name).
"""
from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import yaml

from vla_gym.core.geometry import quat_to_axis_angle

ROBOT_NAME = "robot_r1"
ROBOT_TYPE = "R1Pro"
CONTROL_HZ = 30.0
PHYSICS_HZ = 120.0
#: camera role -> R1 Pro sensor; OmniGibson returns its image as obs[ROBOT_NAME][sensor]["rgb"]
CAMERAS = {
    "main": f"{ROBOT_NAME}:zed_link:Camera:0",
    "left_wrist": f"{ROBOT_NAME}:left_realsense_link:Camera:0",
    "right_wrist": f"{ROBOT_NAME}:right_realsense_link:Camera:0",
}
#: head camera aperture used when the challenge demonstrations were recorded
HEAD_HORIZONTAL_APERTURE = 40.0

#: named parts of the 23-D action (control_mode="joint"); the robot command has the same layout
ACTION_SLICES = {
    "base": slice(0, 3), "torso": slice(3, 7), "left_arm": slice(7, 14), "left_gripper": slice(14, 15),
    "right_arm": slice(15, 22), "right_gripper": slice(22, 23),
}
#: named parts of the 14-D action (control_mode="two_arms")
TWO_ARMS_SLICES = {
    "left_arm": slice(0, 6), "left_gripper": slice(6, 7), "right_arm": slice(7, 13), "right_gripper": slice(13, 14),
}
#: robot command layout in two_arms mode: the arms' IK controllers take 6-D commands (21-D in all)
TWO_ARMS_ROBOT_SLICES = {
    "base": slice(0, 3), "torso": slice(3, 7), "left_arm": slice(7, 13), "left_gripper": slice(13, 14),
    "right_arm": slice(14, 20), "right_gripper": slice(20, 21),
}
#: control mode -> action dimension
CONTROL_MODES = {"joint": 23, "two_arms": 14}

#: joint position limits (rad) of the R1 Pro, as used by the BEHAVIOR-1K challenge (JOINT_RANGE)
JOINT_LIMITS = {
    "torso": ((-1.1345, -2.7925, -1.8326, -3.0543), (1.8326, 2.5307, 1.5708, 3.0543)),
    "left_arm": ((-4.4506, -0.1745, -2.3562, -2.0944, -2.3562, -1.0472, -1.5708),
                 (1.3090, 3.1416, 2.3562, 0.3491, 2.3562, 1.0472, 1.5708)),
    "right_arm": ((-4.4506, -3.1416, -2.3562, -2.0944, -2.3562, -1.0472, -1.5708),
                  (1.3090, 0.1745, 2.3562, 0.3491, 2.3562, 1.0472, 1.5708)),
}
#: base velocity limits: the base controller maps [-1, 1] onto +-0.75 m/s (x, y) and +-1 rad/s (yaw)
BASE_VELOCITY_LIMITS = (0.75, 0.75, 1.0)
#: two_arms mode: an end-effector command of 1 moves this far per control step (m, rad)
EE_DELTA_LIMITS = (0.05, 0.2)
#: torso joint positions of the challenge's start pose (BEHAVIOR-1K robot config reset_joint_pos)
TORSO_START = (1.025, -1.45, -0.47, 0.0)
#: 28 joints: 6 virtual base joints, 4 torso, 14 arm (interleaved left/right), 4 fingers (open)
RESET_JOINT_POS = (0.0,) * 6 + TORSO_START + (0.0,) * 14 + (0.05,) * 4

#: proprioception the robot is asked for (proprio_obs), in order, with dimensions
PROPRIO = (
    ("base_qvel", 3), ("trunk_qpos", 4),
    ("arm_left_qpos", 7), ("gripper_left_qpos", 2), ("eef_left_pos", 3), ("eef_left_quat", 4),
    ("arm_right_qpos", 7), ("gripper_right_qpos", 2), ("eef_right_pos", 3), ("eef_right_quat", 4),
)
PROPRIO_DIM = sum(dim for _, dim in PROPRIO)
#: layout of the unified 37-D ``state`` (end-effector poses in the robot base frame)
STATE_SLICES = {
    "base_velocity": slice(0, 3), "torso_qpos": slice(3, 7),
    "left_arm_qpos": slice(7, 14), "left_gripper_qpos": slice(14, 16),
    "left_eef_pos": slice(16, 19), "left_eef_axis_angle": slice(19, 22),
    "right_arm_qpos": slice(22, 29), "right_gripper_qpos": slice(29, 31),
    "right_eef_pos": slice(31, 34), "right_eef_axis_angle": slice(34, 37),
}
STATE_DIM = 37
#: OmniGibson's own timeout is disabled: VLAEnv owns the per-task episode limit
NO_TIMEOUT = 10**9

#: per-task scene and robot start pose of the challenge tasks, inside the data path
CHALLENGE_TASKS_FILE = os.path.join("2025-challenge-task-instances", "metadata", "available_tasks.yaml")


# ------------------------------------------------------------------------------------- action mapping
def _check_shape(action, dim: int, mode: str) -> np.ndarray:
    array = np.asarray(action, dtype=np.float64)
    if array.shape != (dim,):
        raise ValueError(f"a {mode} action has shape ({dim},), got {array.shape}")
    return array


def _scale(unit: np.ndarray, limits) -> np.ndarray:
    low, high = (np.asarray(bound) for bound in limits)
    return low + (unit + 1.0) / 2.0 * (high - low)


def _unscale(value: np.ndarray, limits) -> np.ndarray:
    low, high = (np.asarray(bound) for bound in limits)
    return np.clip((np.asarray(value) - low) / (high - low) * 2.0 - 1.0, -1.0, 1.0)


def _map_joint_layout(values: np.ndarray, map_joints) -> np.ndarray:
    """Apply ``map_joints(values, limits)`` to the torso and arm slices, flip the grippers' sign, keep the base."""
    mapped = values.copy()
    for part in ("torso", "left_arm", "right_arm"):
        mapped[ACTION_SLICES[part]] = map_joints(values[ACTION_SLICES[part]], JOINT_LIMITS[part])
    for part in ("left_gripper", "right_gripper"):
        mapped[ACTION_SLICES[part]] = -values[ACTION_SLICES[part]]
    return mapped


def joint_action_to_robot(action) -> np.ndarray:
    """23-D unified action in [-1, 1] -> the R1 Pro controllers' 23-D command.

    Base: unchanged (the base controller scales [-1, 1] itself). Torso and arms: absolute joint
    positions, [-1, 1] spread over :data:`JOINT_LIMITS`. Grippers: sign flipped, because
    OmniGibson's gripper controller reads +1 as open and vla_gym uses +1 for close.

    >>> joint_action_to_robot(np.zeros(23))[ACTION_SLICES["torso"]].round(3)
    array([ 0.349, -0.131, -0.131,  0.   ])
    """
    return _map_joint_layout(np.clip(_check_shape(action, 23, "joint"), -1.0, 1.0), _scale)


def robot_to_joint_action(command) -> np.ndarray:
    """Inverse of :func:`joint_action_to_robot`: e.g. the BEHAVIOR challenge demos' actions -> [-1, 1]."""
    return _map_joint_layout(_check_shape(command, 23, "joint"), _unscale)


def two_arms_action_to_robot(action, torso_hold: Sequence[float] = TORSO_START) -> np.ndarray:
    """14-D two-arm action -> the 21-D command of the two_arms controllers (:data:`TWO_ARMS_ROBOT_SLICES`).

    The base gets zero velocity, the torso its ``torso_hold`` joint positions, each arm its 6-D
    end-effector delta (the IK controller scales [-1, 1] by :data:`EE_DELTA_LIMITS`), each gripper
    its sign-flipped value.

    >>> two_arms_action_to_robot(np.ones(14))[TWO_ARMS_ROBOT_SLICES["base"]]
    array([0., 0., 0.])
    """
    action = np.clip(_check_shape(action, 14, "two_arms"), -1.0, 1.0)
    command = np.zeros(21)
    command[TWO_ARMS_ROBOT_SLICES["torso"]] = _check_shape(torso_hold, 4, "torso_hold")
    for part in ("left_arm", "right_arm"):
        command[TWO_ARMS_ROBOT_SLICES[part]] = action[TWO_ARMS_SLICES[part]]
    for part in ("left_gripper", "right_gripper"):
        command[TWO_ARMS_ROBOT_SLICES[part]] = -action[TWO_ARMS_SLICES[part]]
    return command


def robot_command(action, control_mode: str, torso_hold: Sequence[float] = TORSO_START) -> np.ndarray:
    """Dispatch to :func:`joint_action_to_robot` or :func:`two_arms_action_to_robot`."""
    if control_mode == "joint":
        return joint_action_to_robot(action)
    return two_arms_action_to_robot(action, torso_hold)


# -------------------------------------------------------------------------------- observation mapping
def to_numpy(value) -> np.ndarray:
    """torch tensor (any device) or array-like -> numpy array."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def flatten_observation(obs: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested OmniGibson obs -> flat ``"robot_r1::<sensor>::rgb"`` keys (flat input passes through)."""
    flat = {}
    for key, value in obs.items():
        name = f"{prefix}::{key}" if prefix else key
        if isinstance(value, Mapping):
            flat.update(flatten_observation(value, name))
        else:
            flat[name] = value
    return flat


def _resize_nearest(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    rows = np.arange(size[0]) * image.shape[0] // size[0]
    cols = np.arange(size[1]) * image.shape[1] // size[1]
    return image[rows][:, cols]


def observation_images(obs: Mapping[str, Any], camera_roles: Sequence[str],
                       image_size: tuple[int, int]) -> dict[str, np.ndarray]:
    """OmniGibson obs -> {role: uint8 (H, W, 3)}: alpha dropped, resized (nearest) if the sensor differs."""
    flat = flatten_observation(obs)
    images = {}
    for role in camera_roles:
        key = f"{ROBOT_NAME}::{CAMERAS[role]}::rgb"
        if key not in flat:
            found = sorted(k for k in flat if k.endswith("::rgb"))
            raise KeyError(f"no {key!r} in the OmniGibson observation (rgb keys found: {found})")
        image = to_numpy(flat[key])
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] not in (3, 4):
            raise ValueError(f"{key} must be uint8 (H, W, 3|4), got {image.dtype} {image.shape}")
        image = image[..., :3]
        if image.shape[:2] != tuple(image_size):
            image = _resize_nearest(image, image_size)
        images[role] = np.ascontiguousarray(image)
    return images


def _proprio_parts(flat: Mapping[str, Any]) -> dict[str, np.ndarray]:
    key = f"{ROBOT_NAME}::proprio"
    if key in flat:  # one vector in PROPRIO order (robot config proprio_obs)
        vector = to_numpy(flat[key]).astype(np.float64).reshape(-1)
        if vector.shape != (PROPRIO_DIM,):
            raise ValueError(f"{key} has {vector.size} values; the robot config asks for {PROPRIO_DIM} "
                             f"({', '.join(name for name, _ in PROPRIO)})")
        bounds = np.cumsum([0] + [dim for _, dim in PROPRIO])
        spans = zip(PROPRIO, bounds[:-1], bounds[1:], strict=True)
        return {name: vector[start:stop] for (name, _), start, stop in spans}
    parts = {name: to_numpy(flat.get(f"{key}::{name}", np.empty(0))).astype(np.float64).reshape(-1)
             for name, _ in PROPRIO}
    wrong = [f"{name} ({parts[name].size}, want {dim})" for name, dim in PROPRIO if parts[name].size != dim]
    if wrong:
        raise ValueError(f"proprioception missing or malformed in the OmniGibson observation: {', '.join(wrong)}")
    return parts


def observation_state(obs: Mapping[str, Any]) -> np.ndarray:
    """OmniGibson obs -> the 37-D float32 ``state`` (:data:`STATE_SLICES`); quaternions are xyzw."""
    parts = _proprio_parts(flatten_observation(obs))
    return np.concatenate([
        parts["base_qvel"], parts["trunk_qpos"],
        parts["arm_left_qpos"], parts["gripper_left_qpos"],
        parts["eef_left_pos"], quat_to_axis_angle(parts["eef_left_quat"], scalar_first=False),
        parts["arm_right_qpos"], parts["gripper_right_qpos"],
        parts["eef_right_pos"], quat_to_axis_angle(parts["eef_right_quat"], scalar_first=False),
    ]).astype(np.float32)


# ----------------------------------------------------------------------------------------- step results
def single(value):
    """Unbatch OmniGibson results: newer versions return per-env lists / (1,) tensors.

    >>> single([{"success": True}]), single(np.array([0.25])), single(0.5)
    ({'success': True}, 0.25, 0.5)
    """
    if isinstance(value, (list, tuple)) and len(value) == 1:
        return value[0]
    if hasattr(value, "shape") and getattr(value, "ndim", 0) >= 1 and np.prod(value.shape) == 1:
        return to_numpy(value).reshape(-1)[0].item()
    return value


def success_from_info(info: Mapping[str, Any]) -> bool:
    """The BEHAVIOR task's goal predicates, as reported in ``info["done"]["success"]``."""
    done = info.get("done", {})
    return bool(single(done.get("success", info.get("success", False))))


def goal_progress(goal_status) -> float | None:
    """Fraction of satisfied goal conditions from OmniGibson's {"satisfied": [...], "unsatisfied": [...]}.

    ``PredicateGoal.goal_status`` holds the indices of the goal conditions in each list (one dict,
    or a per-env list of them in newer versions); None before the first step.

    >>> goal_progress({"satisfied": [0, 2], "unsatisfied": [1, 3]})
    0.5
    """
    goal_status = single(goal_status)
    if not goal_status:
        return None
    satisfied, unsatisfied = len(goal_status.get("satisfied", ())), len(goal_status.get("unsatisfied", ()))
    return satisfied / (satisfied + unsatisfied) if satisfied + unsatisfied else None


# ---------------------------------------------------------------------------------- OmniGibson config
def controller_config(control_mode: str, ee_delta_limits: tuple[float, float] = EE_DELTA_LIMITS) -> dict:
    """R1 Pro controllers: the 2025 challenge's joint controllers, or IK arms for ``two_arms``."""
    joint = {"name": "JointController", "motor_type": "position", "pos_kp": 150, "command_input_limits": None,
             "command_output_limits": None, "use_impedances": False, "use_delta_commands": False}
    gripper = {"name": "MultiFingerGripperController", "mode": "smooth", "command_input_limits": "default",
               "command_output_limits": "default"}
    base = {"name": "HolonomicBaseJointController", "motor_type": "velocity", "vel_kp": 150,
            "command_input_limits": [[-1.0] * 3, [1.0] * 3],
            "command_output_limits": [[-v for v in BASE_VELOCITY_LIMITS], list(BASE_VELOCITY_LIMITS)],
            "use_impedances": False}
    arm = dict(joint)
    if control_mode == "two_arms":
        position, rotation = ee_delta_limits
        limit = [position] * 3 + [rotation] * 3
        arm = {"name": "InverseKinematicsController", "mode": "pose_delta_ori", "motor_type": "position",
               "pos_kp": 150, "command_input_limits": "default",
               "command_output_limits": [[-v for v in limit], limit], "use_impedances": False}
    return {"base": base, "trunk": dict(joint), "arm_left": dict(arm), "arm_right": dict(arm),
            "gripper_left": dict(gripper), "gripper_right": dict(gripper), "camera": {"name": "NullJointController"}}


def robot_config(image_size: tuple[int, int], control_mode: str, scene: Mapping[str, Any] | None = None,
                 ee_delta_limits: tuple[float, float] = EE_DELTA_LIMITS) -> dict:
    """The R1 Pro entry of the OmniGibson config (start pose from the challenge task file if known)."""
    config = {
        "type": ROBOT_TYPE, "name": ROBOT_NAME, "action_normalize": False, "self_collisions": True,
        "grasping_mode": "assisted", "obs_modalities": ["rgb", "proprio"],
        "proprio_obs": [name for name, _ in PROPRIO],
        "controller_config": controller_config(control_mode, ee_delta_limits),
        "sensor_config": {"VisionSensor": {"sensor_kwargs": {"image_height": image_size[0],
                                                              "image_width": image_size[1]}}},
        "reset_joint_pos": list(RESET_JOINT_POS),
    }
    for key, source in (("position", "robot_start_position"), ("orientation", "robot_start_orientation")):
        if scene and scene.get(source) is not None:
            config[key] = list(scene[source])
    return config


def merge(base: dict, overrides: Mapping[str, Any] | None) -> dict:
    """Recursive dict merge: ``overrides`` wins, nested dicts are merged (returns a new dict)."""
    merged = dict(base)
    for key, value in (overrides or {}).items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def omnigibson_config(activity: str, scene: Mapping[str, Any], image_size: tuple[int, int] = (224, 224),
                      control_mode: str = "joint", online_object_sampling: bool = False,
                      ee_delta_limits: tuple[float, float] = EE_DELTA_LIMITS,
                      overrides: Mapping[str, Any] | None = None) -> dict:
    """The ``og.Environment(configs=...)`` dict for one activity (json-serializable).

    >>> omnigibson_config("can_meat", {"scene_model": "Rs_int"})["task"]["activity_name"]
    'can_meat'
    """
    config = {
        "env": {"action_frequency": CONTROL_HZ, "rendering_frequency": CONTROL_HZ, "physics_frequency": PHYSICS_HZ},
        "scene": {"type": "InteractiveTraversableScene", "scene_model": scene["scene_model"],
                  "load_room_types": None, "load_room_instances": scene.get("load_room_instances"),
                  "include_robots": False},
        "robots": [robot_config(image_size, control_mode, scene, ee_delta_limits)],
        "task": {"type": "BehaviorTask", "activity_name": activity, "activity_definition_id": 0,
                 "activity_instance_id": 0, "online_object_sampling": online_object_sampling,
                 # newer BehaviorTask versions refuse presampled robot poses with online sampling
                 "use_presampled_robot_pose": not online_object_sampling,
                 "debug_object_sampling": False, "highlight_task_relevant_objects": False,
                 "termination_config": {"max_steps": NO_TIMEOUT}, "reward_config": {"r_potential": 1.0},
                 "include_obs": False},
    }
    return merge(config, overrides)


def find_scene(activity: str, data_path: str) -> dict | None:
    """Where ``activity`` can be loaded: {"scene_model", ...} or None.

    Challenge tasks: the first (seed) instance in ``<data>/2025-challenge-task-instances/metadata/
    available_tasks.yaml`` (scene, robot start pose, rooms), as the challenge evaluator does.
    Other activities: the first scene that ships a pre-sampled ``<scene>_task_<activity>_0_0_template.json``.
    """
    tasks_file = os.path.join(data_path, CHALLENGE_TASKS_FILE)
    if os.path.isfile(tasks_file):
        with open(tasks_file) as file:
            entries = (yaml.safe_load(file) or {}).get(activity)
        if entries:
            return dict(entries[0] if isinstance(entries, list) else entries)
    pattern = os.path.join(data_path, "*", "scenes", "*", "json", f"*_task_{activity}_0_0_template.json")
    templates = sorted(glob.glob(pattern))
    if templates:
        return {"scene_model": os.path.basename(os.path.dirname(os.path.dirname(templates[0])))}
    return None
