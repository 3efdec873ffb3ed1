"""``vla-gym compare A B``: two evaluation reports of the same episodes, compared episode by episode.

    vla-gym compare runs/eval_sft/eval.json runs/eval_grpo/eval.json
    vla-gym compare runs/eval_sft runs/eval_grpo --json runs/sft_vs_grpo.json       # report directories work too
    vla-gym compare runs/x/ood_sft runs/x/ood_grpo                                   # OOD reports: row by row
    vla-gym compare s0/sft s0/rl --pool s1/sft s1/rl              # two training seeds' episodes in one comparison

Each report is a ``trainers/eval.py`` ``eval.json`` (or its directory). Episodes are paired on their spec, the
``(task, init state, seed)`` each was played from; an episode only one report played, one whose task name differs
between the reports, or one without a success flag is counted as unpaired and reported, never silently dropped.
Per task and overall: the paired episodes, the success of A and of B, the difference B - A with a paired
bootstrap 95 % interval (overall: drawn within each task) and the exact McNemar p-value
(:mod:`vla_gym.trainers.evaluation.stats`). Reports without an episode in common are refused, saying why.
``--pool A2 B2`` (repeatable) adds the pairs of another two reports, e.g. the same comparison for another training
seed: its episodes join the overall line and the per-task lines (the bootstrap draws within each report pair and
task), so that several seeds' small gains are tested together.

Two OOD reports (``trainers/eval.py --ood``: ``ood.json`` or its directory) are compared row by row: each row both
reports have (``ind``, ``lighting``, ...) pairs the episodes of its ``<row>/eval.json``. ``experiments/libero_plus_ood/compare_ood.py``
stays the tool for the seeds' table of several checkpoints side by side (Markdown for docs); this command says
whether a row's change is more than noise.
"""
from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from vla_gym.runtime.cli_args import parser_with_examples
from vla_gym.trainers.evaluation.stats import (
    CONFIDENCE,
    discordant_pairs,
    mcnemar_exact_p,
    paired_bootstrap_interval,
    wilson_interval,
)

EXAMPLES = [
    "vla-gym compare runs/eval_sft/eval.json runs/eval_grpo/eval.json",
    "vla-gym compare runs/eval_sft runs/eval_grpo --json runs/sft_vs_grpo.json",
    "vla-gym compare runs/x/ood_sft runs/x/ood_grpo          # OOD reports, row by row",
    "vla-gym compare runs/x/ood_sft/ind/eval.json runs/x/ood_sft/lighting/eval.json   # one checkpoint, IND vs OOD row",
    "vla-gym compare runs/s0_sft runs/s0_rl --pool runs/s1_sft runs/s1_rl        # two training seeds pooled",
]


class CompareError(ValueError):
    """Two reports that cannot be compared; the message says why and what to do."""


def load_report(path: str | pathlib.Path) -> tuple[str, pathlib.Path, dict]:
    """``(kind, file, content)`` of a report: ``"eval"`` (``eval.json``) or ``"ood"`` (``ood.json``), given the
    file or its directory (a directory with both is read as the OOD report)."""
    file = pathlib.Path(path)
    if file.is_dir():
        found = [file / name for name in ("ood.json", "eval.json") if (file / name).is_file()]
        if not found:
            raise CompareError(f"{file}: no eval.json or ood.json in it; pass the --out directory of trainers/eval.py")
        file = found[0]
    if not file.is_file():
        raise CompareError(f"{file} not found: pass an eval.json / ood.json or the --out directory of trainers/eval.py")
    try:
        content = json.loads(file.read_text())
    except ValueError as exc:
        raise CompareError(f"{file}: not JSON ({exc})") from None
    if isinstance(content, dict) and "episodes" in content:
        return "eval", file, content
    if isinstance(content, dict) and "rows" in content and "ind" in content:
        return "ood", file, content
    raise CompareError(f"{file}: neither an eval.json (no 'episodes') nor an ood.json of trainers/eval.py")


def _spec(episode: dict) -> tuple:
    spec = episode.get("spec") or {}
    return spec.get("task_id", episode.get("task_id")), spec.get("init_state_id"), spec.get("seed")


def _keyed(episodes: Sequence[dict]) -> dict[tuple, dict]:
    """Episodes by ``(task, init state, seed, k)``: ``k`` counts repeats of a spec, so each pairs with one."""
    seen: collections.Counter = collections.Counter()
    keyed = {}
    for episode in episodes:
        spec = _spec(episode)
        keyed[(*spec, seen[spec])] = episode
        seen[spec] += 1
    return keyed


