"""PPO's rollout: step a vector env with the policy and fill a :class:`~.buffer.RolloutBuffer`.

    collector = RolloutCollector(envs, policy, buffer, gamma=0.99, gae_lambda=0.95)
    collector.reset(seeds)            # once; later rollouts continue the running episodes
    stats = collector.collect()       # buffer now holds advantages and returns

Terminations and truncations across auto-resets, for both gymnasium autoreset modes:

- SAME_STEP: a finished sub-env is reset inside ``step``; its last observation is in
  ``info["final_obs"]`` and its last info in ``info["final_info"]``. A truncated episode is bootstrapped
  with ``gamma * V(final_obs)``.
- NEXT_STEP (gymnasium's default): the observation returned with ``terminated | truncated`` *is* the
  final one and the next ``step`` only resets that sub-env (action ignored, reward 0). That step is
  stored as invalid (not learnt from), and the value the policy computes on the final observation
  anyway bootstraps the truncated step, at no extra forward pass.

A step that is both terminated and truncated counts as terminated (no bootstrap). With
``bootstrap_terminated=True`` terminations are bootstrapped like truncations (ManiSkill's PPO does this for
its success terminations, so that a dense-reward agent is not better off hovering next to the goal).
"""
from __future__ import annotations

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from vla_gym.episodes import Episode, EpisodeCounter, episode_sums
from vla_gym.trainers.batch import stack, to_torch
from vla_gym.trainers.buffer import RolloutBuffer
from vla_gym.trainers.envs import autoreset_mode, env_attr
from vla_gym.trainers.policies.base import Policy


class EpisodeTracker:
    """The episodes that ended during rollouts, until :meth:`pop` (counted by :class:`vla_gym.episodes.EpisodeCounter`).

    ``pop()`` gives sums and counts of the ``env/...`` metrics and of ``env/success_once/<task>`` for every task of
    the env's task list (the same keys on every rank, for ``Distributed.weighted_mean``).
    """

    def __init__(self, num_envs: int, mode: AutoresetMode = AutoresetMode.SAME_STEP, tasks: list[str] = ()):
        self.counter = EpisodeCounter(num_envs, mode)
        self.tasks = list(tasks)
        self.finished: list[Episode] = []

    def step(self, rewards, terminated, truncated, infos: dict) -> np.ndarray:
        """Account one vector step; returns which sub-envs' steps belong to an episode (NEXT_STEP: not the
        reset-only step after an episode end)."""
        self.finished += self.counter.step(rewards, terminated, truncated, infos)
        return self.counter.counted

    def pop(self) -> tuple[dict[str, float], dict[str, float]]:
        """(sums, counts) of the metrics of the episodes finished since the last pop."""
        sums, counts = episode_sums(self.finished, self.tasks)
        self.finished = []
        return sums, counts


class RolloutCollector:
    def __init__(self, envs: VectorEnv, policy: Policy, buffer: RolloutBuffer, gamma: float, gae_lambda: float,
                 bootstrap_terminated: bool = False):
        if not policy.has_critic:
            raise ValueError("PPO needs a policy with a critic (policy.kwargs.critic: true)")
        self.envs, self.policy, self.buffer = envs, policy, buffer
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.bootstrap_terminated = bootstrap_terminated
        self.mode = autoreset_mode(envs)
        self.device = buffer.device
        self.task_names = [task.name for task in env_attr(envs, "tasks") or []]
        self.tracker = self._new_tracker()
        self.obs = None

    def _new_tracker(self) -> EpisodeTracker:
        return EpisodeTracker(self.envs.num_envs, self.mode, self.task_names)

    def reset(self, seeds: list[int]) -> None:
        obs, _ = self.envs.reset(seed=seeds)
        self.obs = to_torch(obs, self.device)
        self.tracker = self._new_tracker()

    @torch.no_grad()  # not inference_mode: in-process sims (ManiSkill) keep tensors made here
    def collect(self) -> dict[str, float]:
        """Fill the buffer with one rollout and compute GAE; returns reward sum/count for logging."""
        if self.obs is None:
            raise RuntimeError("call reset(seeds) before collect()")
        buffer, policy, gamma = self.buffer, self.policy, self.gamma
        buffer.reset()
        next_step = self.mode == AutoresetMode.NEXT_STEP
        pending = np.zeros(self.envs.num_envs, dtype=bool)  # NEXT_STEP: truncated last step, bootstrap now
        reward_sum, reward_count = 0.0, 0
        for t in range(buffer.n_steps):
            actions, log_probs, values = policy.act(self.obs)
            if pending.any():
                rows = torch.from_numpy(pending)
                buffer.bootstrap(t - 1, rows, gamma * values[rows.to(values.device)])
            next_obs, rewards, terminated, truncated, infos = self.envs.step(policy.env_actions(actions))
            dones = terminated | truncated
            valid = self.tracker.step(rewards, terminated, truncated, infos)
            step_rewards = torch.as_tensor(rewards, dtype=torch.float32)
            bootstrap = dones if self.bootstrap_terminated else truncated & ~terminated
            if not next_step and bootstrap.any():
                rows = np.flatnonzero(bootstrap)
                final_obs = to_torch(stack([infos["final_obs"][i] for i in rows]), self.device)
                step_rewards[rows] += gamma * policy.value(final_obs).float().cpu()
            buffer.add(self.obs, actions, log_probs, values, step_rewards, dones, valid)

            reward_sum += float(np.asarray(rewards)[valid].sum())
            reward_count += int(valid.sum())

            self.obs = to_torch(next_obs, self.device)
            if next_step:
                pending = bootstrap
        last_values = policy.value(self.obs).float()
        if pending.any():
            rows = torch.from_numpy(pending)
            buffer.bootstrap(buffer.n_steps - 1, rows, gamma * last_values[rows.to(last_values.device)])
        buffer.compute_gae(last_values, gamma, self.gae_lambda)
        return {"reward_sum": reward_sum, "reward_count": reward_count}
