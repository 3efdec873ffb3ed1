"""The ``vla-gym`` command.

    vla-gym list                  # every registered id, its backend, suite size, runnable offline here?
    vla-gym list --backend libero
    vla-gym list --pro            # each LIBERO-PRO id (perturbed LIBERO suites), its OOD category, what it changes
    vla-gym list --plus           # each LIBERO-Plus id (suite x dimension), its OOD category, variants here, what is missing
    vla-gym check                 # are the rendering system packages there?
    vla-gym demos VLA/LiberoObject-v0 --init-states 0-19 --out data/x --workers 2     # expert demos (LeRobot v3)
    vla-gym compare runs/eval_sft/eval.json runs/eval_grpo/eval.json    # paired difference, bootstrap CI, McNemar
    vla-gym canary --quick        # physics canary: replay recorded expert actions, compare with the fingerprints
"""
from __future__ import annotations

import sys

from vla_gym import canary
from vla_gym.core.registry import ENTRIES
from vla_gym.data import record as record_demos
from vla_gym.runtime import system
from vla_gym.runtime.cli_args import parser_with_examples
from vla_gym.tasks import libero_plus, libero_pro
from vla_gym.tasks.maniskill import TASKS
from vla_gym.tasks.metaworld import INSTALL_COMMAND as METAWORLD_INSTALL
from vla_gym.trainers.evaluation import compare as compare_reports

#: how to get a backend that pip alone cannot install
INSTALL_HINTS = {"behavior": "needs Isaac Sim + OmniGibson: docs/behavior.md", "metaworld": METAWORLD_INSTALL,
                 "liberoplus": libero_plus.INSTALL_COMMAND}


def missing_downloads(entry) -> list[str]:
    """ManiSkill ids among ``entry``'s tasks whose assets are not downloaded (empty for other backends)."""
    if entry.backend != "maniskill":
        return []
    needing = [TASKS[name][0] for name in entry.kwargs.get("tasks", ()) if TASKS[name][2]]
    if not needing:
        return []
    from vla_gym.backends.maniskill.env import missing_assets  # imports mani_skill's asset table, no simulator

    return [maniskill_id for maniskill_id in needing if missing_assets(maniskill_id)]


def runnable_status(entry, backend_importable: bool) -> str:
    """``yes``, or ``no (...)`` with the exact command that makes ``entry`` runnable here."""
    if not backend_importable:
        return "no (" + INSTALL_HINTS.get(entry.backend, f'pip install "vla-gym[{entry.extra}]"') + ")"
    if entry.backend == "liberoplus":
        status = libero_plus.installed_status()
        if status == "yes" and not entry.num_tasks:
            return f"no (its variants need LIBERO-Plus's assets: {libero_plus.ASSETS_DOWNLOAD}; docs/libero_plus.md)"
        return status
    if entry.kwargs.get("perturbation"):
        return libero_pro.installed_status()
    absent = missing_downloads(entry)
    if absent:
        commands = " && ".join(f"python -m mani_skill.utils.download_asset {maniskill_id}" for maniskill_id in absent)
        return f"no (assets not downloaded: {commands})"
    return "yes"


def _pro_summary(base_entry, pro_entries: list, status: str) -> str:
    """One line under a LIBERO suite's row: its LIBERO-PRO ids by OOD category."""
    ids = {entry.kwargs["perturbation"]: entry.env_id for entry in pro_entries}
    groups = libero_pro.variants_by_category(base_entry.kwargs["suite"])
    names = "; ".join(f"{group}: " + ", ".join(ids[v.perturbation].split("-")[-2] for v in found)
                      for group, found in groups.items() if found)
    pattern = base_entry.env_id.replace("-v0", "-<X>-v0")
    note = "" if status == "yes" else f"  [runnable: {status}]"
    return f"  + LIBERO-PRO {pattern} ({len(pro_entries)}): {names}{note}"


