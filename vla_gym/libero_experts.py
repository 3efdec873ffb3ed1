"""Scripted LIBERO experts: pick-and-place driven by the simulator's privileged object poses.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.libero_experts import libero_expert
    >>> env = gym.make("VLA/LiberoObject-v0", task_id=0, cameras=("main",), image_size=64)  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0, options={"init_state_id": 0})                          # doctest: +SKIP
    >>> expert = libero_expert(env)                                                          # doctest: +SKIP
    >>> done = False
    >>> while not done:                                                                      # doctest: +SKIP
    ...     obs, reward, done, truncated, info = env.unwrapped.step(expert(), observe=False)
    ...     done = done or truncated

The task's BDDL goal names what goes where (``("in", "ketchup_1", "basket_1_contain_region")``,
``("on", "akita_black_bowl_1", "plate_1")``). The expert reads the object's collision geometry
(its mesh vertices in the world frame) and the gripper site pose from MuJoCo, and runs a small state
machine: above the grasp -> down -> close -> lift -> carry over the target -> lower -> open -> up.
Boxes and bottles are grasped from the top across their narrowest side; bowls by the rim. A grasp
that comes up empty is retried. Actions are vla_gym's 7-D OSC_POSE convention (delta position,
delta axis-angle in the world frame, gripper -1 open / +1 close); the expert never renders.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vla_gym.tasks.libero import suite_tasks

#: OSC_POSE maps action 1.0 to this translation (m) and rotation (rad) of the controller's goal
POS_SCALE, ROT_SCALE = 0.05, 0.5
#: distance (m) from the grip site to each finger pad, along the site's x axis, gripper open
FINGER_REACH = 0.042
#: suites whose every task is a single pick-and-place goal this expert handles
_FULL_SUITES = ("libero_object", "libero_spatial")

#: (suite, task name) of every task with an expert
SUPPORTED: frozenset[tuple[str, str]] = frozenset(
    (task.suite, task.name) for suite in _FULL_SUITES for task in suite_tasks(suite)
)


# ------------------------------------------------------------------------------------ geometry
def _rotation_vector(rot: np.ndarray) -> np.ndarray:
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


def _yaw_rotation(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _box_corners(half: np.ndarray) -> np.ndarray:
    signs = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=np.float64)
    return signs * half


def _distance_to_segment(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Smallest distance from 2-D ``points`` to the segment a-b (1.0 when there are none)."""
    if not len(points):
        return 1.0
    t = np.clip((points - a) @ (b - a) / ((b - a) @ (b - a)), 0.0, 1.0)
    return float(np.min(np.linalg.norm(points - (a + t[:, None] * (b - a)), axis=1)))


def _box_grid(half: np.ndarray, spacing: float = 0.01) -> np.ndarray:
    axes = [np.linspace(-h, h, int(min(np.ceil(2 * h / spacing), 15)) + 1) for h in half]
    return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)


class _Scene:
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
        model, data = self.model, self.data
        clouds = []
        for g in self._collision_geoms(self.body_id(name)):
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
            return self.body_pos(name)[None]
        return np.concatenate(clouds)

    def goal_reached(self) -> bool:
        """LIBERO's own success check of the task's BDDL goal."""
        return bool(self.env._check_success())

    def site_pos(self, name: str) -> np.ndarray:
        return np.array(self.sim.data.get_site_xpos(name))


@dataclass
class _Extent:
    """An object's world-frame axis-aligned extent and its narrowest horizontal direction."""

    center: np.ndarray   # xy centre of the bounding box, z centre
    low: np.ndarray
    high: np.ndarray
    narrow_yaw: float    # yaw (rad) of the horizontal direction across which the object is narrowest
    narrow_width: float

    @classmethod
    def of(cls, points: np.ndarray, narrow: bool = True) -> "_Extent":
        low, high = points.min(axis=0), points.max(axis=0)
        best = (float(high[1] - low[1]), np.pi / 2)
        if narrow:
            yaws = np.linspace(0, np.pi, 36, endpoint=False)
            proj = (points[:, :2] - points[:, :2].mean(axis=0)) @ np.stack([np.cos(yaws), np.sin(yaws)])
            widths = proj.max(axis=0) - proj.min(axis=0)
            best = (float(widths.min()), float(yaws[widths.argmin()]))
        return cls((low + high) / 2, low, high, best[1], best[0])


