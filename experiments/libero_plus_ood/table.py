"""This study's results table, rendered from results.json (a ``trainers/eval.py --ood --libero-plus`` report).

    python experiments/libero_plus_ood/table.py table             # the Markdown
    python experiments/libero_plus_ood/table.py readme [--check]  # ... into README.md's results block (or check it)

The table: IND, the category means and the OOD average of the seeded rows and of the LIBERO-Plus dimensions, then
one line per row with its success, 95 % Wilson interval, episodes and change from IND.
"""
from __future__ import annotations

import json
import pathlib
import sys

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.evaluation.ood import summary_cells, summary_header
from vla_gym.trainers.evaluation.stats import rate_with_interval, success_counts
from vla_gym.trainers.runtime.results import render_block

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results.json"
README = HERE / "README.md"


def _row(row: dict, ind: float) -> str:
    strength = "-" if row["strength"] is None else f"{row['strength']:g}"
    return (f"| {row['perturbation']} | {row['category']} | {strength} | {row['episodes']} | "
            f"{rate_with_interval(*(success_counts(row) or (0, 0)))} | {100 * (row['success_rate'] - ind):+.1f} |")


def table(report: dict) -> str:
    """The summary (seeded rows, LIBERO-Plus dimensions) and every row, as the README shows them."""
    ind, plus = report["ind"], report.get("libero_plus")
    lines = ["| rows | " + summary_header() + " |", "|---|" + "---:|" * 5,
             "| seeded (`--ood`) | " + " | ".join(summary_cells(report)) + " |"]
    if plus:
        lines.append("| LIBERO-Plus dimensions | " + " | ".join(summary_cells(report, plus)) + " |")
    lines += ["", "| perturbation | category | strength | episodes | success [95 % CI] | change vs IND (points) |",
              "|---|---|---:|---:|---:|---:|",
              f"| none (IND) | - | - | {report['ind_episodes']} | "
              f"{rate_with_interval(*success_counts({'success_rate': ind, 'episodes': report['ind_episodes']}))} | - |"]
    lines += [_row(row, ind) for row in report["rows"]]
    if plus:
        lines += [_row(row, ind) for row in plus["rows"]]
        if plus.get("not_evaluated"):
            lines += ["", f"Not evaluated (no variant buildable with LIBERO's own assets): "
                      f"{', '.join(plus['not_evaluated'])}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("table", help="print the table")
    rendering = sub.add_parser("readme", help="write the table into the study's README (--check: only compare)")
    rendering.add_argument("--results", default=str(RESULTS))
    rendering.add_argument("--readme", default=str(README))
    rendering.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "table":
        print(table(json.loads(RESULTS.read_text())), end="")
        return 0
    same = render_block(args.readme, "results", table(json.loads(pathlib.Path(args.results).read_text())),
                        check=args.check)
    if args.check and not same:
        raise SystemExit(f"{args.readme}'s results table differs from {args.results}: run "
                         f"{pathlib.Path(__file__).name} readme")
    return 0


if __name__ == "__main__":
    sys.exit(main())
