"""ManiSkill3 (SAPIEN) behind the unified schema, one CPU-simulated env per process.

    >>> import gymnasium as gym, vla_gym
    >>> env = gym.make("VLA/ManiSkill-PickCube-v0")                          # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)                                        # doctest: +SKIP
    >>> sorted(obs["images"]), obs["state"].shape, obs["instruction"]        # doctest: +SKIP
    (['main', 'wrist'], (8,), 'pick up the red cube and move it to the green sphere')
    >>> env = gym.make("VLA/ManiSkill-PickCube-v0", obs_mode="state")        # fast, privileged state

How it stays fast:
- ManiSkill steps with ``obs_mode="none"`` (images mode) or ``"state"``: its ``step`` never renders.
  :meth:`ManiSkillBackend.render` updates the renderer and captures the cameras only when VLAEnv
  asks for an observation, so unobserved steps (inside action chunks) cost physics only;
- one ManiSkill env is built per task and kept: switching tasks (``VLA/ManiSkillTabletop-v0``)
  costs a rebuild once per task, a reset never rebuilds;
- the default ``pd_ee_delta_pose`` arm controller runs its pose algebra in numpy
  (:mod:`vla_gym.backends.maniskill.fast_controller`): a state-mode step costs less than half of raw ManiSkill's.

Seeds: ``reset(seed=s)`` is ManiSkill's own ``reset(seed=s)``, step for step (tests/test_fidelity.py, with the
numpy controller on both sides; it matches ManiSkill's own to float rounding);
an unseeded reset passes a seed drawn from the env's generator (:func:`vla_gym.core.env.draw_episode`).

Conventions: the robot is ``panda_wristcam`` (its hand camera is the ``wrist`` role, the task's
``base_camera`` is ``main``); images are 224x224 by default and already right side up. With the
default ``control_mode="pd_ee_delta_pose"`` the gripper action is flipped to vla_gym's convention
(-1 open, +1 close; ManiSkill uses +1 open). Other control modes pass actions through unchanged.
Goal markers that ManiSkill hides from its cameras (PickCube's green sphere) are shown, so that a
policy that sees only images and the instruction can solve the task (``show_goal=False`` hides them).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np

from vla_gym.backends.base import Backend, TaskSpec
from vla_gym.backends.maniskill.cameras import CAMERAS
from vla_gym.backends.maniskill.fast_controller import install_fast_ee_controller
from vla_gym.backends.maniskill.inference import without_autograd
from vla_gym.backends.maniskill.scene import ManiSkillScene
from vla_gym.core import schema
from vla_gym.core.env import VLAEnv
from vla_gym.core.errors import MissingSimulatorError, RenderingUnavailableError
from vla_gym.runtime import fork_guard
from vla_gym.runtime.system import install_hint
from vla_gym.tasks.maniskill import task_specs

ROBOT = "panda_wristcam"
DEFAULT_CONTROL_MODE = "pd_ee_delta_pose"
OBS_MODES = ("images", "state")
REWARD_MODES = ("normalized_dense", "dense", "sparse")
SIMULATOR = "ManiSkill (SAPIEN)"  # as fork_guard names it
#: words in SAPIEN's errors when it has no usable Vulkan device
_NO_VULKAN_MARKERS = ("rendering device", "vk::", "vulkan", "physical device")


class MissingAssetsError(FileNotFoundError):
    """A ManiSkill task needs assets that are not downloaded; the message gives the command."""


def _no_vulkan_error(exc: Exception) -> RenderingUnavailableError:
    return RenderingUnavailableError(
        f"SAPIEN (ManiSkill3) found no usable Vulkan device: {exc}\n"
        "SAPIEN needs one even for state-only observations: NVIDIA's driver, or Mesa >= 23 lavapipe on CPU.\n"
        "In NVIDIA containers whose GLX Vulkan driver fails without a display, point VK_ICD_FILENAMES at a JSON\n"
        "file naming libEGL_nvidia.so.0 instead (see docs/maniskill.md). On CPU machines:\n"
        + install_hint()
    )


class _KnownRobotWarning(logging.Filter):
    """ManiSkill warns that panda_wristcam is not listed for some tasks; its table scene supports it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "list of supported robots" not in record.getMessage()


def import_maniskill():
    """Import mani_skill (registering its tasks) and check for a Vulkan device; return its task table."""
    fork_guard.check_not_forked(SIMULATOR)  # before any SAPIEN call: in a fork of a SAPIEN process it would hang
    os.environ["MS_SKIP_ASSET_DOWNLOAD_PROMPT"] = "1"  # ManiSkill would otherwise call input()
    try:
        import mani_skill.envs  # noqa: F401  (registers the tasks)
        import sapien
        from mani_skill.utils.logging_utils import logger
        from mani_skill.utils.registration import REGISTERED_ENVS
    except ImportError as exc:
        raise MissingSimulatorError("ManiSkill3", "maniskill", detail=str(exc)) from exc
    if not any(isinstance(f, _KnownRobotWarning) for f in logger.filters):
        logger.addFilter(_KnownRobotWarning())
    try:
        sapien.render.get_device_summary()
    except RuntimeError as exc:
        raise _no_vulkan_error(exc) from exc
    fork_guard.note_initialised(SIMULATOR)
    return REGISTERED_ENVS