# ------------------------------------------------------------------------------------ the expert
class PickPlaceExpert:
    """Pick ``obj`` and put it on / in ``target`` (an object or a region site); call for each action."""

    LIFT = 0.10           # clearance above everything on the way (m)
    GAIN = 1.5            # position action per POS_SCALE of error
    CLOSE_STEPS = 6       # at least this many steps closing the gripper
    OPEN_STEPS = 10

    def __init__(self, scene: _Scene, obj: str, target: str, relation: str):
        self.scene, self.obj, self.target, self.relation = scene, obj, target, relation
        self.bowl = "bowl" in obj
        self.attempts, self.goal = 0, None
        self._next("above")
        self.grasp_rot = scene.eef_rot()
        self.plan_grasp()

    # planning
    def plan_grasp(self) -> None:
        scene = self.scene
        ext = _Extent.of(scene.points(self.obj))
        rot_now = scene.eef_rot()
        finger_axis = rot_now[:, 0]  # Panda's finger pads sit at +-4 cm along the grip site's x axis
        current_yaw = np.arctan2(finger_axis[1], finger_axis[0])
        if self.bowl:
            # rim grasp: the fingers straddle the bowl's wall, on the side where the outer finger
            # has the most room from other objects; few degrees of turning break ties
            radius = (ext.high[0] - ext.low[0] + ext.high[1] - ext.low[1]) / 4
            others = self.obstacles(ext.center, ext.high[2] - 0.03)  # what the fingers and hand could hit
            best = None
            for yaw in np.linspace(-np.pi, np.pi, 24, endpoint=False):
                direction = np.array([np.cos(yaw), np.sin(yaw)])
                grasp = ext.center[:2] + direction * (radius - 0.015)
                room = _distance_to_segment(others, grasp - direction * (FINGER_REACH + 0.015),
                                            grasp + direction * (FINGER_REACH + 0.015))
                turn = (yaw - current_yaw + np.pi / 2) % np.pi - np.pi / 2
                score = min(room, 0.05) - 0.01 * abs(turn)
                if best is None or score > best[0]:
                    best = (score, direction, turn)
            _, direction, turn = best
            rim = ext.center[:2] + direction * (radius - 0.015)
            points = scene.points(self.obj)
            near_rim = np.linalg.norm(points[:, :2] - rim, axis=1) < 0.025
            rim_top = points[near_rim, 2].max() if near_rim.any() else ext.high[2]  # a bowl may tilt
            self.grasp_pos = np.array([rim[0], rim[1], rim_top - 0.018])
            self.grasp_rot = _yaw_rotation(turn) @ rot_now
        else:
            turn = (ext.narrow_yaw - current_yaw + np.pi / 2) % np.pi - np.pi / 2  # within +-90 deg
            self.grasp_rot = _yaw_rotation(turn) @ rot_now
            height = ext.high[2] - ext.low[2]
            grasp_z = max(ext.high[2] - min(0.03, 0.5 * height), ext.low[2] + 0.015)  # fingertips reach ~1 cm lower
            self.grasp_pos = np.array([ext.center[0], ext.center[1], grasp_z])
        self.obj_low = ext.low[2]
        self.obj_height = ext.high[2] - ext.low[2]

    def obstacles(self, center: np.ndarray, above_z: float, within: float = 0.2) -> np.ndarray:
        """xy of other objects' points higher than ``above_z`` within ``within`` m of ``center``."""
        clouds = [self.scene.points(name, dense=True) for name in self.scene.env.obj_body_id if name != self.obj]
        points = np.concatenate(clouds) if clouds else np.zeros((0, 3))
        near = (points[:, 2] > above_z) & (np.linalg.norm(points[:, :2] - center[:2], axis=1) < within)
        return points[near, :2]

    def place_goal(self) -> np.ndarray:
        """Where the object's origin (xy) and bottom (z) must go."""
        scene = self.scene
        if self.target in scene.env.obj_body_id:
            # LIBERO's On / In compare body origins: aim the object's origin at the target's
            ext = _Extent.of(scene.points(self.target), narrow=False)
            origin = scene.body_pos(self.target)
            return np.array([origin[0], origin[1], ext.high[2] + 0.01])
        site = scene.site_pos(self.target)
        return np.array([site[0], site[1], site[2] + 0.02])

    # control
    def _move(self, target_pos: np.ndarray, gripper: float, rot: np.ndarray | None = None,
              max_action: float = 1.0) -> np.ndarray:
        scene = self.scene
        action = np.zeros(7, dtype=np.float32)
        action[:3] = np.clip(self.GAIN * (target_pos - scene.eef_pos()) / POS_SCALE, -max_action, max_action)
        rot_error = _rotation_vector((self.grasp_rot if rot is None else rot) @ scene.eef_rot().T)
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

    def __call__(self) -> np.ndarray:
        self.count += 1
        scene = self.scene
        above = self.grasp_pos + np.array([0, 0, 0.08])
        if self.phase == "above":
            if self._near(above, 0.015) and np.linalg.norm(
                    _rotation_vector(self.grasp_rot @ scene.eef_rot().T)) < 0.08 or self.count > 80:
                self._next("down")
            return self._move(above, -1.0)
        if self.phase == "down":
            if self._near(self.grasp_pos, 0.008) or self._stalled() or self.count > 40:
                self._next("close")
            return self._move(self.grasp_pos, -1.0, max_action=0.6)
        if self.phase == "close":
            # the fingers lag the command: wait until they stop closing (on the object, or on nothing)
            gap, previous = scene.finger_gap(), self.last_gap
            self.last_gap = gap
            if self.count == 1:
                self.open_gap = gap
            closed = self.open_gap - gap > 0.004 and previous - gap < 5e-4
            if (self.count >= self.CLOSE_STEPS and closed) or self.count > 30:
                self.lift_from = scene.body_pos(self.obj)[2]
                self._next("lift")
            return self._move(self.grasp_pos, 1.0)
        if self.goal is None:
            self.goal = self.place_goal()  # targets stay put: plan the place once
        goal = self.goal
        obj_now = _Extent.of(scene.points(self.obj), narrow=False)
        # eef target = where the eef must be for the object's bbox centre / bottom to be at the goal
        origin = scene.body_pos(self.obj)
        offset = scene.eef_pos() - np.array([origin[0], origin[1], obj_now.low[2]])
        carry_z = max(goal[2] + self.LIFT, self.obj_low + 0.05) + offset[2]  # clear the target / the start
        if self.phase == "lift":
            lift = np.array([scene.eef_pos()[0], scene.eef_pos()[1], carry_z])
            if self.count > 6 and scene.body_pos(self.obj)[2] - self.lift_from < 0.01:
                return self._retry()
            if scene.eef_pos()[2] > carry_z - 0.03:
                self._next("carry")
            return self._move(lift if self.count > 1 else self.grasp_pos, 1.0)
        if self.phase == "carry":
            target = np.array([goal[0] + offset[0], goal[1] + offset[1], carry_z])
            if self._near(target, 0.012) or self.count > 100:
                self._next("lower")
            if scene.body_pos(self.obj)[2] < self.lift_from + 0.01:
                return self._retry()
            return self._move(target, 1.0)
        if self.phase == "lower":
            target = goal + offset
            height = scene.eef_pos()[2] - target[2]
            if self._near(target, 0.01) or self._stalled() or self.count > 60:
                self._next("open")
            return self._move(target, 1.0, max_action=1.0 if height > 0.05 else 0.5)
        if self.phase == "open":
            if self.count >= self.OPEN_STEPS:
                self._next("up")
            return self._move(scene.eef_pos(), -1.0)
        # up: leave the object where it is; if it did not stay at the goal, pick it again
        if self.count > 15 and not scene.goal_reached():
            return self._retry()
        return self._move(np.array([*scene.eef_pos()[:2], carry_z]), -1.0)

    def _retry(self) -> np.ndarray:
        """The object slipped or missed the goal: plan a new grasp from where it lies now."""
        self.attempts += 1
        self.goal = None
        self.plan_grasp()
        self._next("above")
        return self._move(self.scene.eef_pos() + np.array([0, 0, 0.05]), -1.0)


def libero_expert(env) -> Callable[[], np.ndarray]:
    """After ``env.reset()``: a fresh per-episode expert for the env's current LIBERO task.

    Calling it returns the next 7-D float32 action (vla_gym convention), reading the simulator's
    privileged state through ``env.unwrapped.backend``. Raises KeyError naming the supported tasks
    when the task has none.
    """
    base = env.unwrapped
    task = getattr(base, "task", None)
    if task is None:
        raise RuntimeError("call env.reset() before libero_expert(env)")
    if (task.suite, task.name) not in SUPPORTED:
        raise KeyError(
            f"no scripted LIBERO expert for {task.suite}/{task.name}; experts exist for "
            f"{sorted(SUPPORTED)}"
        )
    robosuite_env = getattr(getattr(base, "backend", None), "robosuite_env", None)
    if robosuite_env is None:
        raise TypeError(f"{env} is not a vla_gym LIBERO env (VLA/Libero*-v0)")
    (relation, obj, target), = robosuite_env.parsed_problem["goal_state"]
    return PickPlaceExpert(_Scene(robosuite_env), obj, target, relation.lower())
