"""Put OOD reports of several checkpoints side by side (e.g. before and after RL), as the seeds' tables do.

    python experiments/libero_plus_ood/compare_ood.py runs/x/ood_sft runs/x/ood_grpo --labels SFT "SFT + GRPO"
    python experiments/libero_plus_ood/compare_ood.py A/ood.json B/ood.json --out runs/ood_before_after.md

Each argument is a report directory of ``trainers/eval.py --ood`` (or its ``ood.json``). Only the perturbation
rows that every report has are compared, and the category means and the OOD average are recomputed over those
rows, so each column averages the same perturbations (a report cut short by time still compares fairly). Prints
Markdown (and writes it to ``--out``): the seeds' table, one line per checkpoint, then one line per perturbation
with each checkpoint's success and the change from the first; every success with its 95 % Wilson interval (a
mean's with the effective episodes of its rows, as ``trainers/eval.py --ood`` reports it) and its episodes.
"""
from __future__ import annotations

import json
import pathlib
import sys

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.evaluation.ood import ood_report_from_rows, summary_cells, summary_header
from vla_gym.trainers.evaluation.stats import rate_with_interval, success_counts


def load_report(path: str) -> dict:
    """An ``ood.json``, given the file or its report directory."""
    file = pathlib.Path(path)
    file = file / "ood.json" if file.is_dir() else file
    if not file.is_file():
        raise FileNotFoundError(f"{file} not found: pass the --out directory of trainers/eval.py --ood")
    return json.loads(file.read_text())


def compare_markdown(reports: dict[str, dict]) -> str:
    """The side-by-side tables of ``reports`` (label -> ood.json content), on the rows they all have."""
    common = set.intersection(*({row["directory"] for row in report["rows"]} for report in reports.values()))
    first = next(iter(reports.values()))
    order = [row["directory"] for row in first["rows"] if row["directory"] in common]
    if not order:
        raise ValueError("the reports have no perturbation row in common")
    trimmed = {label: ood_report_from_rows(report, order) for label, report in reports.items()}
    labels = list(trimmed)
    episodes = sorted({report["ind_episodes"] for report in trimmed.values()})
    lines = [f"Success rate [95 % Wilson interval] over the same {'/'.join(map(str, episodes))} episodes per row; "
             f"category means and OOD average over the {len(order)} perturbations every report has (n: the episodes "
             "they pool; a mean's interval uses the effective n of its rows: docs/evaluation.md#statistics).", "",
             "| checkpoint | " + summary_header() + " |", "|---|" + "---:|" * 5]
    lines += [f"| {label} | " + " | ".join(summary_cells(report)) + " |" for label, report in trimmed.items()]
    lines += ["", "| perturbation | category | strength | " + " | ".join(labels) + " | change (points) |",
              "|---|---|---:|" + "---:|" * (len(labels) + 1)]
    rows_by_label = {label: {row["directory"]: row for row in report["rows"]} for label, report in trimmed.items()}
    for directory in ["ind"] + order:
        if directory == "ind":
            stats = [{"success_rate": report["ind"], "episodes": report["ind_episodes"]} for report in trimmed.values()]
            head = "none (IND) | - | -"
        else:
            row = rows_by_label[labels[0]][directory]
            stats = [rows_by_label[label][directory] for label in labels]
            strength = "-" if row["strength"] is None else f"{row['strength']:g}"
            head = f"{row['perturbation']} | {row['category']} | {strength}"
        change = f"{100 * (stats[-1]['success_rate'] - stats[0]['success_rate']):+.1f}"
        cells = [rate_with_interval(*(success_counts(s) or (0, 0))) for s in stats]  # n/a: no success reported
        lines.append(f"| {head} | " + " | ".join(cells) + f" | {change} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("reports", nargs="+", help="report directories (or ood.json files), first = baseline")
    parser.add_argument("--labels", nargs="+", help="one per report (default: the directory names)")
    parser.add_argument("--out", help="also write the Markdown here")
    args = parser.parse_args(argv)
    labels = args.labels or [pathlib.Path(path).name for path in args.reports]
    if len(labels) != len(args.reports):
        print(f"--labels: {len(labels)} labels for {len(args.reports)} reports; give one per report", file=sys.stderr)
        return 2
    try:
        markdown = compare_markdown({label: load_report(path) for label, path in zip(labels, args.reports)})
    except (FileNotFoundError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 2
    print(markdown, end="")
    if args.out:
        pathlib.Path(args.out).write_text(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
