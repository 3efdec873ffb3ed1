"""The reliability soaks' tables, rendered from their JSON in results/ into this study's README.

    python experiments/reliability_soaks/table.py table            # every table, as Markdown
    python experiments/reliability_soaks/table.py readme [--check] # ... into README.md's blocks (or check they are there)

Blocks of README.md, each written between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``:

- ``resets``: a LIBERO-130 worker's RSS over many resets with task changes (``memory_soak.py --summary``'s JSON);
- ``breakdown``: what a fresh worker's RSS is made of (``memory_soak.py --breakdown``, under ``breakdown``);
- ``training``: a LIBERO GRPO run's trainer and env-worker memory over time (``memory_run.py --json``);
- ``probes``: a live trainer's RSS before and after a ``malloc_trim(0)`` from outside (``heap_probe.py --json``);
- ``faults``: the fault-injected soak's figures (``fault_soak.py``'s summary, its ``--table``).
"""
from __future__ import annotations

import datetime
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results"
README = HERE / "README.md"
sys.path.insert(0, str(HERE))  # fault_soak.py beside this file, also when imported from elsewhere

from fault_soak import markdown_table  # noqa: E402

from vla_gym.runtime.cli_args import script_parser  # noqa: E402
from vla_gym.trainers.runtime.results import render_block  # noqa: E402

#: (results file, column label) of the reset soaks, oldest first
RESET_RUNS = (
    ("memory_soak_before_trim.json", "no trim, MuJoCo 3.17"),
    ("memory_soak_mujoco3.17.json", "`release_freed_memory`, MuJoCo 3.17"),
    ("memory_soak.json", "`release_freed_memory`, MuJoCo 3.3.0"),
)
#: (results file, row label) of the training runs, oldest first
TRAINING_RUNS = (
    ("memory_grpo_cache100k.json", "feature cache 100,000 frames"),
    ("memory_grpo.json", "cache 8,192"),
    ("memory_grpo_fixed.json", "cache 8,192 in one reused table, trim after each update"),
)


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _num(value: float | None, digits: int = 0) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def resets_table() -> str:
    """One column per reset soak: RSS at fixed resets (the same task at each in every run), the spread, the slope."""
    runs = [(load(name), label) for name, label in RESET_RUNS]
    at = sorted({c["reset"] for run, _ in runs for c in run["checkpoints"]})
    lines = ["| worker, MB unless named | " + " | ".join(label for _, label in runs) + " |",
             "|---|" + "---:|" * len(runs)]

    def row(name: str, cells: list[str]) -> None:
        lines.append(f"| {name} | " + " | ".join(cells) + " |")

    row("resets (task changes)", [f"{r['resets']:,} ({r['task_changes']:,})" for r, _ in runs])
    row("worker lives / hours", [f"{r['worker_processes']} / {r['hours']}" for r, _ in runs])
    for reset in at:
        cells = []
        for run, _ in runs:
            point = next((c for c in run["checkpoints"] if c["reset"] == reset), None)
            cells.append("" if point is None else f"{point['worker_rss_mb']:,.0f}")
        task = next(c["task_id"] for run, _ in runs for c in run["checkpoints"] if c["reset"] == reset)
        row(f"RSS at reset {reset:,} (task {task})", cells)
    row("RSS min / median / max", [" / ".join(_num(r["worker_rss_mb"][k]) for k in ("min", "median", "max"))
                                   for r, _ in runs])
    row("growth after warm-up, MB per 100 resets",
        [f"{r['slope_mb_per_100_resets']:+.2f} (after {r['warmup_resets']})" for r, _ in runs])
    row("steps/s, median of first / last tenth",
        [f"{r['steps_per_s']['first_decile']:.1f} / {r['steps_per_s']['last_decile']:.1f}" for r, _ in runs])
    row("reset s (task change), median of first / last tenth",
        [f"{r['reset_s']['first_decile']:.2f} / {r['reset_s']['last_decile']:.2f}" for r, _ in runs])
    row("parent RSS first / last", [f"{r['parent_rss_mb']['first']:.0f} / {r['parent_rss_mb']['last']:.0f}"
                                    for r, _ in runs])
    row("commit", [r["commit"] for r, _ in runs])
    return "\n".join(lines) + "\n"