def _plus_summary(suite: str, plus_entries: list, status: str) -> str:
    """One line per LIBERO suite: its LIBERO-Plus ids by OOD category, with variants buildable here / all."""
    found = {d.perturbation: d for d in libero_plus.dimensions(suite)}
    groups = "; ".join(
        f"{group}: " + ", ".join(f"{found[e.kwargs['perturbation']].env_id.split('-')[-2][4:]} "
                                 f"{found[e.kwargs['perturbation']].num_available}/"
                                 f"{found[e.kwargs['perturbation']].num_variants}"
                                 for e in plus_entries if found[e.kwargs["perturbation"]].category == group)
        for group in libero_plus.CATEGORIES)
    base = next(env_id for env_id, name in libero_plus.ENV_IDS.items() if name == suite)
    note = "" if status == "yes" else f"  [runnable: {status}]"
    return f"  + LIBERO-Plus {base.replace('-v0', '-Plus<X>-v0')} ({len(plus_entries)}, variants here/all): {groups}{note}"


def list_envs(backend: str | None = None, out=sys.stdout) -> int:
    """Every id, one row each; a LIBERO suite's LIBERO-PRO ids and its LIBERO-Plus ids on one line each under it
    (``list_pro`` and ``list_plus`` list them)."""
    rows = [e for e in ENTRIES.values() if backend in (None, e.backend)]
    if not rows:
        known = sorted({e.backend for e in ENTRIES.values()})
        print(f"no env ids for backend {backend!r}; backends: {', '.join(known)}", file=sys.stderr)
        return 2
    importable = {}
    for entry in rows:
        if entry.backend not in importable:
            importable[entry.backend] = entry.available()
    pro, plus = {}, {}  # base suite -> its LIBERO-PRO / LIBERO-Plus entries
    for entry in rows:
        if entry.kwargs.get("perturbation"):
            (plus if entry.backend == "liberoplus" else pro).setdefault(entry.kwargs["suite"], []).append(entry)
    shown = [e for e in rows if not e.kwargs.get("perturbation")]
    width = max((len(e.env_id) for e in shown), default=2)
    print(f"{'id':<{width}}  {'backend':<9}  {'tasks':>5}  runnable offline here", file=out)
    runnable = 0
    for entry in shown:
        status = runnable_status(entry, importable[entry.backend])
        runnable += status == "yes"
        print(f"{entry.env_id:<{width}}  {entry.backend:<9}  {entry.num_tasks:>5}  {status}", file=out)
        perturbed = pro.get(entry.kwargs.get("suite")) if entry.backend == "libero" else None
        if perturbed:
            pro_status = runnable_status(perturbed[0], importable["libero"])
            runnable += len(perturbed) * (pro_status == "yes")
            print(_pro_summary(entry, perturbed, pro_status), file=out)
        if entry.backend == "libero" and entry.kwargs.get("suite") in plus:
            runnable += _print_plus(entry.kwargs["suite"], plus.pop(entry.kwargs["suite"]), out)
    for suite, found in plus.items():  # listed without their base suites (--backend liberoplus)
        runnable += _print_plus(suite, found, out)
    if pro:
        count = sum(len(found) for found in pro.values())
        print(f"(+ {count} LIBERO-PRO ids, one line per suite above; `vla-gym list --pro` lists each, what it "
              "changes, and the suites LIBERO-PRO registers without files)", file=out)
    if any(e.backend == "liberoplus" for e in rows):
        print("(+ LIBERO-Plus ids, one line per suite above; `vla-gym list --plus` lists each, what it changes and "
              "the assets its other variants need)", file=out)
    print(f"{len(rows)} ids, {runnable} runnable offline here", file=out)
    return 0


def _print_plus(suite: str, entries: list, out) -> int:
    """Print a suite's LIBERO-Plus line; the number of its ids runnable here."""
    status = runnable_status(entries[0], entries[0].available())
    print(_plus_summary(suite, entries, status), file=out)
    return sum(runnable_status(e, e.available()) == "yes" for e in entries)


