"""ManiSkill3's GPU simulation behind vla_gym's schema: N envs in one process, torch tensors on the device.

    >>> import torch, vla_gym
    >>> envs = vla_gym.make_vec("VLA/ManiSkill-PickCube-v0", num_envs=256, device="cuda")    # doctest: +SKIP
    >>> obs, info = envs.reset(seed=0)                                                      # doctest: +SKIP
    >>> obs["images"]["main"].shape, obs["state"].shape, len(obs["instruction"])           # doctest: +SKIP
    (torch.Size([256, 224, 224, 3]), torch.Size([256, 8]), 256)
    >>> obs, reward, terminated, truncated, info = envs.step(torch.zeros(256, 7, device="cuda"))  # doctest: +SKIP

The schema is the CPU env's, batched: ``images`` {role: uint8 [N, H, W, 3]}, ``state`` float32 [N, D]
(8-D proprioception, or ManiSkill's privileged state with ``obs_mode="state"``, which has no
``images``), ``instruction`` a tuple of N str; reward float32 [N]; terminated (success) and truncated
(time limit) bool [N]; ``info["success"]`` bool [N]. Actions: [N, 7] in [-1, 1], gripper -1 open /
+1 close (flipped for ManiSkill inside, as on the CPU); other control modes pass through unchanged.

Auto-reset: SAME_STEP, like :func:`vla_gym.make_vec` on the CPU. A sub-env whose episode ended is reset
inside the same ``step``: its row of the returned observation starts the next episode, the last
observation of the finished one is in ``info["final_obs"]`` and its info in ``info["final_info"]``
(rows where ``info["_final_obs"]`` is True). ``reset(seed=s)`` seeds sub-env i with ``s + i``.

All sub-envs run one task (ManiSkill's GPU scene is built once for all of them): for
``VLA/ManiSkillTabletop-v0`` pass ``task_id=``. ``device="cpu"`` runs the same code on ManiSkill's CPU
simulation with ``num_envs=1`` (what the tests on machines without CUDA exercise).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from vla_gym import schema
from vla_gym.backends.maniskill import (
    CAMERAS,
    DEFAULT_CONTROL_MODE,
    capture_images,
    check_action_space,
    check_options,
    default_render_backend,
    import_maniskill,
    make_maniskill_env,
)
from vla_gym.registry import check_env_id
from vla_gym.tasks.maniskill import task_specs


def enable_physx_gpu() -> None:
    """Load SAPIEN's PhysX GPU library, which SAPIEN downloads from GitHub on first use; explain if it can't."""
    import sapien

    try:
        sapien.physx.enable_gpu()
    except Exception as exc:  # requests' ConnectionError, a bad zip, a missing libcuda
        version = sapien.physx.version()
        raise RuntimeError(
            f"SAPIEN could not load its PhysX GPU library: {exc}\n"
            "SAPIEN downloads it on first use. On a machine without access to GitHub, fetch\n"
            f"    https://github.com/sapien-sim/physx-precompiled/releases/download/{version}/linux-so.zip\n"
            f"elsewhere and unzip it into ~/.sapien/physx/{version}/ (it holds libPhysXGpu_64.so)."
        ) from exc


def make_gpu_vector_env(env_id: str, num_envs: int, device: str = "cuda", **kwargs) -> VectorEnv:
    """A :class:`ManiSkillGPUVectorEnv` for a registered ``VLA/ManiSkill...`` id (see the module docstring)."""
    entry = check_env_id(env_id)
    if entry.backend != "maniskill":
        raise ValueError(f"device={device!r} batches ManiSkill envs on the GPU only; {env_id} is a {entry.backend} env")
    return ManiSkillGPUVectorEnv(entry.kwargs["tasks"], num_envs, device=device, **kwargs)


class ManiSkillGPUVectorEnv(VectorEnv):
    """N copies of one ManiSkill task simulated together on the GPU (see the module docstring).

    Keywords as for :class:`vla_gym.backends.maniskill.ManiSkillEnv`: ``task_id``, ``obs_mode``,
    ``cameras``, ``image_size``, ``control_mode``, ``reward_mode``, ``max_episode_steps``,
    ``paraphrase_instructions``, ``show_goal``.
    """

    def __init__(self, tasks: Sequence[str], num_envs: int, device: str = "cuda", task_id: int | None = None,
                 obs_mode: str = "images", cameras: Sequence[str] | None = None,
                 image_size: int | tuple[int, int] = 224, control_mode: str = DEFAULT_CONTROL_MODE,
                 reward_mode: str = "normalized_dense", max_episode_steps: int | None = None,
                 paraphrase_instructions: bool = False, show_goal: bool = True):
        import torch

        specs = task_specs(tasks)
        if task_id is None and len(specs) > 1:
            raise ValueError("the GPU simulation runs one task for all sub-envs: pass task_id= "
                             f"(0..{len(specs) - 1}: {[s.name for s in specs]})")
        self.task = specs[schema.check_index("task_id", task_id, len(specs)) or 0]
        cameras = check_options(cameras, obs_mode, reward_mode)
        cuda = str(device).startswith("cuda")
        if cuda and not torch.cuda.is_available():
            raise RuntimeError(f"device={device!r} needs a CUDA GPU and a CUDA build of torch; none is available here. "
                               "Use the CPU vector env (vla_gym.make_vec without device=) instead.")
        if not cuda and num_envs != 1:
            raise ValueError(f"device={device!r}: ManiSkill's CPU simulation runs num_envs=1 per process")
        if isinstance(image_size, int):
            image_size = (image_size, image_size)
        if cuda:
            import_maniskill()
            enable_physx_gpu()  # before ManiSkill does, to explain a failed download

        self.num_envs = num_envs
        self.obs_mode = obs_mode
        self.camera_roles = cameras
        self._sensor_uids = [CAMERAS[role] for role in self.camera_roles]
        self.show_goal = show_goal
        self.flip_gripper = control_mode == DEFAULT_CONTROL_MODE
        self.paraphrase_instructions = paraphrase_instructions
        self.max_episode_steps = max_episode_steps or self.task.max_episode_steps
        self._env = make_maniskill_env(
            self.task.extra["maniskill_id"], num_envs, obs_mode, control_mode, reward_mode, tuple(image_size),
            sim_backend=str(device), render_backend=str(device) if cuda else default_render_backend(),
        )
        self.device = self._env.device
        action_dim = check_action_space(self._env.single_action_space, control_mode)
        state_dim = 8 if obs_mode == "images" else int(self._env.single_observation_space.shape[-1])

        self.single_action_space = schema.action_space(action_dim)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.single_observation_space = schema.observation_space(
            self.camera_roles, tuple(image_size), state_dim,
            max_instruction_length=max(len(t) for t in (self.task.instruction, *self.task.paraphrases)),
        )
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_fps": float(self._env.control_freq)}
        self._elapsed = torch.zeros(num_envs, dtype=torch.int32, device=self.device)
        self._instructions = [self.task.instruction] * num_envs
        self._ms_obs = None
        self._rng = np.random.default_rng()

    # ----------------------------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        seeds = None if seed is None else [seed + i for i in range(self.num_envs)]
        self._ms_obs, _ = self._env.reset(seed=seeds)
        self._elapsed.zero_()
        self._draw_instructions(range(self.num_envs))
        return self._observation(), {"success": self._env.evaluate()["success"].clone()}

    def step(self, actions):
        import torch

        actions = self._check_actions(actions)
        self._ms_obs, reward, _, _, ms_info = self._env.step(actions)
        self._elapsed += 1
        success = ms_info["success"].clone()
        terminated = success
        truncated = self._elapsed >= self.max_episode_steps
        obs = self._observation()
        info = {"success": success, "elapsed_steps": self._elapsed.clone()}
        done = terminated | truncated
        if done.any():
            env_idx = torch.nonzero(done).flatten()
            info = dict(info, final_obs=obs, final_info=dict(info), _final_obs=done, _final_info=done)
            self._ms_obs, _ = self._env.reset(options={"env_idx": env_idx})
            self._elapsed[env_idx] = 0
            self._draw_instructions(env_idx.tolist())
            obs = self._observation()
        if self._env.reward_mode == "none":  # sparse: the success flag (see make_maniskill_env)
            reward = success
        return obs, reward.to(torch.float32), terminated, truncated, info

    def close_extras(self, **kwargs):
        if getattr(self, "_env", None) is not None:
            self._env.close()
            self._env = None

    # --------------------------------------------------------------------------------- helpers
    def _check_actions(self, actions):
        """Batched actions as a float32 tensor on the device, clipped, gripper flipped; ValueError if malformed."""
        import torch

        shape = (self.num_envs, self.single_action_space.shape[0])
        actions = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        if tuple(actions.shape) != shape:
            raise ValueError(f"actions must have shape {shape} (num_envs, action_dim), got {tuple(actions.shape)}")
        if not bool(torch.isfinite(actions).all()):
            raise ValueError("actions contain NaN or inf; expected finite values in [-1, 1]")
        actions = actions.clamp(-1.0, 1.0)  # a new tensor: the caller's is never modified
        if self.flip_gripper:
            actions[:, -1] = -actions[:, -1]
        return actions

    def _draw_instructions(self, env_indices) -> None:
        choices = (self.task.instruction, *self.task.paraphrases)
        for i in env_indices:
            self._instructions[i] = (choices[int(self._rng.integers(len(choices)))]
                                     if self.paraphrase_instructions else self.task.instruction)

    def _observation(self) -> dict[str, Any]:
        import torch

        obs = {}
        if self._sensor_uids:
            images = capture_images(self._env, self._sensor_uids, self.show_goal)
            obs["images"] = {role: images[uid].clone(memory_format=torch.contiguous_format)  # never SAPIEN's buffer
                             for role, uid in zip(self.camera_roles, self._sensor_uids)}
        obs["state"] = self._state()
        obs["instruction"] = tuple(self._instructions)
        return obs

    def _state(self):
        import torch
        from mani_skill.utils.geometry.rotation_conversions import (
            quaternion_to_axis_angle,
            standardize_quaternion,
        )

        if self.obs_mode == "state":
            return self._ms_obs.to(torch.float32).clone()
        agent = self._env.agent
        pose = agent.tcp_pose.raw_pose  # [N, 7]: position, quaternion wxyz
        axis_angle = quaternion_to_axis_angle(standardize_quaternion(pose[:, 3:]))
        return torch.cat([pose[:, :3], axis_angle, agent.robot.get_qpos()[:, -2:]], dim=1).to(torch.float32)

    def __repr__(self) -> str:
        return f"ManiSkillGPUVectorEnv({self.task.name}, num_envs={self.num_envs}, device={self.device})"

