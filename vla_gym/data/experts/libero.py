"""Scripted LIBERO experts: pick-and-place driven by the simulator's privileged object poses.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.data.experts.libero import libero_expert
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

Besides pick-and-place (every LIBERO-Object and LIBERO-Spatial task, and the LIBERO-Goal and
LIBERO-90 tasks in :data:`SUPPORTED`), :class:`TurnKnobExpert` turns a stove's knob on or off
(grasp it, turn the wrist about its axis), and :class:`SequenceExpert` chains the two for a goal
with several parts ("turn on the stove and put the frying pan on it"). Drawers and pushing have no
primitive (docs/libero.md says why).
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

#: LIBERO-Goal tasks the same primitives solve (pick-and-place, turning a knob); see docs/libero.md
_GOAL_TASKS = (
    "put_the_bowl_on_the_stove",
    "put_the_wine_bottle_on_top_of_the_cabinet",
    "put_the_bowl_on_top_of_the_cabinet",
    "put_the_cream_cheese_in_the_bowl",
    "turn_on_the_stove",
    "put_the_bowl_on_the_plate",
    "put_the_wine_bottle_on_the_rack",
)
#: LIBERO-90 tasks the same primitives solve (those that succeeded at least once when measured)
_LIBERO_90_TASKS = (
    "KITCHEN_SCENE10_put_the_black_bowl_in_the_top_drawer_of_the_cabinet",
    "KITCHEN_SCENE1_put_the_black_bowl_on_the_plate",
    "KITCHEN_SCENE1_put_the_black_bowl_on_top_of_the_cabinet",
    "KITCHEN_SCENE2_put_the_black_bowl_at_the_back_on_the_plate",
    "KITCHEN_SCENE2_put_the_black_bowl_at_the_front_on_the_plate",
    "KITCHEN_SCENE2_put_the_middle_black_bowl_on_the_plate",
    "KITCHEN_SCENE2_put_the_middle_black_bowl_on_top_of_the_cabinet",
    "KITCHEN_SCENE2_stack_the_black_bowl_at_the_front_on_the_black_bowl_in_the_middle",
    "KITCHEN_SCENE2_stack_the_middle_black_bowl_on_the_back_black_bowl",
    "KITCHEN_SCENE3_put_the_moka_pot_on_the_stove",
    "KITCHEN_SCENE3_turn_on_the_stove",
    "KITCHEN_SCENE4_put_the_black_bowl_in_the_bottom_drawer_of_the_cabinet",
    "KITCHEN_SCENE4_put_the_black_bowl_on_top_of_the_cabinet",
    "KITCHEN_SCENE4_put_the_wine_bottle_in_the_bottom_drawer_of_the_cabinet",
    "KITCHEN_SCENE4_put_the_wine_bottle_on_the_wine_rack",
    "KITCHEN_SCENE5_put_the_black_bowl_in_the_top_drawer_of_the_cabinet",
    "KITCHEN_SCENE5_put_the_black_bowl_on_the_plate",
    "KITCHEN_SCENE5_put_the_black_bowl_on_top_of_the_cabinet",
    "KITCHEN_SCENE7_put_the_white_bowl_on_the_plate",
    "KITCHEN_SCENE7_put_the_white_bowl_to_the_right_of_the_plate",
    "KITCHEN_SCENE8_turn_off_the_stove",
    "KITCHEN_SCENE9_put_the_white_bowl_on_top_of_the_cabinet",
    "KITCHEN_SCENE9_turn_on_the_stove",
    "LIVING_ROOM_SCENE1_pick_up_the_alphabet_soup_and_put_it_in_the_basket",
    "LIVING_ROOM_SCENE1_pick_up_the_cream_cheese_box_and_put_it_in_the_basket",
    "LIVING_ROOM_SCENE1_pick_up_the_ketchup_and_put_it_in_the_basket",
    "LIVING_ROOM_SCENE1_pick_up_the_tomato_sauce_and_put_it_in_the_basket",
    "LIVING_ROOM_SCENE2_pick_up_the_alphabet_soup_and_put_it_in_the_basket",
    "LIVING_ROOM_SCENE2_pick_up_the_butter_and_put_it_in_the_basket",
    "LIVING_ROOM_SCENE2_pick_up_the_milk_and_put_it_in_the_basket",
    "LIVING_ROOM_SCENE2_pick_up_the_orange_juice_and_put_it_in_the_basket",
    "LIVING_ROOM_SCENE2_pick_up_the_tomato_sauce_and_put_it_in_the_basket",
    "LIVING_ROOM_SCENE3_pick_up_the_alphabet_soup_and_put_it_in_the_tray",
    "LIVING_ROOM_SCENE3_pick_up_the_butter_and_put_it_in_the_tray",
    "LIVING_ROOM_SCENE3_pick_up_the_cream_cheese_and_put_it_in_the_tray",
    "LIVING_ROOM_SCENE3_pick_up_the_ketchup_and_put_it_in_the_tray",
    "LIVING_ROOM_SCENE3_pick_up_the_tomato_sauce_and_put_it_in_the_tray",
    "LIVING_ROOM_SCENE4_pick_up_the_black_bowl_on_the_left_and_put_it_in_the_tray",
    "LIVING_ROOM_SCENE4_pick_up_the_chocolate_pudding_and_put_it_in_the_tray",
    "LIVING_ROOM_SCENE4_pick_up_the_salad_dressing_and_put_it_in_the_tray",
    "LIVING_ROOM_SCENE5_put_the_red_mug_on_the_left_plate",
    "LIVING_ROOM_SCENE5_put_the_red_mug_on_the_right_plate",
    "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate",
    "LIVING_ROOM_SCENE5_put_the_yellow_and_white_mug_on_the_right_plate",
    "LIVING_ROOM_SCENE6_put_the_chocolate_pudding_to_the_left_of_the_plate",
    "LIVING_ROOM_SCENE6_put_the_chocolate_pudding_to_the_right_of_the_plate",
    "LIVING_ROOM_SCENE6_put_the_red_mug_on_the_plate",
    "LIVING_ROOM_SCENE6_put_the_white_mug_on_the_plate",
    "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_left_compartment_of_the_caddy",
    "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_right_compartment_of_the_caddy",
    "STUDY_SCENE1_pick_up_the_yellow_and_white_mug_and_place_it_to_the_right_of_the_caddy",
    "STUDY_SCENE2_pick_up_the_book_and_place_it_in_the_back_compartment_of_the_caddy",
    "STUDY_SCENE2_pick_up_the_book_and_place_it_in_the_left_compartment_of_the_caddy",
    "STUDY_SCENE2_pick_up_the_book_and_place_it_in_the_right_compartment_of_the_caddy",
    "STUDY_SCENE3_pick_up_the_book_and_place_it_in_the_left_compartment_of_the_caddy",
    "STUDY_SCENE3_pick_up_the_book_and_place_it_in_the_right_compartment_of_the_caddy",
    "STUDY_SCENE3_pick_up_the_red_mug_and_place_it_to_the_right_of_the_caddy",
    "STUDY_SCENE3_pick_up_the_white_mug_and_place_it_to_the_right_of_the_caddy",
    "STUDY_SCENE4_pick_up_the_book_on_the_left_and_place_it_on_top_of_the_shelf",
)

#: (suite, task name) of every task with an expert
SUPPORTED: frozenset[tuple[str, str]] = frozenset(
    [(task.suite, task.name) for suite in _FULL_SUITES for task in suite_tasks(suite)]
    + [("libero_goal", name) for name in _GOAL_TASKS]
    + [("libero_90", name) for name in _LIBERO_90_TASKS]
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


def _rectangle_distance(points: np.ndarray, center: np.ndarray, yaw: float, half_length: float,
                        half_width: float) -> float:
    """Smallest xy distance from ``points`` to a rectangle (long side along ``yaw``); 1.0 if none."""
    if not len(points):
        return 1.0
    rel = points[:, :2] - center
    u = rel @ np.array([np.cos(yaw), np.sin(yaw)])
    v = rel @ np.array([-np.sin(yaw), np.cos(yaw)])
    return float(np.min(np.hypot(np.maximum(np.abs(u) - half_length, 0), np.maximum(np.abs(v) - half_width, 0))))


def _gripper_room(obstacles: np.ndarray, xy: np.ndarray, z: float, yaw: float) -> float:
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
class _Controller:
    """Proportional control of the grip site toward a position and ``self.grasp_rot``, and phase bookkeeping."""

    GAIN = 1.5            # position action per POS_SCALE of error

    scene: _Scene
    grasp_rot: np.ndarray

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

    def describe(self) -> str:
        """The current phase (for logs)."""
        return self.phase


class PickPlaceExpert(_Controller):
    """Pick ``obj`` and put it on / in ``target`` (an object or a region site); call for each action."""

    LIFT = 0.10           # clearance above everything on the way (m)
    CLOSE_STEPS = 6       # at least this many steps closing the gripper
    OPEN_STEPS = 10

    def __init__(self, scene: _Scene, obj: str, target: str, relation: str):
        self.scene, self.obj, self.target, self.relation = scene, obj, target, relation
        self.bowl = "bowl" in obj
        self.attempts, self.goal = 0, None
        self.reached = scene.goal_reached   # a SequenceExpert gives each part its own predicate
        self._next("above")
        self.grasp_rot = scene.eef_rot()
        self.plan_grasp()

    # planning
    def plan_grasp(self) -> None:
        """Choose where and at which yaw to grasp, clear of the other objects (fingers and hand)."""
        scene = self.scene
        points = scene.points(self.obj)
        ext = _Extent.of(points)
        rot_now = scene.eef_rot()
        finger_axis = rot_now[:, 0]  # Panda's finger pads sit at +-4 cm along the grip site's x axis
        current_yaw = np.arctan2(finger_axis[1], finger_axis[0])
        others = self.obstacles(ext.center, ext.low[2])
        candidates = []  # (grasp xy, grasp z, finger-axis yaw, preference penalty)
        if self.bowl:
            # rim grasp: the fingers straddle the bowl's wall, at any side of the rim
            radius = (ext.high[0] - ext.low[0] + ext.high[1] - ext.low[1]) / 4
            for yaw in np.linspace(-np.pi, np.pi, 24, endpoint=False):
                rim = ext.center[:2] + np.array([np.cos(yaw), np.sin(yaw)]) * (radius - 0.015)
                near_rim = np.linalg.norm(points[:, :2] - rim, axis=1) < 0.025
                rim_top = points[near_rim, 2].max() if near_rim.any() else ext.high[2]  # a bowl may tilt
                candidates.append((rim, rim_top - 0.018, yaw, 0.0))
        else:
            # across the narrowest side, or slanted / across the other side where that fits the open
            # gripper too, centred or shifted along the object: whichever leaves the hand most room
            height = ext.high[2] - ext.low[2]
            grasp_z = max(ext.high[2] - min(0.03, 0.5 * height), ext.low[2] + 0.015)  # fingertips reach ~1 cm lower
            xy = points[:, :2] - ext.center[:2]
            for slant in (0.0, 0.25, -0.25, 0.45, -0.45, np.pi / 2):
                yaw = ext.narrow_yaw + slant
                across, along = np.array([np.cos(yaw), np.sin(yaw)]), np.array([-np.sin(yaw), np.cos(yaw)])
                if slant and np.ptp(xy @ across) > 0.068:  # the open gripper spans about 0.08
                    continue
                reach = max(np.ptp(xy @ along) / 2 - 0.012, 0.0)
                for shift in (0.0, 0.01, -0.01, 0.02, -0.02):
                    if abs(shift) <= reach:
                        penalty = 0.1 * abs(shift) + 0.005 * min(abs(slant), 0.5)
                        candidates.append((ext.center[:2] + along * shift, grasp_z, yaw, penalty))
        best = None
        for xy, z, yaw, penalty in candidates:
            turn = (yaw - current_yaw + np.pi / 2) % np.pi - np.pi / 2  # fingers are symmetric: within +-90 deg
            room = _gripper_room(others, xy, z, yaw)
            score = min(room, 0.03) - penalty - 0.005 * abs(turn)
            if best is None or score > best[0]:
                best = (score, xy, z, turn)
        _, xy, z, turn = best
        self.grasp_pos = np.array([xy[0], xy[1], z])
        self.grasp_rot = _yaw_rotation(turn) @ rot_now
        self.obj_low = ext.low[2]

    def obstacles(self, center: np.ndarray, above_z: float, within: float = 0.25) -> np.ndarray:
        """Other objects' points higher than ``above_z`` within ``within`` m (xy) of ``center``."""
        clouds = [self.scene.points(name, dense=True) for name in self.scene.env.obj_body_id if name != self.obj]
        points = np.concatenate(clouds) if clouds else np.zeros((0, 3))
        near = (points[:, 2] > above_z) & (np.linalg.norm(points[:, :2] - center[:2], axis=1) < within)
        return points[near]

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
        if self.count > 15 and not self.reached():
            return self._retry()
        return self._move(np.array([*scene.eef_pos()[:2], carry_z]), -1.0)

    def finished(self) -> bool:
        """Released at the goal and clear of it."""
        return self.phase == "up" and self.count > 15 and self.reached()

    def _retry(self) -> np.ndarray:
        """The object slipped or missed the goal: plan a new grasp from where it lies now."""
        self.attempts += 1
        self.goal = None
        self.plan_grasp()
        self._next("above")
        return self._move(self.scene.eef_pos() + np.array([0, 0, 0.05]), -1.0)


