"""``OnPolicyAlgorithm``: what PPO and GRPO share (setup, the learn loop, updates, checkpoints, eval).

From Python, in the style of Stable-Baselines3::

    from vla_gym.trainers import PPO
    model = PPO("mlp", "CartPole-v1", num_envs=8, n_steps=32, learning_rate=1e-3)   # hyperparameters of cfg.ppo
    model.learn(100_000)
    model.save("cartpole.pt")
    model = PPO.load("cartpole.pt")
    action, _ = model.predict(obs, deterministic=True)

From a config (what ``torchrun trainers/ppo.py --config ...`` does): ``PPO.from_config(cfg, dist)``.

A subclass provides :meth:`collect_rollouts` (fill a buffer, count env steps, return rollout metrics)
and :meth:`loss` (one minibatch's loss and stats); this class runs the update epochs, gradient
clipping, learning-rate schedule, optional target-KL stop, logging, checkpoints, resume and evaluation.
Metrics are averaged over ranks before rank 0 logs them; only rank 0 writes files.
"""
from __future__ import annotations

import dataclasses
import math
import pathlib
import random
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from vla_gym.trainers.batch import index, to_torch
from vla_gym.trainers.buffer import RolloutBuffer
from vla_gym.trainers.checkpoint import (
    Checkpointer,
    atomic_save,
    load_checkpoint,
    rng_state,
    set_rng_state,
)
from vla_gym.trainers.config import Config, config_from_dict, save_config
from vla_gym.trainers.distributed import Distributed
from vla_gym.trainers.envs import make_envs
from vla_gym.trainers.episode_runner import (
    EpisodeRunner,
    EpisodeSpec,
    summarize,
    write_report,
)
from vla_gym.trainers.logger import RunLogger
from vla_gym.trainers.policies import Policy, make_policy

#: metrics every update reports (averaged over minibatches and ranks)
TRAIN_KEYS = (
    "train/actor/approx_kl", "train/actor/clip_fraction", "train/actor/clipped_ratio", "train/actor/grad_norm",
    "train/actor/policy_loss", "train/entropy_loss", "train/loss",
)


def schedule(kind: str, progress: float) -> float:
    """Multiplier of a scheduled value at ``progress`` in [0, 1] of the training budget."""
    progress = min(max(progress, 0.0), 1.0)
    if kind == "constant":
        return 1.0
    if kind == "linear":
        return 1.0 - progress
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown schedule {kind!r}; use constant, linear or cosine")


