"""A FAKE ``omnigibson`` that records calls: the stand-in for OmniGibson on NVIDIA Isaac Sim.

Isaac Sim needs an NVIDIA RTX GPU and cannot be installed on the machines this suite runs on
(docs/behavior.md), so vla_gym's BEHAVIOR backend is tested against this fake. It simulates
nothing. It

- provides the names the backend uses, where OmniGibson has them: ``omnigibson.Environment``,
  ``omnigibson.clear``, ``omnigibson.macros.gm`` (settings that lock once read, ``unlocked()``),
  ``omnigibson.robots.REGISTERED_ROBOTS``;
- records every call in :attr:`FakeOmniGibson.calls` as ``(name, args, kwargs)``;
- checks each call as OmniGibson does, and more strictly where OmniGibson would silently ignore a
  mistake (it drops config keys no class reads: here they are errors);
- answers with data shaped like OmniGibson's: nested observation dicts with an RGBA uint8 torch
  frame per camera and a float32 ``proprio`` vector in the order the robot config asks for, the
  2025 challenge's single-env results or the newer batched ones (``generation="batched"``), and
  goal predicates satisfied on a schedule the test sets (:attr:`FakeOmniGibson.goal_schedule`).
  Its only "dynamics": joints under an absolute ``JointController`` move to their command.

Written from BEHAVIOR-1K's OmniGibson source (read, not copied): ``omnigibson/__init__.py``,
``macros.py``, ``envs/env_base.py`` (``Environment(configs)``, ``reset``, ``step``, ``close``,
``default_config``), ``tasks/task_base.py`` and ``tasks/behavior_task.py`` (task arguments, the
termination/reward config checks, ``info["done"]``), ``termination_conditions/predicate_goal.py``
(``goal_status``), ``reward_functions/potential_reward.py``, ``robots/r1.py`` / ``r1pro.py``
(controller order, arguments), ``learning/eval.py`` and ``learning/utils/eval_utils.py`` (the
challenge's config, camera names, the R1 Pro's proprioception keys).

    fake = FakeOmniGibson(data_path=str(tmp_path))
    fake.install(monkeypatch)                   # sys.modules["omnigibson"] = the fake, for one test
    env = gym.make("VLA/Behavior-can_meat-v0")
    fake.names()                                # ['gm.unlocked', 'Environment', 'scene.object_registry', ...]
"""
from __future__ import annotations

import contextlib
import importlib.machinery
import sys
import types

import torch

GENERATIONS = ("2025", "batched")

# ------------------------------------------------------------- what OmniGibson accepts (from its source)
#: og.Environment's config sections (Environment.default_config, plus the optional scene_graph)
CONFIG_SECTIONS = {"env", "render", "scene", "robots", "objects", "task", "wrapper", "scene_graph"}
ENV_KEYS = {"action_frequency", "rendering_frequency", "physics_frequency", "device", "automatic_reset",
            "flatten_action_space", "flatten_obs_space", "external_sensors", "num_envs", "num_rerenders_on_reset"}
SCENE_TYPES = {"Scene", "StaticTraversableScene", "InteractiveTraversableScene"}
SCENE_KEYS = {"type", "scene_model", "scene_instance", "scene_file", "load_room_types", "load_room_instances",
              "load_object_categories", "not_load_object_categories", "load_task_relevant_only", "include_robots",
              "trav_map_resolution", "default_erosion_radius", "trav_map_with_objects", "num_waypoints",
              "waypoint_resolution", "seg_map_resolution", "use_floor_plane", "floor_plane_visible", "use_skybox"}
#: BehaviorTask.__init__ arguments (the 2025 challenge version and the newest together) and its "type"
BEHAVIOR_TASK_KEYS = {"type", "activity_name", "activity_definition_id", "activity_instance_id", "predefined_problem",
                      "online_object_sampling", "use_presampled_robot_pose", "randomize_presampled_pose",
                      "presampled_pose_key", "sampling_whitelist", "sampling_blacklist", "debug_object_sampling",
                      "highlight_task_relevant_objects", "termination_config", "reward_config", "include_obs"}
