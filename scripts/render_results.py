"""Render README.md's results table (and docs/benchmarks.md's headline table) from the results JSON.

    python scripts/render_results.py            # rewrite both tables from the JSON
    python scripts/render_results.py --check    # exit 1 when a page differs from its JSON (tests/test_repository.py)

Every number in those tables comes from a file that a measuring script wrote: the studies' ``results.json``
(``experiments/<study>/``), ``benchmarks/results/headline.json`` (the benchmark scripts' figures, each with its
command) and ``benchmarks/results/vla_gpu/*.json``. The README keeps one short line per result and links the page
that has the intervals, p-values, commands and method.
"""
from __future__ import annotations

import json
import pathlib
import sys

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.evaluation.stats import mcnemar_outcomes_p
from vla_gym.trainers.runtime.results import render_block

ROOT = pathlib.Path(__file__).resolve().parents[1]
HEADLINE = ROOT / "benchmarks" / "results" / "headline.json"
STUDIES = ROOT / "experiments"
MAX_CELL = 250  # characters per README cell: longer belongs on the linked page


def load(path: pathlib.Path) -> dict:
    return json.loads(path.read_text())


def pct(rate: float) -> str:
    return f"{100 * rate:.1f} %"


def span(values: list[float], spec: str) -> str:
    """``5.6`` or ``5.6-16.2``: the range of ``values`` as they print.

    >>> span([5.62, 5.64], ".1f"), span([190, 520], ".0f")
    ('5.6', '190-520')
    """
    low, high = format(min(values), spec), format(max(values), spec)
    return low if low == high else f"{low}-{high}"


def headline(row_id: str) -> dict:
    rows = {r["id"]: r for r in load(HEADLINE)["rows"]}
    return rows[row_id]


def benchmark_row(row_id: str) -> tuple[str, str, str]:
    """A headline row in the README's words (its ``readme`` entry): what, figure and the page that has the rest."""
    short = headline(row_id)["readme"]
    return short["what"], short["figure"], f"[{pathlib.Path(short['page']).stem}]({short['page']})"


def main_job_row() -> tuple[str, str, str]:
    data = load(STUDIES / "main_job_seeds" / "results.json")
    runs = sorted(data["runs"], key=lambda r: r["seed"])
    successes = " / ".join(f"{r['final_success']:.2f}" for r in runs)
    seeds = ", ".join(str(r["seed"]) for r in runs)
    minutes = [r["wall_minutes"] for r in runs]
    rates = [r["env_steps_per_s"] for r in runs]
    episodes = data["eval_episodes"]  # the runs' closing evaluation, as runs.py recorded it
    return ("PPO, ManiSkill PushCube from state (the main job), 2 processes",
            f"final success ({episodes} episodes) {successes} on seeds {seeds}; {span(minutes, '.1f')} min each at "
            f"{span(rates, '.0f')} env steps/s",
            "[main_job_seeds](experiments/main_job_seeds/README.md)")


def libero_rows() -> list[tuple[str, str, str]]:
    rows = load(STUDIES / "libero_miniature" / "results.json")["rows"]

    def pick(method: str, variant_prefix: str, suite: str, seed: int, split: str = "train", mode: str = "greedy"):
        return next(r for r in rows if r["method"] == method and (r.get("variant") or "").startswith(variant_prefix)
                    and r.get("head") != "tokens" and r["suite"] == suite and r["seed"] == seed
                    and r["split"] == split and r["mode"] == mode)

    def change(r: dict) -> str:
        return f"{pct(r['sft'])} -> {pct(r['rl'])}"

    def held_out_range(method: str, variant: str) -> str:
        gains = [100 * (r["rl"] - r["sft"]) for r in rows if r["method"] == method
                 and (r.get("variant") or "").startswith(variant) and r["split"] == "heldout"]
        return f"{min(gains):+.0f} to {max(gains):+.0f}"

    def with_p(row: dict) -> str:
        p = mcnemar_outcomes_p(row["outcomes"]["sft"], row["outcomes"]["rl"])
        return f"{change(row)} (p {'< 0.001' if p < 0.001 else f'{p:.2f}'})"

    def best_token_grpo() -> list[tuple[str, str]]:
        """Per (suite, seed), the token GRPO variant with the largest greedy change on the training starts: its
        training-start and held-out rows, as text."""
        best: dict[tuple[str, int], dict] = {}
        for r in rows:
            if r["method"] == "grpo" and r.get("head") == "tokens" and (r["split"], r["mode"]) == ("train", "greedy"):
                held = best.get((r["suite"], r["seed"]))
                if held is None or r["rl"] - r["sft"] > held["rl"] - held["sft"]:
                    best[(r["suite"], r["seed"])] = r
        found = []
        for (suite, seed), train in sorted(best.items()):
            heldout = next((r for r in rows if r["method"] == "grpo" and r["variant"] == train["variant"]
                            and (r["suite"], r["seed"], r["split"], r["mode"]) == (suite, seed, "heldout", "greedy")), None)
            found.append((f"{suite.capitalize()} s{seed} {with_p(train)}",
                          f"{suite.capitalize()} s{seed} {with_p(heldout)}" if heldout else ""))
        return found

    link = "[libero_miniature](experiments/libero_miniature/README.md)"
    rft = (f"Object s0 {change(pick('rft', 'protocol', 'object', 0))}, s1 {change(pick('rft', 'protocol', 'object', 1))}; "
           f"Spatial s0 {change(pick('rft', 'protocol', 'spatial', 0))}, s1 {change(pick('rft', 'protocol', 'spatial', 1))}; "
           f"held out {held_out_range('rft', 'protocol')} points")

    def points(method: str, variant: str) -> str:
        gains = sorted(100 * (r["rl"] - r["sft"]) for r in (pick(method, variant, "object", seed) for seed in (0, 1)))
        return f"{gains[0]:+.1f} to {gains[-1]:+.1f}"

    tokens = best_token_grpo()
    text = (", ".join(train for train, _ in tokens) + "; held out " + ", ".join(held for _, held in tokens if held) +
            f"; Gaussian head (Object): GRPO {points('grpo', 'protocol')}, residual RL {points('residual', '')} points")
    figures = sorted((STUDIES / "libero_miniature" / "figures").glob("*_tokens_grpo_curve.png"))
    curves = "curves: " + ", ".join(
        f"[{figure.name.removesuffix('_tokens_grpo_curve.png').replace('_', ' ')}]"
        f"(experiments/libero_miniature/figures/{figure.name})" for figure in figures)
    return [("LIBERO in miniature: 3 demos per task -> SFT -> one RFT round, 400 training starts, greedy", rft, link),
            ("the same protocol, GRPO with action tokens (G = 8, temperature 1.6; Gaussian GRPO and residual RL as ranges), greedy", text, f"{link}, {curves}")]


