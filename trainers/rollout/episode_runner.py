"""Run given episodes (seed / task / initial state) in however many envs there are.

    specs = suite_specs(envs, episodes_per_task=5)                   # episode_plan: tasks x init states, or seeds
    results = EpisodeRunner(envs, policy).run(specs, deterministic=True, video_dir="videos", video_episodes=2)
    write_report(results, "eval/")                 # vla_gym.trainers.evaluation.report: eval.md + eval.json

:class:`EpisodeRunner` hands the episodes out to the envs as they free up (one env evaluates a whole
suite in a loop; N envs do it N at a time), with task affinity (:class:`~vla_gym.trainers.rollout.scheduling.
TaskAffinityQueue`: a freed env takes the next queued episode of the task it has loaded, so a GRPO group's
episodes stay on the env slots that loaded its scene). GRPO uses the same runner with a ``recorder`` to keep each
step's transitions (and ``on_step`` for the sub-steps each action chunk ran). Results stay in spec order; envs
without tasks get the episodes first in, first out.

Resets go through the vector env's public ``reset(seed=..., options=...)`` only (``reset_mask``: the freed envs).
vla_gym's vector envs (``accepts_per_env_options``) take one options dict per sub-env, so one call resets every
freed env into its own episode: ``options={"per_env": [{"task_id": t, "init_state_id": i, "keep_task": True},
...], "reset_mask": mask}``; ``keep_task`` keeps the sub-env's own autoreset at an episode's end on the loaded task
instead of drawing (and building) another (:mod:`vla_gym.core.env`). Nothing is written into the sub-envs and
nothing needs undoing when ``run`` returns. Other vector envs are reset once per distinct options.

Episodes are counted by :class:`vla_gym.core.episodes.EpisodeCounter` (return, length in env steps, success at any
step, task); an :class:`~vla_gym.trainers.rollout.episode_plan.EpisodeResult` is its
:class:`~vla_gym.core.episodes.Episode` plus the spec it was played from and its video.

Pipelining (``pipeline_stages=S``, config ``rollout.pipeline_stages``; :mod:`vla_gym.trainers.rollout.pipeline`): the envs
step in S stages and the policy infers for one stage while the others step. A stage in which an episode ended
waits for the vector step's end, where the freed envs are reset (after the other stages' steps in flight are
drained). Each episode samples from its own generator (seeded from torch's global one when ``run`` starts), so an
episode's actions do not depend on S, on which env slot plays it, or on which envs share its batch.

Faults: an episode cut short by a failed env worker (its last info has ``env_failure``: the worker hung, died or
raised and was restarted, :mod:`vla_gym.vector.respawn`) is played again from the same spec (task, init state,
seed), up to :data:`MAX_FAULT_REPLAYS` times, and its result counts the replays (``EpisodeResult.replays``); one
still cut after that comes back with its ``env_failure`` (reports leave it out of the success rate). With a
``recorder`` or ``on_step`` (GRPO) the steps are already recorded, so a cut episode comes back as it ended,
marked by ``env_failure``, unless ``replay_faults=True``.

Videos are composed from ``obs["images"]`` (:func:`vla_gym.core.video.video_frame`: cameras + instruction and
status overlay) or, for envs without cameras, from ``render()`` (make the env with ``render_mode="rgb_array"``).
"""
from __future__ import annotations

import collections
import os
import pathlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, VectorEnv

from vla_gym.core import episodes
from vla_gym.core.env import KEEP_TASK, PER_ENV_OPTIONS
from vla_gym.core.episodes import Episode, EpisodeCounter
from vla_gym.core.video import video_frame
from vla_gym.trainers.policies.base import Policy
from vla_gym.trainers.rollout.batch import to_torch
from vla_gym.trainers.rollout.episode_plan import EpisodeResult, EpisodeSpec
from vla_gym.trainers.rollout.pipeline import StagedStepper, row_generators, seeded_generators, split
from vla_gym.trainers.rollout.scheduling import TaskAffinityQueue
from vla_gym.trainers.runtime.envs import autoreset_mode, env_attr

#: recorder(obs, actions, log_probs, jobs): one call per step of a pipeline stage's envs (all envs when
#: pipeline_stages=1) before it is taken, for that stage's rows; ``jobs[i]`` is the index of the episode the stage's
#: env i is running, -1 when it is idle (its transition is to be ignored)
Recorder = Callable[[Any, torch.Tensor, torch.Tensor, np.ndarray], None]
#: on_step(jobs, chunk_steps): one call per vector step once its results are in, for all envs: ``jobs[i]`` as above,
#: ``chunk_steps[i]`` the env steps env i ran in it (``info["chunk_steps"]`` of an ActionChunk, -1 when not reported).
#: A job's k-th on_step is the result of its k-th recorded step (GRPO masks the sub-actions a chunk did not run)
StepObserver = Callable[[np.ndarray, np.ndarray], None]
#: times an episode cut by a failed env worker is played again before its cut result is kept
MAX_FAULT_REPLAYS = 3