#: BaseTask asserts these are the only keys (BehaviorTask's default termination / reward configs)
TERMINATION_KEYS = {"max_steps"}
REWARD_KEYS = {"r_potential"}
#: R1.__init__ arguments plus what Environment pops before building a robot
ROBOT_KEYS = {"type", "model", "name", "position", "orientation", "pose_frame", "relative_prim_path", "scale",
              "visible", "visual_only", "self_collisions", "link_physics_materials", "load_config", "abilities",
              "control_freq", "controller_config", "action_type", "action_normalize", "reset_joint_pos",
              "obs_modalities", "include_sensor_names", "exclude_sensor_names", "proprio_obs", "sensor_config",
              "grasping_mode", "disable_grasp_handling", "finger_static_friction", "finger_dynamic_friction",
              "default_reset_mode"}
SENSOR_MODALITIES = {"rgb", "depth", "depth_linear", "normal", "seg_semantic", "seg_instance", "seg_instance_id",
                     "flow", "bbox_2d_tight", "bbox_2d_loose", "bbox_3d", "camera_params", "proprio"}
GRASPING_MODES = {"physical", "assisted", "sticky"}
CONTROLLERS = {"JointController", "HolonomicBaseJointController", "InverseKinematicsController",
               "OperationalSpaceController", "MultiFingerGripperController", "NullJointController"}
#: the R1 / R1 Pro's controller groups in action order (R1._raw_controller_order)
R1PRO_CONTROLLER_ORDER = ("base", "trunk", "arm_left", "gripper_left", "arm_right", "gripper_right")
R1PRO_GROUP_CONTROLLERS = {"base": {"HolonomicBaseJointController"}, "trunk": {"JointController"},
                           "arm_left": {"JointController", "InverseKinematicsController", "OperationalSpaceController"},
                           "gripper_left": {"MultiFingerGripperController"}}
R1PRO_GROUP_CONTROLLERS.update(arm_right=R1PRO_GROUP_CONTROLLERS["arm_left"],
                               gripper_right=R1PRO_GROUP_CONTROLLERS["gripper_left"])
#: 28 joints: 6 virtual base joints, 4 torso, 14 arm joints interleaved left/right, 2 + 2 fingers
R1PRO_N_DOF = 28
R1PRO_JOINTS = {"trunk": slice(6, 10), "arm_left": slice(10, 24, 2), "arm_right": slice(11, 24, 2),
                "gripper_left": slice(24, 26), "gripper_right": slice(26, 28)}
#: the R1 Pro's camera links; OmniGibson names a robot's sensor "<robot name>:<link>:Camera:0"
R1PRO_CAMERA_LINKS = ("zed_link", "left_realsense_link", "right_realsense_link")
#: every proprioception key of the R1 Pro with its size (the challenge's 256-D PROPRIOCEPTION_INDICES)
R1PRO_PROPRIO = {
    "joint_qpos": 28, "joint_qpos_sin": 28, "joint_qpos_cos": 28, "joint_qvel": 28, "joint_qeffort": 28,
    "robot_pos": 3, "robot_ori_cos": 3, "robot_ori_sin": 3, "robot_2d_ori": 1, "robot_2d_ori_cos": 1,
    "robot_2d_ori_sin": 1, "robot_lin_vel": 3, "robot_ang_vel": 3,
    **{f"{key}_{side}{part}": size for side in ("left", "right") for key, part, size in (
        ("arm", "_qpos", 7), ("arm", "_qpos_sin", 7), ("arm", "_qpos_cos", 7), ("arm", "_qvel", 7),
        ("eef", "_pos", 3), ("eef", "_quat", 4), ("gripper", "_qpos", 2), ("gripper", "_qvel", 2))},
    "trunk_qpos": 4, "trunk_qvel": 4, "base_qpos": 3, "base_qpos_sin": 3, "base_qpos_cos": 3, "base_qvel": 3,
}
#: where the fake puts each end effector (robot frame) and how it turns it (xyzw): fixed, it simulates nothing
EEF_POSE = {"left": ((0.5, 0.25, 1.0), (0.0, 0.0, 0.0, 1.0)), "right": ((0.5, -0.25, 1.0), (0.0, 0.0, 0.0, 1.0))}


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(f"[fake omnigibson] {message}")


def _unknown(keys, known, where: str) -> None:
    unknown = sorted(set(keys) - set(known))
    _require(not unknown, f"{where}: keys OmniGibson does not read {unknown}")