def _ids(values) -> str:
    """``0-3,7`` for a set of ids (``-`` for none; ``None`` is shown as ``none``)."""
    numbers = sorted(v for v in values if isinstance(v, int))
    parts, start = [], None
    for i, value in enumerate(numbers):
        if start is None:
            start = value
        if i + 1 == len(numbers) or numbers[i + 1] != value + 1:
            parts.append(str(start) if start == value else f"{start}-{value}")
            start = None
    if any(v is None for v in values):
        parts.append("none")
    return ",".join(parts) or "-"


def _played(episodes: Sequence[dict]) -> str:
    specs = [_spec(e) for e in episodes]
    return (f"{len(specs)} episodes: tasks {_ids({s[0] for s in specs})}, init states {_ids({s[1] for s in specs})}, "
            f"seeds {_ids({s[2] for s in specs})}")


def pair_episodes(a: Sequence[dict], b: Sequence[dict], names: tuple[str, str] = ("A", "B")) -> dict:
    """The episodes of two reports paired on their spec: ``{"pairs": [(task name, a success, b success)],
    "unpaired": {...counts...}}``; :class:`CompareError` when no pair is left, naming why."""
    keyed_a, keyed_b = _keyed(a), _keyed(b)
    pairs, task_mismatch, no_success = [], [], 0
    for key, episode_a in keyed_a.items():
        episode_b = keyed_b.get(key)
        if episode_b is None:
            continue
        name_a, name_b = episode_a.get("task_name") or "", episode_b.get("task_name") or ""
        if name_a and name_b and name_a != name_b:
            task_mismatch.append((name_a, name_b))
        elif episode_a.get("success") is None or episode_b.get("success") is None:
            no_success += 1
        else:
            task = name_a or name_b or ("" if key[0] is None else f"task {key[0]}")
            pairs.append((task, bool(episode_a["success"]), bool(episode_b["success"])))
    common = set(keyed_a) & set(keyed_b)
    unpaired = {"only_a": len(set(keyed_a) - common), "only_b": len(set(keyed_b) - common),
                "task_mismatch": len(task_mismatch), "no_success": no_success}
    if not pairs:
        if not common:
            why = (f"no (task, init state, seed) in common: {names[0]} played {_played(a)}; {names[1]} played "
                   f"{_played(b)}. Evaluate both with the same --tasks, --init-states and --seed")
            same_starts = {key[:2] for key in keyed_a} & {key[:2] for key in keyed_b}
            if same_starts:
                why += (f" ({len(same_starts)} (task, init state) starts are in both, played with other seeds: "
                        "trainers/eval.py numbers the seeds from --seed along its episode list)")
        elif task_mismatch:
            first = task_mismatch[0]
            why = (f"the {len(task_mismatch)} episodes with the same (task, init state, seed) are different tasks "
                   f"(e.g. {first[0]!r} vs {first[1]!r}): the reports come from different suites")
        else:
            why = f"none of the {len(common)} episodes they share reports success (info['success'])"
        raise CompareError(f"the reports have no episode in common to compare: {why}")
    return {"pairs": pairs, "unpaired": unpaired}


def paired_stats(pairs: Sequence[tuple[str, bool, bool]], confidence: float = CONFIDENCE, resamples: int = 10_000,
                 seed: int = 0, by_task: bool = False, strata: Sequence[Any] | None = None) -> dict[str, Any]:
    """Paired comparison of ``(task, a success, b success)`` pairs: successes, difference B - A with its paired
    bootstrap interval (``by_task``: drawn within each task; ``strata``: within these groups, one per pair),
    discordant pairs and the exact McNemar p-value."""
    a = [x for _, x, _ in pairs]
    b = [y for _, _, y in pairs]
    n = len(pairs)
    a_only, b_only = discordant_pairs(a, b)
    if strata is None and by_task:
        strata = [t for t, _, _ in pairs]
    interval = paired_bootstrap_interval(a, b, confidence, resamples, seed, strata=strata)
    return {"paired": n, "success_a": sum(a) / n, "success_b": sum(b) / n,
            "ci95_a": list(wilson_interval(sum(a), n, confidence)), "ci95_b": list(wilson_interval(sum(b), n, confidence)),
            "difference": (sum(b) - sum(a)) / n, "difference_ci95": list(interval),
            "a_only": a_only, "b_only": b_only, "mcnemar_p": mcnemar_exact_p(a_only, b_only)}


