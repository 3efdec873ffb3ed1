"""Pipelined rollouts: a rank's envs in S stages, so that the policy infers for one while the others step.

    stepper = StagedStepper(envs, stages=2)            # envs: vla_gym's async vector env, SAME_STEP autoreset
    stepper.send(0, actions_0); stepper.send(1, actions_1)   # each stage's sub-envs start stepping
    obs_0 = stepper.wait(0)      # stage 0's new observations (numpy rows); stage 1 still steps
    stepper.send(0, policy(obs_0))                      # ... infer and send stage 0 while stage 1 steps
    obs_1 = stepper.wait(1)
    obs, rewards, terminated, truncated, infos = stepper.results()   # the whole vector step, as envs.step gives it

``rollout.pipeline_stages: S`` (default 1) turns it on for PPO's :class:`~vla_gym.trainers.rollout.collector.RolloutCollector`
and for :class:`~vla_gym.trainers.rollout.episode_runner.EpisodeRunner` (GRPO's groups). Stage ``g`` holds sub-envs
``g*k .. (g+1)*k - 1`` (``k = num_envs / S``). Both collectors run the same loop for any S: for each stage in
turn, wait for its step, infer its next actions and send them; once every stage has stepped, account the whole
vector step (:meth:`StagedStepper.results`) exactly as before. With S=1 ``send``/``wait`` are one ``envs.step``
(any vector env); with S>1 the stages' sub-envs must run in worker processes with SAME_STEP autoreset, in a vector
env that steps a subset of its sub-envs through public methods, as SB3's ``step_async`` / ``step_wait`` but per rows:
``envs.step_rows_async(rows, actions)`` and ``envs.step_rows_wait(rows) -> (obs, rewards, terminated, truncated,
infos)`` (:class:`vla_gym.vector.envs.VLAAsyncVectorEnv`: ``vla_gym.make_vec``'s async envs, and the trainers'
``env.vectorization: async`` for gymnasium ids too; gymnasium's own ``step_async`` / ``step_wait`` always step
every sub-env). The stepper uses nothing else of the vector env; :func:`vla_gym.vector.envs.concat_infos` joins
the stages' infos into the whole step's.

Same trajectories for every S: the envs see the same actions in the same states, provided the policy's sampling
noise for an env does not depend on which other envs share its batch. The collectors therefore sample each row
from its own ``torch.Generator`` (:func:`row_generators`; PPO: one per env, seeded at each rollout from torch's
global generator; GRPO: one per episode), for every S alike. The policy's forward pass on a batch of k rows
instead of N may differ in the last float bits (matrix kernels block differently); tests/test_pipeline.py
checks observations, actions, rewards and log-probs of S=1 and S=2 against each other.

A reset (the episode runner's, between episodes) needs every sub-env idle: :meth:`StagedStepper.drain` waits for the
stages still stepping and keeps their results for their next :meth:`~StagedStepper.wait`.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, VectorEnv

from vla_gym.trainers.policies.distributions import row_generators  # noqa: F401  (re-exported for the collectors)
from vla_gym.trainers.runtime.envs import autoreset_mode
from vla_gym.vector.envs import concat_infos

CONFIG_KEY = "rollout.pipeline_stages"


class PipelineError(ValueError):
    """Pipelining cannot run with these envs; the message names the fix."""


def check_stages(envs: VectorEnv, stages: int) -> None:
    """Raise :class:`PipelineError` unless ``envs`` can be stepped in ``stages`` stages."""
    if not isinstance(stages, int) or isinstance(stages, bool) or stages < 1:
        raise PipelineError(f"{CONFIG_KEY} must be a positive integer, got {stages!r}")
    if stages == 1:
        return
    if envs.num_envs % stages:
        raise PipelineError(f"{CONFIG_KEY}={stages} must divide the {envs.num_envs} envs of each process "
                            f"(env.num_envs / number of processes); use a divisor of {envs.num_envs}")
    if not steps_rows_in_background(envs):
        if isinstance(envs, AsyncVectorEnv):  # gymnasium's own: it steps every sub-env at once
            raise PipelineError(f"{CONFIG_KEY}={stages} needs a vector env that steps some of its sub-envs "
                                f"(step_rows_async / step_rows_wait): make it with vla_gym.make_vec or "
                                f"vla_gym.vector.envs.VLAAsyncVectorEnv (got gymnasium's {type(envs).__name__})")
        raise PipelineError(f"{CONFIG_KEY}={stages} needs sub-envs that step in worker processes while the policy "
                            f"infers: set env.vectorization=async (got {type(envs).__name__})")
    if autoreset_mode(envs) != AutoresetMode.SAME_STEP:
        raise PipelineError(f"{CONFIG_KEY}={stages} needs SAME_STEP autoreset (vla_gym.make_vec's default); "
                            f"this vector env resets {autoreset_mode(envs).name}")


def steps_rows_in_background(envs: VectorEnv) -> bool:
    """Whether ``envs`` steps a subset of its sub-envs in worker processes (``step_rows_async`` returns at once)."""
    return bool(getattr(envs, "steps_rows_in_background", False)) and callable(getattr(envs, "step_rows_async", None))


class StagedStepper:
    """Steps a vector env's sub-envs stage by stage (module docstring)."""

    def __init__(self, envs: VectorEnv, stages: int = 1):
        check_stages(envs, stages)
        self.envs, self.num_stages = envs, stages
        size = envs.num_envs // stages
        self.rows: list[range] = [range(g * size, (g + 1) * size) for g in range(stages)]
        self._actions: list[Any] = [None] * stages      # S=1: the actions of the next envs.step
        self._sent = [False] * stages                     # a step is on its way (S>1)
        self._early: list[Any] = [None] * stages          # obs of a stage drained ahead of its wait
        self._obs: list[Any] = [None] * stages            # each stage's observations of its last step
        self._steps: list[tuple | None] = [None] * stages  # each stage's (rewards, terminated, truncated, infos)
        self._whole: tuple | None = None                   # S=1: envs.step's result

    @property
    def can_pipeline(self) -> bool:
        """Whether these envs could run in stages (worker processes, SAME_STEP autoreset), whatever S is now."""
        return steps_rows_in_background(self.envs) and autoreset_mode(self.envs) == AutoresetMode.SAME_STEP

    def stage_of(self, env_index: int) -> int:
        return env_index // len(self.rows[0])

    # ----------------------------------------------------------------------------------- one stage
    def send(self, stage: int, actions: Any) -> None:
        """Start stage ``stage``'s sub-envs on ``actions`` (a batch of the stage's rows)."""
        if self.num_stages == 1:
            self._actions[0] = actions
            return
        if self._sent[stage] or self._early[stage] is not None:
            raise RuntimeError(f"stage {stage} is still stepping: wait({stage}) before sending it again")
        self.envs.step_rows_async(self.rows[stage], actions)
        self._sent[stage] = True

    def wait(self, stage: int) -> Any:
        """Stage ``stage``'s observations after its step (a numpy tree of its rows)."""
        if self.num_stages == 1:
            self._whole = self.envs.step(self._actions[0])
            self._obs[0] = self._whole[0]
            return self._whole[0]
        if self._early[stage] is not None:
            obs, self._early[stage] = self._early[stage], None
            return obs
        if not self._sent[stage]:
            raise RuntimeError(f"wait({stage}) without send({stage})")
        self._sent[stage] = False
        obs, rewards, terminated, truncated, infos = self.envs.step_rows_wait(self.rows[stage])
        self._steps[stage] = (rewards, terminated, truncated, infos)
        self._obs[stage] = obs
        return obs

    def dones(self, stage: int) -> np.ndarray:
        """``terminated | truncated`` of the stage's rows in its last step."""
        if self.num_stages == 1:
            return np.asarray(self._whole[2]) | np.asarray(self._whole[3])
        _, terminated, truncated, _ = self._steps[stage]
        return np.asarray(terminated) | np.asarray(truncated)

    def drain(self) -> None:
        """Wait for every stage still stepping; its results come out of its next :meth:`wait` (before a reset)."""
        for stage in range(self.num_stages):
            if self._sent[stage]:
                self._early[stage] = self.wait(stage)

    @property
    def stepping(self) -> bool:
        return any(self._sent)

    # ----------------------------------------------------------------------------------- whole step
    def results(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The vector step every stage has just finished, as ``envs.step`` returns it (all sub-envs)."""
        if self.num_stages == 1:
            return self._whole
        rewards, terminated, truncated, infos = zip(*self._steps)
        return (concat(self._obs), np.concatenate(rewards), np.concatenate(terminated), np.concatenate(truncated),
                concat_infos(infos, [len(rows) for rows in self.rows]))


def split(obs: Any, rows: Sequence[range]) -> list[Any]:
    """A whole batch (numpy tree) -> one tree per stage."""
    return [_take(obs, r) for r in rows]


def concat(trees: Sequence[Any]) -> Any:
    """Per-stage numpy trees -> one batch (stage order)."""
    first = trees[0]
    if len(trees) == 1:
        return first
    if isinstance(first, dict):
        return {key: concat([tree[key] for tree in trees]) for key in first}
    if isinstance(first, np.ndarray):
        return np.concatenate(trees)
    return tuple(item for tree in trees for item in tree)


def cat_torch(trees: Sequence[Any]) -> Any:
    """Per-stage torch trees (policy outputs, observation batches) -> one batch (stage order)."""
    first = trees[0]
    if len(trees) == 1:
        return first
    if isinstance(first, dict):
        return {key: cat_torch([tree[key] for tree in trees]) for key in first}
    if isinstance(first, torch.Tensor):
        return torch.cat(list(trees))
    if first is None:
        return None
    return [item for tree in trees for item in tree]


def _take(obs: Any, rows: range) -> Any:
    """Rows ``rows`` of a numpy observation tree, copied (a shared-memory buffer is rewritten by the workers)."""
    if isinstance(obs, dict):
        return {key: _take(value, rows) for key, value in obs.items()}
    if isinstance(obs, np.ndarray):
        return obs[rows.start:rows.stop].copy()
    if isinstance(obs, torch.Tensor):  # the GPU-batched ManiSkill env's observations, on their device
        return obs[rows.start:rows.stop]
    return tuple(obs[i] for i in rows)


def seeded_generators(count: int, device: torch.device | str) -> list[torch.Generator]:
    """``count`` generators seeded from torch's global generator (one draw of ``count`` seeds, whatever S is)."""
    seeds = torch.randint(0, 2**62, (count,)).tolist()
    return [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
