"""ManiSkill's (SAPIEN's) side of the scene perturbations (:class:`vla_gym.ood.perturbations.SceneControls`).

    controls = env.unwrapped.backend.scene_controls()
    controls.shift_camera("main", np.array([0.0, 0.02, 0.0]))   # the base camera, 2 cm to the side

Each setter works from the values the loaded ManiSkill env had (recorded on first use per env: a task switch
keeps its env, so its defaults too), so one episode's perturbation never adds to the last one's. The table and
the ground are the actors ManiSkill's table scene names ``table-*`` and ``ground``; movable objects are its
dynamic actors (the cube; goal markers are kinematic).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from vla_gym.backends.maniskill.cameras import CAMERAS
from vla_gym.backends.maniskill.inference import without_autograd
from vla_gym.ood.perturbations import SceneControls


def _is_background(name: str) -> bool:
    return name.startswith("table") or name == "ground"


class ManiSkillScene(SceneControls):
    def __init__(self, backend):
        self.backend = backend
        self._defaults: dict = {}  # (id of the ManiSkill env, key) -> value

    # ----------------------------------------------------------------------------------------- helpers
    @property
    def _env(self):
        env = self.backend.maniskill_env
        if env is None:
            raise RuntimeError("reset the env before perturbing its scene")
        return env

    def _default(self, key, read):
        key = (id(self._env), key)
        if key not in self._defaults:
            self._defaults[key] = np.array(read(), dtype=np.float32, copy=True)  # textures: float32 pixels
        return self._defaults[key]

    def _lights(self):
        import sapien

        for index, sub_scene in enumerate(self._env.scene.sub_scenes):
            for entity in sub_scene.entities:
                for number, component in enumerate(entity.components):
                    if isinstance(component, sapien.render.RenderLightComponent):
                        yield (index, entity.name, number), component

    def _background_materials(self):
        import sapien

        for name, actor in self._env.scene.actors.items():
            if not _is_background(name):
                continue
            for entity in actor._objs:
                body = entity.find_component_by_type(sapien.render.RenderBodyComponent)
                if body is None:
                    continue
                for s, shape in enumerate(body.render_shapes):
                    for p, part in enumerate(getattr(shape, "parts", [shape])):
                        yield (name, entity.name, s, p), part.material

    def _refresh_observation(self) -> None:
        """Poses changed after the reset: the backend's kept observation (obs_mode='state') is read again."""
        if self.backend.obs_mode == "state":
            self.backend._obs = self._env.get_obs()

    # ----------------------------------------------------------------------------------------- vision
    @without_autograd
    def set_lighting(self, scale: np.ndarray) -> None:
        for key, light in self._lights():
            light.color = self._default(("light",) + key, lambda: light.color) * scale
        for index, sub_scene in enumerate(self._env.scene.sub_scenes):
            system = sub_scene.render_system
            system.ambient_light = self._default(("ambient", index), lambda: system.ambient_light) * scale

    @without_autograd
    def set_background_color(self, rgb: np.ndarray, mix: float) -> None:
        for key, material in self._background_materials():
            texture = material.base_color_texture
            if texture is not None:  # SAPIEN draws a textured surface from its texture alone: tint the pixels
                pixels = self._default(("texture",) + key, texture.download)
                tinted = pixels.copy()
                tinted[..., :3] = pixels[..., :3] * (1 - mix) + rgb * 255 * mix
                texture.upload(tinted.astype(np.uint8))
            else:
                default = self._default(("material",) + key, lambda: material.base_color)
                color = default.copy()
                color[:3] = default[:3] * (1 - mix) + rgb * mix
                material.base_color = [float(v) for v in color]

    @without_autograd
    def shift_camera(self, role: str, offset: np.ndarray) -> None:
        import sapien

        if role != "main":
            raise ValueError(f"camera_pose moves the main camera only (the wrist camera rides on the arm), got {role!r}")
        camera = self._env.scene.sensors[CAMERAS[role]].camera
        pose = self._default(("camera", role), lambda: camera.get_local_pose().raw_pose[0].cpu().numpy())
        camera.set_local_pose(sapien.Pose((pose[:3] + offset).astype(np.float32), pose[3:]))

    # -------------------------------------------------------------------------------------- execution
    @without_autograd
    def offset_robot_joints(self, offsets: np.ndarray) -> None:
        import torch

        robot = self._env.agent.robot
        qpos = robot.get_qpos().clone()
        qpos[:, : len(offsets)] += torch.as_tensor(offsets, dtype=qpos.dtype)
        robot.set_qpos(qpos)
        robot.set_qvel(torch.zeros_like(qpos))
        self._refresh_observation()

    def movable_objects(self) -> list[str]:
        return [name for name, actor in self._env.scene.actors.items() if actor.px_body_type == "dynamic"]

    @without_autograd
    def offset_objects(self, offsets: Mapping[str, Sequence[float]]) -> None:
        import sapien

        for name, (dx, dy) in offsets.items():
            actor = self._env.scene.actors[name]
            pose = actor.pose.raw_pose[0].cpu().numpy().astype(np.float32)
            actor.set_pose(sapien.Pose(pose[:3] + np.array([dx, dy, 0.0], dtype=np.float32), pose[3:]))
        self._refresh_observation()
