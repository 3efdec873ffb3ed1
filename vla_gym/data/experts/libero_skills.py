"""Scripted LIBERO skills on privileged state: pick-and-place, turning a stove's knob, and a sequence of both.

Built per episode by :func:`vla_gym.data.experts.libero.libero_expert`; each call returns the next 7-D action.

:class:`PickPlaceExpert` reads the object's collision geometry (its mesh vertices in the world frame) and the
gripper site pose from MuJoCo (:class:`~vla_gym.data.experts.libero_scene.Scene`), and runs a small state
machine: above the grasp -> down -> close -> lift -> carry over the target -> lower -> open -> up. Boxes and
bottles are grasped from the top across their narrowest side; bowls by the rim. A grasp that comes up empty is
retried. Actions are vla_gym's 7-D OSC_POSE convention (delta position, delta axis-angle in the world frame,
gripper -1 open / +1 close); the experts never render.

:class:`TurnKnobExpert` turns a stove's knob on or off (grasp it, turn the wrist about its axis), and
:class:`SequenceExpert` chains the two for a goal with several parts ("turn on the stove and put the frying
pan on it").
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vla_gym.data.experts.controller import Controller
from vla_gym.data.experts.libero_scene import (
    Extent,
    Scene,
    gripper_room,
    rotation_vector,
    yaw_rotation,
)


class PickPlaceExpert(Controller):
    """Pick ``obj`` and put it on / in ``target`` (an object or a region site); call for each action."""

    LIFT = 0.10           # clearance above everything on the way (m)
    CLOSE_STEPS = 6       # at least this many steps closing the gripper
    OPEN_STEPS = 10

    def __init__(self, scene: Scene, obj: str, target: str, relation: str):
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
        ext = Extent.of(points)
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
            room = gripper_room(others, xy, z, yaw)
            score = min(room, 0.03) - penalty - 0.005 * abs(turn)
            if best is None or score > best[0]:
                best = (score, xy, z, turn)
        _, xy, z, turn = best
        self.grasp_pos = np.array([xy[0], xy[1], z])
        self.grasp_rot = yaw_rotation(turn) @ rot_now
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
            ext = Extent.of(scene.points(self.target), narrow=False)
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
                    rotation_vector(self.grasp_rot @ scene.eef_rot().T)) < 0.08 or self.count > 80:
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
        obj_now = Extent.of(scene.points(self.obj), narrow=False)
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


def _joint(scene: Scene, name: str) -> tuple[int, int]:
    """(joint id, qpos address) of a named MuJoCo joint."""
    joint = scene.sim.model.joint_name2id(name)
    return joint, int(scene.model.jnt_qposadr[joint])


class TurnKnobExpert(Controller):
    """Turn a stove's knob (a hinge about the vertical) on or off: grasp it from the top across its
    narrow side, then turn the wrist about the knob's axis until LIBERO's on / off test holds."""

    def __init__(self, scene: Scene, fixture: str, turn_on: bool):
        self.scene, self.fixture, self.turn_on = scene, fixture, turn_on
        self.joint, self.qpos_adr = _joint(scene, scene.env.get_object(fixture).joints[0])
        ext = Extent.of(scene.points_of_body(int(scene.model.jnt_bodyid[self.joint])))
        anchor = np.array(scene.data.xanchor[self.joint])
        rot_now = scene.eef_rot()
        current_yaw = np.arctan2(rot_now[1, 0], rot_now[0, 0])
        turn = (ext.narrow_yaw - current_yaw + np.pi / 2) % np.pi - np.pi / 2
        self.grasp_rot = yaw_rotation(turn) @ rot_now
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
                    rotation_vector(self.grasp_rot @ scene.eef_rot().T)) < 0.08 or self.count > 80:
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
            return self._move(self.grasp_pos, 1.0, rot=yaw_rotation(self.angle) @ self.grasp_rot)
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

    def __init__(self, scene: Scene, parts: list[tuple[list[str], Callable[[], object]]]):
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
