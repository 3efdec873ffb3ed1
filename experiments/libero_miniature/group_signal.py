"""How many GRPO groups would carry a signal: the mixed fraction of an evaluation played with ``--repeats G``.

    python trainers/eval.py --checkpoint <model> --init-states 0,10,20,30 --stochastic --temperature 1.6 \
        --repeats 8 --seed 0 --num-envs 2 --video-episodes 0 --out runs/signal/tokens_t16 env.vectorization=async
    python experiments/libero_miniature/group_signal.py runs/signal/tokens_t16        # prints the fractions
    python experiments/libero_miniature/group_signal.py runs/signal/tokens_t16 --json  # the same as one JSON line

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

from vla_gym.runtime.cli_args import script_parser


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
    wins = [sum(outcomes) for outcomes in by_start.values()]
    size, count = sizes.pop(), len(wins)
    return {"groups": count, "group_size": size,
            "mixed": sum(0 < w < size for w in wins) / count,
            "all_success": sum(w == size for w in wins) / count,
            "all_fail": sum(w == 0 for w in wins) / count,
            "success": sum(wins) / (count * size)}


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("report", help="an evaluation's folder (its eval.json) or the eval.json itself")
    parser.add_argument("--json", action="store_true", help="print the fractions as one JSON line")
    args = parser.parse_args(argv)
    path = pathlib.Path(args.report)
    report = json.loads((path / "eval.json" if path.is_dir() else path).read_text())
    result = signal(groups(report["episodes"]))
    settings = report.get("settings", {})
    result["temperature"], result["std"] = settings.get("temperature"), settings.get("std")
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['groups']} groups of {result['group_size']}: mixed {result['mixed']:.1%}, all-success "
              f"{result['all_success']:.1%}, all-fail {result['all_fail']:.1%} (episode success {result['success']:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
