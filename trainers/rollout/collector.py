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

Pipelining (``pipeline_stages=S``, config ``rollout.pipeline_stages``): the envs step in S stages and the policy
infers for one stage while the others step (:mod:`vla_gym.trainers.rollout.pipeline`); the buffer is filled exactly as with
S=1. On envs that can pipeline (async workers) each env samples its actions from its own generator, seeded from
torch's global one at each rollout, so the rollout is the same for every S; on others (sync, the GPU-batched env)
the batch samples from the global generator in one draw.

A step whose env worker failed (``info["env_failure"]``: hung, died or raised, and was restarted;
:mod:`vla_gym.vector.respawn`) ends its episode as truncated; its transition (an action the env never finished) is
stored as invalid, and the cut episode is left out of the ``env/...`` metrics.

A step that is both terminated and truncated counts as terminated (no bootstrap). With
``bootstrap_terminated=True`` terminations are bootstrapped like truncations (ManiSkill's PPO does this for
its success terminations, so that a dense-reward agent is not better off hovering next to the goal).
"""
from __future__ import annotations

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

from vla_gym.core.episodes import Episode, EpisodeCounter, episode_sums
from vla_gym.trainers.policies.base import Policy
from vla_gym.trainers.rollout.batch import stack, to_torch
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.rollout.pipeline import StagedStepper, cat_torch, row_generators, seeded_generators, split
from vla_gym.trainers.runtime.envs import autoreset_mode, env_attr
from vla_gym.vector.respawn import failed_rows


class EpisodeTracker:
    """The episodes that ended during rollouts, until :meth:`pop` (counted by :class:`vla_gym.core.episodes.EpisodeCounter`).

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
                 bootstrap_terminated: bool = False, pipeline_stages: int = 1):
        if not policy.has_critic:
            raise ValueError("PPO needs a policy with a critic (policy.kwargs.critic: true)")
        self.envs, self.policy, self.buffer = envs, policy, buffer
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.bootstrap_terminated = bootstrap_terminated
        self.mode = autoreset_mode(envs)
        self.stepper = StagedStepper(envs, pipeline_stages)
        self.device = buffer.device
        self.task_names = [task.name for task in env_attr(envs, "tasks") or []]
        self.tracker = self._new_tracker()
        self.stage_obs: list | None = None  # each stage's current observations (torch)

    @property
    def obs(self):
        """The current observations of all envs (torch), None before :meth:`reset`."""
        return None if self.stage_obs is None else cat_torch(self.stage_obs)

    def _new_tracker(self) -> EpisodeTracker:
        return EpisodeTracker(self.envs.num_envs, self.mode, self.task_names)

    def reset(self, seeds: list[int]) -> None:
        obs, _ = self.envs.reset(seed=seeds)
        self.stage_obs = [to_torch(part, self.device) for part in split(obs, self.stepper.rows)]
        self.tracker = self._new_tracker()

    def _act_and_send(self, stage: int, generators: list[torch.Generator] | None):
        """Sample the stage's actions (each env from its generator) and start its envs stepping."""
        rows = self.stepper.rows[stage]
        with row_generators(None if generators is None else generators[rows.start:rows.stop]):
            out = self.policy.act(self.stage_obs[stage])
        self.stepper.send(stage, self.policy.env_actions(out[0]))
        return out

    @torch.no_grad()  # not inference_mode: in-process sims (ManiSkill) keep tensors made here
    def collect(self) -> dict[str, float]:
        """Fill the buffer with one rollout and compute GAE; returns reward sum/count for logging."""
        if self.stage_obs is None:
            raise RuntimeError("call reset(seeds) before collect()")
        buffer, policy, gamma, stepper = self.buffer, self.policy, self.gamma, self.stepper
        buffer.reset()
        next_step = self.mode == AutoresetMode.NEXT_STEP
        pending = np.zeros(self.envs.num_envs, dtype=bool)  # NEXT_STEP: truncated last step, bootstrap now
        reward_sum, reward_count = 0.0, 0
        # one generator per env where S=1 and S>1 must sample alike; elsewhere (sync envs, the GPU-batched env with
        # thousands of rows) one batched draw from the global generator, not one small draw per env per step
        generators = seeded_generators(self.envs.num_envs, policy.device) if stepper.can_pipeline else None
        outs = [self._act_and_send(g, generators) for g in range(stepper.num_stages)]
        for t in range(buffer.n_steps):
            obs = self.obs
            actions, log_probs, values = (cat_torch([out[k] for out in outs]) for k in range(3))
            if pending.any():
                rows = torch.from_numpy(pending)
                buffer.bootstrap(t - 1, rows, gamma * values[rows.to(values.device)])
            for g in range(stepper.num_stages):  # while stage g infers, the stages after it still step
                self.stage_obs[g] = to_torch(stepper.wait(g), self.device)
                if t + 1 < buffer.n_steps:
                    outs[g] = self._act_and_send(g, generators)
            _, rewards, terminated, truncated, infos = stepper.results()
            dones = terminated | truncated
            valid = self.tracker.step(rewards, terminated, truncated, infos) & ~failed_rows(infos, len(rewards))
            step_rewards = torch.as_tensor(rewards, dtype=torch.float32)
            bootstrap = dones if self.bootstrap_terminated else truncated & ~terminated
            if not next_step and bootstrap.any():
                rows = np.flatnonzero(bootstrap)
                final_obs = to_torch(stack([infos["final_obs"][i] for i in rows]), self.device)
                step_rewards[rows] += gamma * policy.value(final_obs).float().cpu()
            buffer.add(obs, actions, log_probs, values, step_rewards, dones, valid)

            reward_sum += float(np.asarray(rewards)[valid].sum())
            reward_count += int(valid.sum())
            if next_step:
                pending = bootstrap
        last_obs = self.obs
        last_values = policy.value(last_obs).float()
        if pending.any():
            rows = torch.from_numpy(pending)
            buffer.bootstrap(buffer.n_steps - 1, rows, gamma * last_values[rows.to(last_values.device)])
        buffer.compute_gae(last_values, gamma, self.gae_lambda)
        return {"reward_sum": reward_sum, "reward_count": reward_count}