# -------------------------------------------------------------------------------------------- macros
class FakeMacros:
    """``omnigibson.macros.gm``: a setting cannot change once read, except inside ``unlocked()`` (MacroDict)."""

    def __init__(self, fake: FakeOmniGibson, **values):
        object.__setattr__(self, "_fake", fake)
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_read", set())
        object.__setattr__(self, "_locked", True)

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name not in values:
            raise AttributeError(f"'MacroDict' object has no attribute '{name}'")
        self._read.add(name)
        return values[name]

    def __setattr__(self, name, value):
        _require(not (self._locked and name in self._read),
                 f"gm.{name} was already read; OmniGibson refuses the change outside `with gm.unlocked()`")
        self._values[name] = value

    @contextlib.contextmanager
    def unlocked(self):
        self._fake.record("gm.unlocked")
        object.__setattr__(self, "_locked", False)
        try:
            yield
        finally:
            object.__setattr__(self, "_locked", True)


# ---------------------------------------------------------------------------------- robot, scene, task
class FakeVisionSensor:
    def __init__(self, name: str, height: int, width: int):
        self.name, self.image_height, self.image_width = name, height, width
        self.horizontal_aperture = 20.955  # Isaac Sim's default camera aperture (mm)


class FakeR1Pro:
    """The robot ``Environment`` builds from a robot config; it keeps joint positions and commands."""

    def __init__(self, config: dict):
        _unknown(config, ROBOT_KEYS, "robots[0]")
        # the 2025 OmniGibson reads "type": "R1Pro"; newer ones prefer "model": "r1pro" and lower-case a "type"
        model = config.get("model") or str(config.get("type", "")).lower()
        _require(model == "r1pro", f"robot {model!r}: this fake models the R1 Pro only")
        self.name = config["name"]
        self.config = config
        controllers = config.get("controller_config") or {}
        missing = [group for group in R1PRO_CONTROLLER_ORDER if group not in controllers]
        _require(not missing, f"controller_config lacks the R1 Pro groups {missing}")
        for group, controller in controllers.items():
            if group == "camera":  # the challenge's config has it; the R1 Pro has no camera joints
                _require(controller == {"name": "NullJointController"}, "camera must be a NullJointController")
                continue
            _require(group in R1PRO_CONTROLLER_ORDER, f"the R1 Pro has no controller group {group!r}")
            _require(controller.get("name") in R1PRO_GROUP_CONTROLLERS[group],
                     f"{group}: {controller.get('name')!r} is not one of {sorted(R1PRO_GROUP_CONTROLLERS[group])}")
        self.controllers = {group: controllers[group] for group in R1PRO_CONTROLLER_ORDER}
        self.action_dims = {group: self._dim(group, c) for group, c in self.controllers.items()}
        self.action_dim = sum(self.action_dims.values())

        modalities = list(config.get("obs_modalities", ("rgb", "proprio")))
        _unknown(modalities, SENSOR_MODALITIES, "obs_modalities")
        self.modalities = modalities
        proprio = config.get("proprio_obs", "default")
        _require(proprio != "default", "pass proprio_obs explicitly (the default depends on the OmniGibson version)")
        _unknown(proprio, R1PRO_PROPRIO, "proprio_obs")
        self.proprio_obs = list(proprio)
        _require(config.get("grasping_mode", "physical") in GRASPING_MODES, "grasping_mode")
        kwargs = config.get("sensor_config", {}).get("VisionSensor", {}).get("sensor_kwargs", {})
        height, width = kwargs.get("image_height", 128), kwargs.get("image_width", 128)
        _require(isinstance(height, int) and isinstance(width, int), "image_height / image_width must be ints")
        self.sensors = {f"{self.name}:{link}:Camera:0": FakeVisionSensor(f"{self.name}:{link}:Camera:0",
                                                                          height, width)
                        for link in R1PRO_CAMERA_LINKS}
        reset = config.get("reset_joint_pos")
        _require(reset is None or len(reset) == R1PRO_N_DOF, f"reset_joint_pos needs {R1PRO_N_DOF} values")
        self.reset_joint_pos = torch.zeros(R1PRO_N_DOF) if reset is None else torch.tensor(reset, dtype=torch.float32)
        self.joint_pos = self.reset_joint_pos.clone()
        self.commands: list[torch.Tensor] = []

    @staticmethod
    def _dim(group: str, controller: dict) -> int:
        if group == "base":
            return 3
        if group == "trunk":
            return 4
        if group.startswith("gripper"):
            return 1  # MultiFingerGripperController in "smooth" mode: one value for both fingers
        return 7 if controller["name"] == "JointController" else 6  # IK / OSC: a 6-D pose delta

    def apply_action(self, action: torch.Tensor) -> None:
        _require(action.shape == (self.action_dim,),
                 f"Action must be dimension {self.action_dim}, got dim {tuple(action.shape)}")
        self.commands.append(action.clone())
        start = 0
        for group, dim in self.action_dims.items():
            controller = self.controllers[group]
            absolute = controller["name"] == "JointController" and not controller.get("use_delta_commands", False)
            if group in R1PRO_JOINTS and absolute:
                self.joint_pos[R1PRO_JOINTS[group]] = action[start:start + dim]
            start += dim

    def proprioception(self) -> torch.Tensor:
        q = self.joint_pos
        values = {"joint_qpos": q, "joint_qpos_sin": q.sin(), "joint_qpos_cos": q.cos(), "trunk_qpos": q[6:10]}
        for side in ("left", "right"):
            arm = q[R1PRO_JOINTS[f"arm_{side}"]]
            values.update({f"arm_{side}_qpos": arm, f"arm_{side}_qpos_sin": arm.sin(), f"arm_{side}_qpos_cos": arm.cos(),
                           f"gripper_{side}_qpos": q[R1PRO_JOINTS[f"gripper_{side}"]],
                           f"eef_{side}_pos": torch.tensor(EEF_POSE[side][0]),
                           f"eef_{side}_quat": torch.tensor(EEF_POSE[side][1])})
        parts = [values.get(name, torch.zeros(R1PRO_PROPRIO[name])).float() for name in self.proprio_obs]
        return torch.cat(parts)


