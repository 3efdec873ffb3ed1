"""LIBERO's (MuJoCo's) side of the scene perturbations (:class:`vla_gym.ood.perturbations.SceneControls`).

    controls = env.unwrapped.backend.scene_controls()
    controls.set_lighting(np.array([0.6, 0.6, 0.7]))    # every light's colour and the headlight, scaled

Each setter works from the values the loaded model had (recorded on first use; a task change builds a new model
and new defaults), so one episode's perturbation never adds to the last one's. Pose changes take no physics
step (the robot's observation is read again): an object moved into another is pushed out by the first steps.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from vla_gym.backends.libero.cameras import CAMERAS
from vla_gym.ood.perturbations import SceneControls

#: robosuite model arrays the lighting scales
LIGHT_FIELDS = ("light_diffuse", "light_specular", "light_ambient")


class LiberoScene(SceneControls):
    def __init__(self, backend):
        self.backend = backend
        self._model = None   # the MuJoCo model the defaults below belong to
        self._defaults: dict = {}

    # ----------------------------------------------------------------------------------------- helpers
    @property
    def _env(self):
        env = self.backend.robosuite_env
        if env is None:
            raise RuntimeError("reset the env before perturbing its scene")
        if env.sim.model is not self._model:  # a task change rebuilt the model
            self._model, self._defaults = env.sim.model, {}
        return env

    def _default(self, key: str, read):
        if key not in self._defaults:
            self._defaults[key] = np.array(read(), copy=True)
        return self._defaults[key]

    def _moved(self, robot: bool) -> None:
        self._env.sim.forward()  # the render sees the new poses
        if robot:  # objects are not in the robot's observation: reading it again would only refresh its rounding
            self.backend.refresh_observation()

    # ----------------------------------------------------------------------------------------- vision
    def set_lighting(self, scale: np.ndarray) -> None:
        model = self._env.sim.model
        for field in LIGHT_FIELDS:
            getattr(model, field)[:] = self._default(field, lambda: getattr(model, field)) * scale
        headlight = model.vis.headlight
        for field in ("ambient", "diffuse", "specular"):
            default = self._default(f"headlight_{field}", lambda: getattr(headlight, field))
            setattr(headlight, field, default * scale)

    def set_background_color(self, rgb: np.ndarray, mix: float) -> None:
        model = self._env.sim.model
        materials, geoms = self._arena_parts()
        mat_rgba = self._default("mat_rgba", lambda: model.mat_rgba)
        geom_rgba = self._default("geom_rgba", lambda: model.geom_rgba)
        model.mat_rgba[materials, :3] = mat_rgba[materials, :3] * (1 - mix) + rgb * mix
        model.geom_rgba[geoms, :3] = geom_rgba[geoms, :3] * (1 - mix) + rgb * mix

    def _arena_parts(self) -> tuple[list[int], list[int]]:
        """Materials of the arena's geoms (table, floor, walls) and the arena geoms without a material."""
        env = self._env
        model = env.sim.model
        names = [geom.get("name") for geom in env.model.mujoco_arena.worldbody.iter("geom") if geom.get("name")]
        ids = [model.geom_name2id(name) for name in names if name in model.geom_names]
        materials = sorted({int(model.geom_matid[i]) for i in ids if model.geom_matid[i] >= 0})
        plain = [i for i in ids if model.geom_matid[i] < 0]
        return materials, plain

    def shift_camera(self, role: str, offset: np.ndarray) -> None:
        if role != "main":
            raise ValueError(f"camera_pose moves the main camera only (the wrist camera rides on the arm), got {role!r}")
        env = self._env
        camera = env.sim.model.camera_name2id(CAMERAS[role])
        position = self._default("cam_pos", lambda: env.sim.model.cam_pos)[camera]
        env.sim.model.cam_pos[camera] = position + offset
        env.sim.forward()  # camera poses in data follow the model's

    # -------------------------------------------------------------------------------------- execution
    def offset_robot_joints(self, offsets: np.ndarray) -> None:
        env = self._env
        robot = env.robots[0]
        indexes = robot._ref_joint_pos_indexes
        env.sim.data.qpos[indexes] += offsets[: len(indexes)]
        env.sim.data.qvel[robot._ref_joint_vel_indexes] = 0.0
        self._moved(robot=True)

    def movable_objects(self) -> list[str]:
        return list(self._env.objects_dict)

    def offset_objects(self, offsets: Mapping[str, Sequence[float]]) -> None:
        env = self._env
        for name, (dx, dy) in offsets.items():
            start, _ = env.sim.model.get_joint_qpos_addr(env.objects_dict[name].joints[0])  # free joint: x y z, quat
            env.sim.data.qpos[start:start + 2] += (dx, dy)
        self._moved(robot=False)
