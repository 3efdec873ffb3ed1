"""Regenerate assets/libero_tasks.json from an installed LIBERO (any distribution).

    python scripts/gen_libero_tasks.py

The table lets `vla-gym list`, the spaces and the docs work without LIBERO installed.
"""
import json
import pathlib

from libero.libero import benchmark

SUITES = ["libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"]


def main() -> None:
    table = {}
    for suite in SUITES:
        bench = benchmark.get_benchmark_dict()[suite]()
        table[suite] = [
            {"name": task.name, "instruction": task.language,
             "num_init_states": int(len(bench.get_task_init_states(i)))}
            for i, task in enumerate(bench.tasks)
        ]
    out = pathlib.Path(__file__).resolve().parents[1] / "assets" / "libero_tasks.json"
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {out}: " + ", ".join(f"{s} {len(t)}" for s, t in table.items()))


if __name__ == "__main__":
    main()
