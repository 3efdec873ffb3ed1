"""Which MuJoCo to run LIBERO on, measured: the scripted experts and the physics canary under several versions.

    python experiments/mujoco_versions/measure.py                                  # 2.3.7 3.1.6 3.3.0 3.17.0
    python experiments/mujoco_versions/measure.py --versions 3.3.0 current --init-states 0-1 --suites libero_object
    python experiments/mujoco_versions/measure.py --versions current --quick --out /tmp/mj --results /tmp/mj/rows.json \
        --asset /tmp/mj/passed.json                                    # short form: 2 tasks x 2 states, canary --quick
    python experiments/mujoco_versions/measure.py --table               # the table (and the asset) from results.json
    python experiments/mujoco_versions/measure.py readme [--check]      # the table into the study's README (or compare)

For each version this makes (once) a virtual environment under ``--venvs`` that sees this Python's packages
(``--system-site-packages``) with only ``mujoco==VERSION`` (and ``numpy<2`` for MuJoCo 2.x) installed over them
and vla_gym installed editable, then runs in it, one after the other:

1. ``experiments/scripted_experts/measure_libero_experts.py`` on the chosen suites and init states (the experts' success per suite);
2. ``vla-gym canary --json`` (how far each fingerprinted trajectory drifts from the one recorded under the
   reference MuJoCo, which successes flip, and how far the reset frames move: ``RENDER``).

``current`` is this interpreter's own MuJoCo (no venv). Each step's output under ``--out/mujoco-VERSION/`` is its
resume point (a rerun skips what exists), and ``--results`` (this study's ``results.json``) gets one row
per version: expert success per suite and the canary's OK / DRIFT / FLIP / RENDER counts, largest drift and
largest frame change. The versions whose canary had no DRIFT, FLIP or RENDER go to ``assets/canary/passed_mujoco.json``:
a LIBERO env on any other version warns once (``vla_gym.backends.libero.mujoco_check``). When ``--results`` is this
study's ``results.json``, its table is rendered into the study's README too; ``readme`` renders it alone and
``readme --check`` only compares (exit 1 when the README differs from the JSON).
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import venv

from vla_gym.canary import load as load_fingerprints
from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.evaluation.stats import rate_with_interval
from vla_gym.trainers.runtime.results import render_block, write_results

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results.json"
README = HERE / "README.md"
SCRIPT = "python experiments/mujoco_versions/measure.py"


def interpreter(version: str, venvs: pathlib.Path) -> str:
    """The python that runs ``version`` of MuJoCo: this one for ``current``, else a venv made on first use."""
    if version == "current":
        return sys.executable
    home = venvs / f"mujoco-{version}"
    python = home / "bin" / "python"
    if not python.is_file():
        venv.EnvBuilder(system_site_packages=True, with_pip=True).create(home)
        pins = [f"mujoco=={version}"] + (["numpy<2"] if version.startswith("2.") else [])
        subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)], check=True)
    return str(python)


def mujoco_version(python: str) -> str:
    return subprocess.run([python, "-c", "import mujoco; print(mujoco.__version__)"], check=True,
                          capture_output=True, text=True).stdout.strip()


def measure(version: str, args) -> dict:
    """Run the experts and the canary under ``version`` (each skipped when its output exists); its row."""
    python = interpreter(version, pathlib.Path(args.venvs))
    out = pathlib.Path(args.out) / f"mujoco-{version}"
    experts = out / "experts"
    if not (experts / "done").is_file():
        starts = ["--quick"] if args.quick else ["--init-states", *args.init_states]
        subprocess.run([python, "experiments/scripted_experts/measure_libero_experts.py", "--suites", *args.suites, *starts,
                        "--workers", str(args.workers), "--out", str(experts)], cwd=ROOT, check=True)
        (experts / "done").write_text("")
    canary = out / "canary.json"
    if not canary.is_file():
        code = subprocess.run([python, "-m", "vla_gym.cli", "canary", "--json", str(canary),
                               *(["--quick"] if args.quick else [])], cwd=ROOT).returncode
        if code not in (0, 1):
            raise SystemExit(f"vla-gym canary under MuJoCo {version} failed with exit code {code}")
    report = json.loads(canary.read_text())
    shipped = {case["key"] for case in load_fingerprints()[0]["cases"]}  # a case dropped since is not counted
    report["results"] = [r for r in report["results"] if r["key"] in shipped]
    return row(mujoco_version(python), json.loads((experts / "table.json").read_text()), report)


def row(mujoco: str, experts: dict, canary: dict) -> dict:
    """One version's row: expert success per suite, canary verdicts and drift per suite.

    >>> canary = {"results": [{"key": "object-t0-i0-s0", "status": "OK", "robot_drift_m": 0.0,
    ...                        "object_drift_m": 0.001, "identical": False, "render_drift": 0.25},
    ...                       {"key": "goal-t1-i0-s0", "status": "FLIP", "robot_drift_m": 0.2,
    ...                        "object_drift_m": 0.3, "identical": False}]}
    >>> r = row("3.3.0", {"suites": {"libero_object": {"episodes": 2, "successes": 1, "success_rate": 0.5}}}, canary)
    >>> r["canary"]["counts"], r["canary"]["flips"], r["canary"]["max_drift_mm"], r["canary"]["max_frame_change"]
    ({'OK': 1, 'DRIFT': 0, 'FLIP': 1, 'RENDER': 0, 'SKIP': 0, 'identical': 0}, ['goal-t1-i0-s0'], {'object': 1.0, 'goal': 300.0}, 0.25)
    """
    results = canary["results"]
    counts = {status: sum(r["status"] == status for r in results) for status in ("OK", "DRIFT", "FLIP", "RENDER", "SKIP")}
    counts["identical"] = sum(bool(r.get("identical")) for r in results)
    drift: dict[str, float] = {}
    for r in results:
        if r["status"] != "SKIP":
            worst = max(r.get("robot_drift_m") or 0.0, r.get("object_drift_m") or 0.0) * 1000
            suite = r["key"].split("-")[0]
            drift[suite] = round(max(drift.get(suite, 0.0), worst), 2)
    return {"mujoco": mujoco, "experts": experts["suites"],
            "canary": {"counts": counts, "flips": [r["key"] for r in results if r["status"] == "FLIP"],
                       "max_drift_mm": drift,
                       "max_frame_change": max((r["render_drift"] for r in results if r.get("render_drift") is not None),
                                               default=None)}}


def merge_row(rows: list[dict], new: dict) -> list[dict]:
    """``rows`` with ``new`` replacing the row of its MuJoCo version, oldest version first.

    >>> [r["mujoco"] for r in merge_row([{"mujoco": "3.17.0"}, {"mujoco": "2.3.7", "x": 1}], {"mujoco": "2.3.7"})]
    ['2.3.7', '3.17.0']
    """
    kept = [r for r in rows if r["mujoco"] != new["mujoco"]] + [new]
    return sorted(kept, key=lambda r: tuple(int(part) for part in r["mujoco"].split(".")))


def passed(rows: list[dict], reference: str) -> list[str]:
    """The MuJoCo versions whose canary drifted nowhere, flipped nothing and rendered the same frames (the reference
    always), oldest first.

    >>> clean = {"counts": {"OK": 3, "DRIFT": 0, "FLIP": 0}}
    >>> passed([{"mujoco": "3.3.0", "canary": clean}, {"mujoco": "2.3.7", "canary": {"counts": {"DRIFT": 1}}}],
    ...        "3.17.0")
    ['3.3.0', '3.17.0']
    """
    ok = {r["mujoco"] for r in rows if not any(r["canary"]["counts"].get(s) for s in ("DRIFT", "FLIP", "RENDER"))}
    return sorted(ok | {reference}, key=lambda v: tuple(int(part) for part in v.split(".")))


def write_asset(rows: list[dict], path: pathlib.Path) -> pathlib.Path:
    """``assets/canary/passed_mujoco.json``: what the LIBERO env's warn-once check reads."""
    reference = json.loads((ROOT / "assets" / "canary" / "fingerprints.json").read_text())["reference"]["mujoco"]
    write_results(path, {"reference": reference, "passed": passed(rows, reference),
                         "measured": {r["mujoco"]: r["canary"]["counts"] for r in rows},
                         "by": f"{SCRIPT} ({RESULTS.relative_to(ROOT)})"})
    return path


