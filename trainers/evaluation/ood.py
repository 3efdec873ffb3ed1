"""The out-of-distribution report of ``trainers/eval.py --ood``: one checkpoint in distribution and under each
seeded perturbation, as the IND / Vision / Semantic / Execution / OOD-average table.

    python trainers/eval.py --checkpoint CKPT --ood                               # every perturbation, defaults
    python trainers/eval.py --checkpoint CKPT --ood lighting=0.8,paraphrase,action_noise=0.2 --episodes-per-task 5

Every row plays the same episodes (same seeds, tasks and initial states) as the in-distribution row, with one
:class:`vla_gym.wrappers.Perturb` put innermost in the env's wrapper list; the perturbation is drawn from each
episode's seed, so a row is repeatable. A category's score is the mean success of its rows, the OOD average
the mean of the categories evaluated. Every rate carries its episode count and 95 % Wilson interval
(:mod:`vla_gym.trainers.evaluation.stats`): a row's over its episodes, a category mean's and the OOD average's
over Kish's effective number of episodes of the rows they average (:func:`~vla_gym.trainers.evaluation.stats.mean_rate_interval`;
the rows replay the same episodes, so these two are, if anything, a little narrow). Vision rows are left out for a policy that sees no images (ManiSkill's
``obs_mode=state``). Writes ``ood.md`` and ``ood.json`` to the report directory and each row's own
``eval.md``/``eval.json``/``videos/`` under ``<row>/`` (``ind/``, ``lighting/``, ...).

``--libero-pro`` (LIBERO suites) adds a row per LIBERO-PRO suite of the checkpoint's suite
(:func:`vla_gym.tasks.libero_pro.variants`: ``swap``, ``lan``, ``object``, ``with_mug``, ...). Those suites have their own
tasks and initial states, so their rows are not the same episodes: they get a table and category means of
their own, apart from the seeded perturbations'.

``--libero-plus [K]`` (LIBERO suites) adds a row per LIBERO-Plus dimension of the checkpoint's suite (camera,
robot, language, light, background, noise, layout: :mod:`vla_gym.tasks.libero_plus`). A dimension has 62-449
variants buildable offline per suite, too many for a CPU, so a row plays a seeded sample of K of them
(:func:`vla_gym.tasks.libero_plus.sample`: spread over the base tasks; default :data:`LIBERO_PLUS_SAMPLE`), one
episode each from initial state 0, LIBERO-Plus's protocol (one trial per variant). Dimensions with no variant
buildable with the assets here are named in the report, not played. Their table is a third one.

A killed report resumes: each finished row leaves ``<row>/ood_row.json`` (its settings and summary), and the same
command again keeps those rows and plays the rest (another checkpoint, episode selection or strength plays the
row anew).
"""
from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

from vla_gym.ood.perturbations import CATEGORIES, PERTURBATIONS, make_perturbation
from vla_gym.tasks import libero_plus, libero_pro
from vla_gym.trainers.evaluation.stats import interval_text, mean_rate_interval, success_counts, wilson_interval
from vla_gym.trainers.runtime.checkpoint import atomic_write_text
from vla_gym.trainers.runtime.distributed import Distributed

