"""Every registered ``VLA/...`` id, with what ``vla-gym list`` and error messages need to know.

Registration imports no simulator: entry points are strings, resolved when an env is made.
Each task catalog (``vla_gym.tasks.<sim>``) contributes its rows through ``env_entries()``.
"""
from __future__ import annotations

import difflib

import gymnasium as gym

from vla_gym.core.env_entry import EnvEntry
from vla_gym.tasks import behavior, libero, maniskill, metaworld


def _entries() -> list[EnvEntry]:
    return libero.env_entries() + maniskill.env_entries() + metaworld.env_entries() + behavior.env_entries()


ENTRIES: dict[str, EnvEntry] = {}


def register_all() -> None:
    """Register every id with gymnasium (idempotent)."""
    for entry in _entries():
        ENTRIES[entry.env_id] = entry
        if entry.env_id not in gym.registry:
            gym.register(entry.env_id, entry_point=entry.entry_point, kwargs=dict(entry.kwargs))


class UnknownEnvError(gym.error.Error, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


def check_env_id(env_id: str) -> EnvEntry:
    """Return the entry for ``env_id`` or raise with the closest registered ids."""
    if env_id in ENTRIES:
        return ENTRIES[env_id]
    ids = sorted(ENTRIES)
    lowered = {i.lower(): i for i in ids}
    close = difflib.get_close_matches(env_id.lower(), list(lowered), n=5, cutoff=0.6)
    hint = f" Did you mean: {', '.join(lowered[c] for c in close)}?" if close else ""
    raise UnknownEnvError(
        f"unknown vla_gym env id {env_id!r}.{hint} Run `vla-gym list` to see all {len(ids)} registered ids."
    )