class EpisodeRunner:
    """Plays given episodes (:class:`~vla_gym.trainers.rollout.episode_plan.EpisodeSpec`) over the envs of a vector
    env: ``run(specs, deterministic, recorder, video_dir, video_episodes, video_prefix)`` (module docstring)."""

    def __init__(self, envs: VectorEnv, policy: Policy, pipeline_stages: int = 1):
        self.envs, self.policy = envs, policy
        self.mode = autoreset_mode(envs)
        if self.mode == AutoresetMode.NEXT_STEP and isinstance(envs, AsyncVectorEnv):
            # gymnasium 1.x async workers without shared memory keep a pending NEXT_STEP autoreset across
            # reset(options={"reset_mask"}), which would overwrite the episode's chosen initial state
            raise ValueError("EpisodeRunner needs SAME_STEP autoreset for async vector envs (vla_gym.make_vec's default)")
        self.num_envs = envs.num_envs
        self.stepper = StagedStepper(envs, pipeline_stages)
        self.device = policy.device
        tasks = env_attr(envs, "tasks") or []
        self.task_names = {task.index: task.name for task in tasks}
        #: the task each env slot was last reset into by this runner (None: unknown), for task affinity
        self.loaded_tasks: list[int | None] = [None] * self.num_envs
        # vla_gym's vector envs reset each sub-env with its own options, in one call
        base = getattr(envs, "unwrapped", envs)
        self._per_env = bool(tasks) and bool(getattr(base, "accepts_per_env_options", False))

    # ------------------------------------------------------------------------------------ resetting
    def _reset(self, assignments: dict[int, EpisodeSpec], first: bool, obs_np: Any) -> Any:
        """Reset env i with ``assignments[i]``: one call (per-env options) or one per distinct options."""
        for i, spec in assignments.items():
            self.loaded_tasks[i] = spec.task_id  # None: drawn by the env, unknown here
        seeds = [assignments[i].seed if i in assignments else None for i in range(self.num_envs)]
        if self._per_env:
            # keep_task: the sub-env's autoresets stay on this task (no scene built for an episode thrown away)
            per_env = [dict(assignments[i].options(), **{KEEP_TASK: True}) if i in assignments else None
                       for i in range(self.num_envs)]
            options: dict[str, Any] = {PER_ENV_OPTIONS: per_env}
            if not first:
                options["reset_mask"] = np.array([i in assignments for i in range(self.num_envs)])
            return self.envs.reset(seed=seeds, options=options)[0]
        groups: dict[tuple, list[int]] = collections.defaultdict(list)
        for i, spec in assignments.items():
            groups[tuple(sorted(spec.options().items()))].append(i)
        for options_key, rows in groups.items():
            options = dict(options_key)
            if not first:
                mask = np.zeros(self.num_envs, dtype=bool)
                mask[rows] = True
                options["reset_mask"] = mask
            obs_np, _ = self.envs.reset(seed=seeds, options=options)
            first = False
        return obs_np

    # ---------------------------------------------------------------------------------------- running
    @torch.no_grad()  # not inference_mode: in-process sims (ManiSkill) keep tensors made here
    def run(
        self, specs: Sequence[EpisodeSpec], deterministic: bool = True, recorder: Recorder | None = None,
        video_dir: str | os.PathLike | None = None, video_episodes: int = 0, video_prefix: str = "episode",
        on_step: StepObserver | None = None, act_kwargs: dict[str, Any] | None = None,
        replay_faults: bool | None = None, skip: Collection[int] = (),
        on_result: Callable[[EpisodeResult], None] | None = None,
    ) -> list[EpisodeResult]:
        """Play every spec once; results in spec order. ``act_kwargs``: extra keywords of ``policy.act`` (GRPO's
        ``per_dim`` / ``executed``). ``replay_faults``: play an episode cut by a failed env worker again (default:
        unless a ``recorder`` or ``on_step`` watches the steps; module docstring). ``skip``: indices of specs not to
        play (played before: a resumed evaluation); the others keep their index and sampling generator.
        ``on_result``: called with each result as its episode ends."""
        todo = [k for k in range(len(specs)) if k not in set(skip)]
        if not todo:  # e.g. a rank whose share of too few evaluation episodes is none
            return []
        if replay_faults is None:
            replay_faults = recorder is None and on_step is None
        video = (video_dir, video_prefix) if video_dir is not None and video_episodes > 0 else None
        play = _Play(self, specs, todo, deterministic, recorder, on_step, dict(act_kwargs or {}), replay_faults,
                     video, video_episodes, on_result)
        return play.until_done()

    def _result(self, episode: Episode, index: int, spec: EpisodeSpec, frames: list[np.ndarray] | None,
                video_dir: str | os.PathLike | None, video_prefix: str, instruction: str | None = None,
                replays: int = 0) -> EpisodeResult:
        task_id = episode.task_id if episode.task_id is not None else spec.task_id
        video = _write_video(frames, video_dir, f"{video_prefix}-{index:04d}", self._fps()) if frames else None
        return EpisodeResult(**dict(asdict(episode), task_id=task_id,
                                    task_name=episode.task_name or self.task_names.get(task_id, "")),
                             index=index, spec=spec, video=video, instruction=instruction, replays=replays)

    # ----------------------------------------------------------------------------------------- video
    def _frame(self, one: Any, i: int, step: int, reward: float, episode_return: float, success: bool):
        """A video frame from env ``i``'s (unbatched) observation ``one``, or from its ``render()``."""
        if isinstance(one, dict) and one.get("images"):
            return video_frame(one["images"], instruction=str(one.get("instruction", "")), step=step, reward=reward,
                               episode_return=episode_return, success=success)
        frame = self.envs.call("render")[i]
        if frame is None:
            raise ValueError("videos need camera images in the observation or an env made with render_mode='rgb_array'")
        return np.asarray(frame)

    def _fps(self) -> float:
        return float(self.envs.metadata.get("render_fps") or env_attr(self.envs, "metadata", {}).get("render_fps") or 20)



