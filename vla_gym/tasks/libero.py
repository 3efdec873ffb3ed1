"""LIBERO's 130 tasks, LIBERO-PRO's perturbed suites and LIBERO-Plus's variants as one catalog (no LIBERO import
needed).

    >>> from vla_gym.tasks.libero import suite_tasks
    >>> len(suite_tasks("libero_130")), suite_tasks("libero_10")[0].max_episode_steps
    (130, 520)
"""
from __future__ import annotations

from vla_gym.backends.base import TaskSpec
from vla_gym.core.env_entry import EnvEntry
from vla_gym.tasks import libero_plus, libero_pro
from vla_gym.tasks.libero_suites import ENV_IDS, LIBERO_130, SUITE_MAX_STEPS, base_suite_tasks, is_base_suite

ENTRY_POINT = "vla_gym.backends.libero.env:LiberoEnv"


def suite_tasks(suite: str) -> tuple[TaskSpec, ...]:
    """The tasks of one suite (or all 130 for ``libero_130``), indexed from 0.

    A LIBERO-PRO suite (``libero_object_swap``) gives its buildable tasks (:mod:`vla_gym.tasks.libero_pro`), a
    LIBERO-Plus suite x dimension (``libero_object_plus_camera``) its variants buildable with the assets here
    (:mod:`vla_gym.tasks.libero_plus`).
    """
    if is_base_suite(suite):
        return base_suite_tasks(suite)
    if libero_pro.is_perturbed(suite):
        return libero_pro.suite_tasks(suite)
    if libero_plus.is_plus(suite):
        return libero_plus.suite_tasks(suite)
    raise ValueError(f"unknown LIBERO suite {suite!r}; choose from {[LIBERO_130, *SUITE_MAX_STEPS]}, a LIBERO-PRO "
                     "suite such as libero_object_swap or a LIBERO-Plus one such as libero_object_plus_camera "
                     "(vla-gym list --backend libero, --pro, --plus)")


def env_entries() -> list[EnvEntry]:
    """Registry rows: one id per suite, one per LIBERO-PRO suite its wheel ships (``VLA/LiberoObject-Swap-v0``) and
    one per LIBERO-Plus suite x dimension (``VLA/LiberoObject-PlusCamera-v0``, backend ``liberoplus``)."""
    return [
        EnvEntry(env_id, "libero", ENTRY_POINT, len(suite_tasks(suite)), requires="libero", extra="libero",
                 kwargs={"suite": suite})
        for env_id, suite in ENV_IDS.items()
    ] + [
        EnvEntry(variant.env_id, "libero", ENTRY_POINT, variant.num_tasks, requires="libero", extra="libero",
                 kwargs={"suite": variant.base_suite, "perturbation": variant.perturbation})
        for variant in libero_pro.variants()
    ] + libero_plus.env_entries(ENTRY_POINT)


__all__ = ["ENTRY_POINT", "ENV_IDS", "LIBERO_130", "SUITE_MAX_STEPS", "env_entries", "suite_tasks"]