class OnPolicyAlgorithm:
    #: the config section holding this algorithm's hyperparameters ("ppo" | "grpo")
    algo: str = ""
    #: loss stats a subclass adds to TRAIN_KEYS
    extra_train_keys: tuple[str, ...] = ()

    def __init__(
        self,
        policy: str | Policy = "mlp",
        env: str | VectorEnv | gym.Env | None = None,
        *,
        config: Config | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        env_kwargs: dict[str, Any] | None = None,
        num_envs: int | None = None,
        seed: int | None = None,
        device: str | None = None,
        run_dir: str | None = None,
        name: str | None = None,
        progress_bar: bool = False,
        observation_space: gym.Space | None = None,
        action_space: gym.Space | None = None,
        dist: Distributed | None = None,
        **hparams,
    ):
        data = dataclasses.asdict(config or Config())
        data[self.algo].update(hparams)
        if isinstance(policy, str):
            data["policy"]["name"] = policy
        if policy_kwargs is not None:
            data["policy"]["kwargs"] = dict(policy_kwargs)
        if isinstance(env, str):
            data["env"]["id"] = env
        if env_kwargs is not None:
            data["env"]["kwargs"] = dict(env_kwargs)
        for key, value in (("seed", seed), ("device", device), ("run_dir", run_dir), ("name", name)):
            if value is not None:
                data[key] = value
        if num_envs is not None:
            data["env"]["num_envs"] = num_envs
        data["logging"]["progress_bar"] = progress_bar
        cfg = config_from_dict(data)
        if isinstance(env, gym.Env):
            env = SyncVectorEnv([lambda: env], autoreset_mode=AutoresetMode.SAME_STEP)
        self._setup(cfg, dist, policy if isinstance(policy, Policy) else None, env if isinstance(env, VectorEnv) else None,
                    observation_space, action_space, write_run=run_dir is not None)

    @classmethod
    def from_config(
        cls, cfg: Config, dist: Distributed | None = None, write_run: bool = True, env: VectorEnv | None = None,
        observation_space: gym.Space | None = None, action_space: gym.Space | None = None,
    ):
        """Build from a validated config (the torchrun entry points use this, with ``write_run=True``)."""
        self = cls.__new__(cls)
        self._setup(cfg, dist, None, env, observation_space, action_space, write_run)
        return self

    # ------------------------------------------------------------------------------------------ setup
    def _setup(self, cfg, dist, policy, envs, observation_space, action_space, write_run) -> None:
        self.cfg = cfg
        self.hp = getattr(cfg, self.algo)
        self.dist = dist or Distributed.from_env(cfg.device)
        self.device = self.dist.device
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        self.envs = envs
        if envs is not None:  # a given vector env is this rank's shard
            cfg.env.num_envs = envs.num_envs * self.dist.world_size
        self.num_envs = self.dist.shard(cfg.env.num_envs)
        self._policy_from_config = policy is None
        if policy is None:
            if observation_space is None:
                if self.envs is None:
                    self.envs = make_envs(cfg.env, self.num_envs)
                observation_space, action_space = self.envs.single_observation_space, self.envs.single_action_space
            torch.manual_seed(cfg.seed)  # the same initial parameters on every rank
            policy = make_policy(cfg.policy.name, observation_space, action_space, **self._policy_kwargs())
        self.policy = policy.to(self.device)
        self.prepare_policy()
        self.model = self.dist.wrap(self.policy, find_unused_parameters=self._find_unused_parameters())
        self._params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = _adam(self._params, self.hp.learning_rate, self.hp.adam_eps)
        self.num_timesteps = 0
        self.num_updates = 0
        rank_seed = cfg.seed + 10_007 * self.dist.rank
        self.generator = torch.Generator().manual_seed(rank_seed)
        torch.manual_seed(rank_seed)
        np.random.seed(rank_seed % 2**32)
        random.seed(rank_seed)
        self._total_timesteps = cfg.total_timesteps
        self._start_time = time.perf_counter()
        self.run_path: pathlib.Path | None = cfg.path if write_run else None
        self.logger: RunLogger | None = None
        self.checkpointer: Checkpointer | None = None
        self.last_metrics: dict[str, float] = {}
        self.last_eval: dict[str, Any] | None = None
        self._eval_envs: VectorEnv | None = None
        self._last_eval_results: tuple[tuple, list] | None = None
        self._run_started = False

    def _policy_kwargs(self) -> dict[str, Any]:
        return dict(self.cfg.policy.kwargs)

    def _find_unused_parameters(self) -> bool:
        return False

    def prepare_policy(self) -> None:
        """Hook run once the policy is on its device, before DDP wraps it (GRPO: init weights, reference)."""

    # --------------------------------------------------------------------------------- subclass API
    def start_rollouts(self, seeds: list[int]) -> None:
        """Called before the first rollout of a learn() call (and after a resume)."""

    def collect_rollouts(self) -> tuple[RolloutBuffer, int, dict[str, float]]:
        """Fill a buffer; returns (buffer, num_minibatches, rollout metrics reduced over ranks).

        Must add the env steps taken (over all ranks) to ``self.num_timesteps``.
        """
        raise NotImplementedError

    def loss(self, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        """One minibatch's loss and its stats (keys of TRAIN_KEYS and extra_train_keys)."""
        raise NotImplementedError

    def post_update_metrics(self, buffer: RolloutBuffer) -> dict[str, float]:
        """Extra per-rank metrics after an update (averaged over ranks)."""
        return {}

    # ------------------------------------------------------------------------------------ the loop
    @property
    def progress(self) -> float:
        return self.num_timesteps / max(1, self._total_timesteps)

    def learn(self, total_timesteps: int | None = None, callback: Callable[[OnPolicyAlgorithm, dict], Any] | None = None):
        """Train until ``total_timesteps`` env steps (over all ranks) have been taken; returns self.

        ``callback(algo, metrics)`` runs after every update; returning False stops training.
        """
        self._total_timesteps = total_timesteps or self.cfg.total_timesteps
        self._start_time = start_time = time.perf_counter()
        self._start_run()
        start_steps = self.num_timesteps
        try:
            while self.num_timesteps < self._total_timesteps and not self._out_of_time():
                t0 = time.perf_counter()
                steps_before = self.num_timesteps
                buffer, num_minibatches, metrics = self.collect_rollouts()
                t1 = time.perf_counter()
                metrics.update(self._update(buffer, num_minibatches))
                self._update_statistics(buffer)
                self.num_updates += 1
                t2 = time.perf_counter()
                metrics.update({
                    "time/fps": (self.num_timesteps - steps_before) / (t2 - t0),
                    "time/rollout_s": t1 - t0, "time/update_s": t2 - t1,
                    "time/total_fps": (self.num_timesteps - start_steps) / (t2 - start_time),
                    "time/elapsed_s": t2 - start_time,
                })
                self.last_metrics = metrics
                self._after_update(metrics)
                if callback is not None and callback(self, metrics) is False:
                    break
            self._finish_run()
        finally:
            if self.logger is not None:
                self.logger.close()
                self.logger = None
        return self

    def _out_of_time(self) -> bool:
        """All ranks agree (rank 0's clock decides) whether cfg.time_limit_s is used up."""
        if self.cfg.time_limit_s is None:
            return False
        return bool(self.dist.broadcast_object(time.perf_counter() - self._start_time >= self.cfg.time_limit_s))

    def _start_run(self) -> None:
        if self.envs is None:
            self.envs = make_envs(self.cfg.env, self.num_envs)
        if self.run_path is not None and self.checkpointer is None:
            self.checkpointer = Checkpointer(self.run_path / "checkpoints", self.cfg.checkpoint.keep_last)
            if self.dist.is_main:
                self.run_path.mkdir(parents=True, exist_ok=True)
                save_config(self.cfg, self.run_path / "config.yaml")
            self._maybe_resume()
        if self.run_path is not None and self.logger is None:
            self.logger = RunLogger(
                self.cfg.logging, self.run_path, enabled=self.dist.is_main, total_steps=self._total_timesteps,
                initial_step=self.num_timesteps, run_name=self.cfg.name, config=dataclasses.asdict(self.cfg),
            )
        elif self.logger is None and self.cfg.logging.progress_bar:
            quiet = dataclasses.replace(self.cfg.logging, tensorboard=False)
            quiet.wandb = dataclasses.replace(quiet.wandb, enabled=False)
            self.logger = RunLogger(quiet, ".", enabled=self.dist.is_main, total_steps=self._total_timesteps,
                                    initial_step=self.num_timesteps)
        if not self._run_started:
            # new episodes on every (re)start: seeds depend on rank and on how far training got
            base = self.cfg.seed + self.num_envs * self.dist.rank + 1_000_003 * self.num_updates
            self.start_rollouts([base + i for i in range(self.num_envs)])
            self._run_started = True

    def _maybe_resume(self) -> None:
        choice = self.cfg.checkpoint.resume
        path = None
        if self.dist.is_main and choice:
            path = self.checkpointer.latest() if choice == "auto" else pathlib.Path(choice)
            if path is not None and not path.exists():
                raise FileNotFoundError(f"checkpoint.resume={choice!r}: no such file")
        path = self.dist.broadcast_object(str(path) if path else None)
        if path:
            self.load_state(load_checkpoint(path, map_location=self.device), restore_rng=True)
            if self.dist.is_main:
                print(f"resumed from {path} at update {self.num_updates}, {self.num_timesteps} env steps", flush=True)

    def _after_update(self, metrics: dict[str, float]) -> None:
        cfg = self.cfg
        if self.num_updates % cfg.logging.log_interval == 0 and self.logger is not None:
            self.logger.log(metrics, self.num_timesteps)
        if self.logger is not None:
            postfix = {"fps": int(metrics["time/total_fps"])}
            for key, label in (("env/success_once", "success"), ("env/return", "return")):
                if key in metrics:
                    postfix[label] = float(metrics[key])
            self.logger.progress(self.num_timesteps, postfix)
        if self.checkpointer is not None and cfg.checkpoint.every and self.num_updates % cfg.checkpoint.every == 0:
            self.save_checkpoint()
        if cfg.eval.every and cfg.eval.episodes > 0 and self.num_updates % cfg.eval.every == 0:
            self.evaluate(cfg.eval.episodes)

    def _finish_run(self) -> None:
        if self.checkpointer is not None:
            self.save_checkpoint()
        if self.run_path is not None and self.cfg.eval.episodes > 0:
            self.evaluate(self.cfg.eval.episodes, report_dir=self.run_path / "eval")
            if self.cfg.eval.video and self.dist.is_main:
                self.last_eval["videos"] = self.record_videos(self.cfg.eval.video_episodes, self.run_path / "eval" / "videos")

    # ---------------------------------------------------------------------------------- the update
    def _update(self, buffer: RolloutBuffer, num_minibatches: int) -> dict[str, float]:
        hp = self.hp
        lr = hp.learning_rate * schedule(hp.lr_schedule, self.progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        keys = TRAIN_KEYS + self.extra_train_keys
        sums, counts = dict.fromkeys(keys, 0.0), dict.fromkeys(keys, 0.0)
        max_norm = hp.max_grad_norm if hp.max_grad_norm is not None else math.inf
        epochs_done = 0
        for _ in range(hp.n_epochs):
            stop = False
            for batch in buffer.minibatches(num_minibatches, self.generator):
                loss, stats = self.loss(batch)
                weight = batch["weight"]
                if hp.target_kl is not None:
                    kl = stats["train/actor/approx_kl"]
                    kl = self.dist.weighted_mean({"kl": kl * weight}, {"kl": weight}).get("kl", 0.0)
                    if kl > 1.5 * hp.target_kl:
                        stop = True
                        break
                self.optimizer.zero_grad(set_to_none=True)
                (loss if weight == 1.0 else loss * weight).backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(self._params, max_norm, foreach=True)
                self.optimizer.step()
                if weight:
                    stats["train/actor/grad_norm"] = grad_norm.item()
                    stats["train/loss"] = loss.item()
                    for key, value in stats.items():
                        sums[key] += value
                        counts[key] += 1
            epochs_done += 1
            if stop:
                break
        metrics = self.dist.weighted_mean(sums, counts)
        metrics.update(self.dist.mean(self.post_update_metrics(buffer)))
        metrics["train/actor/lr"] = lr
        metrics["train/epochs"] = epochs_done
        return metrics

    def _update_statistics(self, buffer: RolloutBuffer) -> None:
        """Let the policy update running statistics (observation normalisation) from this rollout."""
        rows = torch.nonzero(buffer.valid.flatten()).squeeze(-1).cpu()
        with torch.no_grad():
            self.policy.update_statistics(index(buffer.obs.flat(), rows), self.dist.sum_tensor)

    # ----------------------------------------------------------------------------- checkpointing
    def state_dict(self, rng: list[Any] | None = None) -> dict[str, Any]:
        return {
            "algo": self.algo,
            "config": dataclasses.asdict(self.cfg),
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "counters": {"num_timesteps": self.num_timesteps, "num_updates": self.num_updates},
            "observation_space": self.policy.observation_space,
            "action_space": self.policy.action_space,
            # how to rebuild the policy (None when it was passed in as an instance)
            "policy_name": self.cfg.policy.name if self._policy_from_config else None,
            "policy_kwargs": self._policy_kwargs() if self._policy_from_config else None,
            "rng": rng,
            "extra": self.extra_state(),
        }

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def load_state(self, state: dict[str, Any], restore_rng: bool = False) -> None:
        """Restore policy, optimizer, counters (and this rank's RNG states) from a checkpoint dict."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_timesteps = state["counters"]["num_timesteps"]
        self.num_updates = state["counters"]["num_updates"]
        self.load_extra_state(state.get("extra") or {})
        if restore_rng and state.get("rng"):
            ranks = state["rng"]
            set_rng_state(ranks[self.dist.rank % len(ranks)], {"minibatch": self.generator})

    def save_checkpoint(self) -> pathlib.Path | None:
        """Collective: gathers every rank's RNG state; rank 0 writes ``checkpoints/ckpt_<update>.pt``."""
        rng = self.dist.gather_objects(rng_state({"minibatch": self.generator}))
        if not self.dist.is_main or self.checkpointer is None:
            return None
        return self.checkpointer.save(self.state_dict(rng), self.num_updates)

    def save(self, path: str | pathlib.Path) -> pathlib.Path:
        """Write the model (with optimizer and counters) to ``path`` atomically (rank 0 only)."""
        if not self.dist.is_main:
            return pathlib.Path(path)
        return atomic_save(self.state_dict(), path)

    @classmethod
    def load(cls, path: str | pathlib.Path, env: VectorEnv | None = None, device: str = "auto", **overrides):
        """Rebuild a saved model; ``env`` is only needed to continue training (made from the config otherwise)."""
        state = load_checkpoint(path)
        if state["algo"] != cls.algo:
            raise ValueError(f"{path} is a {state['algo'].upper()} checkpoint: use {state['algo'].upper()}.load")
        if state.get("policy_name") is None:
            raise ValueError(f"{path}: the policy was passed in as an instance; build the algorithm with the same "
                             "policy and call load_state(load_checkpoint(path))")
        data = state["config"]
        data["device"] = device
        for key, value in overrides.items():
            data[cls.algo][key] = value
        cfg = config_from_dict(data)
        self = cls.from_config(cfg, dist=Distributed(device=torch.device(
            "cuda" if device == "cuda" or (device == "auto" and torch.cuda.is_available()) else "cpu")),
            write_run=False, env=env, observation_space=state["observation_space"], action_space=state["action_space"])
        self.load_state(state)
        return self

    # ----------------------------------------------------------------------------------- inference
    def predict(self, obs: Any, deterministic: bool = True) -> tuple[np.ndarray, None]:
        """Actions for one observation or a batch (numpy in, numpy out), like SB3's ``predict``."""
        single = _is_single(obs, self.policy.observation_space)
        batch = _add_batch_dim(obs) if single else obs
        with torch.inference_mode():
            actions, _, _ = self.policy.act(to_torch(batch, self.device), deterministic=deterministic)
        out = self.policy.env_actions(actions)
        return (out[0] if single else out), None

    # ---------------------------------------------------------------------------------- evaluation
    def _eval_specs(self, episodes: int) -> list[EpisodeSpec]:
        return [EpisodeSpec(seed=10**9 + self.cfg.seed + k) for k in range(episodes)]

    def evaluate(self, episodes: int, report_dir: pathlib.Path | None = None,
                 deterministic: bool | None = None) -> dict[str, Any]:
        """Collective: ``episodes`` episodes split over the ranks; logs ``eval/*`` and returns the summary.

        The same policy at the same update is not played twice: a final evaluation right after a periodic one
        reuses its episodes (and only writes the report).
        """
        key = (self.num_updates, episodes, deterministic)
        if self._last_eval_results is not None and self._last_eval_results[0] == key:
            gathered = self._last_eval_results[1]
            if self.dist.is_main and report_dir is not None:
                write_report(gathered, report_dir, header=f"# {self.cfg.name}: {self.cfg.env.id} at "
                                                          f"{self.num_timesteps} env steps")
            return self.last_eval
        if self._eval_envs is None:
            self._eval_envs = make_envs(self.cfg.env, self.cfg.eval.num_envs, kwargs=self.cfg.eval.env_kwargs)
        mine = self._eval_specs(episodes)[self.dist.rank::self.dist.world_size]
        deterministic = self.cfg.eval.deterministic if deterministic is None else deterministic
        results = EpisodeRunner(self._eval_envs, self.policy).run(mine, deterministic=deterministic)
        gathered = [r for rank_results in self.dist.gather_objects(results) for r in rank_results]
        self._last_eval_results = (key, gathered)
        summary = summarize(gathered)
        if self.dist.is_main:
            overall = summary["overall"]
            if self.logger is not None:
                self.logger.log({"eval/success_rate": overall["success_rate"], "eval/return": overall["mean_return"],
                                 "eval/episode_len": overall["mean_length"],
                                 "eval/elapsed_s": time.perf_counter() - self._start_time}, self.num_timesteps)
                self.logger.write(f"eval @ {self.num_timesteps} steps: success {overall['success_rate']:.3f}, "
                                  f"return {overall['mean_return']:.2f} over {overall['episodes']} episodes"
                                  .replace("success nan, ", ""))
            if report_dir is not None:
                write_report(gathered, report_dir, header=f"# {self.cfg.name}: {self.cfg.env.id} at "
                                                          f"{self.num_timesteps} env steps")
        self.last_eval = summary
        return summary

    def record_videos(self, episodes: int, directory: pathlib.Path) -> list[str]:
        """Play the first ``episodes`` evaluation episodes again in an env made with ``eval.video_env_kwargs``
        (cameras for state-only envs, ``render_mode``) and write one MP4 each; returns their paths.

        A video is a by-product: if the env cannot give frames, say why and go on without it.
        """
        kwargs = {**self.cfg.eval.env_kwargs, **self.cfg.eval.video_env_kwargs}
        envs = None
        try:
            envs = make_envs(self.cfg.env, 1, kwargs=kwargs)
            results = EpisodeRunner(envs, self.policy).run(
                self._eval_specs(episodes), deterministic=self.cfg.eval.deterministic, video_dir=directory,
                video_episodes=episodes)
        except Exception as exc:  # noqa: BLE001 - any failure to render costs the video only, and is reported
            self._say(f"no evaluation video ({self.cfg.env.id} with {kwargs}): {type(exc).__name__}: {exc}. "
                      "Set eval.video_env_kwargs so that the env has cameras or renders (render_mode=rgb_array).")
            return []
        finally:
            if envs is not None:
                envs.close()
        return [r.video for r in results if r.video]

    def _say(self, message: str) -> None:
        if self.logger is not None:
            self.logger.write(message)
        elif self.dist.is_main:
            print(message, flush=True)

    def close(self) -> None:
        for envs in (self.envs, self._eval_envs):
            if envs is not None:
                envs.close()
        self.envs = self._eval_envs = None


def _adam(params: list[torch.nn.Parameter], lr: float, eps: float) -> torch.optim.Adam:
    """Adam with the fused kernel (one op per step) where torch has it."""
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr, eps=eps)


def _is_single(obs: Any, space: gym.Space) -> bool:
    if isinstance(space, gym.spaces.Dict) and "state" in space.spaces:
        return np.asarray(obs["state"]).ndim == len(space["state"].shape)
    if isinstance(space, gym.spaces.Box):
        return np.asarray(obs).shape == space.shape
    raise TypeError(f"predict() cannot tell single from batched observations for {space}")


def _add_batch_dim(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {key: _add_batch_dim(value) for key, value in obs.items()}
    if isinstance(obs, str):
        return [obs]
    return np.asarray(obs)[None]