def compare_episodes(a: Sequence[dict], b: Sequence[dict], confidence: float = CONFIDENCE, resamples: int = 10_000,
                     seed: int = 0, pooled: Sequence[tuple[Sequence[dict], Sequence[dict]]] = ()) -> dict[str, Any]:
    """Two reports' episodes compared overall and per task (:func:`pair_episodes`, :func:`paired_stats`);
    ``pooled``: more ``(a, b)`` episode lists (e.g. other training seeds) whose pairs join in."""
    pairs, strata, unpaired = [], [], collections.Counter()
    for k, (episodes_a, episodes_b) in enumerate([(a, b), *pooled]):
        names = ("A", "B") if k == 0 else (f"A{k + 1}", f"B{k + 1}")
        paired = pair_episodes(episodes_a, episodes_b, names)
        pairs += paired["pairs"]
        strata += [(k, task) if pooled else task for task, _, _ in paired["pairs"]]  # one pair: tasks, as always
        unpaired.update(paired["unpaired"])
    by_task = collections.defaultdict(list)
    task_strata = collections.defaultdict(list)
    for pair, stratum in zip(pairs, strata):
        by_task[pair[0]].append(pair)
        task_strata[pair[0]].append(stratum)
    tasks = {name: paired_stats(rows, confidence, resamples, seed, strata=task_strata[name] if pooled else None)
             for name, rows in sorted(by_task.items()) if name}
    return {"overall": paired_stats(pairs, confidence, resamples, seed, strata=strata), "tasks": tasks,
            "unpaired": dict(unpaired), "report_pairs": 1 + len(pooled),
            "episodes_a": len(a) + sum(len(x) for x, _ in pooled), "episodes_b": len(b) + sum(len(y) for _, y in pooled)}


def _ood_rows(report: dict) -> list[tuple[str, str]]:
    """``(directory, category)`` of an OOD report's rows, IND first."""
    rows = [("ind", "ind")] + [(r["directory"], r["category"]) for r in report["rows"]]
    rows += [(r["directory"], r["category"]) for r in report.get("libero_pro", {}).get("rows", [])]
    return rows


