"""One registered id: its backend, entry point, size and what installs it (pure data, no imports of simulators).

    >>> from vla_gym.core.env_entry import EnvEntry
    >>> EnvEntry("VLA/X-v0", "libero", "m:C", 1, requires="libero", extra="libero").extra
    'libero'
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnvEntry:
    env_id: str
    backend: str          # libero | maniskill | metaworld | behavior
    entry_point: str
    num_tasks: int
    requires: str         # top-level module the backend imports
    extra: str            # pip extra that installs it
    kwargs: dict = field(default_factory=dict)

    def available(self) -> bool:
        return importlib.util.find_spec(self.requires) is not None
