"""BEHAVIOR-1K (OmniGibson on NVIDIA Isaac Sim) behind the unified schema, with the R1 Pro robot.

    >>> import gymnasium as gym, vla_gym
    >>> env = gym.make("VLA/Behavior-turning_on_radio-v0")                       # doctest: +SKIP
    >>> env = gym.make("VLA/Behavior-v0", activity="can_meat", control_mode="two_arms")  # doctest: +SKIP

This module holds the OmniGibson calls and the env's front door; every conversion between them
(actions, observations, the config dict, the scene lookup) is pure numpy in
:mod:`vla_gym.backends.behavior.r1pro`. The calls follow the BEHAVIOR-1K challenge evaluator's use of
OmniGibson, once per episode step:

    og.Environment(configs=omnigibson_config(...))     load: one activity's scene, R1 Pro, BehaviorTask
    env.scene.object_registry("name", "robot_r1")      load: the head camera's aperture as in the demos
    env.reset()                                        reset: the pre-sampled instance (no seed, see below)
    env.step(torch float32 command)                    step: 23-D (joint) or 21-D (two_arms) robot command
    env.task._termination_conditions["predicate"].goal_status   step: goal progress
    og.clear()                                         close / task change: frees the scene

They were NOT run against Isaac Sim (no machine here can run it): tests/test_behavior.py checks them
against a recording fake of the ``omnigibson`` module written from OmniGibson's source.

Seeding: ``reset(seed=s)`` seeds vla_gym's task and instruction draws; OmniGibson's reset takes no
seed and BehaviorTask restores the same pre-sampled instance (objects, first pre-sampled robot pose)
every time, so the initial state does not depend on ``s``. Nothing here touches the global random
generators of Python, NumPy or torch. OmniGibson's own optional randomness (``online_object_sampling``
at load, ``randomize_presampled_pose``) draws from those global generators: seed them in your script
if you turn it on (docs/behavior.md).

Actions (``control_mode``): ``joint`` (23-D, default) or ``two_arms`` (14-D); cameras ``main`` (head),
``left_wrist``, ``right_wrist``; 37-D ``state``: see :mod:`vla_gym.backends.behavior.r1pro` and docs/behavior.md.
Control runs at 30 Hz on 120 Hz physics; OmniGibson renders once per control step, so
``step(observe=False)`` saves only the image conversion.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from vla_gym.backends.base import Backend, TaskSpec
from vla_gym.backends.behavior import r1pro
from vla_gym.core import schema
from vla_gym.core.env import VLAEnv
from vla_gym.core.errors import MissingSimulatorError
from vla_gym.tasks.behavior import activity_tasks

DATA_PATH_VARIABLE = "OMNIGIBSON_DATA_PATH"
#: OmniGibson macros set before the first environment, as the challenge evaluator sets them
OMNIGIBSON_MACROS = {"ENABLE_OBJECT_STATES": True, "ENABLE_TRANSITION_RULES": True, "USE_GPU_DYNAMICS": False}


# ------------------------------------------------------------------------------------------ errors
class BehaviorUnavailableError(MissingSimulatorError):
    """OmniGibson / Isaac Sim / the BEHAVIOR data are missing; the message says what and how to install."""

    def __init__(self, detail: str = ""):
        message = (
            "BEHAVIOR-1K needs OmniGibson (with the R1 Pro robot) running on NVIDIA Isaac Sim"
            + (f": {detail}" if detail else ", which is not installed in this Python environment") + ".\n"
            "Requirements:\n"
            "  - an NVIDIA RTX-class GPU (RTX 2070 or newer, 8 GB+ VRAM) with a recent NVIDIA driver;\n"
            "    Isaac Sim has no CPU rendering path\n"
            "  - Linux (Ubuntu 20.04+) or Windows, 32 GB+ RAM\n"
            "  - Isaac Sim + OmniGibson from the BEHAVIOR-1K repository (PyPI's omnigibson 1.1.1 has no R1 Pro)\n"
            "  - the BEHAVIOR datasets (scenes, objects, 2025 challenge task instances), found through "
            f"{DATA_PATH_VARIABLE}\n"
            "Install:\n"
            "    git clone https://github.com/StanfordVL/BEHAVIOR-1K.git && cd BEHAVIOR-1K\n"
            "    ./setup.sh --new-env --omnigibson --bddl --dataset \\\n"
            "        --accept-conda-tos --accept-nvidia-eula --accept-dataset-tos\n"
            "    conda activate behavior && pip install -e /path/to/vla_gym\n"
            f"    export {DATA_PATH_VARIABLE}=$PWD/datasets\n"
            "Listing the tasks, their instructions and spaces works without it (docs/behavior.md)."
        )
        ImportError.__init__(self, message)


def import_omnigibson():
    """Import OmniGibson configured for headless evaluation, or raise :class:`BehaviorUnavailableError`."""
    if importlib.util.find_spec("omnigibson") is None:
        raise BehaviorUnavailableError()
    os.environ.setdefault("OMNIGIBSON_HEADLESS", "1")
    os.environ.setdefault("OMNI_KIT_ACCEPT_EULA", "YES")
    try:
        import omnigibson as og
        from omnigibson.macros import gm
        from omnigibson.robots import REGISTERED_ROBOTS
    except ImportError as exc:
        raise BehaviorUnavailableError(f"importing omnigibson failed ({exc})") from exc
    if r1pro.ROBOT_TYPE.lower() not in {name.lower() for name in REGISTERED_ROBOTS}:
        version = getattr(og, "__version__", "?")
        raise BehaviorUnavailableError(
            f"omnigibson {version} has no {r1pro.ROBOT_TYPE} robot; install BEHAVIOR-1K's OmniGibson")
    if not os.path.isdir(gm.DATA_PATH):
        raise BehaviorUnavailableError(f"the data path {gm.DATA_PATH!r} does not exist; set {DATA_PATH_VARIABLE}")
    with (gm.unlocked() if hasattr(gm, "unlocked") else contextlib.nullcontext()):
        for key, value in OMNIGIBSON_MACROS.items():
            setattr(gm, key, value)
    return og


# ---------------------------------------------------------------------------------------- backend
class BehaviorBackend(Backend):
    """One OmniGibson environment (one per process: Isaac Sim is a singleton). NOT run against Isaac Sim.

    Only simulator calls live here (listed in the module docstring); the conversions are
    :mod:`vla_gym.backends.behavior.r1pro`'s.
    """

    control_hz = r1pro.CONTROL_HZ
    state_dim = r1pro.STATE_DIM

    def __init__(self, camera_roles: Sequence[str] = tuple(r1pro.CAMERAS), image_size: tuple[int, int] = (224, 224),
                 control_mode: str = "joint", scene_model: str | None = None, online_object_sampling: bool = False,
                 reward_type: str = "sparse", ee_delta_limits: tuple[float, float] = r1pro.EE_DELTA_LIMITS,
                 config_overrides: Mapping[str, Any] | None = None):
        check_settings(camera_roles, control_mode, reward_type)
        super().__init__(camera_roles, image_size)
        self.action_dim = r1pro.CONTROL_MODES[control_mode]
        self.control_mode = control_mode
        self.scene_model = scene_model
        self.online_object_sampling = online_object_sampling
        self.reward_type = reward_type
        self.ee_delta_limits = ee_delta_limits
        self.config_overrides = config_overrides
        self._og = import_omnigibson()
        self._env = None
        self._obs: dict | None = None
        self._torso_hold = np.asarray(r1pro.TORSO_START)
        self.goal_progress: float | None = None

    def scene_for(self, activity: str) -> dict:
        """The scene ``activity`` loads in: ``scene_model`` if given, else the data path's (r1pro.find_scene)."""
        if self.scene_model is not None:
            return {"scene_model": self.scene_model}
        from omnigibson.macros import gm

        scene = r1pro.find_scene(activity, gm.DATA_PATH)
        if scene is None:
            raise ValueError(
                f"no pre-sampled scene for BEHAVIOR activity {activity!r} under {gm.DATA_PATH}: pass "
                "scene_model='<scene>' with online_object_sampling=True to sample one (slow), or download the "
                "BEHAVIOR datasets (./setup.sh --dataset)"
            )
        return scene

    def load(self, task: TaskSpec) -> None:
        config = r1pro.omnigibson_config(task.name, self.scene_for(task.name), self.image_size, self.control_mode,
                                         self.online_object_sampling, self.ee_delta_limits, self.config_overrides)
        self.close()
        self._env = self._og.Environment(configs=config)
        robot = self._env.scene.object_registry("name", r1pro.ROBOT_NAME)
        head = robot.sensors.get(r1pro.CAMERAS["main"])
        if head is not None and hasattr(head, "horizontal_aperture"):
            head.horizontal_aperture = r1pro.HEAD_HORIZONTAL_APERTURE

    def reset(self, init_state_id: int | None, seed: int) -> None:
        """``env.reset()`` as the challenge evaluator calls it; ``seed`` is unused (module docstring)."""
        obs, _ = self._env.reset()
        self._obs = r1pro.single(obs)
        self._torso_hold = r1pro.observation_state(self._obs)[r1pro.STATE_SLICES["torso_qpos"]].astype(np.float64)
        self.goal_progress = None

    def step(self, action: np.ndarray) -> tuple[float, bool]:
        import torch  # OmniGibson runs on torch; vla_gym imports it only here

        command = r1pro.robot_command(action, self.control_mode, self._torso_hold)
        obs, reward, _, _, info = self._env.step(torch.as_tensor(command, dtype=torch.float32))
        self._obs, info = r1pro.single(obs), r1pro.single(info)
        success = r1pro.success_from_info(info)
        self.goal_progress = r1pro.goal_progress(self._goal_status())
        return (float(r1pro.single(reward)) if self.reward_type == "potential" else float(success)), success

    def _goal_status(self):
        conditions = getattr(self._env.task, "_termination_conditions", {}) or {}
        return getattr(conditions.get("predicate"), "goal_status", None)

    def state(self) -> np.ndarray:
        return r1pro.observation_state(self._obs)

    def render(self) -> dict[str, np.ndarray]:
        return r1pro.observation_images(self._obs, self.camera_roles, self.image_size)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()  # a no-op in OmniGibson today; kept for the gymnasium contract
            self._og.clear()   # frees the scene; Isaac Sim itself lives until the process exits
            self._env = None


