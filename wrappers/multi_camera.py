"""``MultiCamera``: choose cameras, resize them, HWC or CHW, and the layout VLA trainers use.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.wrappers import MultiCamera
    >>> env = MultiCamera(gym.make("VLA/Libero10-v0"), layout="vla", size=224)          # doctest: +SKIP
    >>> obs, _ = env.reset(seed=0)                                                      # doctest: +SKIP
    >>> obs["images"]["main"].shape, obs["images"]["wrists"].shape                     # doctest: +SKIP
    ((3, 224, 224), (1, 3, 224, 224))

Only ``obs["images"]`` changes; ``state`` and ``instruction`` pass through.

- ``cameras``: roles to keep, in this order (default: all the env renders). Unknown roles raise.
- ``size``: int or (height, width) to resize every kept camera to (antialiased bilinear, Pillow);
  None keeps each camera's own size.
- ``layout="dict"`` (default): ``{role: image}`` for the kept roles.
  ``layout="vla"``: ``{"main": image, "wrists": stack}``: the ``main`` role (or the first kept camera)
  and the other kept cameras stacked in order, ``(n_wrist, ...)``; ``wrists`` is left out when no other
  camera is kept. Gymnasium's vector envs batch these to ``[B, 3, 224, 224]`` and
  ``[B, n_wrist, 3, 224, 224]`` (``n_wrist`` = 2 for BEHAVIOR's R1 Pro).
- ``channels_first``: CHW (``(3, H, W)``) instead of HWC; defaults to True for ``layout="vla"`` and
  False for ``layout="dict"``. Images stay uint8.

Resizing costs a few ms per camera; when the env can render at the wanted size directly (e.g.
``image_size=224``) do that instead and leave ``size`` None.
"""
from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vla_gym.core.video import MAIN_ROLE, resize_image

LAYOUTS = ("dict", "vla")


class MultiCamera(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Select, resize and lay out the camera images (see the module docstring)."""

    def __init__(self, env: gym.Env, cameras: Sequence[str] | None = None, size: int | tuple[int, int] | None = None,
                 channels_first: bool | None = None, layout: str = "dict"):
        gym.utils.RecordConstructorArgs.__init__(self, cameras=cameras, size=size, channels_first=channels_first, layout=layout)
        super().__init__(env)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        images_space = env.observation_space.spaces.get("images")
        available = list(images_space.spaces) if images_space is not None else []
        self.cameras = tuple(cameras) if cameras is not None else tuple(available)
        unknown = [role for role in self.cameras if role not in available]
        if not available:
            raise ValueError("MultiCamera needs camera images: this env renders none (a state-only mode?)")
        if unknown or not self.cameras:
            raise ValueError(f"cameras {list(self.cameras)}: unknown or none; this env renders {available}")
        self.size = (size, size) if isinstance(size, int) else (tuple(size) if size is not None else None)
        self.layout = layout
        self.channels_first = (layout == "vla") if channels_first is None else channels_first
        self.main_role = MAIN_ROLE if MAIN_ROLE in self.cameras else self.cameras[0]
        self.wrist_roles = tuple(role for role in self.cameras if role != self.main_role)

        shapes = {role: self._shape(images_space[role].shape[:2]) for role in self.cameras}
        if layout == "dict":
            image_spaces = {role: spaces.Box(0, 255, shapes[role], np.uint8) for role in self.cameras}
        else:
            wrist_shapes = {shapes[role] for role in self.wrist_roles}
            if len(wrist_shapes) > 1:
                raise ValueError(f"wrist cameras {self.wrist_roles} have different sizes {wrist_shapes}: "
                                 "pass size=... to stack them")
            image_spaces = {"main": spaces.Box(0, 255, shapes[self.main_role], np.uint8)}
            if self.wrist_roles:
                image_spaces["wrists"] = spaces.Box(0, 255, (len(self.wrist_roles), *wrist_shapes.pop()), np.uint8)
        self.observation_space = spaces.Dict(
            {**env.observation_space.spaces, "images": spaces.Dict(image_spaces)}
        )

    def _shape(self, native_hw) -> tuple[int, int, int]:
        height, width = self.size or tuple(native_hw)
        return (3, height, width) if self.channels_first else (height, width, 3)

    def _convert(self, image: np.ndarray) -> np.ndarray:
        if self.size is not None:
            image = resize_image(image, self.size)
        return np.ascontiguousarray(image.transpose(2, 0, 1)) if self.channels_first else image

    def observation(self, observation):
        images = observation["images"]
        if self.layout == "dict":
            converted = {role: self._convert(images[role]) for role in self.cameras}
        else:
            converted = {"main": self._convert(images[self.main_role])}
            if self.wrist_roles:
                converted["wrists"] = np.stack([self._convert(images[role]) for role in self.wrist_roles])
        return {**observation, "images": converted}
