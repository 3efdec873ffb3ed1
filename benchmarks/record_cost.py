"""What recording a rollout as a dataset costs on LIBERO, against playing it unrecorded, in one run.

    python benchmarks/record_cost.py                                  # 128 px, main + wrist, 3 repeats
    python benchmarks/record_cost.py --json benchmarks/results/record_cost.json      # the docs' figures
    python benchmarks/record_cost.py --image-size 32 --repeats 1      # a short run
    python benchmarks/record_cost.py --quick                          # short form (CI): it runs, nothing is claimed

Two episodes of LIBERO-Object task 1 from init state 0 under action chunks of 8 (as the miniature configs play
them): the scripted expert's success (about 90 steps) and a failure of the same length (the arm held still). Each is
played three ways, interleaved so that machine noise hits all alike: unrecorded (one render per chunk, what the
policy sees), recorded with every frame rendered at once (``RecordEpisodes``), and recorded with
``successes_only=True`` (the skipped frames kept as poses and rendered only when the episode ends a success;
``trainers/eval.py --record-dataset DIR --successes-only`` and ``trainers/rft.py`` record this way). Resets are not
timed. Prints milliseconds per env step and the ratio to the unrecorded play; ``--json`` writes them with the
command and the load average when it started. ``--quick`` (CI): the success episode only, each way once without a
warm-up, main camera at 32 px (``--image-size 32 --cameras main --repeats 1 --outcomes success --no-warmup``).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.runtime.results import write_results

TASK, INIT_STATE, CHUNK = 1, 0, 8
MODES = ("unrecorded", "recorded", "recorded, successes only")


def expert_actions(env) -> np.ndarray:
    from vla_gym.data.experts.dispatch import expert_for

    env.reset(seed=0, options={"task_id": TASK, "init_state_id": INIT_STATE})
    expert, actions = expert_for(env), []
    for _ in range(300):
        actions.append(expert())
        if env.step(actions[-1])[2]:
            return np.asarray(actions, np.float32)
    raise SystemExit("the scripted expert did not succeed: nothing to time")


def play(env, actions: np.ndarray, mode: str, staging: str) -> float:
    """Seconds to play ``actions`` in chunks (reset not timed); the episode ends at success or at its length."""
    from vla_gym.wrappers import ActionChunk, RecordEpisodes

    inner = env if mode == "unrecorded" else RecordEpisodes(env, staging, successes_only=mode != "recorded")
    chunked = ActionChunk(inner, chunk_size=CHUNK)
    env.unwrapped.max_episode_steps_override = len(actions)
    chunked.reset(seed=0, options={"task_id": TASK, "init_state_id": INIT_STATE})
    start = time.perf_counter()
    for first in range(0, len(actions), CHUNK):
        *_, terminated, truncated, _ = chunked.step(actions[first:first + CHUNK])
        if terminated or truncated:
            break
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--cameras", nargs="+", default=["main", "wrist"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--outcomes", default="success,failure", help="which episodes to play (comma list)")
    parser.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                        help="play each episode once recorded, untimed, before the timed ones")
    parser.add_argument("--quick", action="store_true", help="short form (CI): one play each way of the success, "
                        "no warm-up, main camera at 32 px")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.image_size, args.cameras, args.repeats, args.outcomes, args.warmup = 32, ["main"], 1, "success", False
    outcomes = args.outcomes.split(",")
    if not outcomes or set(outcomes) - {"success", "failure"}:
        parser.error(f"--outcomes {args.outcomes}: a comma list of success, failure")
    import gymnasium as gym

    import vla_gym  # noqa: F401

    load = os.getloadavg()[0]
    env = gym.make("VLA/LiberoObject-v0", cameras=args.cameras, image_size=args.image_size)
    try:
        success = expert_actions(env)
        episodes = {"success": success, "failure": np.zeros_like(success)}
        episodes = {outcome: episodes[outcome] for outcome in outcomes}
        seconds = {(outcome, mode): [] for outcome in episodes for mode in MODES}
        with tempfile.TemporaryDirectory() as staging:
            for outcome, actions in episodes.items():
                if args.warmup:
                    play(env, actions, "recorded", staging)  # warm-up: renderer, PNG encoder
                for _ in range(args.repeats):
                    for mode in MODES:
                        seconds[outcome, mode].append(play(env, actions, mode, staging))
    finally:
        env.close()
    rows = []
    print(f"LIBERO-Object task {TASK}, init state {INIT_STATE}, {len(success)} steps, chunks of {CHUNK}, "
          f"{'+'.join(args.cameras)} at {args.image_size} px, median of {args.repeats}")
    print(f"{'episode':<9} {'mode':<26} {'ms/step':>8} {'x unrecorded':>13}")
    for outcome in episodes:
        base = float(np.median(seconds[outcome, "unrecorded"]))
        for mode in MODES:
            median = float(np.median(seconds[outcome, mode]))
            rows.append({"episode": outcome, "mode": mode, "steps": len(success),
                         "ms_per_step": round(1000 * median / len(success), 2), "ratio": round(median / base, 2)})
            print(f"{outcome:<9} {mode:<26} {rows[-1]['ms_per_step']:>8.2f} {rows[-1]['ratio']:>13.2f}")
    if args.json:
        write_results(args.json, {"rows": rows, "image_size": args.image_size, "cameras": args.cameras,
                                  "repeats": args.repeats, "warmup": args.warmup,
                                  "load_average_at_start": round(load, 2),
                                  "command": "python benchmarks/record_cost.py " + " ".join(argv or sys.argv[1:])})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