def check_settings(camera_roles: Sequence[str], control_mode: str, reward_type: str = "sparse") -> None:
    """Validate user settings before anything is imported."""
    unknown = [role for role in camera_roles if role not in r1pro.CAMERAS]
    if unknown or not camera_roles:
        raise ValueError(f"unknown BEHAVIOR camera roles {unknown}; choose from {list(r1pro.CAMERAS)}")
    if control_mode not in r1pro.CONTROL_MODES:
        raise ValueError(f"control_mode must be one of {list(r1pro.CONTROL_MODES)}, got {control_mode!r}")
    if reward_type not in ("sparse", "potential"):
        raise ValueError(f"reward_type must be 'sparse' or 'potential', got {reward_type!r}")


def _image_size(image_size: int | Sequence[int]) -> tuple[int, int]:
    return (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)


def behavior_tasks(activity: str | Sequence[str] | None, instruction: str | None = None) -> tuple[TaskSpec, ...]:
    """Tasks an env serves; ``instruction`` replaces the instruction of a single activity."""
    if activity is None:
        raise ValueError("pass activity=<name>, a list of names, or 'challenge' (the 50 challenge tasks), e.g. "
                         "gym.make('VLA/Behavior-v0', activity='can_meat')")
    tasks = activity_tasks(activity)
    if instruction is not None:
        if len(tasks) != 1:
            raise ValueError("instruction= replaces the instruction of one activity; got several")
        tasks = (replace(tasks[0], instruction=instruction),)
    return tasks