def _joint(scene: _Scene, name: str) -> tuple[int, int]:
    """(joint id, qpos address) of a named MuJoCo joint."""
    joint = scene.sim.model.joint_name2id(name)
    return joint, int(scene.model.jnt_qposadr[joint])


class TurnKnobExpert(_Controller):
    """Turn a stove's knob (a hinge about the vertical) on or off: grasp it from the top across its
    narrow side, then turn the wrist about the knob's axis until LIBERO's on / off test holds."""

    def __init__(self, scene: _Scene, fixture: str, turn_on: bool):
        self.scene, self.fixture, self.turn_on = scene, fixture, turn_on
        self.joint, self.qpos_adr = _joint(scene, scene.env.get_object(fixture).joints[0])
        ext = _Extent.of(scene.points_of_body(int(scene.model.jnt_bodyid[self.joint])))
        anchor = np.array(scene.data.xanchor[self.joint])
        rot_now = scene.eef_rot()
        current_yaw = np.arctan2(rot_now[1, 0], rot_now[0, 0])
        turn = (ext.narrow_yaw - current_yaw + np.pi / 2) % np.pi - np.pi / 2
        self.grasp_rot = _yaw_rotation(turn) @ rot_now
        self.grasp_pos = np.array([anchor[0], anchor[1], ext.high[2] - 0.012])
        low, high = scene.model.jnt_range[self.joint]
        self.goal_q = min(high - 0.1, 1.0) if turn_on else low
        self.angle, self.q_start = 0.0, None
        self._next("above")

    def reached(self) -> bool:
        """LIBERO's own on / off test of the knob's joint."""
        q = float(self.scene.sim.data.qpos[self.qpos_adr])
        fixture = self.scene.env.get_object(self.fixture)
        return bool(fixture.turn_on(q) if self.turn_on else fixture.turn_off(q))

    def finished(self) -> bool:
        return self.phase == "up" and self.count > 8

    def __call__(self) -> np.ndarray:
        self.count += 1
        scene = self.scene
        above = self.grasp_pos + np.array([0, 0, 0.06])
        q = float(scene.sim.data.qpos[self.qpos_adr])
        if self.phase == "above":
            if self._near(above, 0.012) and np.linalg.norm(
                    _rotation_vector(self.grasp_rot @ scene.eef_rot().T)) < 0.08 or self.count > 80:
                self._next("down")
            return self._move(above, -1.0)
        if self.phase == "down":
            if self._near(self.grasp_pos, 0.006) or self._stalled() or self.count > 40:
                self._next("close")
            return self._move(self.grasp_pos, -1.0, max_action=0.5)
        if self.phase == "close":
            if self.count >= 10:
                self._next("turn")
            return self._move(self.grasp_pos, 1.0)
        if self.phase == "turn":
            # turn the goal orientation about the knob's (vertical) axis, at most 0.3 rad ahead of the joint
            if self.q_start is None:
                self.q_start = q
            remaining = self.goal_q - q
            if self.reached() or abs(remaining) < 0.02 or self.count > 80:
                self._next("release")
            self.angle = float(np.clip(self.angle + np.clip(remaining, -0.08, 0.08),
                                       q - self.q_start - 0.3, q - self.q_start + 0.3))
            return self._move(self.grasp_pos, 1.0, rot=_yaw_rotation(self.angle) @ self.grasp_rot)
        if self.phase == "release":
            if self.count >= 8:
                self._next("up")
            return self._move(scene.eef_pos(), -1.0, rot=scene.eef_rot())
        return self._move(above + np.array([0, 0, 0.04]), -1.0, rot=scene.eef_rot())