class FakeScene:
    def __init__(self, fake: FakeOmniGibson, config: dict, robot: FakeR1Pro):
        _unknown(config, SCENE_KEYS, "scene")
        _require(config.get("type") in SCENE_TYPES, f"scene type {config.get('type')!r} is not registered")
        _require(bool(config.get("scene_model")), "scene needs a scene_model")
        self._fake, self.scene_model, self._robot = fake, config["scene_model"], robot

    def object_registry(self, key, value, default_val=None):
        self._fake.record("scene.object_registry", key, value)
        return self._robot if (key, value) == ("name", self._robot.name) else default_val


class FakePredicateGoal:
    """``termination_conditions.PredicateGoal``: goal_status lists satisfied / unsatisfied condition indices."""

    def __init__(self, num_conditions: int, batched: bool):
        self.num_conditions, self.batched, self.satisfied = num_conditions, batched, 0
        self._status = None

    def update(self, satisfied: int) -> None:
        self.satisfied = satisfied
        self._status = {"satisfied": list(range(satisfied)),
                        "unsatisfied": list(range(satisfied, self.num_conditions))}

    def reset(self) -> None:
        self.satisfied = 0
        self._status = {"satisfied": [], "unsatisfied": []}

    @property
    def goal_status(self):
        return [self._status] if self.batched else self._status


class FakeBehaviorTask:
    def __init__(self, config: dict, macros: FakeMacros, num_conditions: int, batched: bool):
        _unknown(config, BEHAVIOR_TASK_KEYS, "task (BehaviorTask)")
        _require(config.get("type") == "BehaviorTask", f"task type {config.get('type')!r}: expected BehaviorTask")
        _require(macros.ENABLE_OBJECT_STATES, "Must set gm.ENABLE_OBJECT_STATES=True in order to use BehaviorTask!")
        _require(isinstance(config.get("activity_name"), str), "Activity name must be specified for BehaviorTask!")
        _require(not (config.get("online_object_sampling", False) and config.get("use_presampled_robot_pose", True)),
                 "Cannot use presampled robot pose if online_object_sampling is True!")
        termination, reward = config.get("termination_config") or {}, config.get("reward_config") or {}
        _unknown(termination, TERMINATION_KEYS, "termination_config")
        _unknown(reward, REWARD_KEYS, "reward_config")
        self.activity_name = config["activity_name"]
        self.max_steps = termination.get("max_steps", 500)
        self.r_potential = reward.get("r_potential", 1.0)
        self._termination_conditions = {"timeout": object(), "predicate": FakePredicateGoal(num_conditions, batched)}

    @property
    def predicate(self) -> FakePredicateGoal:
        return self._termination_conditions["predicate"]