def metaworld_row() -> tuple[str, str, str]:
    rows = load(STUDIES / "metaworld_mt10" / "results.json")["rows"]

    def pick(method: str, seed: int) -> dict:
        return next(r for r in rows if r["method"] == method and r["seed"] == seed and r["split"] == "train"
                    and r["mode"] == "greedy")

    parts = [f"{m.upper()} seed {s} {pct(pick(m, s)['sft'])} -> {pct(pick(m, s)['rl'])}"
             for m, s in (("grpo", 0), ("grpo", 1), ("ppo", 0))]
    return ("Meta-World MT10 from state: 3 demos per task -> SFT -> RL, 400 training goals, greedy", "; ".join(parts),
            "[metaworld_mt10](experiments/metaworld_mt10/README.md)")


def libero_plus_row() -> tuple[str, str, str]:
    data = load(STUDIES / "libero_plus_ood" / "results.json")
    rates = {r["perturbation"].removeprefix("plus_"): r["success_rate"] for r in data["libero_plus"]["rows"]}
    groups: dict[str, list[str]] = {}
    for name, rate in sorted(rates.items(), key=lambda kv: (-kv[1], kv[0])):
        groups.setdefault(f"{100 * rate:.0f} %", []).append(name)
    dims = "; ".join(f"{', '.join(names)} {rate}" for rate, names in groups.items())
    return ("LIBERO-Plus dimensions, the 3-demo SFT policy on LIBERO-Object, 10 variants each",
            f"in distribution {100 * data['ind']:.0f} %; {dims}",
            "[libero_plus_ood](experiments/libero_plus_ood/README.md)")


def vla_gpu_row() -> tuple[str, str, str]:
    folder = ROOT / "benchmarks" / "results" / "vla_gpu"
    runs = [load(path) for path in sorted(folder.glob("*.json"))]
    parts = [f"{r['family']} {r['policy']} {r['algo'].upper()} {r['loop_samples_per_s']:.1f} samples/s "
             f"({r['peak_memory_gib']:.0f} GiB)" for r in runs]
    return ("VLAs (random weights, bf16) rollout + update on one H100, synthetic observations", "; ".join(parts),
            "[vla](docs/vla.md)")


def readme_table() -> str:
    rows = [benchmark_row("libero_overhead"), benchmark_row("maniskill_overhead_state"), main_job_row(),
            benchmark_row("ppo_cartpole"), benchmark_row("grpo_pushcube"), *libero_rows(), metaworld_row(),
            libero_plus_row(), vla_gpu_row()]
    lines = ["| what | result | details |", "|---|---|---|"]
    for what, result, details in rows:
        for cell in (what, result):
            if len(cell) > MAX_CELL:
                raise SystemExit(f"a README cell is {len(cell)} characters (at most {MAX_CELL}): {cell!r}")
        lines.append(f"| {what} | {result} | {details} |")
    return "\n".join(lines) + "\n"


def benchmarks_table() -> str:
    lines = ["| what | figure | command |", "|---|---|---|"]
    lines += [f"| {r['what']} | {r['figure']} | `{r['command']}`{' ' + r['note'] if r.get('note') else ''} |"
              for r in load(HEADLINE)["rows"]]
    return "\n".join(lines) + "\n"


PAGES = {ROOT / "README.md": readme_table, ROOT / "docs" / "benchmarks.md": benchmarks_table}


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a page differs")
    args = parser.parse_args(argv)
    stale = [page for page, render in PAGES.items() if not render_block(page, "results", render(), check=args.check)]
    for page in stale:
        print(f"{page.relative_to(ROOT)}: {'differs from its JSON' if args.check else 'rewritten'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
