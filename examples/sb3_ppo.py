"""Stable-Baselines3 PPO on a vla_gym env through the SB3Compat wrapper.

    python examples/sb3_ppo.py                                   # ManiSkill PickCube, state, 20k steps
    python examples/sb3_ppo.py --env-id VLA/ManiSkill-PushCube-v0 --steps 100000 --num-envs 4
    python examples/sb3_ppo.py --steps 2000 --logdir runs/sb3    # TensorBoard logs incl. env/success_once
    python examples/sb3_ppo.py --env-id VLA/ManiSkill-PushCube-v0 --steps 64 --n-steps 64   # short form (CI)

The env stack, innermost first: the vla_gym env -> EpisodeMetrics (env/return, env/success_once, ...)
-> SB3Compat (the unified Dict observation becomes a Box of the state). With ``--num-envs > 1`` the
envs run in SB3's SubprocVecEnv. Episode metrics reach SB3's logger through a small callback.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_checker import check_env
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import SubprocVecEnv

import vla_gym
from vla_gym.runtime.cli_args import script_parser
from vla_gym.wrappers import EpisodeMetrics, SB3Compat, summarize_episodes


def make_env(env_id: str) -> gym.Env:
    env = vla_gym.make(env_id, obs_mode="state")
    return SB3Compat(EpisodeMetrics(env))


class LogEpisodeMetrics(BaseCallback):
    """Record the mean of vla_gym's episode metrics (finished episodes of each rollout) in SB3's logger."""

    def _on_rollout_start(self) -> None:
        self.episodes = []

    def _on_step(self) -> bool:
        self.episodes += [info["episode_metrics"] for info in self.locals["infos"] if "episode_metrics" in info]
        return True

    def _on_rollout_end(self) -> None:
        for name, value in summarize_episodes(self.episodes).items():
            self.logger.record(name, value)


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--env-id", default="VLA/ManiSkill-PickCube-v0")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--n-steps", type=int, default=None,
                        help="steps per env per rollout (default: 1024 in all, at least 64 per env)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logdir", default=None, help="TensorBoard folder (off when not given)")
    args = parser.parse_args()

    check_env(make_env(args.env_id))  # SB3's own checks pass on the wrapped env
    envs = make_vec_env(make_env, n_envs=args.num_envs, seed=args.seed, env_kwargs={"env_id": args.env_id},
                        vec_env_cls=SubprocVecEnv if args.num_envs > 1 else None)
    n_steps = args.n_steps or max(64, 1024 // args.num_envs)
    model = PPO("MlpPolicy", envs, n_steps=n_steps, batch_size=min(256, n_steps * args.num_envs), seed=args.seed,
                device="cpu", tensorboard_log=args.logdir, verbose=1)
    model.learn(total_timesteps=args.steps, callback=LogEpisodeMetrics())

    returns = [info["r"] for info in model.ep_info_buffer]
    print(f"{model.num_timesteps} steps, mean return of the last {len(returns)} episodes: {np.mean(returns):.3f}")
    envs.close()


if __name__ == "__main__":
    main()