class _Play:
    """One :meth:`EpisodeRunner.run`: the queue of episodes, which env plays which (``job``), their counters, frames
    and results. ``until_done`` steps the envs stage by stage (:mod:`~vla_gym.trainers.rollout.pipeline`) until
    every episode has a result."""

    def __init__(self, runner: EpisodeRunner, specs: Sequence[EpisodeSpec], todo: list[int], deterministic: bool,
                 recorder: Recorder | None, on_step: StepObserver | None, act_kwargs: dict[str, Any],
                 replay_faults: bool, video: tuple[Any, str] | None, video_episodes: int,
                 on_result: Callable[[EpisodeResult], None] | None):
        self.runner, self.specs, self.todo = runner, specs, todo
        self.deterministic, self.recorder, self.on_step, self.act_kwargs = deterministic, recorder, on_step, act_kwargs
        self.replay_faults, self.video, self.video_episodes, self.on_result = (replay_faults, video, video_episodes,
                                                                              on_result)
        n = runner.num_envs
        self.stepper = runner.stepper
        self.queue = TaskAffinityQueue(specs, todo)
        self.job = np.full(n, -1)  # the spec index each env plays, -1: idle
        self.counter = EpisodeCounter(n, runner.mode)
        self.replays = collections.Counter()  # spec index -> plays cut by a fault so far
        self.frames: dict[int, list[np.ndarray]] = {}
        self.results: dict[int, EpisodeResult] = {}
        self.instructions: dict[int, str | None] = {}  # what each episode's policy read, for the report
        # one generator per episode (sampled runs): its actions do not depend on its env slot or batch
        self.generators = None if deterministic else seeded_generators(len(specs), runner.device)
        self.idle = torch.Generator(device=runner.device).manual_seed(0)  # envs without an episode: ignored

    def until_done(self) -> list[EpisodeResult]:
        n, stepper, job = self.runner.num_envs, self.stepper, self.job
        obs_np = self.assign(range(n), True, None)
        for stage, stage_obs in enumerate(split(obs_np, stepper.rows)):
            self.act_and_send(stage, stage_obs)
        while True:
            held = []  # stages with an episode end: they step again after this vector step's resets
            for stage in range(stepper.num_stages):
                stage_obs = stepper.wait(stage)
                rows = stepper.rows[stage]
                if (stepper.dones(stage) & (job[rows.start:rows.stop] >= 0)).any():
                    held.append(stage)
                else:  # infer for this stage while the next ones still step
                    self.act_and_send(stage, stage_obs)
            obs_np, freed = self.account(*stepper.results())
            if freed and self.queue:
                stepper.drain()  # a reset needs every env idle
                obs_np = self.assign(freed, False, obs_np)
            if not (job >= 0).any():
                stepper.drain()  # steps of envs left idle: results unused
                return [self.results[k] for k in sorted(self.results)]
            for stage in held:
                self.act_and_send(stage, split(obs_np, [stepper.rows[stage]])[0])

    def assign(self, envs_free: Sequence[int], first: bool, obs_np: Any) -> Any:
        """Reset the free envs into the next queued episodes (every env on the first call); their observations."""
        runner, queue, job, specs = self.runner, self.queue, self.job, self.specs
        chosen = {}
        # envs whose loaded task has queued episodes choose first, so that the others do not take them
        for i in sorted(envs_free, key=lambda i: not queue.has(runner.loaded_tasks[i])):
            if queue:
                job[i] = queue.take(runner.loaded_tasks[i])
                chosen[i] = specs[job[i]]
        if first:  # every env needs a first reset, idle ones included: on a task they have (no rebuild)
            for i in range(runner.num_envs):
                if i not in chosen:
                    loaded = runner.loaded_tasks[i]
                    chosen[i] = EpisodeSpec(task_id=loaded if loaded is not None else specs[self.todo[0]].task_id)
        if not chosen:
            return obs_np
        obs_np = runner._reset(chosen, first, obs_np)
        self.counter.restart(chosen)
        for i in chosen:
            if job[i] >= 0:
                self.instructions[int(job[i])] = _instruction(_row(obs_np, i))
            if self.video is not None and 0 <= job[i] < self.video_episodes:
                self.frames[job[i]] = [runner._frame(_row(obs_np, i), i, 0, 0.0, 0.0, False)]
        return obs_np

    def act_and_send(self, stage: int, stage_obs: Any) -> None:
        """The policy's actions for one stage's envs (each episode sampling from its own generator), sent."""
        rows, policy, job = self.stepper.rows[stage], self.runner.policy, self.job
        obs = to_torch(stage_obs, self.runner.device)
        row_gens = None if self.generators is None else [
            self.generators[job[i]] if job[i] >= 0 else self.idle for i in rows]
        with row_generators(row_gens):
            actions, log_probs, _ = policy.act(obs, deterministic=self.deterministic, **self.act_kwargs)
        if self.recorder is not None:
            self.recorder(obs, actions, log_probs, job[rows.start:rows.stop].copy())
        self.stepper.send(stage, policy.env_actions(actions))

    def account(self, obs_np: Any, rewards, terminated, truncated, infos) -> tuple[Any, list[int]]:
        """Count one vector step: video frames, ended episodes (results, or queued again when a failed worker cut
        them). Returns the observations and the envs freed."""
        job, counter = self.job, self.counter
        if self.video is not None:
            self.stepper.drain()  # videos may call render() on the envs: no step in flight
        ended = {episode.env_index: episode
                 for episode in counter.step(rewards, terminated, truncated, infos, active=job >= 0)}
        if self.on_step is not None:
            self.on_step(job.copy(), counter.chunk_steps.copy())
        freed = []
        for i in np.flatnonzero(job >= 0):
            if job[i] in self.frames:
                final = i in ended and self.runner.mode == AutoresetMode.SAME_STEP
                last = infos[episodes.FINAL_OBS][i] if final else _row(obs_np, i)
                self.frames[job[i]].append(self.runner._frame(
                    last, i, int(counter.lengths[i]), float(rewards[i]), float(counter.returns[i]),
                    bool(counter.success[i])))
            if i in ended:
                self.end(i, ended[i])
                freed.append(i)
        return obs_np, freed

    def end(self, i: int, episode: Episode) -> None:
        """Env ``i``'s episode ended: keep its result, or queue it again when a failed env worker cut it."""
        k = int(self.job[i])
        spec = self.specs[k]
        self.queue.done(spec.task_id)
        if episode.env_failure is not None and self.replay_faults and self.replays[k] < MAX_FAULT_REPLAYS:
            self.replays[k] += 1  # cut by a failed worker, not by the policy: play it again
            self.frames.pop(k, None)
            self.instructions.pop(k, None)
            self.queue.put_back(k, spec.task_id)
            self.runner.loaded_tasks[i] = None  # a new worker: the task it has loaded is unknown
        else:
            video_dir, video_prefix = self.video if self.video is not None else (None, "")
            self.results[k] = self.runner._result(episode, k, spec, self.frames.pop(k, None), video_dir,
                                                  video_prefix, self.instructions.pop(k), self.replays[k])
            if self.on_result is not None:
                self.on_result(self.results[k])
        self.job[i] = -1


def _instruction(one: Any) -> str | None:
    """The instruction in one env's observation (None: the observation has none)."""
    if isinstance(one, dict) and "instruction" in one:
        return str(one["instruction"])
    return None


def _row(obs: Any, i: int) -> Any:
    if isinstance(obs, dict):
        return {key: _row(value, i) for key, value in obs.items()}
    return obs[i]


def _write_video(frames: list[np.ndarray], directory: str | os.PathLike, name: str, fps: float) -> str:
    """Write an MP4 atomically (temporary file + rename); returns its path."""
    import imageio.v2 as imageio

    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.mp4"
    tmp = directory / f".{name}.{os.getpid()}.partial.mp4"
    with imageio.get_writer(tmp, fps=fps, codec="libx264", quality=7, macro_block_size=16,
                            ffmpeg_log_level="error") as writer:
        for frame in frames:
            writer.append_data(frame)
    os.replace(tmp, path)
    return str(path)
