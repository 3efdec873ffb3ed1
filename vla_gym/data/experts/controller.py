"""The scripted experts' OSC_POSE controller: proportional control of the grip site toward a pose, and phases.

A subclass sets ``scene`` and ``grasp_rot``, moves between phases with ``self._next(phase)`` and returns
``self._move(target_pos, gripper)`` from ``__call__``. Actions are vla_gym's 7-D OSC_POSE convention (delta
position, delta axis-angle in the world frame, gripper -1 open / +1 close).
"""
from __future__ import annotations

import numpy as np

from vla_gym.data.experts.libero_scene import Scene, rotation_vector

#: OSC_POSE maps action 1.0 to this translation (m) and rotation (rad) of the controller's goal
POS_SCALE, ROT_SCALE = 0.05, 0.5


class Controller:
    """Proportional control of the grip site toward a position and ``self.grasp_rot``, and phase bookkeeping."""

    GAIN = 1.5            # position action per POS_SCALE of error

    scene: Scene
    grasp_rot: np.ndarray

    def _move(self, target_pos: np.ndarray, gripper: float, rot: np.ndarray | None = None,
              max_action: float = 1.0) -> np.ndarray:
        scene = self.scene
        action = np.zeros(7, dtype=np.float32)
        action[:3] = np.clip(self.GAIN * (target_pos - scene.eef_pos()) / POS_SCALE, -max_action, max_action)
        rot_error = rotation_vector((self.grasp_rot if rot is None else rot) @ scene.eef_rot().T)
        action[3:6] = np.clip(2.0 * rot_error / ROT_SCALE, -1.0, 1.0)
        action[6] = gripper
        return action

    def _near(self, target_pos: np.ndarray, tol: float) -> bool:
        return bool(np.linalg.norm(target_pos - self.scene.eef_pos()) < tol)

    def _stalled(self) -> bool:
        """Going down but no longer moving: resting on something."""
        z, previous = self.scene.eef_pos()[2], self.last_z
        self.last_z = z
        return self.count > 8 and previous - z < 5e-4

    def _next(self, phase: str) -> None:
        self.phase, self.count, self.last_gap, self.last_z = phase, 0, 1.0, np.inf

    def describe(self) -> str:
        """The current phase (for logs)."""
        return self.phase