def behavior_spaces(activity: str | Sequence[str] = "challenge", control_mode: str = "joint",
                    cameras: Sequence[str] = tuple(r1pro.CAMERAS), image_size: int | Sequence[int] = 224):
    """(observation_space, action_space) of a BEHAVIOR env, without OmniGibson.

    >>> obs_space, act_space = behavior_spaces("can_meat", control_mode="two_arms")
    >>> act_space.shape, obs_space["state"].shape
    ((14,), (37,))
    """
    check_settings(cameras, control_mode)
    tasks = activity_tasks(activity)
    observation_space = schema.observation_space(
        cameras, _image_size(image_size), r1pro.STATE_DIM,
        max_instruction_length=max(len(text) for t in tasks for text in (t.instruction, *t.paraphrases)),
    )
    return observation_space, schema.action_space(r1pro.CONTROL_MODES[control_mode])


class BehaviorEnv(VLAEnv):
    """BEHAVIOR activities as a :class:`VLAEnv` (the entry point of the ``VLA/Behavior*`` ids).

    Args:
        activity: an activity name (any of the 1,016), a list of names, or ``"challenge"`` (the 50
            challenge tasks in order).
        task_id: fixed index into the activities, or None to draw one per reset.
        control_mode: ``joint`` (23-D, default) or ``two_arms`` (14-D); see :mod:`vla_gym.backends.behavior.r1pro`.
        cameras: roles from ``main`` (head), ``left_wrist``, ``right_wrist``.
        image_size: int or (height, width), default 224 (the challenge records 720 head / 480 wrist).
        max_episode_steps: overrides the per-task limit (challenge tasks: 2x the mean human
            demonstration length at 30 Hz; other activities 5000).
        instruction: replaces the instruction of a single activity (e.g. a dataset's own prompt).
        paraphrase_instructions: draw the instruction per reset between the hand-written one and the
            text generated from the goal conditions (challenge tasks).
        scene_model: load this scene instead of the one the data path lists for the activity.
        online_object_sampling: sample the activity's objects at load time instead of loading a
            pre-sampled instance (needed for scenes without one; slow).
        reward_type: ``sparse`` (1.0 on success) or ``potential`` (OmniGibson's goal-progress reward).
        ee_delta_limits: two_arms mode, (metres, radians) per control step for a command of 1.
        config_overrides: dict merged recursively into the OmniGibson config
            (:func:`vla_gym.backends.behavior.r1pro.omnigibson_config`).

    ``info["goal_progress"]`` is the fraction of satisfied goal conditions (None before a step).
    ``reset(seed=s)`` makes the task and instruction draws repeatable; the initial scene is the
    activity's pre-sampled instance whatever ``s`` is (module docstring, "Seeding").
    """

    def __init__(self, activity: str | Sequence[str] | None = None, task_id: int | None = None,
                 control_mode: str = "joint", cameras: Sequence[str] = tuple(r1pro.CAMERAS),
                 image_size: int | Sequence[int] = 224, max_episode_steps: int | None = None,
                 render_mode: str | None = None, instruction: str | None = None,
                 paraphrase_instructions: bool = False, scene_model: str | None = None,
                 online_object_sampling: bool = False, reward_type: str = "sparse",
                 ee_delta_limits: tuple[float, float] = r1pro.EE_DELTA_LIMITS,
                 config_overrides: Mapping[str, Any] | None = None):
        tasks = behavior_tasks(activity, instruction)
        backend = BehaviorBackend(tuple(cameras), _image_size(image_size), control_mode, scene_model,
                                  online_object_sampling, reward_type, ee_delta_limits, config_overrides)
        super().__init__(backend, tasks, task_id=task_id, max_episode_steps=max_episode_steps,
                         render_mode=render_mode, paraphrase_instructions=paraphrase_instructions)

    def _info(self, success: bool, observed: bool) -> dict[str, Any]:
        info = super()._info(success, observed)
        info["goal_progress"] = self.backend.goal_progress
        return info
