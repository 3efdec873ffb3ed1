"""``SB3Compat``: Box or Dict-of-Box observations for Stable-Baselines3 and other RL libraries.

    >>> import gymnasium as gym, vla_gym
    >>> from stable_baselines3 import PPO
    >>> from vla_gym.wrappers import SB3Compat
    >>> env = SB3Compat(gym.make("VLA/ManiSkill-PickCube-v0", obs_mode="state"))    # doctest: +SKIP
    >>> PPO("MlpPolicy", env).learn(10_000)                                         # doctest: +SKIP

SB3 has no text space, so the instruction is either dropped (``instruction="drop"``, the default) or
embedded (``instruction="hash"``) as a fixed float32 vector of ``instruction_dim`` numbers: hashed
bag-of-words features (crc32, so the same in every process), L2-normalised. It tells tasks apart
in a multi-task env; it is not a language model.

The result is a plain ``Box`` (the state) when that is all there is, so ``MlpPolicy`` works; otherwise
a ``Dict`` of ``state``, each camera role (uint8 HxWx3, which SB3's ``MultiInputPolicy`` feeds to a
CNN) and ``instruction`` (when embedded). ``keep_images=False`` drops the cameras. The env's
``info`` dicts are left alone (metrics go under ``info["episode_metrics"]``, never SB3 Monitor's
``info["episode"]``).
"""
from __future__ import annotations

import re
import zlib

import gymnasium as gym
import numpy as np
from gymnasium import spaces

INSTRUCTION_MODES = ("drop", "hash")


def hash_instruction(text: str, dim: int = 64) -> np.ndarray:
    """A fixed float32 vector for ``text``: signed hashed bag of lower-cased words, unit length."""
    vector = np.zeros(dim, dtype=np.float32)
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        code = zlib.crc32(word.encode())
        vector[code % dim] += 1.0 if (code >> 31) & 1 else -1.0
    norm = np.linalg.norm(vector)
    return vector / norm if norm > 0 else vector


class SB3Compat(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Flatten the unified observation into Box / Dict-of-Box (see the module docstring)."""

    def __init__(self, env: gym.Env, instruction: str = "drop", instruction_dim: int = 64, keep_images: bool = True):
        gym.utils.RecordConstructorArgs.__init__(self, instruction=instruction, instruction_dim=instruction_dim, keep_images=keep_images)
        super().__init__(env)
        if instruction not in INSTRUCTION_MODES:
            raise ValueError(f"instruction must be one of {INSTRUCTION_MODES}, got {instruction!r}")
        self.instruction_mode, self.instruction_dim = instruction, instruction_dim
        source = env.observation_space
        parts = {"state": source["state"]}
        if keep_images and "images" in source.spaces:  # state-only envs have no (or an empty) images dict
            parts.update(source["images"].spaces)
        if instruction == "hash":
            parts["instruction"] = spaces.Box(-1.0, 1.0, (instruction_dim,), np.float32)
        self.keys = tuple(parts)
        self.observation_space = parts["state"] if self.keys == ("state",) else spaces.Dict(parts)
        self._embedding_cache: dict[str, np.ndarray] = {}

    def observation(self, observation):
        if self.keys == ("state",):
            return observation["state"]
        flat = {"state": observation["state"]}
        flat.update({role: image for role, image in observation.get("images", {}).items() if role in self.keys})
        if self.instruction_mode == "hash":
            text = observation["instruction"]
            if text not in self._embedding_cache:
                self._embedding_cache[text] = hash_instruction(text, self.instruction_dim)
            flat["instruction"] = self._embedding_cache[text].copy()
        return flat