#: column title of each category in the table
COLUMNS = {"vision": "Vision", "semantic": "Semantic", "execution": "Execution"}
#: variants a LIBERO-Plus row plays by default (one episode each): 7 rows x 20 episodes, each a scene build
LIBERO_PLUS_SAMPLE = 20


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the OOD report: a perturbation at a strength (``kind`` None: in distribution)."""

    kind: str | None = None
    strength: float | None = None
    #: a LIBERO-PRO perturbation of the suite (``swap``, ``lan``, ...) instead of a seeded one
    libero_pro: str | None = None
    #: a LIBERO-Plus dimension of the suite (``plus_camera``, ...) and the task ids (variants) the row plays
    libero_plus: str | None = None
    plus_tasks: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        """The row's report directory: ``ind``, ``lighting``, ``lighting-0.8`` (an explicit strength),
        ``libero_pro-swap``, ``libero_plus-camera``."""
        if self.libero_pro:
            return f"libero_pro-{self.libero_pro}"
        if self.libero_plus:
            return f"libero_plus-{self.libero_plus.removeprefix(libero_plus.PREFIX)}"
        if self.kind is None:
            return "ind"
        return self.kind if self.strength is None else f"{self.kind}-{self.strength:g}"

    @property
    def category(self) -> str:
        if self.libero_pro:
            return libero_pro.category(self.libero_pro)
        if self.libero_plus:
            return libero_plus.category(self.libero_plus)
        return PERTURBATIONS[self.kind].category if self.kind else "ind"

    def env_config(self, env_cfg):
        """``env_cfg`` with this row's perturbation: Perturb innermost, or the LIBERO-PRO suite's / LIBERO-Plus
        dimension's ``perturbation=``."""
        if self.libero_pro or self.libero_plus:
            return dataclasses.replace(env_cfg, kwargs={**env_cfg.kwargs,
                                                        "perturbation": self.libero_pro or self.libero_plus})
        if self.kind:
            return dataclasses.replace(env_cfg, wrappers=[self.wrapper()] + list(env_cfg.wrappers))
        return env_cfg

    def wrapper(self) -> dict:
        return {"name": "Perturb", "kwargs": {"kind": self.kind, "strength": self.strength}}

    def selection(self) -> dict:
        """The episodes a row plays when not the in-distribution ones (the evaluate callable's keywords): a
        LIBERO-Plus row its sampled variants, one episode each from initial state 0 (LIBERO-Plus's protocol)."""
        if self.libero_plus:
            return {"tasks": list(self.plus_tasks), "episodes_per_task": 1, "first_init_state": 0}
        return {}


def parse_rows(text: str) -> list[Row]:
    """``all`` or ``kind[=strength],...`` -> the perturbed rows (strength None: the perturbation's default).

        >>> [(r.kind, r.strength) for r in parse_rows("lighting=0.8,paraphrase")]
        [('lighting', 0.8), ('paraphrase', None)]
    """
    if text.strip() == "all":
        return [Row(kind) for names in CATEGORIES.values() for kind in names]
    rows = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, _, value = item.partition("=")
        try:
            strength = float(value) if value else None
        except ValueError:
            raise ValueError(f"{item!r}: the strength after '=' must be a number, e.g. lighting=0.5") from None
        make_perturbation(kind, strength)  # an unknown kind or a bad strength fails here, naming the choices
        rows.append(Row(kind, strength))
    if not rows:
        raise ValueError("name at least one perturbation (or 'all')")
    names = [row.name for row in rows]
    if len(set(names)) < len(names):
        raise ValueError(f"a perturbation is named twice at the same strength: {', '.join(names)}")
    return rows


def libero_pro_rows(env_id: str) -> list[Row]:
    """A row per LIBERO-PRO suite of ``env_id``'s LIBERO suite that tests vision, semantics or execution."""
    try:
        found = libero_pro.variants(env_id)
    except ValueError as exc:
        raise ValueError(f"--libero-pro needs a checkpoint trained on a LIBERO suite: {exc}") from None
    return [Row(libero_pro=v.perturbation) for v in found if v.category in CATEGORIES]


def libero_plus_rows(env_id: str, count: int = LIBERO_PLUS_SAMPLE, seed: int = 0) -> list[Row]:
    """A row per LIBERO-Plus dimension of ``env_id``'s suite with a variant buildable here, each playing a sample
    of ``count`` variants drawn with ``seed`` (:func:`vla_gym.tasks.libero_plus.sample`)."""
    if count < 1:
        raise ValueError(f"--libero-plus K: K variants per dimension must be >= 1, got {count}")
    try:
        found = libero_plus.dimensions(env_id)
    except libero_plus.UnknownPerturbationError as exc:
        raise ValueError(f"--libero-plus needs a checkpoint trained on a LIBERO suite LIBERO-Plus perturbs: {exc}") \
            from None
    return [Row(libero_plus=d.perturbation,
                plus_tasks=tuple(libero_plus.sample(d.base_suite, d.perturbation, count, seed)))
            for d in found if d.num_available]


def observes_images(env_kwargs: dict) -> bool:
    """Whether the policy sees camera images (ManiSkill's ``obs_mode=state`` policies do not)."""
    return env_kwargs.get("obs_mode", "images") != "state"


#: evaluate(env_config, directory, header[, **selection]) -> the summary of
#: :func:`~vla_gym.trainers.evaluation.report.summarize` (None off rank 0); ``selection`` (:meth:`Row.selection`,
#: LIBERO-Plus rows only) overrides the episodes: ``tasks``, ``episodes_per_task``, ``first_init_state``
Evaluate = Callable[..., "dict | None"]


#: written beside a finished row's ``eval.json``: the settings it was played with and its summary
ROW_MARKER = "ood_row.json"


