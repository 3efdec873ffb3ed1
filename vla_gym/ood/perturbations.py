"""Seeded perturbations for out-of-distribution evaluation, one API on LIBERO and ManiSkill.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.wrappers import Perturb
    >>> env = gym.make("VLA/ManiSkill-PushCube-v0")                    # doctest: +SKIP
    >>> env = Perturb(env, "lighting", strength=0.5)                    # doctest: +SKIP
    >>> env = Perturb(env, "action_noise")                              # doctest: +SKIP
    >>> obs, info = env.reset(seed=3)                                   # doctest: +SKIP
    >>> info["perturbation"]                                            # doctest: +SKIP
    {'lighting': {'strength': 0.5, 'scale': [...]}, 'action_noise': {'strength': 0.1, 'std': 0.1}}

In a config (wrapper specs, innermost first)::

    env:
      wrappers: [{name: Perturb, kwargs: {kind: lighting, strength: 0.5}}, ...]

Each perturbation draws its parameters once per episode from the episode's seed (``reset(seed=s)``, or the
seed an unseeded reset drew), with a generator of its own (``default_rng([seed, crc32(name)])``): the same
seed gives the same perturbation whatever else is stacked, other seeds give others, and the parameters are
in ``info["perturbation"][name]`` at every step. Strength 0 changes nothing.

The perturbations, grouped as the OOD table groups them (:data:`CATEGORIES`); ``strength`` means:

==================  =========  ==============================================================================
name                category   strength (default) and what changes
==================  =========  ==============================================================================
lighting            vision     0.5: every light's colour x brightness in [1-s, 1+s] x tint per channel
                               in [1-s/2, 1+s/2] (MuJoCo lights + headlight / SAPIEN lights + ambient)
background_color    vision     0.5: table, floor and walls blended by s towards a random colour
camera_pose         vision     0.03: the ``main`` camera moved by up to s metres per axis (wrist unchanged)
image_noise         vision     0.05: Gaussian pixel noise, std s x 255, fresh per rendered frame
paraphrase          semantic   1: the instruction rewritten by one of the held-out templates
                               (:data:`HELD_OUT_TEMPLATES`, never used in training); s is unused (0: off)
robot_pose          execution  0.05: the arm's 7 joints offset by up to s rad each at the episode's start
object_pose         execution  0.02: each movable object moved by up to s metres in x and y at the start
action_noise        execution  0.1: Gaussian noise of std s added to every action (then clipped to [-1, 1])
action_delay        execution  2: each action executed s steps late (the first s steps hold still, open)
==================  =========  ==============================================================================

The scene ones (lighting, background_color, camera_pose, robot_pose, object_pose) go through the backend's
``scene_controls()`` (:class:`SceneControls`, one small class per simulator: ``vla_gym/backends/*_scene.py``)
between the simulator's reset and the first render; the others (image_noise, paraphrase, action_noise,
action_delay) are simulator-agnostic and act on observations and actions. Unseen distractor objects are
LIBERO-PRO's ``_with_<distractor>`` suites (:mod:`vla_gym.tasks.libero_pro`), not a perturbation here.
"""
from __future__ import annotations

import difflib
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: category -> perturbation names, in the OOD table's order
CATEGORIES: dict[str, tuple[str, ...]] = {
    "vision": ("lighting", "background_color", "camera_pose", "image_noise"),
    "semantic": ("paraphrase",),
    "execution": ("robot_pose", "object_pose", "action_noise", "action_delay"),
}

#: held-out instruction templates for ``paraphrase`` ({} is the task's instruction, first letter lowered)
HELD_OUT_TEMPLATES = (
    "could you {}?",
    "please {}.",
    "your job now: {}.",
    "I need you to {}.",
    "{}, if you would.",
    "go ahead and {}.",
    "the goal is simple: {}.",
    "robot, {}.",
)


