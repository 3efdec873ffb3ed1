"""The seeds' recipe in miniature: demonstrations -> behaviour cloning (SFT) -> RL (PPO or GRPO), on a CPU.

    python examples/sft_then_rl.py --out runs/sft_then_rl                  # PushCube, GRPO, ~25 min on 2 cores
    python examples/sft_then_rl.py --algo ppo --out runs/sft_then_ppo      # PPO with a critic instead

1. A scripted expert that reads ManiSkill's privileged state makes ``--demos`` successful episodes
   (:func:`vla_gym.demos.collect_demos`, with DART noise).
2. The small pretrained policy (:class:`~vla_gym.trainers.policies.vla_small.SmallVLAPolicy`:
   EfficientNet-Lite0 + MiniLM, frozen, with trained heads) is behaviour-cloned on them from the main
   camera, its proprioception and the instruction.
3. It is evaluated (greedy actions) on ``--eval-episodes`` fixed seeds that no demo used.
4. GRPO (groups of episodes from one initial state, success as the score, no critic) or PPO fine-tunes it,
   starting from the SFT weights, through vla_gym's trainers. The RL reward is ``--reward-mode``: ``sparse``
   (1 on success, which ends the episode) by default, so that the objective is the success the table reports
   (with ManiSkill's dense shaping and termination on success, hovering next to the goal out-earns pushing
   the cube onto it). PPO's critic starts untrained.
5. It is evaluated again on the same seeds. ``{out}/results.md`` holds the before/after table,
   ``{out}/results.json`` the numbers and ``{out}/curve.png`` the training curve.

Stages are cached in ``--out`` (``demos.npz``, ``sft/``, ``after_sft.json``): running the same command again
skips the finished ones (delete the files to redo them).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import time

import numpy as np
import torch


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="VLA/ManiSkill-PushCube-v0")
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--demos", type=int, default=30, help="successful expert episodes")
    parser.add_argument("--noise", type=float, default=0.3, help="DART noise on the executed expert actions")
    parser.add_argument("--bc-epochs", type=int, default=60)
    parser.add_argument("--eval-episodes", type=int, default=40)
    parser.add_argument("--algo", choices=("ppo", "grpo"), default="grpo")
    parser.add_argument("--reward-mode", default="sparse", help="the env's reward during RL (sparse: success)")
    parser.add_argument("--rl-steps", type=int, default=8000, help="environment steps of RL")
    parser.add_argument("--rl-minutes", type=float, default=None, help="stop RL after this wall-clock time")
    parser.add_argument("--group-size", type=int, default=4, help="GRPO: episodes per initial state")
    parser.add_argument("--groups", type=int, default=4, help="GRPO: groups (initial states) per update")
    parser.add_argument("--lr", type=float, default=5e-5, help="RL learning rate (Adam moves the small heads fast)")
    parser.add_argument("--num-envs", type=int, default=2, help="envs, each in its own worker process")
    parser.add_argument("--log-std", type=float, default=-1.6, help="exploration noise (log std) for RL")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/sft_then_rl")
    return parser.parse_args(argv)


def env_kwargs(args, reward_mode: str = "normalized_dense") -> dict:
    return {"cameras": ["main"], "image_size": args.image_size, "reward_mode": reward_mode}


def make_envs(args):
    """The evaluation envs: the dense reward (for the table's return column), in worker processes."""
    import vla_gym

    return vla_gym.make_vec(args.env, args.num_envs, vectorization="async", **env_kwargs(args))


def save_demos(demos: dict, path: pathlib.Path) -> None:
    arrays = {f"images/{role}": value for role, value in demos["images"].items()}
    arrays.update(state=demos["state"], actions=demos["actions"], episode=demos["episode"],
                  instruction=np.asarray(demos["instruction"]), seeds=np.asarray(demos["seeds"]),
                  success_rate=np.asarray(demos["success_rate"]))
    np.savez_compressed(path, **arrays)


def load_demos(path: pathlib.Path) -> dict | None:
    if not path.exists():
        return None
    data = np.load(path)
    return {"images": {key.split("/", 1)[1]: data[key] for key in data.files if key.startswith("images/")},
            "state": data["state"], "actions": data["actions"], "episode": data["episode"],
            "instruction": [str(text) for text in data["instruction"]], "seeds": data["seeds"].tolist(),
            "success_rate": float(data["success_rate"])}


def behaviour_clone(policy, demos: dict, epochs: int, batch_size: int = 64, lr: float = 1e-3, seed: int = 0) -> list:
    """Minimise ``policy.imitation_loss`` over the demos; returns the loss per epoch."""
    from vla_gym.trainers.batch import to_torch

    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    n = len(demos["actions"])
    obs_all = to_torch({"images": demos["images"], "state": demos["state"], "instruction": demos["instruction"]})
    actions = torch.from_numpy(demos["actions"])
    losses = []
    policy.train()
    for _ in range(epochs):
        total = 0.0
        for rows in torch.randperm(n, generator=generator).split(batch_size):
            obs = {"images": {k: v[rows] for k, v in obs_all["images"].items()}, "state": obs_all["state"][rows],
                   "instruction": [obs_all["instruction"][i] for i in rows.tolist()]}
            loss = policy.imitation_loss(obs, actions[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(rows)
        losses.append(total / n)
    return losses


def evaluate(policy, args, seeds: list[int]) -> dict:
    """Greedy success rate / return / length on fixed seeds."""
    from vla_gym.trainers.episode_runner import EpisodeRunner, EpisodeSpec

    envs = make_envs(args)
    try:
        results = EpisodeRunner(envs, policy).run([EpisodeSpec(seed=s) for s in seeds], deterministic=True)
    finally:
        envs.close()
    return {
        "success_rate": float(np.mean([bool(r.success) for r in results])),
        "mean_return": float(np.mean([r.episode_return for r in results])),
        "mean_length": float(np.mean([r.length for r in results])),
        "episodes": len(results),
    }


def reinforce(policy, args, out: pathlib.Path) -> list[dict]:
    """PPO or GRPO from the current weights; returns one metrics row per update."""
    from vla_gym.trainers import GRPO, PPO
    from vla_gym.trainers.config import config_from_dict

    curve = []

    def record(algo, metrics):
        curve.append({"steps": algo.num_timesteps, **{k: float(v) for k, v in metrics.items()
                                                     if isinstance(v, (int, float))}})
        print(f"  {args.algo} update {algo.num_updates}: steps {algo.num_timesteps}, "
              f"success {metrics.get('env/success_once', float('nan')):.2f}, "
              f"return {metrics.get('env/return', float('nan')):.2f}", flush=True)

    config = config_from_dict({  # the trainer makes its envs from config.env
        "env": {"id": args.env, "num_envs": args.num_envs, "vectorization": "async",
                "kwargs": env_kwargs(args, args.reward_mode)},
        "eval": {"episodes": 0}, "checkpoint": {"resume": None}, "logging": {"progress_bar": False},
        "time_limit_s": None if args.rl_minutes is None else args.rl_minutes * 60,
    })
    common = {"config": config, "seed": args.seed, "device": "cpu", "run_dir": str(out), "name": f"{args.algo}_run"}
    if args.algo == "ppo":
        algo = PPO(policy, None, n_steps=50, batch_size=50, n_epochs=4, learning_rate=args.lr, gamma=0.99,
                   gae_lambda=0.95, clip_range=0.2, target_kl=0.05, max_grad_norm=0.5, **common)
    else:
        algo = GRPO(policy, None, group_size=args.group_size, groups_per_update=args.groups, n_epochs=4,
                    batch_size=128, learning_rate=args.lr, clip_range=0.2, filter_uniform_groups=True, target_kl=0.03,
                    **common)
    try:
        algo.learn(args.rl_steps, callback=record)
    finally:
        algo.close()
    return curve


def plot_curve(curve: list[dict], before: dict, after: dict, path: pathlib.Path, algo: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [row["steps"] for row in curve if "env/success_once" in row]
    success = [row["env/success_once"] for row in curve if "env/success_once" in row]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, success, marker="o", alpha=0.5, label=f"{algo.upper()} rollouts per update (sampled actions)")
    window = min(4, len(success))
    if window > 1:
        smooth = np.convolve(success, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1:], smooth, color="tab:blue", linewidth=2.5, label=f"mean of the last {window} updates")
    ax.axhline(before["success_rate"], color="gray", linestyle="--", label="eval after SFT (greedy)")
    ax.axhline(after["success_rate"], color="green", linestyle="--", label=f"eval after SFT+{algo.upper()} (greedy)")
    ax.set_xlabel("RL environment steps")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # 2 shared cores: one intra-op thread is faster than two fighting
    import gymnasium as gym
    from vla_gym.trainers.policies.vla_small import SmallVLAPolicy

    from vla_gym.demos import collect_demos

    timings = {}
    t0 = time.perf_counter()
    demos = load_demos(out / "demos.npz")
    if demos is None:
        demos = collect_demos(args.env, episodes=args.demos, seed=10_000 + args.seed, noise=args.noise,
                              **env_kwargs(args))
        save_demos(demos, out / "demos.npz")
    timings["demos_s"] = time.perf_counter() - t0
    print(f"demos: {len(demos['seeds'])} episodes, {len(demos['actions'])} steps, expert success "
          f"{demos['success_rate']:.2f} ({timings['demos_s']:.0f} s)", flush=True)

    probe = gym.make(args.env, **env_kwargs(args))
    observation_space, action_space = probe.observation_space, probe.action_space
    probe.close()
    policy = SmallVLAPolicy(observation_space, action_space, cameras=["main"], image_size=None,
                            feature_cache=len(demos["actions"]) + 20_000)
    t0 = time.perf_counter()
    if (out / "sft" / "trained.pt").exists():
        policy.load_trained(out / "sft")
        losses = json.loads((out / "sft" / "bc_loss.json").read_text())
    else:
        losses = behaviour_clone(policy, demos, args.bc_epochs, seed=args.seed)
        policy.save_trained(out / "sft")
        (out / "sft" / "bc_loss.json").write_text(json.dumps(losses))
    timings["bc_s"] = time.perf_counter() - t0
    print(f"behaviour cloning: loss {losses[0]:.4f} -> {losses[-1]:.4f} ({timings['bc_s']:.0f} s)", flush=True)

    eval_seeds = list(range(args.seed + 1, args.seed + 1 + args.eval_episodes))
    t0 = time.perf_counter()
    cached = json.loads((out / "after_sft.json").read_text()) if (out / "after_sft.json").exists() else None
    if cached is not None and cached["episodes"] == len(eval_seeds):
        before = cached
    else:
        before = evaluate(policy, args, eval_seeds)
        (out / "after_sft.json").write_text(json.dumps(before))
    timings["eval_sft_s"] = time.perf_counter() - t0
    print(f"after SFT: {before}", flush=True)

    with torch.no_grad():
        policy.action_head.log_std.fill_(args.log_std)
    t0 = time.perf_counter()
    curve = reinforce(policy, args, out)
    timings["rl_s"] = time.perf_counter() - t0
    policy.save_trained(out / "rl")
    after = evaluate(policy, args, eval_seeds)
    print(f"after SFT + {args.algo.upper()}: {after}", flush=True)

    results = {"args": vars(args), "demos": {"episodes": len(demos["seeds"]), "steps": len(demos["actions"]),
                                             "expert_success": demos["success_rate"]},
               "bc_loss": losses, "after_sft": before, "after_rl": after, "curve": curve, "timings_s": timings}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    table = (
        f"| {args.env} ({args.eval_episodes} fixed seeds, greedy) | success | return | length |\n|---|---|---|---|\n"
        f"| SFT ({len(demos['seeds'])} demos) | {before['success_rate']:.2f} | {before['mean_return']:.2f} | "
        f"{before['mean_length']:.1f} |\n"
        f"| SFT + {args.algo.upper()} ({curve[-1]['steps'] if curve else 0} env steps) | {after['success_rate']:.2f} | "
        f"{after['mean_return']:.2f} | {after['mean_length']:.1f} |\n"
    )
    (out / "results.md").write_text(table)
    plot_curve(curve, before, after, out / "curve.png", args.algo)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
