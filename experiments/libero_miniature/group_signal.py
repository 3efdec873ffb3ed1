"""How many GRPO groups would carry a signal: the mixed fraction of an evaluation played with ``--repeats G``.

    python trainers/eval.py --checkpoint <model> --init-states 20-23 --stochastic --temperature 1.6 \
        --repeats 8 --seed 0 --num-envs 2 --video-episodes 0 --out runs/signal/tokens_t16 env.vectorization=async
    python experiments/libero_miniature/group_signal.py runs/signal/tokens_t16        # prints the fractions
    python experiments/libero_miniature/group_signal.py runs/signal/tokens_t16 --json  # the same as one JSON line
    python experiments/libero_miniature/group_signal.py runs/signal/tokens_t16 --head tokens \
        --out experiments/libero_miniature/results_signal.json   # its row (same checkpoint and sampling: replaced)
    python experiments/libero_miniature/group_signal.py --readme [--check]   # results_signal.json -> README.md's table

A group is the G episodes of one start (task, init state, seed): **mixed** when 0 < successes < G (GRPO's advantages are nonzero
only there), all-success or all-fail otherwise. Issue 65's question before training: does the token head sampled at
temperature 1.6 give more mixed groups than the Gaussian head at its std, from the same SFT budget?

    >>> groups([{"spec": {"task_id": 0, "init_state_id": 1}, "success": s} for s in (True, False, True)])
    {(0, 1, None): [True, False, True]}
    >>> signal({(0, 1): [True, False], (0, 2): [True, True], (1, 1): [False, False], (1, 2): [False, True]})
    {'groups': 4, 'group_size': 2, 'mixed': 0.5, 'all_success': 0.25, 'all_fail': 0.25, 'success': 0.5}
"""
from __future__ import annotations

import collections
import json
import pathlib
import sys

import torch

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.algorithms.group_sampling import group_outcomes
from vla_gym.trainers.runtime.results import git_commit, render_block, write_results

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results_signal.json"


def groups(episodes: list[dict]) -> dict[tuple, list[bool]]:
    """Episodes of an eval.json by start (their spec: task, init state, seed), in play order."""
    by_start: dict[tuple, list[bool]] = collections.defaultdict(list)
    for episode in episodes:
        spec = episode["spec"]
        by_start[(spec.get("task_id"), spec.get("init_state_id"), spec.get("seed"))].append(bool(episode["success"]))
    return dict(by_start)


def signal(by_start: dict[tuple, list[bool]]) -> dict:
    """Fractions of mixed, all-success and all-fail groups, and the episodes' success rate."""
    sizes = {len(outcomes) for outcomes in by_start.values()}
    if len(sizes) != 1 or min(sizes) < 2:
        raise ValueError(f"groups of {sorted(sizes)} episodes: play every start the same number of times, at least "
                         "twice (trainers/eval.py --stochastic --repeats G)")
    size, count = sizes.pop(), len(by_start)
    scores = torch.tensor([float(won) for outcomes in by_start.values() for won in outcomes])
    outcome = group_outcomes(scores, size, success=True)  # GRPO's own rule for which groups carry a signal
    return {"groups": count, "group_size": size,
            "mixed": outcome.mixed.float().mean().item(),
            "all_success": outcome.all_success.float().mean().item(),
            "all_fail": outcome.all_fail.float().mean().item(),
            "success": scores.mean().item()}


def row(report: dict, head: str | None) -> dict:
    """The fractions of one report with what was played: the model, its head, how it sampled, which starts."""
    settings = report.get("settings", {})
    starts = sorted({(e["spec"].get("task_id"), e["spec"].get("init_state_id")) for e in report["episodes"]})
    return {"checkpoint": settings.get("checkpoint"), "head": head, "temperature": settings.get("temperature"),
            **({"top_k": settings["top_k"]} if settings.get("top_k") is not None else {}),
            "std": settings.get("std"), "init_states": sorted({i for _, i in starts if i is not None}),
            "tasks": len({t for t, _ in starts}), **signal(groups(report["episodes"])), "commit": git_commit()}


