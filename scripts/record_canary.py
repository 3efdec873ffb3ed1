"""Record the physics canary's fingerprints (vla_gym/canary/) under the simulators installed here.

    python scripts/record_canary.py                            # every suite -> assets/canary/fingerprints.{json,npz}
    python scripts/record_canary.py --suite object maniskill --out runs/canary/fingerprints.json
    python scripts/record_canary.py --suite maniskill --merge  # re-record one suite, keep the others' cases
    python scripts/record_canary.py --sensitivity 1e-6         # drift of the recorded cases when actions move 1e-6
    python scripts/record_canary.py --rebase                   # same cases and actions, replayed under this MuJoCo
    python scripts/record_canary.py --drop 90-t79-i4-s4 --why "7.2 mm under +-1e-6 on MuJoCo 3.3.0"   # leave one out

Record under the reference versions (docs/evaluation.md names them), then check that a fresh process replays
them exactly (`vla-gym canary`: every drift 0.00 mm) before committing both files. ``--sensitivity EPS``
records nothing: it replays the fingerprints with every action moved by +-EPS and prints the drift, which is
how far a tiny numerical difference grows; the tolerance must stay above it.
"""
from __future__ import annotations

import sys

from vla_gym import canary
from vla_gym.runtime.cli_args import script_parser


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--suite", nargs="+", default=list(canary.SUITES), metavar="NAMES",
                        help=f"suites to record (default all: {' '.join(canary.SUITES)})")
    parser.add_argument("--out", default=str(canary.default_path()), help="fingerprints JSON (.npz beside it)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the other suites' cases already in --out (same versions and settings only)")
    parser.add_argument("--rebase", action="store_true",
                        help="keep --out's cases and actions, record their positions, successes and reset frames again "
                             "under the versions installed here (a new reference MuJoCo)")
    parser.add_argument("--drop", nargs="+", metavar="KEY", help="move these cases of --out to left_out (with --why)")
    parser.add_argument("--why", default="left out by hand", help="the reason --drop records")
    parser.add_argument("--sensitivity", type=float, metavar="EPS",
                        help="replay --out's fingerprints with actions moved by +-EPS instead of recording")
    args = parser.parse_args(argv)
    try:
        suites = canary.parse_suites(args.suite)
        if args.drop:
            meta = canary.drop_cases(args.out, args.drop, args.why)
        elif args.rebase:
            meta = canary.rebase(args.out)
        elif args.sensitivity is None:
            meta = canary.record(args.out, suites, merge=args.merge)
    except canary.CanaryError as error:
        print(f"record_canary: {error}", file=sys.stderr)
        return 2
    if args.sensitivity is None:
        solved = sum(case["success"] for case in meta["cases"])
        print(f"{len(meta['cases'])} cases ({solved} solved by the expert) -> {args.out} (+ .npz), "
              f"MuJoCo {meta['reference']['mujoco']}")
        return 0
    meta, arrays = canary.load(args.out)
    moved = canary.perturb_actions(arrays, args.sensitivity, seed=canary.SCREEN_REPEATS)  # a draw the screen never used
    results = canary.check(meta, moved, canary.select(meta, suites), tolerance=float("inf"),
                           on_result=lambda result: print(canary.format_result(result), flush=True))
    worst = max(max(r.robot_drift_m, r.object_drift_m) for r in results if r.status != "SKIP")
    print(f"actions moved by +-{args.sensitivity:g}: largest drift {worst * 1000:.3f} mm over {len(results)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