def run_ood(evaluate: Evaluate, env_cfg, rows: Sequence[Row], out: pathlib.Path, title: str,
            sees_images: bool, settings: dict | None = None, dist: Distributed | None = None,
            receipt: dict | None = None) -> dict | None:
    """Evaluate in distribution and each row, then write ``ood.md`` / ``ood.json``; returns the report (rank 0).

    A row finished by an earlier run into the same ``out`` with the same ``settings`` (checkpoint, episodes,
    seed, ...: whatever decides its episodes) and the same env config is kept, not played again, so a killed
    report resumes at the row it was in. ``settings=None`` plays every row. Under torchrun (``dist``) the main
    rank, which writes the reports, decides for every rank, so ranks on nodes that share no filesystem still play
    the same rows together.
    """
    main = dist is None or dist.is_main
    skipped = [row for row in rows if row.category == "vision" and not sees_images]
    rows = [row for row in rows if row not in skipped]
    summaries = {}
    for row in [Row()] + list(rows):
        label = f"{row.name} (strength {_strength(row)})" if row.kind else \
            f"LIBERO-PRO {row.libero_pro}" if row.libero_pro else \
            f"LIBERO-Plus {row.libero_plus} ({len(row.plus_tasks)} variants)" if row.libero_plus else "in distribution"
        row_env = row.env_config(env_cfg)
        selection = row.selection()
        key = None if settings is None else _row_key(settings, row_env, selection)
        summary = _finished_row(out / row.name, key) if main else None
        kept = summary is not None if dist is None else dist.broadcast_object(summary is not None)
        if kept:  # the main rank's decision, on every rank
            summaries[row] = summary
            if main:
                print(f"{row.name}: kept from an earlier run ({out / row.name / ROW_MARKER})")
            continue
        summary = evaluate(row_env, out / row.name, f"# {title}: {label}", **selection)
        if main and key is not None:
            (out / row.name).mkdir(parents=True, exist_ok=True)
            atomic_write_text(out / row.name / ROW_MARKER, json.dumps({"settings": key, "summary": summary}, indent=2))
        summaries[row] = summary
    if not main:
        return None
    report = ood_report(summaries, title, [row.kind or row.libero_pro or row.libero_plus for row in skipped])
    if receipt is not None:  # the software and checkpoint; each row's eval.json has its env and episodes
        report = {"receipt": receipt, **report}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "ood.json", json.dumps(report, indent=2))
    atomic_write_text(out / "ood.md", ood_markdown(report))
    return report


def _row_key(settings: dict, row_env, selection: dict | None = None) -> Any:
    """What decides a row's episodes, as plain JSON (compared after a round trip through JSON)."""
    env = dataclasses.asdict(row_env) if dataclasses.is_dataclass(row_env) else row_env
    key = {"settings": settings, "env": env, **({"episodes": selection} if selection else {})}
    return json.loads(json.dumps(key, sort_keys=True, default=str))


def _finished_row(directory: pathlib.Path, key: Any) -> dict | None:
    """The summary of a row an earlier run finished with the same key (None: play it)."""
    marker = directory / ROW_MARKER
    if key is None or not marker.is_file():
        return None
    try:
        saved = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    return saved["summary"] if saved.get("settings") == key else None


def _strength(row: Row) -> float | None:
    if row.kind is None:
        return None
    return PERTURBATIONS[row.kind].default_strength if row.strength is None else row.strength


def _category_means(rows: list[dict]) -> dict[str, float]:
    means = {}
    for category in CATEGORIES:
        rates = [r["success_rate"] for r in rows if r["category"] == category and not math.isnan(r["success_rate"])]
        if rates:
            means[category] = sum(rates) / len(rates)
    return means


def _ood_average(categories: dict[str, float]) -> float:
    """The OOD average: the mean of the category means."""
    return sum(categories.values()) / len(categories) if categories else math.nan


def _interval(stats: dict) -> list[float] | None:
    """The 95 % Wilson interval of a summary entry or a row (None: no success reported)."""
    counts = success_counts(stats)
    return None if counts is None else list(wilson_interval(*counts))


def _rate_parts(rows: list[dict]) -> list[tuple[float, float]]:
    """``(rate, episodes that reported success)`` of rows with a rate (the rows the means average)."""
    parts = []
    for row in rows:
        counts = success_counts(row)
        if counts is not None:
            parts.append((row["success_rate"], counts[1]))
    return parts


