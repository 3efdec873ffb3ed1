"""Every registered ``VLA/...`` id, with what ``vla-gym list`` and error messages need to know.

Registration imports no simulator: entry points are strings, resolved when an env is made.
Backends add themselves by contributing rows to :data:`ENTRIES` in :func:`_entries`.
"""
from __future__ import annotations

import difflib
import importlib
import importlib.util
from dataclasses import dataclass, field

import gymnasium as gym


@dataclass(frozen=True)
class EnvEntry:
    env_id: str
    backend: str          # libero | maniskill | behavior
    entry_point: str
    num_tasks: int
    requires: str         # top-level module the backend imports
    extra: str            # pip extra that installs it
    kwargs: dict = field(default_factory=dict)

    def available(self) -> bool:
        return importlib.util.find_spec(self.requires) is not None


def _libero_entries() -> list[EnvEntry]:
    from vla_gym import libero_pro
    from vla_gym.tasks import libero

    return [
        EnvEntry(env_id, "libero", "vla_gym.backends.libero:LiberoEnv", len(libero.suite_tasks(suite)),
                 requires="libero", extra="libero", kwargs={"suite": suite})
        for env_id, suite in libero.ENV_IDS.items()
    ] + [  # LIBERO-PRO's perturbed suites that its wheel ships: VLA/LiberoObject-Swap-v0, ...
        EnvEntry(variant.env_id, "libero", "vla_gym.backends.libero:LiberoEnv", variant.num_tasks,
                 requires="libero", extra="libero",
                 kwargs={"suite": variant.base_suite, "perturbation": variant.perturbation})
        for variant in libero_pro.variants()
    ]


def _entries() -> list[EnvEntry]:
    entries = _libero_entries()
    for family in ("maniskill", "behavior"):  # catalogs added by later backends
        if importlib.util.find_spec(f"vla_gym.tasks.{family}") is not None:
            entries += importlib.import_module(f"vla_gym.tasks.{family}").env_entries()
    return entries

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