def record(path: pathlib.Path, new: dict) -> None:
    """Add ``new`` to the rows at ``path``, replacing a row of the same checkpoint, sampling and starts."""
    key = ("checkpoint", "temperature", "top_k", "std", "init_states", "group_size")
    rows = json.loads(path.read_text())["rows"] if path.is_file() else []
    rows = [r for r in rows if tuple(r.get(k) for k in key) != tuple(new.get(k) for k in key)] + [new]
    write_results(path, {"rows": rows})


def table(rows: list[dict]) -> str:
    """The rows as README.md's table (block ``signal``).

        >>> table([{"checkpoint": "m.pt", "head": "tokens", "temperature": 1.6, "std": None, "init_states": [20, 21],
        ...         "tasks": 10, "groups": 20, "group_size": 8, "mixed": 0.875, "all_success": 0.0, "all_fail": 0.125,
        ...         "success": 0.31875, "commit": "69f2d71"}]).splitlines()[2]
        '| tokens | temperature 1.6 | 20 x 8 (init states 20-21, 10 tasks) | 31.9 % | **87.5 %** | 0.0 % | 12.5 % | m.pt | 69f2d71 |'
        >>> table([{"checkpoint": "m.pt", "head": "tokens", "temperature": 1.0, "top_k": 5, "std": None,
        ...         "init_states": [20], "tasks": 10, "groups": 10, "group_size": 8, "mixed": 0.5, "all_success": 0.1,
        ...         "all_fail": 0.4, "success": 0.3, "commit": "abc1234"}]).splitlines()[2].split(" | ")[1]
        'temperature 1.0, top 5'
    """
    lines = ["| head | sampled at | groups x G (starts) | episode success | mixed groups | all success | all fail | "
             "model | commit |", "|---|---|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        how = f"temperature {r['temperature']}" if r.get("temperature") is not None else f"std {r['std']}"
        how += f", top {r['top_k']}" if r.get("top_k") is not None else ""  # the row of screen s4's removed top_k
        starts = f"init states {min(r['init_states'])}-{max(r['init_states'])}, {r['tasks']} tasks"
        lines.append(f"| {r['head']} | {how} | {r['groups']} x {r['group_size']} ({starts}) | {r['success']:.1%} | "
                     f"**{r['mixed']:.1%}** | {r['all_success']:.1%} | {r['all_fail']:.1%} | "
                     f"{pathlib.Path(r['checkpoint']).name} | {r['commit']} |".replace("%", " %"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("report", nargs="?", help="an evaluation's folder (its eval.json) or the eval.json itself")
    parser.add_argument("--readme", action="store_true", help="render results_signal.json into README.md")
    parser.add_argument("--check", action="store_true", help="with --readme: only compare (exit 1 when it differs)")
    parser.add_argument("--json", action="store_true", help="print the fractions as one JSON line")
    parser.add_argument("--head", choices=("tokens", "gaussian"), help="the model's action head, for the row")
    parser.add_argument("--out", help="a results JSON to add the row to")
    args = parser.parse_args(argv)
    if args.readme:
        same = render_block(HERE / "README.md", "signal", table(json.loads(RESULTS.read_text())["rows"]), args.check)
        return 0 if same or not args.check else 1
    if args.report is None:
        parser.error("give an evaluation's folder, or --readme")
    path = pathlib.Path(args.report)
    result = row(json.loads((path / "eval.json" if path.is_dir() else path).read_text()), args.head)
    if args.out:
        record(pathlib.Path(args.out), result)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['groups']} groups of {result['group_size']}: mixed {result['mixed']:.1%}, all-success "
              f"{result['all_success']:.1%}, all-fail {result['all_fail']:.1%} (episode success {result['success']:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