def _mean_intervals(rows: list[dict]) -> dict:
    """The intervals and episode counts of the category means and the OOD average of ``rows`` (report keys)."""
    by_category = {c: [r for r in rows if r["category"] == c] for c in CATEGORIES}
    parts = {c: _rate_parts(found) for c, found in by_category.items()}
    parts = {c: found for c, found in parts.items() if found}
    intervals = {c: mean_rate_interval(found) for c, found in parts.items()}
    # the OOD average weighs each category equally and each row equally within its category
    weights = [1.0 / len(found) for found in parts.values() for _ in found]
    overall = mean_rate_interval([part for found in parts.values() for part in found], weights)
    return {"categories_ci95": {c: list(i) for c, i in intervals.items()},
            "categories_episodes": {c: int(sum(n for _, n in found)) for c, found in parts.items()},
            "ood_average_ci95": None if overall is None else list(overall),
            "ood_episodes": int(sum(n for found in parts.values() for _, n in found))}


def ood_report(summaries: dict[Row, dict], title: str, skipped: Sequence[str] = ()) -> dict:
    """The table's numbers: IND, per-category means, OOD average and one entry per perturbation."""
    ind = summaries[Row()]["overall"]["success_rate"]
    def entry(row: Row, summary: dict) -> dict:
        overall = summary["overall"]
        counts = success_counts(overall)
        return {"perturbation": row.kind or row.libero_pro or row.libero_plus, "directory": row.name,
                "category": row.category,
                "strength": _strength(row), "episodes": overall["episodes"],
                "success_rate": overall["success_rate"], "mean_length": overall["mean_length"],
                "successes": None if counts is None else counts[0],
                "success_episodes": None if counts is None else counts[1], "ci95": _interval(overall)}

    rows = [entry(row, summary) for row, summary in summaries.items() if row.kind]
    pro_rows = [entry(row, summary) for row, summary in summaries.items() if row.libero_pro]
    categories = _category_means(rows)
    report = {"title": title, "ind": ind, "ind_episodes": summaries[Row()]["overall"]["episodes"],
              "ind_ci95": _interval(summaries[Row()]["overall"]),
              "categories": categories, "ood_average": _ood_average(categories), "rows": rows,
              "skipped": list(skipped), **_mean_intervals(rows)}
    if pro_rows:
        pro_categories = _category_means(pro_rows)
        report["libero_pro"] = {"categories": pro_categories, "rows": pro_rows,
                                "ood_average": _ood_average(pro_categories), **_mean_intervals(pro_rows)}
    plus_rows = [entry(row, summary) for row, summary in summaries.items() if row.libero_plus]
    if plus_rows:
        plus_categories = _category_means(plus_rows)
        played = {row["perturbation"] for row in plus_rows}
        report["libero_plus"] = {"categories": plus_categories, "rows": plus_rows,
                                 "ood_average": _ood_average(plus_categories), **_mean_intervals(plus_rows),
                                 "not_evaluated": [d for d in libero_plus.DIMENSIONS if d not in played]}
    return report


def percent(rate: float | None) -> str:
    """A success rate as a percentage with one decimal ("n/a" when unknown)."""
    return "n/a" if rate is None or math.isnan(rate) else f"{100 * rate:.1f}"


