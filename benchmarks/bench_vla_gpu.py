"""Realistic-size VLA on a GPU: rollout + PPO update on a real env; prints samples/s and peak memory.

    python benchmarks/bench_vla_gpu.py                                    # PaliGemma-3B-size action-token VLA, bf16
    python benchmarks/bench_vla_gpu.py --family smolvlm --policy continuous
    python benchmarks/bench_vla_gpu.py --family pi0 --policy pi0 --chunk 4
    python benchmarks/bench_vla_gpu.py --algo grpo --env synthetic     # GRPO with the LIBERO v3 loss, KL to a frozen copy
    python benchmarks/bench_vla_gpu.py --size tiny --env synthetic --num-envs 1 --n-steps 2 --updates 1   # short form (CPU)
    python benchmarks/bench_vla_gpu.py --env synthetic --json benchmarks/results/vla_gpu/ppo_paligemma_tokens.json

The weights are random (from a config with the layer shapes of PaliGemma-3B / SmolVLM-2.2B / PI0:
:func:`random_vlms.build_vlm` of ``tests/random_vlms.py``, loaded by path, with ``size="full"``, saved in bf16 and
loaded back through the policies' ``from_pretrained`` path), so the numbers measure compute and memory, not skill.
One PPO run through vla_gym's trainer: ``--updates`` rollouts of ``--n-steps`` vector steps in
``--num-envs`` ManiSkill envs (224 px main camera, an action chunk of ``--chunk`` steps), each followed by
one epoch of minibatches of ``--batch-size``. Reported: rollout samples/s (policy forward + env), update
samples/s (forward + backward + Adam on LoRA and heads), the whole loop's samples/s and the peak GPU memory.
``--algo grpo`` runs GRPO instead, with the loss of the LIBERO miniature's GRPO v3 config
(``experiments/libero_miniature/configs/libero_object_miniature_grpo_v3.yaml``: a ratio per action dimension/token,
clip 0.2 / 0.28, masked unexecuted sub-actions, every episode weighted the same, a KL term to a frozen copy of the
initial policy): ``--updates`` updates of 2 groups of ``--num-envs`` episodes. ``--json`` writes the figures,
stamped with the commit; the ones docs/vla.md shows are in ``benchmarks/results/vla_gpu/``.

Without CUDA it stops at once (a full-size model would take hours on a CPU) unless ``--size tiny``: the same
loop with a tiny model (2 layers), which checks that the script runs, not how fast a GPU is.

``--env synthetic`` replaces the simulator by :class:`SyntheticVLAEnv` (random 224 px images, the unified
observation schema, ``--episode-steps`` decisions per episode, success when the last action's first dimension is
positive, so that the policy's own sampling mixes GRPO's groups) for GPU machines without ManiSkill/Vulkan: the numbers then measure
the model side only (the env costs nothing).
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import tempfile
import time

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.runtime.results import git_commit, write_results

#: the random-weight VLM builder, shared with the tests (tests/random_vlms.py)
RANDOM_VLMS = pathlib.Path(__file__).resolve().parents[1] / "tests" / "random_vlms.py"


def load_random_vlms():
    """``tests/random_vlms.py`` as a module, by path (tests/ is no package and not on this script's path)."""
    spec = importlib.util.spec_from_file_location("random_vlms", RANDOM_VLMS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synthetic_env_class():
    """A gymnasium env with vla_gym's observation schema and random observations (model-side benchmarks)."""
    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces

    class SyntheticVLAEnv(gym.Env):
        def __init__(self, cameras=("main",), image_size=224, action_dim=7, episode_steps=50):
            self.cameras, self.size, self.episode_steps = list(cameras), image_size, episode_steps
            self.observation_space = spaces.Dict({
                "images": spaces.Dict({r: spaces.Box(0, 255, (image_size, image_size, 3), np.uint8) for r in cameras}),
                "state": spaces.Box(-np.inf, np.inf, (8,), np.float32), "instruction": spaces.Text(256),
            })
            self.action_space = spaces.Box(-1, 1, (action_dim,), np.float32)
            self.t = 0

        def _obs(self):
            rng = self.np_random
            return {"images": {r: rng.integers(0, 256, (self.size, self.size, 3), dtype=np.uint8) for r in self.cameras},
                    "state": rng.standard_normal(8).astype(np.float32), "instruction": "pick up the red cube"}

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self._obs(), {"success": False}

        def step(self, action):
            self.t += 1
            done = self.t >= self.episode_steps
            success = bool(done and np.asarray(action).reshape(-1)[0] > 0)  # the policy's draw decides
            return self._obs(), float(self.np_random.random()), False, done, {"success": success}

    return SyntheticVLAEnv


def make_envs(args, env_kwargs: dict, wrappers: list):
    import vla_gym

    if args.env != "synthetic":
        return vla_gym.make_vec(args.env, args.num_envs, vectorization="async", wrappers=wrappers, **env_kwargs)
    from gymnasium import spaces
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    cls = synthetic_env_class()

    def make():
        env = cls(cameras=env_kwargs["cameras"], image_size=env_kwargs["image_size"], episode_steps=args.episode_steps)
        if args.chunk > 1:  # K actions per step, as ActionChunk's action space
            env.action_space = spaces.Box(-1, 1, (args.chunk, 7), "float32")
        return env

    return SyncVectorEnv([make] * args.num_envs, autoreset_mode=AutoresetMode.SAME_STEP)


def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--family", choices=("paligemma", "smolvlm", "pi0"), default="paligemma")
    parser.add_argument("--policy", choices=("tokens", "continuous", "pi0"), default="tokens")
    parser.add_argument("--algo", choices=("ppo", "grpo"), default="ppo")
    parser.add_argument("--episode-steps", type=int, default=50, help="decisions per synthetic episode")
    parser.add_argument("--env", default="VLA/ManiSkill-PickCube-v0")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=4)
    parser.add_argument("--n-steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--size", choices=("full", "tiny"), default="full",
                        help="tiny: a 2-layer model, to check the script on a CPU (the numbers then mean nothing)")
    parser.add_argument("--model-dir", default=None, help="reuse a model built by an earlier run")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)

    import torch

    from vla_gym.trainers import GRPO, PPO
    from vla_gym.trainers.policies import make_policy
    from vla_gym.trainers.runtime.config import config_from_dict

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and args.size == "full":
        parser.error("no CUDA device: this benchmark measures realistic-size VLAs on a GPU (hours on a CPU). "
                     "Run it on an NVIDIA GPU, or add --size tiny to check the script on a CPU.")
    model_dir = args.model_dir or os.path.join(tempfile.gettempdir(), f"vla_bench_{args.family}_{args.size}")
    t0 = time.perf_counter()
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        load_random_vlms().build_vlm(model_dir, family=args.family, size=args.size, device=device, dtype=args.dtype,
                  **({"chunk_size": max(args.chunk, 4)} if args.family == "pi0" else {}))
    build_s = time.perf_counter() - t0

    env_kwargs = {"cameras": ["main", "wrist"] if args.policy == "pi0" else ["main"], "image_size": 224}
    wrappers = [{"name": "ActionChunk", "kwargs": {"chunk_size": args.chunk}}] if args.chunk > 1 else []
    envs = make_envs(args, env_kwargs, wrappers)
    names = {"tokens": "vla_gym.trainers.policies.vla_tokens:ActionTokenVLAPolicy",
             "continuous": "vla_gym.trainers.policies.vla_continuous:ContinuousVLAPolicy",
             "pi0": "vla_gym.trainers.policies.vla_pi0:PI0Policy"}
    kwargs = {"model": model_dir, "dtype": args.dtype}
    if args.policy != "pi0":
        kwargs["lora"] = {"rank": args.lora_rank, "alpha": args.lora_rank}
        kwargs["critic"] = args.algo == "ppo"  # GRPO has no critic
    t0 = time.perf_counter()
    policy = make_policy(names[args.policy], envs.single_observation_space, envs.single_action_space, **kwargs)
    load_s = time.perf_counter() - t0
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    total = sum(p.numel() for p in policy.parameters())
    config = config_from_dict({"env": {"id": args.env, "num_envs": args.num_envs, "kwargs": env_kwargs,
                                       "wrappers": wrappers},
                               "eval": {"episodes": 0}, "checkpoint": {"resume": None},
                               "logging": {"progress_bar": False, "tensorboard": False}, "torch_threads": 0})
    # PPO counts vector steps; GRPO counts episode lengths: env steps under ActionChunk, decisions on the synthetic env
    per_decision = args.chunk if args.algo == "grpo" and args.env != "synthetic" else 1
    if args.algo == "ppo":
        algo = PPO(policy, envs, config=config, device=device, n_steps=args.n_steps, batch_size=args.batch_size,
                   n_epochs=1, learning_rate=1e-5)
        budget = args.n_steps * args.num_envs * (args.updates + 1)
    else:  # two groups of num_envs episodes per update, the v3 loss (module docstring)
        algo = GRPO(policy, envs, config=config, device=device, group_size=args.num_envs, groups_per_update=2,
                    batch_size=args.batch_size, n_epochs=1, learning_rate=1e-5, ratio_level="dim",
                    clip_range_low=0.2, clip_range_high=0.28, mask_unexecuted=True, loss_weighting="episode",
                    filter_uniform_groups=True, kl_coef=0.1)
        budget = 2 * args.num_envs * args.episode_steps * per_decision * (args.updates + 1)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rows = []
    algo.learn(budget, callback=lambda a, m: rows.append({**m, "decisions": a.num_timesteps / per_decision}))
    algo.close()
    steady = rows[1:] or rows  # the first update includes CUDA warm-up
    decisions = [r["decisions"] - (rows[i - 1]["decisions"] if i else 0) for i, r in enumerate(rows)][-len(steady):]
    samples = sum(decisions) / len(decisions)  # policy decisions (chunks) per update
    rollout_s = sum(r["time/rollout_s"] for r in steady) / len(steady)
    update_s = sum(r["time/update_s"] for r in steady) / len(steady)
    result = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "env": args.env, "algo": args.algo, "family": args.family,
        "policy": args.policy, "dtype": args.dtype, "params_total": total, "params_trainable": trainable,
        "num_envs": args.num_envs, "chunk": args.chunk, "samples_per_rollout": samples,
        "rollout_samples_per_s": samples / rollout_s, "update_samples_per_s": samples / update_s,
        "loop_samples_per_s": samples / (rollout_s + update_s),
        "env_steps_per_s": samples * args.chunk / (rollout_s + update_s),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        "build_s": build_s, "load_s": load_s, "commit": git_commit(),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        write_results(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