# --------------------------------------------------------------------------------------- environment
class FakeEnvironment:
    """``og.Environment``: built from one config dict; reset / step / close as in env_base.py."""

    def __init__(self, fake: FakeOmniGibson, configs: dict):
        _require(isinstance(configs, dict), f"configs must be a dict here, got {type(configs).__name__}")
        _unknown(configs, CONFIG_SECTIONS, "config")
        env = configs.get("env", {})
        _unknown(env, ENV_KEYS, "env")
        physics, rendering, action = (env.get(k, d) for k, d in (("physics_frequency", 120),
                                                                 ("rendering_frequency", 30),
                                                                 ("action_frequency", 30)))
        _require(physics % rendering == 0 and rendering % action == 0,
                 "physics frequency must be a multiple of rendering, rendering a multiple of action frequency")
        _require(env.get("num_envs", 1) == 1, "the backend runs one env per process")
        robots = configs.get("robots", [])
        _require(len(robots) == 1, f"one robot expected, got {len(robots)}")
        self._fake = fake
        self.config = configs
        self.robot = FakeR1Pro(robots[0])
        self.scene = FakeScene(fake, configs.get("scene", {}), self.robot)
        self.task = FakeBehaviorTask(configs.get("task", {}), fake.gm, fake.num_goal_conditions,
                                     fake.generation == "batched")
        self.closed = self.cleared = False
        self.steps = 0
        self._potential = 0.0
        self._reset_episode()  # Environment.load() ends with a reset

    # ------------------------------------------------------------------------------- gym-like API
    def reset(self, env_indices=None, get_obs=True, **kwargs):
        self._fake.record("Environment.reset", env_indices=env_indices, get_obs=get_obs, **kwargs)
        self._check_alive()
        self._reset_episode()
        obs = self._observation()
        return ([obs], {"obs_info": [{}]}) if self._batched else (obs, {})

    def step(self, action, n_render_iterations=1):
        self._fake.record("Environment.step", action, n_render_iterations=n_render_iterations)
        self._check_alive()
        _require(isinstance(action, torch.Tensor) and action.dtype == torch.float32,
                 f"the backend sends a torch float32 action, got {type(action).__name__}")
        self.robot.apply_action(action.reshape(-1))
        self.steps += 1
        schedule = self._fake.goal_schedule
        satisfied = schedule[min(self.steps, len(schedule)) - 1] if schedule else 0
        self.task.predicate.update(satisfied)
        score = satisfied / self.task.predicate.num_conditions
        reward, self._potential = self.task.r_potential * (score - self._potential), score  # PotentialReward
        success = satisfied == self.task.predicate.num_conditions
        timeout = self.steps >= self.task.max_steps
        info = {"reward": {"potential": {}, "reward_breakdown": {"potential": reward}},
                "done": {"success": success, "termination_conditions": {
                    "timeout": {"done": timeout, "success": False},
                    "predicate": {"done": success, "success": success}}},
                "episode_length": self.steps}
        obs = self._observation()
        if self._batched:
            return ([obs], torch.tensor([reward]), torch.tensor([success]), torch.tensor([timeout]), [info])
        return obs, reward, success, timeout, info

    def close(self):
        self._fake.record("Environment.close")
        self.closed = True

    # ------------------------------------------------------------------------------------ helpers
    @property
    def _batched(self) -> bool:
        return self._fake.generation == "batched"

    def _check_alive(self) -> None:
        _require(not self.cleared, "this Environment's scene was cleared by og.clear(); build a new one")

    def _reset_episode(self) -> None:
        self.robot.joint_pos = self.robot.reset_joint_pos.clone()
        self.task.predicate.reset()
        self.steps, self._potential = 0, 0.0

    def _observation(self) -> dict:
        """obs[robot name][sensor name]["rgb"] (H, W, 4) uint8 and obs[robot name]["proprio"] float32."""
        robot_obs = {}
        if "rgb" in self.robot.modalities:
            for index, sensor in enumerate(self.robot.sensors.values()):
                generator = torch.Generator().manual_seed(1000 * index + self.steps)
                frame = torch.randint(0, 256, (sensor.image_height, sensor.image_width, 4), dtype=torch.uint8,
                                      generator=generator)
                frame[..., 3] = 255
                robot_obs[sensor.name] = {"rgb": frame}
        if "proprio" in self.robot.modalities:
            robot_obs["proprio"] = self.robot.proprioception()
        self._fake.last_obs = {self.robot.name: robot_obs}
        return self._fake.last_obs


