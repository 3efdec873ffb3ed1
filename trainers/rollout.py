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

from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from vla_gym.trainers.advantages import gae
from vla_gym.trainers.batch import stack, to_torch
from vla_gym.trainers.buffer import RolloutBuffer
from vla_gym.trainers.envs import autoreset_mode
from vla_gym.trainers.policies.base import Policy
from vla_gym.wrappers.episode_metrics import finished_episodes

EPISODE_KEYS = ("env/return", "env/episode_len", "env/success_once", "env/reward")


def _masked(infos: dict, key: str, i: int) -> Any:
    """``infos[key][i]`` of a vector-env info dict, or None when sub-env ``i`` did not report it."""
    mask = infos.get(f"_{key}")
    if key in infos and (mask is None or mask[i]):
        return infos[key][i]
    return None


class EpisodeTracker:
    """Per-env running return / length / success; finished episodes become metric rows.

    When the env reports ``info["episode_metrics"]`` (vla_gym's EpisodeMetrics wrapper) at the last step
    of an episode, its numbers win (they count the sub-steps of action chunks, for example).
    """

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.success = np.zeros(num_envs, dtype=bool)
        self.reports_success = False  # envs without info["success"] (CartPole) get no env/success_once
        self.finished: list[dict[str, Any]] = []

    def step(self, rewards: np.ndarray, dones: np.ndarray, valid: np.ndarray, infos: dict) -> None:
        """Account one vector step (``infos`` as the vector env returned it, either autoreset mode)."""
        self.returns += np.where(valid, rewards, 0.0)
        self.lengths += valid
        final = infos.get("final_info") or {}
        reports_success = "success" in infos or "success" in final
        self.reports_success |= reports_success
        for i in np.flatnonzero(valid) if reports_success else ():
            success = _masked(final, "success", i) if dones[i] and final else _masked(infos, "success", i)
            self.success[i] |= bool(success)
        reported = {row["env_index"]: row for row in finished_episodes(infos)}
        for i in np.flatnonzero(dones & valid):
            row = {
                "env/return": float(self.returns[i]), "env/episode_len": int(self.lengths[i]),
                "env/reward": float(self.returns[i] / max(1, self.lengths[i])),
            }
            if self.reports_success:
                row["env/success_once"] = float(self.success[i])
            row.update(reported.get(int(i), {}))
            self.finished.append(row)
            self.returns[i], self.lengths[i], self.success[i] = 0.0, 0, False

    def pop(self) -> tuple[dict[str, float], dict[str, float]]:
        """(sums, counts) of the metrics of the episodes finished since the last pop."""
        sums = {k: 0.0 for k in EPISODE_KEYS}
        counts = {k: 0.0 for k in EPISODE_KEYS}
        for row in self.finished:
            for key in EPISODE_KEYS:
                if key in row:
                    sums[key] += float(row[key])
                    counts[key] += 1
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
        self.tracker = EpisodeTracker(envs.num_envs)
        self.obs = None
        self.prev_done = np.zeros(envs.num_envs, dtype=bool)

    def reset(self, seeds: list[int]) -> None:
        obs, _ = self.envs.reset(seed=seeds)
        self.obs = to_torch(obs, self.device)
        self.prev_done[:] = False
        self.tracker = EpisodeTracker(self.envs.num_envs)

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
                buffer.rewards[t - 1, rows] += gamma * values[rows.to(values.device)].to(buffer.device)
            next_obs, rewards, terminated, truncated, infos = self.envs.step(policy.env_actions(actions))
            dones = terminated | truncated
            valid = ~self.prev_done if next_step else np.ones_like(dones)
            step_rewards = torch.as_tensor(rewards, dtype=torch.float32)
            bootstrap = dones if self.bootstrap_terminated else truncated & ~terminated
            if not next_step and bootstrap.any():
                rows = np.flatnonzero(bootstrap)
                final_obs = to_torch(stack([infos["final_obs"][i] for i in rows]), self.device)
                step_rewards[rows] += gamma * policy.value(final_obs).float().cpu()
            buffer.add(self.obs, actions, log_probs, values, step_rewards, dones, valid)

            self.tracker.step(np.asarray(rewards, dtype=np.float64), dones, valid, infos)
            reward_sum += float(np.asarray(rewards)[valid].sum())
            reward_count += int(valid.sum())

            self.obs = to_torch(next_obs, self.device)
            if next_step:
                self.prev_done = dones
                pending = bootstrap
        last_values = policy.value(self.obs).float()
        if pending.any():
            rows = torch.from_numpy(pending)
            buffer.rewards[-1, rows] += gamma * last_values[rows.to(last_values.device)].to(buffer.device)
        advantages, returns = gae(
            buffer.rewards, buffer.values, buffer.dones, last_values.to(buffer.device), gamma, self.gae_lambda,
        )
        buffer.advantages.copy_(advantages)  # in place: the buffer's tensors stay usable by autograd
        buffer.returns.copy_(returns)
        return {"reward_sum": reward_sum, "reward_count": reward_count}
