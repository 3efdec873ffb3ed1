"""CartPole-v1: vla_gym's PPO next to Stable-Baselines3's PPO, same hyperparameters and network.

    python benchmarks/bench_ppo_cartpole.py                          # 3 seeds x 100k steps each, about 8 minutes
    python benchmarks/bench_ppo_cartpole.py --seeds 1 --steps 30000  # short form (CI)
    python benchmarks/bench_ppo_cartpole.py --plot docs/figures/ppo_cartpole.png --json bench.json

Hyperparameters are RL Zoo's tuned CartPole-v1 PPO (8 envs, n_steps 32, batch 256, 20 epochs, gamma 0.98,
GAE lambda 0.8, linear 1e-3 learning rate and 0.2 clip range, no entropy bonus); the network is SB3's default
MlpPolicy (64-64 tanh actor and critic, orthogonal init), which is vla_gym's ``mlp`` policy with defaults.
Both run 8 envs in-process (SB3 DummyVecEnv, gymnasium SyncVectorEnv) with one torch thread; the runs
alternate (ours, SB3, ours, ...) so that load on a shared machine hits both alike.

Reported per implementation: wall time and env steps per second of ``learn()`` (everything included),
env steps until the mean return of the last 10 training episodes first reaches 500, and the mean return
of 10 deterministic evaluation episodes after training.
"""
from __future__ import annotations

import json
import time

import gymnasium as gym
import numpy as np
import torch

from vla_gym.runtime.cli_args import script_parser

HPARAMS = {"n_steps": 32, "batch_size": 256, "n_epochs": 20, "gamma": 0.98, "gae_lambda": 0.8, "ent_coef": 0.0,
           "vf_coef": 0.5, "max_grad_norm": 0.5}
NUM_ENVS = 8
LR, CLIP = 1e-3, 0.2


def evaluate(predict, seed: int, episodes: int = 10) -> float:
    env = gym.make("CartPole-v1")
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=10_000 + seed * 100 + k)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(predict(obs)))
            total += reward
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def run_ours(steps: int, seed: int) -> dict:
    from vla_gym.trainers import PPO

    curve = []
    model = PPO("mlp", "CartPole-v1", num_envs=NUM_ENVS, seed=seed, device="cpu", learning_rate=LR,
                lr_schedule="linear", clip_range=CLIP, clip_schedule="linear", **HPARAMS)

    def on_update(algo, metrics):  # mean return of the episodes that ended in this rollout
        curve.append((algo.num_timesteps, metrics.get("env/return", float("nan")), time.perf_counter() - start))

    start = time.perf_counter()
    model.learn(steps, callback=on_update)
    seconds = time.perf_counter() - start
    final = evaluate(lambda obs: model.predict(obs)[0], seed)
    model.close()
    return {"seconds": seconds, "steps": model.num_timesteps, "curve": curve, "eval_return": final}


def run_sb3(steps: int, seed: int) -> dict:
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    curve = []

    class Curve(BaseCallback):  # mean return of the episodes that ended in this rollout
        def _on_rollout_start(self) -> None:
            self.returns = []

        def _on_step(self) -> bool:
            self.returns += [info["episode"]["r"] for info in self.locals["infos"] if "episode" in info]
            return True

        def _on_rollout_end(self) -> None:
            curve.append((self.num_timesteps, float(np.mean(self.returns)) if self.returns else float("nan"),
                          time.perf_counter() - start))

    env = make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=seed)
    model = SB3PPO("MlpPolicy", env, learning_rate=lambda p: LR * p, clip_range=lambda p: CLIP * p, seed=seed,
                   device="cpu", verbose=0, **HPARAMS)
    start = time.perf_counter()
    model.learn(steps, callback=Curve())
    seconds = time.perf_counter() - start
    final = evaluate(lambda obs: model.predict(obs, deterministic=True)[0], seed)
    env.close()
    return {"seconds": seconds, "steps": int(model.num_timesteps), "curve": curve, "eval_return": final}


def steps_to_500(curve: list[tuple[int, float, float]], window: int = 10) -> int | None:
    values = [v for _, v, _ in curve]
    for i in range(len(curve)):
        recent = [v for v in values[max(0, i - window + 1): i + 1] if not np.isnan(v)]
        if len(recent) >= min(window, 3) and np.mean(recent) >= 499.5:
            return curve[i][0]
    return None


def summarize(runs: list[dict]) -> dict:
    return {
        "seconds": float(np.mean([r["seconds"] for r in runs])),
        "steps_per_s": float(np.mean([r["steps"] / r["seconds"] for r in runs])),
        "eval_return": float(np.mean([r["eval_return"] for r in runs])),
        "eval_returns": [r["eval_return"] for r in runs],
        "steps_to_500": [steps_to_500(r["curve"]) for r in runs],
    }


def filled(values) -> np.ndarray:
    """Carry the last finished episode's return over rollouts in which no episode ended."""
    out = np.array(values, dtype=float)
    for i in range(1, len(out)):
        if np.isnan(out[i]):
            out[i] = out[i - 1]
    return out


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, color in (("vla_gym", "tab:blue"), ("sb3", "tab:orange")):
        for i, run in enumerate(results[name]["runs"]):
            steps, values, seconds = zip(*run["curve"])
            label = f"{name} ({results[name]['summary']['steps_per_s']:.0f} env steps/s)" if i == 0 else None
            axes[0].plot(steps, filled(values), color=color, alpha=0.8, lw=1.2, label=label)
            axes[1].plot(seconds, filled(values), color=color, alpha=0.8, lw=1.2, label=label)
    for ax, xlabel in zip(axes, ("env steps", "seconds (1 CPU thread)")):
        ax.axhline(500, color="gray", ls=":", lw=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("training episode return")
        ax.legend(loc="lower right")
    fig.suptitle(f"PPO on CartPole-v1, same hyperparameters and network ({len(results['sb3']['runs'])} seeds each)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--plot", help="write the learning curves to this PNG")
    parser.add_argument("--json", help="write all numbers to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(1)

    results = {"vla_gym": {"runs": []}, "sb3": {"runs": []}}
    for seed in range(args.seeds):
        for name, runner in (("vla_gym", run_ours), ("sb3", run_sb3)):
            run = runner(args.steps, seed)
            results[name]["runs"].append(run)
            print(f"seed {seed} {name:8s}: {run['seconds']:6.1f} s, {run['steps'] / run['seconds']:6.0f} steps/s, "
                  f"eval return {run['eval_return']:.1f}, steps to 500: {steps_to_500(run['curve'])}", flush=True)
    for entry in results.values():
        entry["summary"] = summarize(entry["runs"])
    ours, sb3 = results["vla_gym"]["summary"], results["sb3"]["summary"]
    ratio = ours["steps_per_s"] / sb3["steps_per_s"]
    results["speedup"] = ratio
    print("\n| implementation | env steps/s | seconds per run | eval return (10 ep.) | env steps to reach 500 |")
    print("|---|---:|---:|---:|---|")
    for name, s in (("vla_gym PPO", ours), ("Stable-Baselines3 PPO", sb3)):
        print(f"| {name} | {s['steps_per_s']:.0f} | {s['seconds']:.1f} | "
              f"{', '.join(f'{r:.0f}' for r in s['eval_returns'])} | {s['steps_to_500']} |")
    print(f"\nspeed-up (env steps/s, vla_gym / SB3): {ratio:.2f}x")
    if args.plot:
        plot(results, args.plot)
        print(f"curves: {args.plot}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