def breakdown_table() -> str:
    """The RSS after each stage of a fresh worker, without and with torch imported first (a trainer's worker)."""
    data = load("memory_soak_mujoco3.17.json")["breakdown"]
    plain, torch = dict(data["worker"]["stages"]), dict(data["worker_with_torch"]["stages"])
    model = data["worker"]["model"]
    lines = ["| stage (cumulative) | worker RSS, MB | with `import torch` first |", "|---|---:|---:|"]
    lines += [f"| {stage} | {_num(plain.get(stage), 1)} | {_num(torch.get(stage), 1)} |" for stage in torch]
    lines += ["", f"{data['env_id']}, {data['image_size']} px, main camera, MuJoCo 3.17, EGL on Mesa's llvmpipe. Task 0's "
              f"model: {model['model_buffer_mb']} MB buffer, {model['mesh_vertices']:,} mesh vertices, "
              f"{model['texture_bytes_mb']} MB of textures ({model['textures']}); `MjData` reserves "
              f"{model['data_buffer_mb']} MB (untouched, not resident); MuJoCo's asset cache {model['asset_cache_mb']} "
              f"of {model['asset_cache_capacity_mb']} MB."]
    return "\n".join(lines) + "\n"


def training_table() -> str:
    """One row per training run: the largest env worker's and the trainer's RSS, first / after warm-up / last / peak."""
    lines = ["| run | minutes (updates) | warm-up, min | env worker: first / after warm-up / last / peak, MB | "
             "growth after warm-up | trainer: first / after warm-up / last / peak, MB | growth after warm-up | "
             "env steps/s, first / last fifth | commit |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, label in TRAINING_RUNS:
        run = load(name)
        cells = [label, f"{run['minutes']} ({run['updates']})", f"{run['warmup_minutes']:g}"]
        for tag in ("env/worker_rss_mb", "proc/rss_mb"):
            s = run[tag]
            cells += [" / ".join(f"{s[k]:,.0f}" for k in ("first", "after_warmup", "last", "max")),
                      f"{s['growth_mb_per_hour']:+.1f} MB/h"]
        cells += [f"{run['steps_per_s']['first_fifth']} / {run['steps_per_s']['last_fifth']}", run["commit"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def probes_table() -> str:
    """Each probe of a running GRPO trainer: RSS before and after the trim, and what it freed."""
    probes = load("memory_trim_probe.json")["probes"]
    start = datetime.datetime.fromisoformat(probes[0]["time"].replace("Z", "+00:00"))
    lines = ["| probe, minutes after the first | RSS before the trim, MB | after, MB | freed, MB |", "|---:|---:|---:|---:|"]
    for p in probes:
        minutes = (datetime.datetime.fromisoformat(p["time"].replace("Z", "+00:00")) - start).total_seconds() / 60
        lines.append(f"| {minutes:.0f} | {p['rss_before_mb']:,.0f} | {p['rss_after_mb']:,.0f} | {p['freed_mb']:,.0f} |")
    return "\n".join(lines) + "\n"


def faults_table() -> str:
    summary = load("fault_soak.json")
    return markdown_table(summary) + f"\nCommit {summary['commit']}; planned {summary['plan']['updates']} updates, " \
        f"faults every {summary['plan']['fault_every']:g} s or more.\n"


BLOCKS = {"resets": resets_table, "breakdown": breakdown_table, "training": training_table,
          "probes": probes_table, "faults": faults_table}


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("table", help="print every table")
    rendering = sub.add_parser("readme", help="write the tables into the study's README (--check: only compare)")
    rendering.add_argument("--readme", default=str(README))
    rendering.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "table":
        for name, render in BLOCKS.items():
            print(f"<!-- {name} -->\n{render()}")
        return 0
    differ = [name for name, render in BLOCKS.items()
              if not render_block(args.readme, name, render(), check=args.check)]
    if args.check and differ:
        raise SystemExit(f"{args.readme}: the blocks {', '.join(differ)} differ from results/: "
                         f"run {pathlib.Path(__file__).name} readme")
    return 0


if __name__ == "__main__":
    sys.exit(main())
