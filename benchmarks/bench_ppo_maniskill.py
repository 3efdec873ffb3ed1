"""ManiSkill3 PushCube from state (end-effector delta control): vla_gym's PPO next to Stable-Baselines3's.

    python benchmarks/bench_ppo_maniskill.py                      # 15 + 15 minutes on a 2-core machine
    python benchmarks/bench_ppo_maniskill.py --minutes 2 --skip-sb3   # a short run
    python benchmarks/bench_ppo_maniskill.py --quick --skip-sb3      # short form (CI): it runs, nothing is claimed
    python benchmarks/bench_ppo_maniskill.py --plot docs/figures/ppo_maniskill_pushcube.png --json pushcube.json

vla_gym: ``torchrun --nproc_per_node=2 trainers/ppo.py --config examples/configs/maniskill_pushcube_ppo.yaml``
(its env steps and learning-rate schedule) with a wall-clock limit (``time_limit_s``),
evaluating 20 deterministic episodes (new seeds) every 13 updates (10.4k env steps) and at the end. Stable-Baselines3 (run afterwards, alone, for the same wall-clock budget): PPO MlpPolicy 3x256,
the config's gamma and GAE lambda, otherwise SB3's defaults, in 2 subprocess envs (``SubprocVecEnv``) over the same
env through vla_gym's ``SB3Compat`` wrapper; its success is that of its training episodes (as in the issue's
reference figure, 0.80 after 28 minutes), plus 20 deterministic evaluation episodes at the end.

Reported: minutes and env steps until evaluation success first reaches 0.8, final evaluation success, env
steps per second. The numbers depend on the machine's load: run it on an otherwise idle machine.

``--quick`` (CI) calls ``trainers/ppo.py``'s ``main`` in this process instead of under torchrun (``--in-process``)
with overrides (``QUICK``) for two updates of 2 envs, an evaluation of 2 episodes after each, and gives SB3 (unless
``--skip-sb3``) 3 seconds.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import yaml

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.evaluation.stats import rate_with_interval, success_counts

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENV_ID = "VLA/ManiSkill-PushCube-v0"
CONFIG = "examples/configs/maniskill_pushcube_ppo.yaml"
#: --quick: two updates of 2 envs, 2 evaluation episodes after each (after the script's own overrides)
QUICK = ["env.num_envs=2", "ppo.n_steps=25", "ppo.batch_size=50", "ppo.n_epochs=1", "total_timesteps=100",
         "time_limit_s=null", "eval.every=1", "eval.episodes=2", "checkpoint.every=1"]


def scalars(run: pathlib.Path, *keys: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    return {key: [(e.step, e.value) for e in accumulator.Scalars(key)] if key in tags else [] for key in keys}


def run_ours(minutes: float, workdir: pathlib.Path, extra: list[str], in_process: bool = False) -> dict:
    # the config's total_timesteps (its learning rate decays to 0 there), cut at the wall-clock budget
    overrides = [f"run_dir={workdir}", "name=vla_gym", f"time_limit_s={minutes * 60}", "eval.every=13",
                 "eval.episodes=20", "eval.video=false", "logging.progress_bar=false", "checkpoint.resume=null", *extra]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "trainers/ppo.py", "--config", CONFIG, *overrides]
    start = time.perf_counter()
    if in_process:  # the same entry point and arguments, one process
        from vla_gym.trainers.ppo import main as ppo_main

        print("running in this process: trainers/ppo.py", " ".join(command[6:]), flush=True)
        if ppo_main(command[6:]):
            raise SystemExit("trainers/ppo.py failed")
    else:
        print("running:", " ".join(command[1:]), flush=True)
        subprocess.run(command, cwd=ROOT, check=True)
    seconds = time.perf_counter() - start
    run = workdir / "vla_gym"
    data = scalars(run, "eval/success_rate", "eval/elapsed_s", "env/success_once", "time/elapsed_s", "time/total_fps")
    evals = [(step, t, s) for (step, s), (_, t) in zip(data["eval/success_rate"], data["eval/elapsed_s"])]
    train = [(step, t, s) for (step, s), (_, t) in zip(data["env/success_once"], data["time/elapsed_s"])]
    final = json.loads((run / "eval" / "eval.json").read_text())["summary"]["overall"]
    successes, episodes = success_counts(final) or (0, 0)
    steps = data["time/total_fps"][-1][0] if data["time/total_fps"] else 0
    return {"seconds": seconds, "evals": evals, "train": train, "final_eval_success": final["success_rate"],
            "final_eval_successes": successes, "final_eval_episodes": episodes, "steps": steps,
            "steps_per_s": data["time/total_fps"][-1][1] if data["time/total_fps"] else 0.0}


def make_sb3_env():
    """The config's env for SB3: the same id and kwargs, its wrappers (ActionSubset: the same xyz actions), then
    EpisodeMetrics and SB3Compat."""
    import vla_gym
    from vla_gym.vector.wrapper_spec import parse_wrappers
    from vla_gym.wrappers import EpisodeMetrics, SB3Compat

    env_config = yaml.safe_load((ROOT / CONFIG).read_text())["env"]
    env = vla_gym.make(ENV_ID, **env_config["kwargs"])
    for wrapper in parse_wrappers(env_config.get("wrappers") or [], key="env.wrappers"):
        env = wrapper(env)
    return SB3Compat(EpisodeMetrics(env))


def run_sb3(minutes: float) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import SubprocVecEnv

    train: list[tuple[int, float, float]] = []

    class Track(BaseCallback):
        """Training-episode success (mean of the last 20 episodes) and the wall-clock budget."""

        def _on_training_start(self) -> None:
            self.start, self.window = time.perf_counter(), []

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode_metrics" in info:
                    self.window = (self.window + [info["episode_metrics"]["env/success_once"]])[-20:]
                    train.append((self.num_timesteps, time.perf_counter() - self.start, float(np.mean(self.window))))
            return time.perf_counter() - self.start < minutes * 60

    envs = SubprocVecEnv([make_sb3_env, make_sb3_env])
    ppo_config = yaml.safe_load((ROOT / CONFIG).read_text())["ppo"]
    model = PPO("MlpPolicy", envs, gamma=ppo_config["gamma"], gae_lambda=ppo_config["gae_lambda"],
                policy_kwargs={"net_arch": [256, 256, 256]}, device="cpu", seed=0, verbose=0)
    start = time.perf_counter()
    model.learn(10_000_000, callback=Track())
    seconds = time.perf_counter() - start
    steps = int(model.num_timesteps)
    envs.close()

    env = make_sb3_env()
    successes = []
    for k in range(20):
        obs, _ = env.reset(seed=10**9 + k)
        done, success = False, False
        while not done:
            obs, _, terminated, truncated, info = env.step(model.predict(obs, deterministic=True)[0])
            success |= bool(info.get("success"))
            done = terminated or truncated
        successes.append(success)
    env.close()
    return {"seconds": seconds, "train": train, "final_eval_success": float(np.mean(successes)),
            "final_eval_successes": int(sum(successes)), "final_eval_episodes": len(successes), "steps": steps,
            "steps_per_s": steps / seconds}


def first_reaching(rows: list[tuple[int, float, float]], level: float = 0.8):
    for step, t, value in rows:
        if value >= level:
            return step, t / 60
    return None, None


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    series = [("vla_gym", "evals", 1, "vla_gym PPO, evaluation (20 new seeds)", "tab:blue", "-"),
              ("vla_gym", "train", 2, "vla_gym PPO, training episodes (last 2 updates, ~20 ep.)", "tab:blue", ":"),
              ("sb3", "train", 1, "SB3 PPO, training episodes (last 20)", "tab:orange", ":")]
    for name, key, window, label, color, style in series:
        rows = results.get(name, {}).get(key) or []
        if rows:
            steps, times, values = zip(*rows)
            values = np.convolve(values, np.ones(window) / window, mode="full")[:len(values)]
            axes[0].plot(np.array(times) / 60, values, style, color=color, label=label)
            axes[1].plot(steps, values, style, color=color, label=label)
    for name, color in (("vla_gym", "tab:blue"), ("sb3", "tab:orange")):
        if name in results:
            r = results[name]
            label = f"{'vla_gym' if name == 'vla_gym' else 'SB3'} final evaluation (20 ep.)"
            axes[0].plot(r["seconds"] / 60, r["final_eval_success"], "*", ms=12, color=color, label=label)
            axes[1].plot(r["steps"], r["final_eval_success"], "*", ms=12, color=color)
    for ax, xlabel in zip(axes, ("minutes (2 CPU cores)", "env steps")):
        ax.axhline(0.8, color="gray", ls="--", lw=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("success rate")
        ax.set_ylim(-0.02, 1.02)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=8)
    fig.suptitle("PPO on ManiSkill3 PushCube (state, end-effector delta control)")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> dict:
    parser = script_parser(__doc__)
    parser.add_argument("--minutes", type=float, default=15.0, help="wall-clock budget of each implementation")
    parser.add_argument("--skip-sb3", action="store_true")
    parser.add_argument("--sb3-from", help="reuse the SB3 results of an earlier run's --json (SB3's side does not "
                                           "change with vla_gym's config)")
    parser.add_argument("--workdir", help="where vla_gym's run goes (default: a temporary directory)")
    parser.add_argument("--plot")
    parser.add_argument("--json")
    parser.add_argument("--in-process", action="store_true",
                        help="run vla_gym's trainer in this process (one process) instead of under torchrun")
    parser.add_argument("--quick", action="store_true", help="short form (CI): --in-process, two tiny updates, "
                        "2 evaluation episodes, SB3 for 3 seconds; nothing is claimed")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for vla_gym's run")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.quick:
        args.in_process, args.minutes, args.overrides = True, 0.05, [*QUICK, *args.overrides]
    if args.in_process:
        import torch

        torch.set_num_threads(1)  # as OMP_NUM_THREADS=1 does for torchrun's ranks

    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="bench_pushcube_"))
    results = {"minutes": args.minutes,
               "vla_gym": run_ours(args.minutes, workdir, args.overrides, args.in_process)}
    if args.sb3_from:
        results["sb3"] = json.loads(pathlib.Path(args.sb3_from).read_text())["sb3"]
    elif not args.skip_sb3:
        results["sb3"] = run_sb3(args.minutes)

    print(f"\n| PushCube, {args.minutes:g} min budget | env steps/s | env steps | eval success reaches 0.8 "
          "(min / env steps) | final eval success [95 % CI] | final eval episodes |")
    print("|---|---:|---:|---|---:|---:|")
    ours = "vla_gym PPO, " + ("in one process" if args.in_process else "2 torchrun processes")
    for name, label, key in (("vla_gym", ours, "evals"),
                             ("sb3", "SB3 PPO, 2 subprocess envs", "train")):
        if name not in results:
            continue
        r = results[name]
        step, minutes = first_reaching(r[key])
        reached = f"{minutes:.1f} min / {step}" if step is not None else "not reached"
        if name == "sb3":
            reached += " (training episodes)"
        episodes = r.get("final_eval_episodes", 20)  # an older --sb3-from JSON: its 20 episodes, no counts
        successes = r.get("final_eval_successes", round(r["final_eval_success"] * episodes))
        print(f"| {label} | {r['steps_per_s']:.0f} | {r['steps']} | {reached} | "
              f"{rate_with_interval(successes, episodes)} | {episodes} |")
    if args.plot:
        plot(results, args.plot)
        print(f"curves: {args.plot}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
