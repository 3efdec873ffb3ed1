"""A training run's memory over time, from its TensorBoard: does a long LIBERO GRPO run stay flat?

    nice -n 5 python trainers/grpo.py --config experiments/libero_miniature/configs/libero_object_miniature_grpo.yaml \
        name=memory_grpo time_limit_s=3600                                  # one hour of rollouts and updates
    python experiments/reliability_soaks/memory_run.py runs/libero_miniature/memory_grpo \
        --json experiments/reliability_soaks/results/memory_grpo.json

The trainers log, every update, ``env/worker_rss_mb`` (the largest env worker's resident memory, all ranks) and
``proc/rss_mb`` (the largest trainer process's), with ``time/elapsed_s``. This reads them back and reports, per
series: the value at the first update, after ``--warmup-minutes``, at the end, the peak, and the growth in MB per
hour fitted (least squares) after the warm-up, plus the env steps per second in the first and the last fifth of
the run. A worker respawned by a fault restarts its own curve; this reports the largest worker at each update.

A resumed run is several processes, each with its own clock (``time/elapsed_s`` starts again) and memory: each
process's life is a segment, and ``--segment K`` picks the K-th (0: the first; default -1, the last). The summary
names the segment, how many the run has, and the env steps it covers.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.runtime.results import git_commit, write_results

SERIES = ("env/worker_rss_mb", "proc/rss_mb")


def read_scalars(run: pathlib.Path) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of the run's TensorBoard event files (a resumed run's segments merged)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = run / "tensorboard" if (run / "tensorboard").is_dir() else run
    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def segments(elapsed: dict[int, float]) -> list[list[int]]:
    """The run's updates (env-step counts) split where the clock starts again: one list per trainer process."""
    parts: list[list[int]] = []
    for step in sorted(elapsed):
        if not parts or elapsed[step] < elapsed[parts[-1][-1]]:
            parts.append([])
        parts[-1].append(step)
    return parts


def summarize(scalars: dict[str, dict[int, float]], warmup_minutes: float, segment: int = -1) -> dict:
    """The curve of each series against elapsed minutes and its growth after the warm-up, in one process's life
    (``segment``; module docstring)."""
    elapsed = scalars.get("time/elapsed_s")
    if not elapsed:
        raise SystemExit("no time/elapsed_s in the run's TensorBoard: is it a PPO/GRPO run directory?")
    missing = [tag for tag in SERIES if tag not in scalars]
    if len(missing) == len(SERIES):
        raise SystemExit(f"none of {list(SERIES)} in the run's TensorBoard: it was trained before the trainers "
                         "logged memory; train again")
    lives = segments(elapsed)
    if not -len(lives) <= segment < len(lives):
        raise SystemExit(f"--segment {segment}: the run has {len(lives)} segment(s) (trainer processes), 0-{len(lives) - 1}")
    steps = lives[segment]
    minutes = np.array([elapsed[s] / 60.0 for s in steps])
    out: dict = {"segment": segment % len(lives), "segments": len(lives), "env_steps": [steps[0], steps[-1]],
                 "updates": len(steps), "minutes": round(float(minutes[-1]), 1), "warmup_minutes": warmup_minutes}
    for tag in SERIES:
        if tag in missing:
            continue
        values = np.array([scalars[tag].get(s, np.nan) for s in steps])
        after = (minutes >= warmup_minutes) & ~np.isnan(values)
        slope = float(np.polyfit(minutes[after], values[after], 1)[0] * 60) if after.sum() >= 3 else None
        at_warmup = values[after][0] if after.any() else np.nan
        out[tag] = {"first": round(float(values[0]), 1), "after_warmup": round(float(at_warmup), 1),
                    "last": round(float(values[-1]), 1), "max": round(float(np.nanmax(values)), 1),
                    "growth_mb_per_hour": None if slope is None else round(slope, 1),
                    "curve": [[round(float(m), 2), round(float(v), 1)] for m, v in
                              zip(minutes[::max(1, len(steps) // 60)], values[::max(1, len(steps) // 60)])]}
    fps = scalars.get("time/fps", {})
    if fps:
        speed = np.array([fps.get(s, np.nan) for s in steps])
        fifth = max(1, len(steps) // 5)
        out["steps_per_s"] = {"first_fifth": round(float(np.nanmedian(speed[:fifth])), 1),
                              "last_fifth": round(float(np.nanmedian(speed[-fifth:])), 1)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("run", help="the PPO/GRPO run directory (its tensorboard/ is read)")
    parser.add_argument("--warmup-minutes", type=float, default=5.0, help="growth is fitted after this")
    parser.add_argument("--segment", type=int, default=-1,
                        help="which trainer process of a resumed run (0: the first; -1: the last)")
    parser.add_argument("--json", default=None, help="also write the summary here (e.g. results/...)")
    args = parser.parse_args(argv)
    run = pathlib.Path(args.run)
    if not run.is_dir():
        parser.error(f"{run}: no such run directory")
    summary = summarize(read_scalars(run), args.warmup_minutes, args.segment)
    print(f"{run}, segment {summary['segment']} of 0-{summary['segments'] - 1} (env steps {summary['env_steps'][0]:,}-"
          f"{summary['env_steps'][1]:,}): {summary['updates']} updates over {summary['minutes']} min")
    for tag in SERIES:
        if tag in summary:
            s = summary[tag]
            print(f"  {tag:<18} first {s['first']:8.1f}  after warm-up {s['after_warmup']:8.1f}  last {s['last']:8.1f}"
                  f"  max {s['max']:8.1f} MB  growth {s['growth_mb_per_hour']} MB/h")
    if "steps_per_s" in summary:
        print(f"  env steps/s: first fifth {summary['steps_per_s']['first_fifth']}, "
              f"last fifth {summary['steps_per_s']['last_fifth']}")
    if args.json:
        command = "python experiments/reliability_soaks/memory_run.py " + " ".join(argv or sys.argv[1:])
        write_results(args.json, {"run": str(run), **summary, "commit": git_commit(), "command": command})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