class SceneControls:
    """What a backend changes in its loaded scene for the scene perturbations (one subclass per simulator).

    Every setter works from the scene's own values, recorded the first time (a new episode's perturbation
    replaces the last one's; strength 0 restores them). Called after the backend's ``reset`` and before
    the first render.
    """

    def set_lighting(self, scale: np.ndarray) -> None:
        """Multiply every light's colour (and the ambient light) by ``scale`` (3,) per RGB channel."""
        raise NotImplementedError

    def set_background_color(self, rgb: np.ndarray, mix: float) -> None:
        """Blend the table, floor and walls' colour towards ``rgb`` (3,) by ``mix`` in [0, 1]."""
        raise NotImplementedError

    def shift_camera(self, role: str, offset: np.ndarray) -> None:
        """Move camera ``role`` by ``offset`` (3,) metres in the world frame, orientation unchanged."""
        raise NotImplementedError

    def offset_robot_joints(self, offsets: np.ndarray) -> None:
        """Add ``offsets`` (7,) radians to the arm's joint positions (velocities zeroed, no physics step)."""
        raise NotImplementedError

    def movable_objects(self) -> list[str]:
        """Names of the objects ``object_pose`` moves (free bodies: not the robot, table or goal markers)."""
        raise NotImplementedError

    def offset_objects(self, offsets: Mapping[str, Sequence[float]]) -> None:
        """Move each named object by (dx, dy) metres (no physics step)."""
        raise NotImplementedError