class SequenceExpert:
    """Reach a conjunction of BDDL goals one part at a time (e.g. turn on the stove, then put the pan on it).

    ``parts`` are (predicate, expert factory) in order; a part whose predicate already holds is
    skipped, and the next part starts when the current one's expert has finished its motion.
    """

    def __init__(self, scene: _Scene, parts: list[tuple[list[str], Callable[[], object]]]):
        self.scene, self.parts, self.index, self.current = scene, parts, 0, None

    def describe(self) -> str:
        return f"{self.index}:{self.current.describe() if self.current is not None else '-'}"

    def __call__(self) -> np.ndarray:
        env = self.scene.env
        if self.current is not None and self.current.finished():
            self.index, self.current = self.index + 1, None
        while self.current is None and self.index < len(self.parts):
            predicate, make = self.parts[self.index]
            if env._eval_predicate(predicate):
                self.index += 1
                continue
            self.current = make()
            self.current.reached = (lambda p=predicate: bool(env._eval_predicate(p)))
        if self.current is None:   # every part holds: stay still, gripper open
            return np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float32)
        return self.current()


def _part(scene: _Scene, predicate: list[str], task_name: str) -> Callable[[], object]:
    """A factory for the expert that makes one BDDL predicate true."""
    kind = predicate[0].lower()
    if kind in ("on", "in") and not task_name.startswith("push") and "_push_" not in task_name:
        _, obj, target = predicate
        return lambda: PickPlaceExpert(scene, obj, target, kind)
    if kind in ("turnon", "turnoff"):
        return lambda: TurnKnobExpert(scene, predicate[1], kind == "turnon")
    # opening / closing drawers and pushing have no primitive: see docs/libero.md
    raise KeyError(f"no scripted primitive for the BDDL predicate {predicate} of {task_name}")


def _order(goal: list[list[str]]) -> list[list[str]]:
    """The goal's parts in an order that works: knobs first, then placing (an object that another is
    placed on goes first)."""
    placed_on = {p[2] for p in goal if p[0].lower() in ("on", "in")}
    return sorted(goal, key=lambda p: 0 if p[0].lower() in ("turnon", "turnoff") else 1 if p[1] in placed_on else 2)


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
    return _expert_for_goal(robosuite_env, task)


def _expert_for_goal(robosuite_env, task) -> Callable[[], np.ndarray]:
    """The expert for the BDDL goal of the robosuite env's task (whether or not it is in SUPPORTED)."""
    goal = [list(predicate) for predicate in robosuite_env.parsed_problem["goal_state"]]
    scene = _Scene(robosuite_env)
    parts = _order(goal)
    if len(parts) == 1:
        return _part(scene, parts[0], task.name)()
    return SequenceExpert(scene, [(predicate, _part(scene, predicate, task.name)) for predicate in parts])
