"""Which PushCube starts a main-job run fails: its final evaluation split by where the cube starts.

    python experiments/main_job_seeds/starts.py runs/screen_v13b/main_job_seed11 [more run directories]

For each run directory (``eval/eval.json`` of ``trainers/ppo.py``), every evaluation episode's seed is reset again on
``VLA/ManiSkill-PushCube-v0`` (state observations) to read the cube's start. A start is *behind* when the cube is
more than 2.5 cm nearer the robot than the gripper's start (cube x < -0.025 in ManiSkill's frame; the goal is always
beyond the cube in +x), so the gripper must move back before it descends behind the cube. Prints per run the
successes on behind starts and on the rest; ``--json`` writes them too.
"""
from __future__ import annotations

import json
import pathlib

from vla_gym.runtime.cli_args import script_parser

#: cube x below this (m) is a start behind the gripper's start
BEHIND_X = -0.025
#: the cube's position in PushCube's 35-D privileged state (ManiSkill's obs_mode="state")
CUBE_POS = slice(28, 31)


def cube_starts(seeds: list[int]) -> dict[int, float]:
    """Cube x at the reset of each seed."""
    import gymnasium as gym

    import vla_gym  # noqa: F401  (registers the ids)

    env = gym.make("VLA/ManiSkill-PushCube-v0", obs_mode="state")
    try:
        return {seed: float(env.reset(seed=seed)[0]["state"][CUBE_POS][0]) for seed in seeds}
    finally:
        env.close()


def split_by_start(run: pathlib.Path) -> dict:
    """``{"run", "behind": [successes, episodes], "rest": [successes, episodes]}`` of the run's final evaluation."""
    episodes = json.loads((run / "eval" / "eval.json").read_text())["episodes"]
    starts = cube_starts([e["spec"]["seed"] for e in episodes])
    counts = {"behind": [0, 0], "rest": [0, 0]}
    for episode in episodes:
        side = "behind" if starts[episode["spec"]["seed"]] < BEHIND_X else "rest"
        counts[side][0] += bool(episode["success"])
        counts[side][1] += 1
    return {"run": str(run), **counts}


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("runs", nargs="+", type=pathlib.Path, help="run directories with eval/eval.json")
    parser.add_argument("--json", type=pathlib.Path, help="also write the rows there")
    args = parser.parse_args(argv)
    rows = [split_by_start(run) for run in args.runs]
    for row in rows:
        (b, nb), (r, nr) = row["behind"], row["rest"]
        print(f"{row['run']}: behind {b}/{nb}, rest {r}/{nr}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