def compare_ood(file_a: pathlib.Path, a: dict, file_b: pathlib.Path, b: dict, confidence: float = CONFIDENCE,
                resamples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Two OOD reports compared row by row on the episodes of each row's ``eval.json``."""
    rows_b = dict(_ood_rows(b))
    rows, skipped = {}, {}
    for directory, category in _ood_rows(a):
        if directory not in rows_b:
            skipped[directory] = "only in A"
            continue
        files = [file_a.parent / directory / "eval.json", file_b.parent / directory / "eval.json"]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            skipped[directory] = f"no {', '.join(missing)}"
            continue
        episodes = [json.loads(f.read_text()).get("episodes", []) for f in files]
        try:
            rows[directory] = {"category": category, **compare_episodes(*episodes, confidence, resamples, seed)}
        except CompareError as exc:
            skipped[directory] = str(exc)
    skipped.update({d: "only in B" for d in rows_b if d not in dict(_ood_rows(a))})
    if not rows:
        reasons = "; ".join(f"{d}: {why}" for d, why in skipped.items()) or "neither has a row"
        raise CompareError(f"the OOD reports have no row with episodes in common: {reasons}")
    return {"rows": rows, "skipped": skipped}


def _line(label: str, s: dict, extra: str = "") -> str:
    low, high = s["difference_ci95"]
    difference = f"{s['difference']:+.3f} [{low:+.3f}, {high:+.3f}]"
    return (f"| {label} |{extra} {s['paired']} | {s['success_a']:.3f} | {s['success_b']:.3f} | {difference} | "
            f"{s['a_only']} | {s['b_only']} | {s['mcnemar_p']:.3g} |")


def _unpaired_text(unpaired: dict) -> str:
    parts = [f"{unpaired['only_a']} only in A", f"{unpaired['only_b']} only in B"]
    if unpaired["task_mismatch"]:
        parts.append(f"{unpaired['task_mismatch']} with the same spec but another task")
    if unpaired["no_success"]:
        parts.append(f"{unpaired['no_success']} without a success flag")
    return ", ".join(parts)


HEADER = "paired | success A | success B | B - A [95 % CI] | only A solved | only B solved | McNemar p |"


def comparison_markdown(result: dict) -> str:
    """The printed comparison: one table per report pair (eval) or one line per row (OOD)."""
    lines = [f"A: {result['a']}", f"B: {result['b']}"]
    lines += [f"pooled with A{k}: {a}, B{k}: {b}" for k, (a, b) in enumerate(result.get("pooled", []), 2)] + [""]
    if "rows" not in result:
        lines += [f"Paired {result['overall']['paired']} episodes on (task, init state, seed) of A's "
                  f"{result['episodes_a']} and B's {result['episodes_b']}; unpaired: {_unpaired_text(result['unpaired'])}.",
                  "", "| task | " + HEADER, "|---|" + "---:|" * 7]
        lines += [_line(name, s) for name, s in result["tasks"].items()]
        lines.append(_line("**all**", result["overall"]))
    else:
        lines += ["Each row pairs the episodes both reports played in it (tasks as strata of the bootstrap).", "",
                  "| row | category | " + HEADER, "|---|---|" + "---:|" * 7]
        lines += [_line(directory, row["overall"], f" {row['category']} |") for directory, row in result["rows"].items()]
        unpaired = [f"{d}: {_unpaired_text(row['unpaired'])}" for d, row in result["rows"].items()
                    if any(row["unpaired"].values())]
        if unpaired:
            lines += ["", "Unpaired episodes: " + "; ".join(unpaired) + "."]
        if result["skipped"]:
            lines += ["", "Rows not compared: " + "; ".join(f"{d} ({why})" for d, why in result["skipped"].items()) + "."]
    lines += ["", f"B - A: difference of the success rates on the paired episodes, with its paired bootstrap "
              f"{100 * result['confidence']:g} % interval ({result['resamples']} resamples, seed {result['bootstrap_seed']}). "
              "McNemar p: exact two-sided test on the episodes only one of them solved (per-task p-values are not "
              "corrected for testing several tasks). docs/evaluation.md#statistics"]
    return "\n".join(lines) + "\n"


def compare_reports(path_a: str, path_b: str, confidence: float = CONFIDENCE, resamples: int = 10_000,
                    seed: int = 0, pool: Sequence[Sequence[str]] = ()) -> dict[str, Any]:
    """Compare two reports (files or directories), pooling the report pairs of ``pool`` in: the result
    :func:`comparison_markdown` prints."""
    (kind_a, file_a, a), (kind_b, file_b, b) = load_report(path_a), load_report(path_b)
    if kind_a != kind_b:
        raise CompareError(f"{file_a} is an {kind_a}.json and {file_b} an {kind_b}.json: compare two eval.json or "
                           "two ood.json (a row of an OOD report is <dir>/<row>/eval.json)")
    head = {"a": str(file_a), "b": str(file_b), "kind": kind_a, "confidence": confidence, "resamples": resamples,
            "bootstrap_seed": seed}
    if kind_a == "ood":
        if pool:
            raise CompareError("--pool pools eval.json reports; compare OOD reports one pair at a time")
        return {**head, **compare_ood(file_a, a, file_b, b, confidence, resamples, seed)}
    pooled, files = [], []
    for more_a, more_b in pool:
        (kind_c, file_c, c), (kind_d, file_d, d) = load_report(more_a), load_report(more_b)
        if "ood" in (kind_c, kind_d):
            raise CompareError(f"--pool {more_a} {more_b}: pool eval.json reports (or their directories)")
        pooled.append((c["episodes"], d["episodes"]))
        files.append([str(file_c), str(file_d)])
    result = compare_episodes(a["episodes"], b["episodes"], confidence, resamples, seed, pooled)
    return {**head, **({"pooled": files} if files else {}), **result}


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``vla-gym compare`` flags (the parser gets the description and examples)."""
    parser_with_examples(None, "Compare two evaluation reports of the same episodes, episode by episode: success "
                         "of each, the paired difference with a bootstrap 95 % interval and the exact McNemar "
                         "p-value, per task and overall (OOD reports: per row). See docs/evaluation.md.",
                         EXAMPLES, parser=parser)
    parser.add_argument("a", metavar="A", help="eval.json or ood.json (or its report directory): the baseline")
    parser.add_argument("b", metavar="B", help="the report compared with A (B - A is reported)")
    parser.add_argument("--pool", nargs=2, action="append", default=[], metavar=("A2", "B2"),
                        help="another pair of eval reports (e.g. another training seed) whose episodes join the "
                             "comparison (repeatable)")
    parser.add_argument("--json", metavar="OUT", help="also write the comparison as JSON to this file")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    parser.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap draws (default 0)")
    parser.add_argument("--confidence", type=float, default=CONFIDENCE, help="interval level (default 0.95)")
    return parser


def main(args: argparse.Namespace) -> int:
    """Run ``vla-gym compare`` with parsed ``args``: print the comparison, write ``--json``; 2 on an error."""
    try:
        if not 0 < args.confidence < 1 or args.resamples < 1:
            raise CompareError(f"--confidence {args.confidence} must lie in (0, 1) and --resamples "
                               f"{args.resamples} be >= 1")
        result = compare_reports(args.a, args.b, args.confidence, args.resamples, args.bootstrap_seed, args.pool)
    except CompareError as exc:
        print(f"vla-gym compare: {exc}", file=sys.stderr)
        return 2
    print(comparison_markdown(result), end="")
    if args.json:
        out = pathlib.Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"comparison: {out}")
    return 0
