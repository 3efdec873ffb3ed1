"""A numpy path for ManiSkill's end-effector delta-pose arm controller on the CPU simulator.

ManiSkill's ``PDEEPoseController.set_action`` does its pose algebra with batch-1 torch tensors and
computes the end effector's pose twice (the second copy is unused on the CPU): on PushCube it is more
than half of a state-mode step. On a one-env CPU sim the same steps run here on ``sapien.Pose`` and
numpy, and the same pinocchio IK call turns the target pose into joint targets:

1. the action is clipped and scaled as ManiSkill does (position to ``[pos_lower, pos_upper]``; the
   rotation clipped to norm 1, then multiplied by ``rot_lower``);
2. the target pose, in the robot's root frame: position = current + delta, rotation = the delta's
   XYZ Euler rotation composed before the current one (ManiSkill's
   ``root_translation:root_aligned_body_rotation`` frame);
3. pinocchio's IK from the current joint positions (100 iterations), or the current joints where it fails;
4. the joint targets go to ManiSkill's own ``set_drive_targets``.

The joint targets agree with ManiSkill's controller to float32 rounding (tests/test_maniskill_fast_controller.py
runs both on the same states); they are not bit-identical, so an episode's states drift from raw
ManiSkill's by float rounding. ``benchmarks/bench_maniskill.py`` measures the step with and without it.

    >>> from vla_gym.backends.maniskill.fast_controller import install_fast_ee_controller
    >>> install_fast_ee_controller(maniskill_env)   # doctest: +SKIP
    True
"""
from __future__ import annotations

import types

import numpy as np

#: the only frame ManiSkill's delta-pose controllers use by default, and the one this path implements
SUPPORTED_FRAME = "root_translation:root_aligned_body_rotation"


def _euler_xyz_quaternion(angles: np.ndarray) -> np.ndarray:
    """Quaternion (w, x, y, z) of the rotation Rx(a) @ Ry(b) @ Rz(c): ManiSkill's ``euler_angles_to_matrix(., "XYZ")``."""
    half = 0.5 * np.asarray(angles, dtype=np.float64)
    cx, cy, cz = np.cos(half)
    sx, sy, sz = np.sin(half)
    return np.array([
        cx * cy * cz - sx * sy * sz,
        sx * cy * cz + cx * sy * sz,
        cx * sy * cz - sx * cy * sz,
        cx * cy * sz + sx * sy * cz,
    ])


def supports(controller) -> bool:
    """Whether ``controller`` is a delta-pose arm controller this path reproduces (one CPU env)."""
    from mani_skill.agents.controllers.pd_ee_pose import PDEEPoseController

    config = getattr(controller, "config", None)
    return (type(controller) is PDEEPoseController and config.use_delta and not config.use_target
            and not config.interpolate and config.normalize_action and config.frame == SUPPORTED_FRAME
            and not controller.scene.gpu_sim_enabled and controller.scene.num_envs == 1
            and not controller.kinematics.use_gpu_ik)


def _set_action(self, action) -> None:
    """``PDEEPoseController.set_action`` for one CPU env, with numpy and sapien poses (see the module docstring)."""
    import sapien
    import torch

    fast = self._vla_fast
    action = np.asarray(action, dtype=np.float64).reshape(-1)
    delta_pos = fast["pos_offset"] + fast["pos_scale"] * np.clip(action[:3], -1.0, 1.0)
    delta_rot = action[3:6]
    norm = np.linalg.norm(delta_rot)
    if norm > 1.0:
        delta_rot = delta_rot / norm
    delta_rot = delta_rot * fast["rot_scale"]

    self._step = 0
    self._start_qpos = self.qpos
    root_pose = self.root_link._objs[0].entity_pose
    ee_at_base = root_pose.inv() * self.ee_link._objs[0].entity_pose
    rotation = sapien.Pose(q=_euler_xyz_quaternion(delta_rot)) * sapien.Pose(q=ee_at_base.q)
    target = sapien.Pose(ee_at_base.p + delta_pos, rotation.q)

    kinematics = self.kinematics
    qpos = self.articulation._objs[0].qpos[fast["ik_joints"]]
    result, success, _ = kinematics.pmodel.compute_inverse_kinematics(
        kinematics.end_link_idx, target, initial_qpos=qpos, active_qmask=fast["qmask"], max_iterations=100)
    if success:
        self._target_qpos = torch.as_tensor(result[fast["controlled"]], dtype=torch.float32).reshape(1, -1)
    else:
        self._target_qpos = self._start_qpos
    self.set_drive_targets(self._target_qpos)


def install_fast_ee_controller(env) -> bool:
    """Give the arm controller of a one-env CPU ManiSkill ``env`` the numpy path; False (unchanged) when unsupported.

    Only the default delta-pose controller (``pd_ee_delta_pose``) qualifies; every other mode keeps
    ManiSkill's own ``set_action``.
    """
    controllers = getattr(env.unwrapped.agent.controller, "controllers", {})
    arm = controllers.get("arm")
    if arm is None or not supports(arm):
        return False
    low = arm.action_space_low[:3].cpu().numpy().astype(np.float64)
    high = arm.action_space_high[:3].cpu().numpy().astype(np.float64)
    kinematics = arm.kinematics
    arm._vla_fast = {
        "pos_offset": 0.5 * (high + low), "pos_scale": 0.5 * (high - low),
        "rot_scale": np.broadcast_to(np.asarray(arm.config.rot_lower, dtype=np.float64), 3),
        "ik_joints": kinematics.pmodel_active_joint_indices.cpu().numpy().astype(np.int64),
        "controlled": kinematics.pmodel_controlled_joint_indices.cpu().numpy().astype(np.int64),
        "qmask": kinematics.qmask.cpu().numpy(),
    }
    arm.set_action = types.MethodType(_set_action, arm)
    return True