def missing_assets(maniskill_id: str) -> list[str]:
    """ManiSkill asset ids that ``maniskill_id`` needs and that are not downloaded (mani_skill imported)."""
    from mani_skill.utils import assets

    group = assets.DATA_GROUPS.get(maniskill_id, [])
    wanted = [uid for gid in group for uid in
              (assets.expand_data_group_into_individual_data_source_ids(gid) if gid in assets.DATA_GROUPS else [gid])]
    return sorted({uid for uid in wanted if not assets.is_data_source_downloaded(uid)})


def make_maniskill_env(maniskill_id: str, num_envs: int, obs_mode: str, control_mode: str, reward_mode: str,
                       image_size: tuple[int, int], sim_backend: str, render_backend: str):
    """Build ManiSkill's own env (the unwrapped ``BaseEnv``) for one task, or raise a vla_gym error.

    Its ``reward_mode`` is ``"none"`` when the reward is to be the success flag (``reward_mode="sparse"``,
    or a task without a dense reward). A one-env CPU sim in ``pd_ee_delta_pose`` gets the numpy arm
    controller (:func:`install_fast_ee_controller`).
    """
    registered = import_maniskill()
    missing = missing_assets(maniskill_id)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise MissingAssetsError(
            f"ManiSkill task {maniskill_id} needs assets that are not downloaded ({shown}). Download them with\n"
            f"    python -m mani_skill.utils.download_asset {maniskill_id}\n"
            "(they go to ~/.maniskill/data, or to $MS_ASSET_DIR when set)."
        )
    height, width = image_size
    # sparse (and dense on tasks that have no dense reward): ManiSkill computes none, the caller uses success
    dense = reward_mode != "sparse" and reward_mode in registered[maniskill_id].cls.SUPPORTED_REWARD_MODES
    try:
        env = registered[maniskill_id].make(
            num_envs=num_envs, obs_mode="state" if obs_mode == "state" else "none",
            control_mode=control_mode, reward_mode=reward_mode if dense else "none", robot_uids=ROBOT,
            sensor_configs={"width": width, "height": height},
            sim_backend=sim_backend, render_backend=render_backend,
        )
    except AssertionError as exc:  # ManiSkill asserts on e.g. an unknown control mode
        raise ValueError(f"ManiSkill rejected the arguments for {maniskill_id}: {exc}") from exc
    except RuntimeError as exc:
        if any(marker in str(exc).lower() for marker in _NO_VULKAN_MARKERS):
            raise _no_vulkan_error(exc) from exc
        raise
    install_fast_ee_controller(env)
    return env


