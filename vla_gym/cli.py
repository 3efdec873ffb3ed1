"""The ``vla-gym`` command.

    vla-gym list                  # every registered id, its backend, suite size, runnable offline here?
    vla-gym list --backend libero
    vla-gym check                 # are the rendering system packages there?
    vla-gym demos VLA/LiberoObject-v0 --episodes-per-task 20 --out data/x --workers 2   # expert demos (LeRobot v3)
"""
from __future__ import annotations

import argparse
import sys

from vla_gym.registry import ENTRIES

#: how to get a backend that pip alone cannot install
INSTALL_HINTS = {"behavior": "needs Isaac Sim + OmniGibson: docs/behavior.md"}


def missing_downloads(entry) -> list[str]:
    """ManiSkill ids among ``entry``'s tasks whose assets are not downloaded (empty for other backends)."""
    if entry.backend != "maniskill":
        return []
    from vla_gym.tasks.maniskill import TASKS

    needing = [TASKS[name][0] for name in entry.kwargs.get("tasks", ()) if TASKS[name][2]]
    if not needing:
        return []
    from vla_gym.backends.maniskill import missing_assets  # imports mani_skill's asset table, no simulator

    return [maniskill_id for maniskill_id in needing if missing_assets(maniskill_id)]


def runnable_status(entry, backend_importable: bool) -> str:
    """``yes``, or ``no (...)`` with the exact command that makes ``entry`` runnable here."""
    if not backend_importable:
        return "no (" + INSTALL_HINTS.get(entry.backend, f'pip install "vla-gym[{entry.extra}]"') + ")"
    absent = missing_downloads(entry)
    if absent:
        commands = " && ".join(f"python -m mani_skill.utils.download_asset {maniskill_id}" for maniskill_id in absent)
        return f"no (assets not downloaded: {commands})"
    return "yes"


def list_envs(backend: str | None = None, out=sys.stdout) -> int:
    rows = [e for e in ENTRIES.values() if backend in (None, e.backend)]
    if not rows:
        known = sorted({e.backend for e in ENTRIES.values()})
        print(f"no env ids for backend {backend!r}; backends: {', '.join(known)}", file=sys.stderr)
        return 2
    importable = {}
    for entry in rows:
        if entry.backend not in importable:
            importable[entry.backend] = entry.available()
    width = max(len(e.env_id) for e in rows)
    print(f"{'id':<{width}}  {'backend':<9}  {'tasks':>5}  runnable offline here", file=out)
    runnable = 0
    for entry in rows:
        status = runnable_status(entry, importable[entry.backend])
        runnable += status == "yes"
        print(f"{entry.env_id:<{width}}  {entry.backend:<9}  {entry.num_tasks:>5}  {status}", file=out)
    print(f"{len(rows)} ids, {runnable} runnable offline here", file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vla-gym", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    list_parser = sub.add_parser("list", help="list registered env ids")
    list_parser.add_argument("--backend", help="only this backend (libero, maniskill, behavior)")
    sub.add_parser("check", help="check the system packages headless rendering needs")
    from vla_gym import record_demos

    record_demos.add_arguments(sub.add_parser("demos", help="record scripted-expert episodes as a LeRobot v3 dataset"))
    args = parser.parse_args(argv)
    if args.command == "demos":
        return record_demos.main(args)
    if args.command == "list":
        return list_envs(args.backend)
    from vla_gym import system

    return system.main([])


if __name__ == "__main__":
    sys.exit(main())
