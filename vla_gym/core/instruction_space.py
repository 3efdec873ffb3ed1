"""The instruction's observation space: a ``gymnasium.spaces.Text`` that survives shared memory.

gymnasium 1.x's ``AsyncVectorEnv`` (``shared_memory=True``, its default, so also
``gym.make_vec(..., vectorization_mode="async")``) decodes a ``Text`` field out of shared memory once, when
it is built; every later instruction would come back as that first, meaningless string. For
:class:`InstructionText` the read returns a live view that decodes the workers' latest write each time
it is copied or indexed: the vector env's observations (copied, gymnasium's default) hold the true
instructions.

    >>> from vla_gym.core.instruction_space import InstructionText
    >>> space = InstructionText(max_length=8, charset="abc ")
    >>> space.contains("abc")
    True
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils.shared_memory import read_from_shared_memory


class InstructionText(Text):
    """``spaces.Text`` whose batched shared-memory read is live (see the module docstring)."""


class SharedTextBatch(Sequence):
    """The instructions of all sub-envs, decoded from shared memory on each access; copies are tuples."""

    def __init__(self, space: Text, shared_memory, n: int):
        self._space = space
        self._codes = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((n, space.max_length))

    def __len__(self) -> int:
        return len(self._codes)

    def _decode(self, codes: np.ndarray) -> str:
        characters, size = self._space.character_list, len(self._space.character_set)
        return "".join(characters[code] for code in codes if code < size)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self._decode(codes) for codes in self._codes[index])
        return self._decode(self._codes[index])

    def __deepcopy__(self, memo) -> tuple[str, ...]:
        return tuple(self)

    def __copy__(self) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __repr__(self) -> str:
        return repr(tuple(self))


@read_from_shared_memory.register(InstructionText)
def _read_instructions(space: InstructionText, shared_memory, n: int = 1) -> SharedTextBatch:
    return SharedTextBatch(space, shared_memory, n)