def check_options(cameras: Sequence[str] | None, obs_mode: str, reward_mode: str) -> tuple[str, ...]:
    """Check the keywords the CPU env and the GPU vector env share; return the camera roles to render."""
    if obs_mode not in OBS_MODES:
        raise ValueError(f"obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
    if reward_mode not in REWARD_MODES:
        raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
    if cameras is None:
        return ("main", "wrist") if obs_mode == "images" else ()
    cameras = tuple(cameras)
    unknown = [role for role in cameras if role not in CAMERAS]
    if unknown:
        raise ValueError(f"unknown ManiSkill camera roles {unknown}; choose from {list(CAMERAS)}")
    if obs_mode == "images" and not cameras:
        raise ValueError(f"obs_mode='images' needs at least one camera role from {list(CAMERAS)}")
    return cameras


def check_action_space(space, control_mode: str) -> int:
    """vla_gym actions live in [-1, 1]: accept only control modes whose ManiSkill space is exactly that."""
    if not (np.all(space.low == -1.0) and np.all(space.high == 1.0)):
        raise ValueError(
            f"control_mode={control_mode!r} takes unnormalized actions (bounds {space.low.min():.3g}.."
            f"{space.high.max():.3g}); vla_gym actions are in [-1, 1]. Use a normalized mode such as "
            f"{DEFAULT_CONTROL_MODE!r} (default), 'pd_ee_delta_pos', 'pd_joint_delta_pos' or 'pd_ee_target_delta_pose'."
        )
    return int(space.shape[0])


def capture_images(env, sensor_uids: Sequence[str], show_goal: bool) -> dict:
    """Render the named cameras of a ManiSkill env now: {uid: uint8 tensor (num_envs, H, W, 3)}.

    The same steps as ManiSkill's own ``_get_obs_sensor_data``, for the chosen cameras only and on demand.
    """
    import torch

    if not show_goal:
        for obj in env._hidden_objects:  # what ManiSkill hides from its cameras (idempotent)
            obj.hide_visual()
    env.scene.update_render(update_sensors=True, update_human_render_cameras=False)
    sensors = [env.scene.sensors[uid] for uid in sensor_uids]
    for sensor in sensors:
        sensor.capture()
    images = {uid: sensor.get_obs(rgb=True, depth=False, position=False, segmentation=False)["rgb"]
              for uid, sensor in zip(sensor_uids, sensors)}
    if env.backend.render_device.is_cuda():
        torch.cuda.synchronize()
    return images


def flips_gripper(control_mode: str) -> bool:
    """Whether vla_gym's gripper sign (-1 open, +1 close) is flipped for ManiSkill (+1 open): only in the default mode."""
    return control_mode == DEFAULT_CONTROL_MODE


def to_maniskill_action(action, flip_gripper: bool):
    """vla_gym action(s) ``[..., D]`` (numpy or torch, a copy the caller owns) -> ManiSkill's, in place."""
    if flip_gripper:
        action[..., -1] = -action[..., -1]
    return action


def step_reward(reward, success, success_reward: bool):
    """The reward of a step: ManiSkill's, or the success flag where it computes none (see make_maniskill_env)."""
    return success if success_reward else reward


def proprio_state(agent):
    """vla_gym's 8-D proprioception of every sub-env, float32 torch ``[N, 8]``: tcp position (3),
    tcp orientation as axis-angle (3), the two finger positions (2)."""
    import torch
    from mani_skill.utils.geometry.rotation_conversions import quaternion_to_axis_angle, standardize_quaternion

    pose = agent.tcp_pose.raw_pose  # [N, 7]: position, quaternion wxyz
    axis_angle = quaternion_to_axis_angle(standardize_quaternion(pose[:, 3:]))
    return torch.cat([pose[:, :3], axis_angle, agent.robot.get_qpos()[:, -2:]], dim=1).to(torch.float32)


def default_render_backend() -> str:
    """Render on the GPU when there is one, else on the CPU (without ManiSkill's fallback warning)."""
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


class ManiSkillBackend(Backend):
    """One ManiSkill env per task (CPU simulation, ``num_envs=1``); see the module docstring."""

    control_hz = 20.0

    def __init__(self, cameras: Sequence[str] | None = None, image_size=(224, 224), obs_mode: str = "images",
                 control_mode: str = DEFAULT_CONTROL_MODE, reward_mode: str = "normalized_dense",
                 show_goal: bool = True):
        super().__init__(check_options(cameras, obs_mode, reward_mode), image_size)
        import_maniskill()
        self.obs_mode = obs_mode
        self.control_mode = control_mode
        self.reward_mode = reward_mode
        self.show_goal = show_goal
        self.flip_gripper = flips_gripper(control_mode)
        self.state_dim = 8 if obs_mode == "images" else None  # state mode: set by the first load()
        self.action_dim = None
        self._sensor_uids = [CAMERAS[role] for role in self.camera_roles]
        self._render_backend = default_render_backend()
        self._envs: dict = {}  # ManiSkill id -> built env, kept across task switches
        self._env = None
        self._success_reward = False
        self._obs = None

    @property
    def maniskill_env(self):
        """The loaded ManiSkill env (unwrapped), e.g. for privileged state in scripted experts; None before load()."""
        return None if self._env is None else self._env.unwrapped

    def scene_controls(self):
        """The scene perturbations' controls (:class:`vla_gym.backends.maniskill.scene.ManiSkillScene`)."""
        if getattr(self, "_scene_controls", None) is None:
            self._scene_controls = ManiSkillScene(self)
        return self._scene_controls

    # ------------------------------------------------------------------------------------ life cycle
    @without_autograd
    def load(self, task: TaskSpec) -> None:
        maniskill_id = task.extra["maniskill_id"]
        if maniskill_id not in self._envs:
            env = make_maniskill_env(maniskill_id, 1, self.obs_mode, self.control_mode, self.reward_mode,
                                     self.image_size, sim_backend="physx_cpu", render_backend=self._render_backend)
            try:
                self._check_sizes(env, task)
            except ValueError:
                env.close()
                raise
            self._envs[maniskill_id] = env
        self._env = self._envs[maniskill_id]
        self._success_reward = self._env.reward_mode == "none"
        self.control_hz = float(self._env.control_freq)

    def _check_sizes(self, env, task: TaskSpec) -> None:
        action_dim = check_action_space(env.single_action_space, self.control_mode)
        state_dim = 8 if self.obs_mode == "images" else int(env.single_observation_space.shape[0])
        if self.action_dim is None:
            self.action_dim, self.state_dim = action_dim, state_dim
        elif (action_dim, state_dim) != (self.action_dim, self.state_dim):
            raise ValueError(
                f"task {task.name!r} has action/state sizes {(action_dim, state_dim)}, the env was built for "
                f"{(self.action_dim, self.state_dim)}: with obs_mode='state' use one task per env"
            )

    @without_autograd
    def reset(self, init_state_id: int | None, seed: int) -> None:
        self._obs = self._env.reset(seed=seed)[0]  # ManiSkill's own episode for this seed

    @without_autograd
    def step(self, action: np.ndarray) -> tuple[float, bool]:
        # astype: a fresh array (ManiSkill wraps it as a tensor without copying), flipped in place
        action = to_maniskill_action(action.astype(np.float32), self.flip_gripper)
        self._obs, reward, _, _, info = self._env.step(action)
        success = bool(info["success"])
        return float(step_reward(reward, success, self._success_reward)), success

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()
        self._env = self._obs = None

    # ----------------------------------------------------------------------------------- observation
    @without_autograd
    def state(self) -> np.ndarray:
        if self.obs_mode == "state":
            return self._obs[0].numpy().astype(np.float32)  # astype copies: never a view of ManiSkill's tensor
        return proprio_state(self._env.agent)[0].numpy()

    @without_autograd
    def render(self) -> dict[str, np.ndarray]:
        if not self._sensor_uids:
            return {}
        images = capture_images(self._env, self._sensor_uids, self.show_goal)
        return {role: images[uid][0].cpu().numpy().copy() for role, uid in zip(self.camera_roles, self._sensor_uids)}


class ManiSkillEnv(VLAEnv):
    """ManiSkill3 table-top tasks as a :class:`VLAEnv` (the entry point of the ``VLA/ManiSkill*`` ids).

    Args:
        tasks: task names from :data:`vla_gym.tasks.maniskill.TASKS` (set by the registered id).
        task_id: fixed index into ``tasks``, or None to draw one per reset.
        obs_mode: ``"images"`` (cameras + 8-D proprioception: tcp position, tcp axis-angle, finger
            positions) or ``"state"`` (no cameras; ``state`` is ManiSkill's flattened privileged state,
            whose size depends on the task, so it needs a single task).
        cameras: roles from ``main`` (base camera) and ``wrist`` (hand camera). With ``obs_mode="state"``
            none by default; naming some renders them beside the privileged state (e.g. evaluation
            videos of a state policy).
        image_size: int or (height, width), default 224.
        control_mode: ManiSkill controller, default ``pd_ee_delta_pose`` (7-D: delta position, delta
            axis-angle, gripper -1 open / +1 close). Other normalized modes (e.g. ``pd_joint_delta_pos``,
            8-D) take ManiSkill's own action layout and gripper sign (+1 open), unchanged.
        reward_mode: ``normalized_dense`` (default), ``dense`` or ``sparse`` (1.0 on the steps that
            succeed, else 0). Tasks without a dense reward (PlugCharger, StackPyramid, ...) are sparse.
        max_episode_steps: overrides ManiSkill's per-task limit (PickCube 50, ... see the docs).
        paraphrase_instructions: draw the instruction among paraphrases per reset (training).
        show_goal: show goal markers that ManiSkill hides from its cameras (default True).
    """

    def __init__(self, tasks: Sequence[str], task_id: int | None = None, obs_mode: str = "images",
                 cameras: Sequence[str] | None = None, image_size: int | tuple[int, int] = 224,
                 control_mode: str = DEFAULT_CONTROL_MODE, reward_mode: str = "normalized_dense",
                 max_episode_steps: int | None = None, render_mode: str | None = None,
                 paraphrase_instructions: bool = False, show_goal: bool = True):
        if isinstance(image_size, int):
            image_size = (image_size, image_size)
        specs = task_specs(tasks)
        task_id = schema.check_index("task_id", task_id, len(specs))
        if obs_mode == "state" and task_id is None and len(specs) > 1:
            raise ValueError(
                "obs_mode='state' gives ManiSkill's privileged state, whose size differs per task: pass task_id= "
                "or use a single-task id such as VLA/ManiSkill-PickCube-v0"
            )
        backend = ManiSkillBackend(cameras, tuple(image_size), obs_mode=obs_mode, control_mode=control_mode,
                                   reward_mode=reward_mode, show_goal=show_goal)
        try:
            backend.load(specs[task_id or 0])  # built now: the action/state sizes and the control rate come from it
            super().__init__(backend, specs, task_id=task_id, max_episode_steps=max_episode_steps,
                             render_mode=render_mode, paraphrase_instructions=paraphrase_instructions)
        except BaseException:
            backend.close()
            raise