def markdown(rows: list[dict]) -> str:
    """The docs' table: one line per MuJoCo version; each expert success with its 95 % Wilson interval."""
    suites = sorted({s for r in rows for s in r["experts"]})
    head = ["MuJoCo", *(f"expert {s.removeprefix('libero_')} [95 % CI]" for s in suites),
            "canary identical / OK / DRIFT / FLIP / RENDER", "largest drift (mm)", "largest frame change (of 255)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["mujoco"]]
        for s in suites:
            e = r["experts"].get(s)
            cells.append(f"{e['successes']}/{e['episodes']}: {rate_with_interval(e['successes'], e['episodes'])}"
                         if e else "-")
        c = r["canary"]["counts"]
        cells.append(f"{c['identical']} / {c['OK']} / {c['DRIFT']} / {c['FLIP']} / {c.get('RENDER', '-')}")
        cells.append(f"{max(r['canary']['max_drift_mm'].values(), default=0.0):.1f}")
        frames = r["canary"].get("max_frame_change")
        cells.append("-" if frames is None else f"{frames:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def readme(argv: list[str]) -> int:
    """``readme [--check]``: render ``--results``' table into the study's README (or only compare)."""
    parser = script_parser(__doc__, prog="measure.py readme")
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--readme", default=str(README))
    parser.add_argument("--check", action="store_true", help="only compare: exit 1 when the README differs")
    args = parser.parse_args(argv)
    rows = json.loads(pathlib.Path(args.results).read_text())["rows"]
    same = render_block(args.readme, "results", markdown(rows), check=args.check)
    if args.check and not same:
        print(f"{args.readme}'s results table differs from {args.results}: run {SCRIPT} readme", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["readme"]:
        return readme(argv[1:])
    parser = script_parser(__doc__)
    parser.add_argument("--versions", nargs="+", default=["2.3.7", "3.1.6", "3.3.0", "3.17.0"],
                        help="MuJoCo versions from PyPI, or `current` (this interpreter's)")
    parser.add_argument("--suites", nargs="+", default=["libero_object", "libero_spatial", "libero_goal"])
    parser.add_argument("--init-states", nargs="+", default=["0-9"], help="init states of every task with an expert")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--venvs", default="runs/mujoco_versions/venvs", help="where the per-version venvs live")
    parser.add_argument("--out", default="runs/mujoco_versions")
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--asset", default=str(ROOT / "assets" / "canary" / "passed_mujoco.json"),
                        help="where the passed versions go (the LIBERO env reads the shipped one)")
    parser.add_argument("--quick", action="store_true", help="2 tasks x 2 init states per suite, `canary --quick`")
    parser.add_argument("--table", action="store_true", help="only print the table of --results")
    args = parser.parse_args(argv)
    results = pathlib.Path(args.results)
    if args.table:
        rows = json.loads(results.read_text())["rows"]
        print(markdown(rows), end="")
        print("passed versions written to", write_asset(rows, pathlib.Path(args.asset)))
        return 0
    old = json.loads(results.read_text()) if results.is_file() else {}
    same_sample = (old.get("suites"), old.get("init_states")) == (args.suites, args.init_states)
    rows = old.get("rows", []) if same_sample else []  # other versions' rows stay (same experts' sample)
    for version in args.versions:
        rows = merge_row(rows, measure(version, args))
        write_results(results, {"command": f"{SCRIPT} " + " ".join(argv), "suites": args.suites,
                                "init_states": args.init_states, "rows": rows})
        print(markdown(rows), end="", flush=True)
    write_asset(rows, pathlib.Path(args.asset))
    if results.resolve() == RESULTS and README.is_file():
        render_block(README, "results", markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
