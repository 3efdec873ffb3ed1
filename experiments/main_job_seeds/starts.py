"""Which PushCube starts a main-job run fails: its final evaluation split by where the cube starts.

    python experiments/main_job_seeds/starts.py runs/screen_v13b/main_job_seed11 [more run directories]

For each run directory (``eval/eval.json`` of ``trainers/ppo.py``), every evaluation episode's seed is reset again on
``VLA/ManiSkill-PushCube-v0`` (state observations) to read the cube's start. A start is *behind* when the cube is
more than 2.5 cm nearer the robot than the gripper's start (cube x < -0.025 in ManiSkill's frame; the goal is always
beyond the cube in +x), so the gripper must move back before it descends behind the cube. Prints per run the
successes on behind starts and on the rest; ``--json`` writes them too.

``--ends`` also replays the run's last checkpoint (deterministic, as the final evaluation) on each failed episode's
seed and prints where the gripper and the cube end: the gripper beside the cube (more than 3 cm aside in y: it
slid off the cube's side while pushing), the cube off the table, or neither (the push stopped short).

    python experiments/main_job_seeds/starts.py runs/screen_v17/main_job_seed12 --ends
"""
from __future__ import annotations

import json
import pathlib

from vla_gym.runtime.cli_args import script_parser

#: cube x below this (m) is a start behind the gripper's start
BEHIND_X = -0.025
#: the cube's position in PushCube's 35-D privileged state (ManiSkill's obs_mode="state")
CUBE_POS = slice(28, 31)
#: a failed episode whose gripper ends more than this (m) aside of the cube in y slid off the cube's side
ASIDE_Y = 0.03


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


def failed_ends(run: pathlib.Path) -> list[dict]:
    """Replay the run's last checkpoint on each failed episode of its final evaluation: where gripper and cube end."""
    import gymnasium as gym
    import torch
    import yaml

    import vla_gym  # noqa: F401  (registers the ids)
    from vla_gym.trainers.rollout.batch import to_torch
    from vla_gym.trainers.runtime.checkpoint import load_policy
    from vla_gym.vector.wrapper_spec import parse_wrappers

    policy = load_policy(sorted((run / "checkpoints").glob("ckpt_*.pt"))[-1])
    episodes = json.loads((run / "eval" / "eval.json").read_text())["episodes"]
    env_config = yaml.safe_load((run / "config.yaml").read_text())["env"]  # the run's own env and wrappers
    env = gym.make(env_config["id"], **env_config["kwargs"])
    for wrapper in parse_wrappers(env_config.get("wrappers") or [], key="env.wrappers"):  # e.g. ActionSubset
        env = wrapper(env)
    sim = env.unwrapped.backend.maniskill_env
    rows = []
    try:
        for episode in (e for e in episodes if not e["success"]):
            obs, _ = env.reset(seed=episode["spec"]["seed"])
            start = obs["state"][CUBE_POS].tolist()
            done = success = False
            while not done:
                with torch.no_grad():
                    action, _, _ = policy.act(to_torch({k: [v] if isinstance(v, str) else v[None]
                                                        for k, v in obs.items()}), deterministic=True)
                obs, _, terminated, truncated, info = env.step(action[0].numpy())
                success, done = bool(info["success"]), terminated or truncated
            gripper, cube = sim.agent.tcp.pose.p[0].tolist(), sim.obj.pose.p[0].tolist()
            end = ("off the table" if cube[2] < 0 else "aside" if abs(gripper[1] - cube[1]) > ASIDE_Y else "short")
            rows.append({"seed": episode["spec"]["seed"], "behind": start[0] < BEHIND_X, "cube_start": start,
                         "gripper_end": gripper, "cube_end": cube, "end": end, "replayed_success": success})
    finally:
        env.close()
    return rows


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("runs", nargs="+", type=pathlib.Path, help="run directories with eval/eval.json")
    parser.add_argument("--json", type=pathlib.Path, help="also write the rows there")
    parser.add_argument("--ends", action="store_true",
                        help="replay the last checkpoint on the failed episodes: where gripper and cube end")
    args = parser.parse_args(argv)
    rows = [split_by_start(run) for run in args.runs]
    for row in rows:
        (b, nb), (r, nr) = row["behind"], row["rest"]
        print(f"{row['run']}: behind {b}/{nb}, rest {r}/{nr}")
        if args.ends:
            row["failed"] = failed_ends(pathlib.Path(row["run"]))
            for end in row["failed"]:
                print(f"  seed {end['seed']} ({'behind' if end['behind'] else 'rest'}): {end['end']}; gripper "
                      f"{[round(v, 3) for v in end['gripper_end']]}, cube {[round(v, 3) for v in end['cube_end']]}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
