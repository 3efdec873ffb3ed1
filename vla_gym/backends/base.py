"""The contract between one simulator and :class:`vla_gym.core.env.VLAEnv`.

A backend owns exactly one live simulator instance and translates it to the unified schema
(see ``docs/schema.md``). It never sees gymnasium: seeding, task drawing, time limits, action
validation and ``info`` live in :class:`~vla_gym.core.env.VLAEnv`, once for every simulator.

Physics and rendering are separate calls so that steps nobody observes (inside an action chunk)
skip the camera render, which dominates the cost of a step on every simulator::

    backend.load(task)                 # (re)build the scene when the task changes
    backend.reset(init_state_id, seed) # restore an initial state, no rebuild
    reward, success = backend.step(action)
    state = backend.state()            # cheap: float32 proprioception
    images = backend.render()          # expensive: {role: uint8 HxWx3}, right side up
"""
from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TaskSpec:
    """One task an env can run. ``index`` is its position in the env's task list."""

    index: int
    suite: str
    name: str
    instruction: str
    max_episode_steps: int
    num_init_states: int | None = None  # None: the initial state comes from the seed
    paraphrases: tuple[str, ...] = ()   # alternative instructions, drawn per reset on request
    extra: Mapping[str, Any] = field(default_factory=dict)


class Backend(abc.ABC):
    """Adapter around one simulator instance (see the module docstring for the call order)."""

    #: control frequency in Hz (the rate of ``step``), used for ``metadata['render_fps']``.
    control_hz: float
    #: dimension of the float32 ``state`` vector
    state_dim: int
    #: dimension of the action vector (7 for single arms: delta xyz, delta axis-angle, gripper)
    action_dim: int = 7
    #: how camera frames are flipped from the simulator's (LIBERO's ``flip``); None: as rendered
    image_flip: str | None = None
    #: how the scene's textures look as rendered (LIBERO: ``linear`` or ``auto``, see mujoco_textures); None: n/a
    texture_look: str | None = None

    def __init__(self, camera_roles: Sequence[str], image_size: tuple[int, int]):
        self.camera_roles = tuple(camera_roles)
        self.image_size = tuple(image_size)  # (height, width)

    @abc.abstractmethod
    def load(self, task: TaskSpec) -> None:
        """Build (or rebuild) the scene for ``task``; called only when the task changes."""

    @abc.abstractmethod
    def reset(self, init_state_id: int | None, seed: int) -> None:
        """Put the loaded scene into an initial state without rebuilding it."""

    @abc.abstractmethod
    def step(self, action: np.ndarray) -> tuple[float, bool]:
        """Advance one control step; return (reward, success). Must not render cameras."""

    @abc.abstractmethod
    def state(self) -> np.ndarray:
        """Proprioception as float32 of shape (state_dim,)."""

    @abc.abstractmethod
    def render(self) -> dict[str, np.ndarray]:
        """Render every camera role: {role: uint8 (H, W, 3)}, right side up, freshly allocated."""

    def close(self) -> None:
        """Free the simulator and its renderer. Safe to call twice."""

    def render_snapshot(self) -> Any:
        """What :meth:`render` would read now, kept so that :meth:`render_from` renders this moment later (the
        skipped frames of an episode that turns out to be kept); None when the backend cannot (render now)."""
        return None

    def render_from(self, snapshot: Any) -> dict[str, np.ndarray]:
        """Every camera role as :meth:`render` gave it when ``snapshot`` was taken; the scene is left as it is."""
        raise NotImplementedError(f"{type(self).__name__} keeps no render snapshots (render_snapshot() is None)")

    def scene_controls(self):
        """The loaded scene's :class:`vla_gym.ood.perturbations.SceneControls` (lighting, colours, camera, poses)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no scene perturbations (lighting, background_color, camera_pose, robot_pose, "
            "object_pose): LIBERO and ManiSkill have them; image_noise, paraphrase, action_noise and action_delay "
            "work on every simulator"
        )