def list_plus(out=sys.stdout) -> int:
    """Every LIBERO-Plus suite x dimension: its id, OOD category, variants buildable here / all, what it changes and
    what the other variants need."""
    found = libero_plus.dimensions()
    entry = ENTRIES[found[0].env_id]
    status = libero_plus.installed_status() if entry.available() else runnable_status(entry, False)
    width = max(len(d.env_id) for d in found) + 2
    print(f"{'id':<{width}}  {'category':<9}  {'variants':>9}  changes", file=out)
    for d in sorted(found, key=lambda d: (d.base_suite, libero_plus.CATEGORIES.index(d.category))):
        note = d.changes
        if d.missing:
            note += (f"; {d.num_variants - d.num_available} need {len(d.missing)} LIBERO-Plus asset files "
                     f"(e.g. {d.missing[0]})")
        print(f"{d.env_id:<{width}}  {d.category:<9}  {d.num_available:>4}/{d.num_variants:<4}  {note}", file=out)
    here, total = sum(d.num_available for d in found), sum(d.num_variants for d in found)
    folder = libero_plus.plus_asset_folder()
    assets = f"LIBERO-Plus's assets from {folder}" if folder else \
        f"LIBERO's own assets only (the others: {libero_plus.ASSETS_DOWNLOAD}, then {libero_plus.ASSETS_ENV})"
    print(f"{len(found)} LIBERO-Plus ids (runnable here: {status}); {here} of {total} variants of "
          f"{libero_plus.catalog_source()} buildable with {assets}; gym.make(<suite id>, perturbation=\"plus_...\") "
          "makes the same envs (docs/libero_plus.md)", file=out)
    return 0


def list_pro(out=sys.stdout) -> int:
    """Every LIBERO-PRO suite the installed catalog knows: its id (or why it has none), category, changes."""
    found = libero_pro.variants(include_unavailable=True)
    first = ENTRIES[next(v.env_id for v in found if v.env_id)]
    status = runnable_status(first, first.available())
    width = max(len(v.env_id or v.benchmark) for v in found) + 2
    print(f"{'id (or LIBERO name when not registered)':<{width}}  {'category':<9}  {'tasks':>5}  changes", file=out)
    for v in sorted(found, key=lambda v: (v.env_id is None, v.base_suite, libero_pro.CATEGORIES.index(v.category))):
        name = v.env_id or f"({v.benchmark})"
        note = f"not registered: {v.unavailable}" if not v.env_id else v.changes
        if v.dropped_tasks:
            note += f"; left out: {'; '.join(v.dropped_tasks)}"
        print(f"{name:<{width}}  {v.category:<9}  {v.num_tasks:>5}  {note}", file=out)
    registered = sum(bool(v.env_id) for v in found)
    print(f"{registered} LIBERO-PRO ids (runnable here: {status}), {len(found) - registered} suites without "
          f"files in {libero_pro.catalog_source()}; gym.make(<suite id>, perturbation=...) makes the same envs",
          file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = parser_with_examples(
        "vla-gym", "The vla-gym command: list env ids, check the machine, record demos, compare evaluations, run the "
        "physics canary.", [
            "vla-gym list --backend libero", "vla-gym list --pro", "vla-gym list --plus", "vla-gym check", *record_demos.EXAMPLES[:1],
            compare_reports.EXAMPLES[0], canary.EXAMPLES[0]])
    sub = parser.add_subparsers(dest="command", required=True)
    list_parser = sub.add_parser("list", help="list registered env ids")
    parser_with_examples(None, "List the registered VLA/... ids: backend, tasks, runnable here.",
                         ["vla-gym list", "vla-gym list --backend maniskill", "vla-gym list --backend metaworld",
                          "vla-gym list --pro", "vla-gym list --plus"], parser=list_parser)
    list_parser.add_argument("--backend", help="only this backend (libero, liberoplus, maniskill, metaworld, behavior)")
    list_parser.add_argument("--pro", action="store_true",
                             help="each LIBERO-PRO id (perturbed LIBERO suite), its OOD category and what it changes")
    list_parser.add_argument("--plus", action="store_true",
                             help="each LIBERO-Plus id (suite x dimension), its OOD category, variants buildable here")
    sub.add_parser("check", help="check the system packages headless rendering needs")
    record_demos.add_arguments(sub.add_parser("demos", help="record scripted-expert episodes as a LeRobot v3 dataset"))
    compare_reports.add_arguments(sub.add_parser(
        "compare", help="compare two eval.json (or ood.json) reports episode by episode: paired CI, McNemar p"))
    canary.add_arguments(sub.add_parser(
        "canary", help="replay recorded expert actions and compare trajectories and success with the fingerprints"))
    args = parser.parse_args(argv)
    if args.command == "canary":
        return canary.main(args)
    if args.command == "compare":
        return compare_reports.main(args)
    if args.command == "demos":
        return record_demos.main(args)
    if args.command == "list":
        return list_pro() if args.pro else list_plus() if args.plus else list_envs(args.backend)
    return system.main([])


if __name__ == "__main__":
    sys.exit(main())
