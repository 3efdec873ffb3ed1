"""The unified observation and action schema, shared by every backend.

Observation (a ``spaces.Dict``)::

    {
      "images":      {role: uint8 (H, W, 3)},  # right side up; roles: main, wrist | left_wrist, right_wrist
                                                # (absent when an env has no cameras, e.g. state-only)
      "state":       float32 (D,),              # proprioception, see docs/schema.md per backend
      "instruction": str,                       # natural language, spaces.Text
    }

Action: ``Box(-1, 1, (7,), float32)`` for single arms: end-effector delta position (3), delta
rotation as axis-angle (3), gripper (-1 open, +1 close). Meta-World's Sawyer keeps its own 4-D action
(end-effector delta position (3), gripper effort (-1 open, +1 close)); BEHAVIOR's R1 Pro uses 23-D.
"""
from __future__ import annotations

import string
from collections.abc import Sequence

import numpy as np
from gymnasium import spaces

from vla_gym.core.instruction_space import InstructionText

#: characters an instruction may contain (printable ASCII without tabs/newlines)
INSTRUCTION_CHARSET = "".join(c for c in string.printable if c not in "\t\n\r\x0b\x0c")
#: how an action of each size reads, for error messages (7: single arms; 4: Meta-World's Sawyer)
ACTION_LAYOUTS = {7: " = [dx, dy, dz, droll, dpitch, dyaw, gripper]", 4: " = [dx, dy, dz, gripper]"}
#: generous headroom so every env of a family shares one observation space
MAX_INSTRUCTION_LENGTH = 256


def observation_space(
    camera_roles: Sequence[str], image_size: tuple[int, int], state_dim: int, max_instruction_length: int = 0
) -> spaces.Dict:
    height, width = image_size
    fields = {}
    if camera_roles:  # gymnasium rejects an empty Dict space: camera-less (state-only) envs have no "images"
        fields["images"] = spaces.Dict(
            {role: spaces.Box(0, 255, (height, width, 3), np.uint8) for role in camera_roles}
        )
    fields["state"] = spaces.Box(-np.inf, np.inf, (state_dim,), np.float32)
    fields["instruction"] = InstructionText(  # a Text that gymnasium's shared memory reads live
        max_length=max(MAX_INSTRUCTION_LENGTH, max_instruction_length), min_length=0, charset=INSTRUCTION_CHARSET,
    )
    return spaces.Dict(fields)


def action_space(action_dim: int = 7) -> spaces.Box:
    return spaces.Box(-1.0, 1.0, (action_dim,), np.float32)


def check_action(action, action_dim: int) -> np.ndarray:
    """Return ``action`` as float64 (action_dim,) clipped to [-1, 1]; raise ValueError if malformed.

    Raising before anything reaches the simulator keeps the env usable after a bad call.
    """
    try:
        array = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"action must be a numeric array of shape ({action_dim},), got {action!r}") from exc
    if array.shape != (action_dim,):
        hint = ""
        if array.ndim == 2 and array.shape[1] == action_dim:
            hint = f" (an action chunk of shape (K, {action_dim}) needs the ActionChunk wrapper)"
        layout = ACTION_LAYOUTS.get(action_dim, "")
        raise ValueError(f"action must have shape ({action_dim},){layout}, got shape {array.shape}{hint}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"action contains NaN or inf: {array.tolist()}; expected finite values in [-1, 1]")
    return np.clip(array, -1.0, 1.0)


def check_index(name: str, value, size: int) -> int | None:
    """Validate an optional index into a table of ``size`` entries."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int in [0, {size - 1}] or None, got {value!r}")
    if not 0 <= value < size:
        raise ValueError(f"{name}={value} is out of range: valid values are 0..{size - 1} ({size} in all)")
    return int(value)
