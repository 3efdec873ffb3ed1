"""``ActionSubset``: the policy sets some dimensions of the env's action; the others are held at fixed values.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.wrappers import ActionSubset
    >>> env = gym.make("VLA/ManiSkill-PushCube-v0", obs_mode="state")                      # doctest: +SKIP
    >>> env = ActionSubset(env, dims=[0, 1, 2], hold=[0, 0, 0, 0, 0, 0, 1])                # doctest: +SKIP
    >>> env.action_space                                                                   # doctest: +SKIP
    Box(-1.0, 1.0, (3,), float32)

In a config: ``env.wrappers: [{name: ActionSubset, kwargs: {dims: [0, 1, 2], hold: [0, 0, 0, 0, 0, 0, 1]}}]``.

Every vla_gym id of a robot arm takes the same 7-D action (end-effector delta xyz, delta rotation, gripper
-1 open / +1 close). A task that needs only some of them, such as pushing a cube (xyz; no rotation; the
fingers closed into one solid pusher), learns faster when the policy acts on those alone: each step's
exploration noise and each update's gradient stay on the dimensions that matter, and nothing the policy does
on the others can rotate the hand or open the fingers into the object. ``dims`` are the dimensions the policy
sets, in that order; ``hold`` is a full action whose values fill the other dimensions (its values at ``dims``
are ignored; zeros when left out). The env below still sees its own 7-D action, so success, videos and replays
are unchanged. Put it innermost (below ``ActionChunk``, which then sends chunks of the subset).
"""
from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ActionSubset(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """The policy acts on ``dims`` of a 1-D ``Box`` action; the other dimensions take ``hold``'s values."""

    def __init__(self, env: gym.Env, dims: Sequence[int], hold: Sequence[float] | None = None):
        gym.utils.RecordConstructorArgs.__init__(self, dims=list(dims), hold=None if hold is None else list(hold))
        gym.ActionWrapper.__init__(self, env)
        full = env.action_space
        if not isinstance(full, spaces.Box) or len(full.shape) != 1:
            raise TypeError(f"ActionSubset needs a 1-D Box action space, got {full}")
        size = full.shape[0]
        self.dims = np.asarray(list(dims), dtype=np.int64)
        if self.dims.size == 0 or len(set(self.dims.tolist())) != self.dims.size or \
                self.dims.min() < 0 or self.dims.max() >= size:
            raise ValueError(f"ActionSubset: dims must be distinct indices in [0, {size}), got {list(dims)}")
        self.hold = np.zeros(size, dtype=full.dtype) if hold is None else np.asarray(hold, dtype=full.dtype)
        if self.hold.shape != (size,):
            raise ValueError(f"ActionSubset: hold must be a full {size}-D action, got {len(self.hold)} values")
        if np.any(self.hold < full.low) or np.any(self.hold > full.high):
            raise ValueError(f"ActionSubset: hold {self.hold.tolist()} is outside the action space [{full.low}, "
                             f"{full.high}]")
        self.action_space = spaces.Box(full.low[self.dims], full.high[self.dims], dtype=full.dtype)

    def action(self, action) -> np.ndarray:
        """The env's full action: ``hold`` with ``action`` written at ``dims``."""
        action = np.asarray(action, dtype=self.hold.dtype)
        if action.shape != self.action_space.shape:
            raise ValueError(f"ActionSubset expects actions of shape {self.action_space.shape} (dims "
                             f"{self.dims.tolist()} of the env's {self.hold.size}-D action), got {action.shape}")
        full = self.hold.copy()
        full[self.dims] = action
        return full