# ----------------------------------------------------------------------------------------- the module
class FakeOmniGibson:
    """The fake ``omnigibson`` package: holds the call record and the modules :meth:`install` puts in sys.modules.

    Args:
        data_path: what ``gm.DATA_PATH`` says (the backend reads the challenge task file there).
        generation: ``"2025"`` (single-env results, the challenge's OmniGibson) or ``"batched"``
            (per-env lists and (1,) tensors, newer OmniGibson).
        registered_robots: names in ``omnigibson.robots.REGISTERED_ROBOTS``.
        num_goal_conditions: goal predicates of every activity.
    """

    def __init__(self, data_path: str, generation: str = "2025", registered_robots=("R1Pro", "Fetch", "Tiago"),
                 num_goal_conditions: int = 4):
        _require(generation in GENERATIONS, f"generation must be one of {GENERATIONS}")
        self.generation = generation
        self.num_goal_conditions = num_goal_conditions
        #: satisfied goal conditions after step 1, 2, ... (the last entry holds afterwards); empty: none
        self.goal_schedule: list[int] = []
        self.calls: list[tuple[str, tuple, dict]] = []
        self.environments: list[FakeEnvironment] = []
        self.last_obs: dict | None = None
        self.gm = FakeMacros(self, DATA_PATH=data_path, HEADLESS=False, ENABLE_OBJECT_STATES=True,
                             ENABLE_TRANSITION_RULES=False, USE_GPU_DYNAMICS=True, ENABLE_FLATCACHE=False)
        self.registered_robots = {name: object for name in registered_robots}

    def record(self, name: str, *args, **kwargs) -> None:
        self.calls.append((name, args, kwargs))

    def names(self) -> list[str]:
        """The recorded call names, in order."""
        return [name for name, _, _ in self.calls]

    # ------------------------------------------------------------------------ omnigibson's functions
    def Environment(self, configs):  # noqa: N802 - og.Environment is a class in OmniGibson
        self.record("Environment", configs=configs)
        live = [env for env in self.environments if not env.cleared]
        _require(not live, "an Environment is still loaded: og.clear() before building another in this process")
        env = FakeEnvironment(self, configs)
        self.environments.append(env)
        return env

    def clear(self, **kwargs):
        self.record("clear", **kwargs)
        for env in self.environments:
            env.cleared = True

    # ----------------------------------------------------------------------------------- installing
    def modules(self) -> dict[str, types.ModuleType]:
        """``omnigibson``, ``omnigibson.macros``, ``omnigibson.robots`` (with a spec, so find_spec finds them)."""
        og = types.ModuleType("omnigibson", "FAKE omnigibson (tests/fake_omnigibson.py): Isaac Sim cannot run here")
        macros = types.ModuleType("omnigibson.macros")
        robots = types.ModuleType("omnigibson.robots")
        for module in (og, macros, robots):
            module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None)
        og.__version__ = "fake"
        og.Environment, og.clear, og.gm, og.macros, og.robots = self.Environment, self.clear, self.gm, macros, robots
        macros.gm = self.gm
        robots.REGISTERED_ROBOTS = self.registered_robots
        return {"omnigibson": og, "omnigibson.macros": macros, "omnigibson.robots": robots}

    def install(self, monkeypatch) -> FakeOmniGibson:
        """Put the fake in ``sys.modules`` for one test (pytest's monkeypatch undoes it)."""
        for name, module in self.modules().items():
            monkeypatch.setitem(sys.modules, name, module)
        return self
