"""Read a robosuite LIBERO env's privileged MuJoCo state (:class:`Scene`), and the geometry the experts plan with.

    >>> from vla_gym.data.experts.libero_scene import rotation_vector, yaw_rotation
    >>> rotation_vector(yaw_rotation(0.5)).round(6).tolist()
    [0.0, 0.0, 0.5]

:class:`Scene` gives the gripper site's pose and finger gap, and world-frame points spanning an object's
collision geometry (mesh vertices, box corners); :class:`Extent` is an object's bounding box and narrowest
horizontal direction; :func:`gripper_room` is the clearance around an open Panda gripper.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: distance (m) from the grip site to each finger pad, along the site's x axis, gripper open
FINGER_REACH = 0.042


# ------------------------------------------------------------------------------------ geometry
def rotation_vector(rot: np.ndarray) -> np.ndarray:
    """Rotation matrix -> axis-angle vector (angle * axis)."""
    cos = np.clip((np.trace(rot) - 1.0) / 2.0, -1.0, 1.0)
    angle = np.arccos(cos)
    if angle < 1e-6:
        return np.zeros(3)
    axis = np.array([rot[2, 1] - rot[1, 2], rot[0, 2] - rot[2, 0], rot[1, 0] - rot[0, 1]])
    if np.pi - angle < 1e-3:  # near pi the skew part vanishes: take the axis from the symmetric part
        axis = np.sqrt(np.maximum((np.diag(rot) + 1.0) / 2.0, 0.0))
        axis *= np.sign(np.where(np.abs(axis) > 1e-6, [1, np.sign(rot[0, 1] + rot[1, 0]) or 1,
                                                        np.sign(rot[0, 2] + rot[2, 0]) or 1], 1))
        return axis / np.linalg.norm(axis) * angle
    return axis / np.linalg.norm(axis) * angle


def yaw_rotation(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _box_corners(half: np.ndarray) -> np.ndarray:
    signs = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=np.float64)
    return signs * half


def _rectangle_distance(points: np.ndarray, center: np.ndarray, yaw: float, half_length: float,
                        half_width: float) -> float:
    """Smallest xy distance from ``points`` to a rectangle (long side along ``yaw``); 1.0 if none."""
    if not len(points):
        return 1.0
    rel = points[:, :2] - center
    u = rel @ np.array([np.cos(yaw), np.sin(yaw)])
    v = rel @ np.array([-np.sin(yaw), np.cos(yaw)])
    return float(np.min(np.hypot(np.maximum(np.abs(u) - half_length, 0), np.maximum(np.abs(v) - half_width, 0))))


def gripper_room(obstacles: np.ndarray, xy: np.ndarray, z: float, yaw: float) -> float:
    """Clearance (m) around an open Panda gripper whose grip site is at (xy, z), fingers along ``yaw``.

    The fingers span +-5.7 cm along their axis from 1 cm below the site; the hand above them
    (from 3 cm over the site) about +-10 cm by +-3.5 cm.
    """
    fingers = obstacles[obstacles[:, 2] > z - 0.015]
    hand = obstacles[obstacles[:, 2] > z + 0.025]
    return min(_rectangle_distance(fingers, xy, yaw, FINGER_REACH + 0.015, 0.012),
               _rectangle_distance(hand, xy, yaw, 0.10, 0.035))


def _box_grid(half: np.ndarray, spacing: float = 0.01) -> np.ndarray:
    axes = [np.linspace(-h, h, int(min(np.ceil(2 * h / spacing), 15)) + 1) for h in half]
    return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)


class Scene:
    """Read-only view of one robosuite LIBERO env's privileged state (MuJoCo ``sim.data``)."""

    def __init__(self, problem_env):
        self.env = problem_env
        self.sim = problem_env.sim
        self.model = getattr(self.sim.model, "_model", self.sim.model)
        self.data = getattr(self.sim.data, "_data", self.sim.data)
        self.robot = problem_env.robots[0]
        self._geoms: dict[int, np.ndarray] = {}

    # robot
    def eef_pos(self) -> np.ndarray:
        return np.array(self.data.site_xpos[self.robot.eef_site_id])

    def eef_rot(self) -> np.ndarray:
        return np.array(self.data.site_xmat[self.robot.eef_site_id]).reshape(3, 3)

    def finger_gap(self) -> float:
        """Distance between the two finger joints (about 0.08 open, 0 closed on nothing)."""
        qpos = self.sim.data.qpos[self.robot._ref_gripper_joint_pos_indexes]
        return float(abs(qpos[0] - qpos[1]))

    # objects
    def body_id(self, name: str) -> int:
        return self.env.obj_body_id[name]

    def body_pos(self, name: str) -> np.ndarray:
        return np.array(self.data.xpos[self.body_id(name)])

    def _collision_geoms(self, body: int) -> np.ndarray:
        if body not in self._geoms:
            bodies = {body}
            for child in range(self.model.nbody):  # bodies are ordered parents first
                if self.model.body_parentid[child] in bodies and child != 0:
                    bodies.add(child)
            self._geoms[body] = np.array([
                g for g in range(self.model.ngeom)
                if self.model.geom_bodyid[g] in bodies
                and (self.model.geom_contype[g] or self.model.geom_conaffinity[g])
            ], dtype=int)
        return self._geoms[body]

    def points(self, name: str, dense: bool = False) -> np.ndarray:
        """World-frame points spanning the object's collision geometry (mesh vertices, box corners)."""
        return self.points_of_body(self.body_id(name), dense)

    def points_of_body(self, body: int, dense: bool = False) -> np.ndarray:
        """World-frame points spanning one MuJoCo body's collision geometry, its children's included."""
        model, data = self.model, self.data
        clouds = []
        for g in self._collision_geoms(body):
            size = model.geom_size[g]
            if model.geom_type[g] == 7:  # mesh
                mesh = model.geom_dataid[g]
                start, count = model.mesh_vertadr[mesh], model.mesh_vertnum[mesh]
                local = np.asarray(model.mesh_vert[start:start + count], dtype=np.float64)
            elif model.geom_type[g] == 6:  # box: its corners, or a grid through it (obstacles)
                local = _box_grid(size) if dense else _box_corners(size)
            elif model.geom_type[g] in (5, 3):  # cylinder, capsule: a ring of points top and bottom
                angles = np.linspace(0, 2 * np.pi, 16, endpoint=False)
                ring = np.stack([size[0] * np.cos(angles), size[0] * np.sin(angles)], axis=1)
                half = size[1] + (size[0] if model.geom_type[g] == 3 else 0.0)
                local = np.concatenate([np.c_[ring, np.full(16, z)] for z in (-half, half)])
            else:  # sphere, ellipsoid, ...: its bounding box
                local = _box_corners(np.broadcast_to(size[0] if model.geom_type[g] == 2 else size, 3))
            rot = np.asarray(data.geom_xmat[g]).reshape(3, 3)
            clouds.append(local @ rot.T + data.geom_xpos[g])
        if not clouds:
            return np.array(data.xpos[body])[None]
        return np.concatenate(clouds)

    def goal_reached(self) -> bool:
        """LIBERO's own success check of the task's BDDL goal."""
        return bool(self.env._check_success())

    def site_pos(self, name: str) -> np.ndarray:
        return np.array(self.sim.data.get_site_xpos(name))


@dataclass
class Extent:
    """An object's world-frame axis-aligned extent and its narrowest horizontal direction."""

    center: np.ndarray   # xy centre of the bounding box, z centre
    low: np.ndarray
    high: np.ndarray
    narrow_yaw: float    # yaw (rad) of the horizontal direction across which the object is narrowest
    narrow_width: float

    @classmethod
    def of(cls, points: np.ndarray, narrow: bool = True) -> Extent:
        low, high = points.min(axis=0), points.max(axis=0)
        best = (float(high[1] - low[1]), np.pi / 2)
        if narrow:
            yaws = np.linspace(0, np.pi, 36, endpoint=False)
            proj = (points[:, :2] - points[:, :2].mean(axis=0)) @ np.stack([np.cos(yaws), np.sin(yaws)])
            widths = proj.max(axis=0) - proj.min(axis=0)
            best = (float(widths.min()), float(yaws[widths.argmin()]))
        return cls((low + high) / 2, low, high, best[1], best[0])
