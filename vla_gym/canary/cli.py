"""The ``vla-gym canary`` command (wired into :mod:`vla_gym.cli`): replay the fingerprinted cases, print one line
per case and a summary, exit 1 on any ``DRIFT``, ``FLIP`` or ``RENDER`` and 2 when nothing could run.

    vla-gym canary --quick
    vla-gym canary --suite object,spatial --tolerance 0.01 --json runs/canary.json

    >>> import argparse
    >>> args = add_arguments(argparse.ArgumentParser()).parse_args(["--quick", "--suite", "object,90"])
    >>> args.quick, parse_suites(args.suite), args.tolerance
    (True, ['object', '90'], 0.005)
    >>> main(args)                      # doctest: +SKIP
    0
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict

from vla_gym.canary.fingerprints import RENDER_TOLERANCE, SUITES, TOLERANCE_M, CanaryError, load, select, versions
from vla_gym.canary.player import check
from vla_gym.canary.report import exit_code, format_result, summary
from vla_gym.runtime.cli_args import parser_with_examples

EXAMPLES = [
    "vla-gym canary --quick",
    "vla-gym canary",
    "vla-gym canary --suite object,spatial --tolerance 0.01",
    "vla-gym canary --quick --json runs/canary.json",
]


def parse_suites(tokens: Sequence[str] | None) -> list[str] | None:
    """``["object,spatial", "90"]`` -> ``["object", "spatial", "90"]``; unknown names raise CanaryError."""
    if tokens is None:
        return None
    names = [part.strip() for token in tokens for part in token.split(",") if part.strip()]
    unknown = [name for name in names if name not in SUITES]
    if unknown or not names:
        raise CanaryError(f"--suite {','.join(unknown) or '(empty)'}: choose from {','.join(SUITES)}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``vla-gym canary`` flags (the parser gets the description and examples)."""
    parser_with_examples(None, "Replay the scripted experts' recorded actions from fixed resets and compare robot "
                         "and object trajectories and success with the fingerprints recorded under a reference "
                         "MuJoCo: exit 1 when a success flips or a trajectory drifts beyond the tolerance. See "
                         "docs/evaluation.md.", EXAMPLES, parser=parser)
    parser.add_argument("--quick", action="store_true",
                        help="one case per LIBERO suite and one ManiSkill seed (under a minute)")
    parser.add_argument("--suite", nargs="+", metavar="NAMES",
                        help=f"only these suites, comma separated (default all: {','.join(SUITES)})")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE_M, metavar="M",
                        help=f"largest drift (metres) of the robot or an object before DRIFT (default {TOLERANCE_M})")
    parser.add_argument("--render-tolerance", type=float, default=RENDER_TOLERANCE, metavar="LEVELS",
                        help="largest mean change of the pooled reset frames (of 255) before RENDER "
                             f"(default {RENDER_TOLERANCE:g})")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON to this file")
    parser.add_argument("--fingerprints", metavar="PATH",
                        help="fingerprints JSON (its .npz beside it); default: the ones shipped in vla_gym.assets")
    return parser


def main(args: argparse.Namespace) -> int:
    """Run ``vla-gym canary``: print one line per case and a summary; the exit code of :func:`exit_code`."""
    started = time.perf_counter()
    try:
        if args.tolerance <= 0:
            raise CanaryError(f"--tolerance {args.tolerance}: give a positive distance in metres, e.g. 0.005")
        suites = parse_suites(args.suite)
        meta, arrays = load(args.fingerprints)
        cases = select(meta, suites, args.quick)
        if not cases:
            raise CanaryError(f"the fingerprints hold no case of {suites}")
        results = check(meta, arrays, cases, args.tolerance, on_result=lambda r: print(format_result(r), flush=True),
                        strict=suites is not None, render_tolerance=args.render_tolerance)
    except CanaryError as error:
        print(f"vla-gym canary: {error}", file=sys.stderr)
        return 2
    code = exit_code(results)
    print(summary(results, meta, args.tolerance, time.perf_counter() - started, args.render_tolerance))
    if code == 2:
        print("vla-gym canary: no case could run here (see the SKIP lines)", file=sys.stderr)
    if args.json:
        report = {"exit_code": code, "tolerance_m": args.tolerance, "render_tolerance": args.render_tolerance,
                  "reference": meta["reference"],
                  "current": versions(), "recorded": meta.get("recorded"), "results": [asdict(r) for r in results]}
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return code