class Perturbation:
    """One named perturbation at a fixed strength; subclasses override the hooks they use.

    ``draw`` turns the episode's generator (and, for ``object_pose``, the scene's objects) into the episode's
    parameters (a JSON-able dict, recorded in ``info``; ``controls`` is None for simulator-agnostic ones); ``apply_scene`` changes the loaded scene (scene perturbations); ``observation`` and ``action``
    transform what goes in and out (simulator-agnostic ones).
    """

    name: str = ""
    category: str = ""
    default_strength: float = 0.0
    #: the SceneControls method it needs, for a clear error on a backend without it
    scene_method: str | None = None

    def __init__(self, strength: float | None = None):
        strength = self.default_strength if strength is None else strength
        if not isinstance(strength, (int, float)) or isinstance(strength, bool) or not np.isfinite(strength) \
                or strength < 0:
            raise ValueError(f"perturbation {self.name!r}: strength must be a number >= 0, got {strength!r}")
        self.strength = float(strength)

    def draw(self, rng: np.random.Generator, episode, controls: SceneControls | None) -> dict[str, Any]:
        return {}

    def apply_scene(self, controls: SceneControls, params: dict[str, Any]) -> None:
        pass

    def restore_scene(self, controls: SceneControls) -> None:
        """Put back what ``apply_scene`` changed and a reset does not restore (lights, colours, cameras)."""

    def start(self, params: dict[str, Any]) -> None:
        """A new episode starts with ``params`` (per-episode state such as a delay queue is reset here)."""

    def observation(self, obs: dict, params: dict[str, Any], rng: np.random.Generator, observed: bool) -> dict:
        return obs

    def action(self, action: np.ndarray, params: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
        return action


def _uniform(rng: np.random.Generator, bound: float, size) -> list[float]:
    return [float(v) for v in rng.uniform(-bound, bound, size)]


class Lighting(Perturbation):
    name, category, default_strength, scene_method = "lighting", "vision", 0.5, "set_lighting"

    def draw(self, rng, episode, controls):
        s = self.strength
        brightness = rng.uniform(max(0.0, 1 - s), 1 + s)
        tint = rng.uniform(max(0.0, 1 - s / 2), 1 + s / 2, 3)
        return {"scale": [float(v) for v in brightness * tint]}

    def apply_scene(self, controls, params):
        controls.set_lighting(np.asarray(params["scale"]))

    def restore_scene(self, controls):
        controls.set_lighting(np.ones(3))


class BackgroundColor(Perturbation):
    name, category, default_strength, scene_method = "background_color", "vision", 0.5, "set_background_color"

    def draw(self, rng, episode, controls):
        return {"rgb": [float(v) for v in rng.uniform(0, 1, 3)], "mix": min(1.0, self.strength)}

    def apply_scene(self, controls, params):
        controls.set_background_color(np.asarray(params["rgb"]), params["mix"])

    def restore_scene(self, controls):
        controls.set_background_color(np.zeros(3), 0.0)


class CameraPose(Perturbation):
    name, category, default_strength, scene_method = "camera_pose", "vision", 0.03, "shift_camera"

    def draw(self, rng, episode, controls):
        return {"camera": "main", "offset": _uniform(rng, self.strength, 3)}

    def apply_scene(self, controls, params):
        controls.shift_camera(params["camera"], np.asarray(params["offset"]))

    def restore_scene(self, controls):
        controls.shift_camera("main", np.zeros(3))


class ImageNoise(Perturbation):
    name, category, default_strength = "image_noise", "vision", 0.05

    def draw(self, rng, episode, controls):
        return {"std": self.strength * 255.0}

    def start(self, params):
        self._last = None

    def observation(self, obs, params, rng, observed):
        if "images" not in obs or not params["std"]:
            return obs
        if observed or self._last is None:  # unobserved steps keep the last (noisy) frame, as the env does
            self._last = {role: np.clip(image + rng.normal(0.0, params["std"], image.shape), 0, 255).astype(np.uint8)
                          for role, image in obs["images"].items()}
        return {**obs, "images": {role: image.copy() for role, image in self._last.items()}}


class Paraphrase(Perturbation):
    name, category, default_strength = "paraphrase", "semantic", 1.0

    def draw(self, rng, episode, controls):
        if not self.strength:
            return {"instruction": episode.instruction}
        template = int(rng.integers(len(HELD_OUT_TEMPLATES)))
        text = episode.instruction.strip().rstrip(".")
        text = text[:1].lower() + text[1:]
        return {"template": template, "instruction": HELD_OUT_TEMPLATES[template].format(text)}

    def observation(self, obs, params, rng, observed):
        return {**obs, "instruction": params["instruction"]}


class RobotPose(Perturbation):
    name, category, default_strength, scene_method = "robot_pose", "execution", 0.05, "offset_robot_joints"

    def draw(self, rng, episode, controls):
        return {"joint_offsets": _uniform(rng, self.strength, 7)}

    def apply_scene(self, controls, params):
        if any(params["joint_offsets"]):
            controls.offset_robot_joints(np.asarray(params["joint_offsets"]))


class ObjectPose(Perturbation):
    name, category, default_strength, scene_method = "object_pose", "execution", 0.02, "offset_objects"

    def draw(self, rng, episode, controls):
        names = controls.movable_objects()
        return {"offsets": {name: _uniform(rng, self.strength, 2) for name in names}}

    def apply_scene(self, controls, params):
        if self.strength:
            controls.offset_objects(params["offsets"])


class ActionNoise(Perturbation):
    name, category, default_strength = "action_noise", "execution", 0.1

    def draw(self, rng, episode, controls):
        return {"std": self.strength}

    def action(self, action, params, rng):
        if not params["std"]:
            return action
        noisy = np.asarray(action, dtype=np.float32) + rng.normal(0.0, params["std"], np.shape(action))
        return np.clip(noisy, -1.0, 1.0).astype(np.float32)


class ActionDelay(Perturbation):
    name, category, default_strength = "action_delay", "execution", 2

    def __init__(self, strength=None):
        super().__init__(strength)
        if self.strength != int(self.strength):
            raise ValueError(f"perturbation 'action_delay': strength is a whole number of steps, got {strength!r}")
        self._queue: list[np.ndarray] = []

    def draw(self, rng, episode, controls):
        return {"steps": int(self.strength)}

    def start(self, params):
        self._queue = []

    def action(self, action, params, rng):
        steps = params["steps"]
        if not steps:
            return action
        action = np.asarray(action, dtype=np.float32)
        if not self._queue:  # the first `steps` steps hold still with the gripper open (-1), then the policy's
            hold = np.zeros_like(action)
            if hold.shape[-1] == 7:
                hold[..., -1] = -1.0
            self._queue = [hold] * steps
        self._queue.append(action)
        return self._queue.pop(0)


PERTURBATIONS: dict[str, type[Perturbation]] = {cls.name: cls for cls in (
    Lighting, BackgroundColor, CameraPose, ImageNoise, Paraphrase, RobotPose, ObjectPose, ActionNoise, ActionDelay)}
assert sorted(PERTURBATIONS) == sorted(name for names in CATEGORIES.values() for name in names)


def make_perturbation(name: str, strength: float | None = None) -> Perturbation:
    """The perturbation called ``name`` at ``strength`` (None: its default), or a ValueError listing them."""
    if name not in PERTURBATIONS:
        close = difflib.get_close_matches(str(name), PERTURBATIONS, n=2, cutoff=0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"unknown perturbation {name!r}{hint}; choose from {', '.join(PERTURBATIONS)} "
                         "(unseen distractor objects: LIBERO-PRO's _with_<object> suites)")
    return PERTURBATIONS[name](strength)


def category_of(name: str) -> str:
    return PERTURBATIONS[name].category


def episode_generator(seed: int, name: str) -> np.random.Generator:
    """The generator perturbation ``name`` draws an episode's parameters (and per-step noise) from."""
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])