def ood_markdown(report: dict) -> str:
    """The seeds' table (success in %) and the per-perturbation rows."""
    lines = [f"# {report['title']}", "", "Success rate (%) in distribution (IND) and per OOD category "
             "(mean over its perturbations); OOD avg: mean over the categories. Each with its 95 % Wilson interval "
             "and n, the episodes it is measured on (a mean's interval uses the effective n of its rows: "
             "docs/evaluation.md#statistics).", ""]
    lines += _summary_table(report, report)
    lines += ["", "| perturbation | category | strength | episodes | success (%) | 95 % CI (%) | change vs IND (points) "
              "| mean length |", "|---|---|---:|---:|---:|---:|---:|---:|",
              f"| none (IND) | - | - | {report['ind_episodes']} | {percent(report['ind'])} | "
              f"{interval_text(_ind_interval(report), percent=True)} | - | - |"]
    lines += [_row_line(row, report["ind"]) for row in report["rows"]]
    if report["skipped"]:
        lines += ["", f"Not evaluated (the policy sees no images): {', '.join(report['skipped'])}."]
    pro = report.get("libero_pro")
    if pro:
        lines += ["", "## LIBERO-PRO suites", "", "Their own tasks and initial states (not the IND episodes); "
                  "category means over these suites only.", ""]
        lines += _summary_table(report, pro)
        lines += ["", "| LIBERO-PRO suite | category | strength | episodes | success (%) | 95 % CI (%) | "
                  "change vs IND (points) | mean length |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        lines += [_row_line(row, report["ind"]) for row in pro["rows"]]
    plus = report.get("libero_plus")
    if plus:
        lines += ["", "## LIBERO-Plus dimensions", "", "A seeded sample of each dimension's variants, one episode "
                  "each from initial state 0 (LIBERO-Plus's protocol), not the IND episodes; category means over "
                  "these rows only (docs/libero_plus.md).", ""]
        lines += _summary_table(report, plus)
        lines += ["", "| LIBERO-Plus dimension | category | strength | episodes | success (%) | 95 % CI (%) | "
                  "change vs IND (points) | mean length |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        lines += [_row_line(row, report["ind"]) for row in plus["rows"]]
        if plus.get("not_evaluated"):
            lines += ["", f"Not evaluated (no variant buildable with the assets here): "
                      f"{', '.join(plus['not_evaluated'])}."]
    return "\n".join(lines) + "\n"


def summary_header() -> str:
    """The seeds' table's columns: ``IND | Vision | Semantic | Execution | OOD avg``."""
    return " | ".join(["IND"] + [COLUMNS[c] for c in CATEGORIES] + ["OOD avg"])


def summary_cells(report: dict, means: dict | None = None) -> list[str]:
    """The cells for :func:`summary_header`: ``report``'s IND and ``means``' category means and OOD average
    (default ``report``'s own; or its ``libero_pro`` / ``libero_plus`` part), each with its interval and episodes."""
    means = report if means is None else means
    if "ood_average_ci95" not in means:  # a report written before intervals were stored
        means = {**means, **_mean_intervals(means["rows"])}
    intervals, episodes = means["categories_ci95"], means["categories_episodes"]
    values = [_with_interval(report["ind"], _ind_interval(report), report["ind_episodes"])]
    values += [_with_interval(means["categories"].get(c), intervals.get(c), episodes.get(c)) for c in CATEGORIES]
    return values + [_with_interval(means["ood_average"], means["ood_average_ci95"], means["ood_episodes"])]


def ood_report_from_rows(report: dict, directories: Sequence[str]) -> dict:
    """``report`` with only the perturbation rows in ``directories`` (in that order), its category means and
    OOD average recomputed over them: comparable across reports that were cut short at different rows."""
    by_directory = {row["directory"]: row for row in report["rows"]}
    rows = [by_directory[d] for d in directories]
    categories = _category_means(rows)
    return {**report, "rows": rows, "categories": categories, "ood_average": _ood_average(categories),
            **_mean_intervals(rows)}


def _ind_interval(report: dict) -> list[float] | None:
    """IND's interval (reports written before intervals were stored: from its rate and episodes)."""
    if "ind_ci95" in report:
        return report["ind_ci95"]
    return _interval({"success_rate": report["ind"], "episodes": report["ind_episodes"]})


def _with_interval(rate: float | None, interval: list[float] | None, episodes: int | None) -> str:
    """``75.0 [40.9, 92.9] n=8`` (``n/a`` without a rate)."""
    if rate is None or math.isnan(rate) or interval is None:
        return percent(rate)
    return f"{percent(rate)} {interval_text(interval, percent=True)} n={episodes}"


def _summary_table(report: dict, means: dict) -> list[str]:
    """The seeds' table of ``report``'s IND and ``means``' categories and OOD average (``means`` is the report or
    its ``libero_pro`` / ``libero_plus`` part), each cell with its interval and episodes."""
    return ["| " + summary_header() + " |", "|" + "---:|" * 5, "| " + " | ".join(summary_cells(report, means)) + " |"]


def _row_line(row: dict, ind: float) -> str:
    change = "n/a" if math.isnan(row["success_rate"]) or math.isnan(ind) else \
        f"{100 * (row['success_rate'] - ind):+.1f}"
    strength = "-" if row["strength"] is None else f"{row['strength']:g}"
    interval = row["ci95"] if "ci95" in row else _interval(row)
    return (f"| {row['perturbation']} | {row['category']} | {strength} | {row['episodes']} | "
            f"{percent(row['success_rate'])} | {interval_text(interval, percent=True)} | {change} | "
            f"{row['mean_length']:.1f} |")
