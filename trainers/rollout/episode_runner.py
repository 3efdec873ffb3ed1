"""Run given episodes (seed / task / initial state) in however many envs there are.

    specs = suite_specs(envs, episodes_per_task=5)                   # tasks x init states, or seeds
    results = EpisodeRunner(envs, policy).run(specs, deterministic=True, video_dir="videos", video_episodes=2)
    write_report(results, "eval/")                                    # eval.md + eval.json per-task table

:class:`EpisodeRunner` hands the episodes out to the envs as they free up (one env evaluates a whole
suite in a loop; N envs do it N at a time): a free env is reset with ``reset(seed=..., options={"task_id":
..., "init_state_id": ...})`` through the vector env's ``reset_mask``. Episodes with the same options are
reset in one call. GRPO uses the same runner with a ``recorder`` to keep each step's transitions.

Task affinity (envs with a task list, e.g. ``VLA/Libero130-v0``, where a task change rebuilds the scene in
seconds while a same-task reset takes a fraction of one): a freed env takes the next queued episode of the
task it has loaded; when that task has none left, it takes the task with the most queued episodes per env
already on it (:class:`TaskAffinityQueue`), so a GRPO group's episodes stay on the env slots that loaded its
scene. For vla_gym envs each sub-env's episode is pinned through its ``task_id`` / ``fixed_init_state_id``
attributes before a reset (restored when ``run`` returns): the envs of one reset call may then start
different episodes in parallel, and the vector env's own autoreset at an episode's end keeps the loaded
task instead of drawing (and building) another. Results stay in spec order; envs without tasks get the
episodes first in, first out, as before.

Episodes are counted by :class:`vla_gym.core.episodes.EpisodeCounter` (return, length in env steps, success at any
step, task: the rules are :mod:`vla_gym.core.episodes`'); an :class:`EpisodeResult` is its
:class:`~vla_gym.core.episodes.Episode` plus the spec it was played from and its video. :func:`summarize` applies
:func:`vla_gym.core.episodes.summarize` overall and per task.

Pipelining (``pipeline_stages=S``, config ``rollout.pipeline_stages``; :mod:`vla_gym.trainers.rollout.pipeline`): the envs
step in S stages and the policy infers for one stage while the others step. A stage in which an episode ended
waits for the vector step's end, where the freed envs are reset (after the other stages' steps in flight are
drained). Each episode samples from its own generator (seeded from torch's global one when ``run`` starts), so an
episode's actions do not depend on S, on which env slot plays it, or on which envs share its batch.

Videos are composed from ``obs["images"]`` (:func:`vla_gym.core.video.video_frame`: cameras + instruction and
status overlay) or, for envs without cameras, from ``render()`` (make the env with ``render_mode="rgb_array"``).
"""
from __future__ import annotations

import collections
import json
import math
import os
import pathlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, VectorEnv
from vla_gym.core import episodes
from vla_gym.core.episodes import Episode, EpisodeCounter
from vla_gym.trainers.rollout.batch import to_torch
from vla_gym.trainers.runtime.envs import autoreset_mode, env_attr
from vla_gym.trainers.rollout.pipeline import StagedStepper, row_generators, seeded_generators, split
from vla_gym.trainers.policies.base import Policy


@dataclass(frozen=True)
class EpisodeSpec:
    """How one episode starts: ``reset(seed=seed, options={task_id, init_state_id})`` (None: not passed)."""

    seed: int | None = None
    task_id: int | None = None
    init_state_id: int | None = None

    def options(self) -> dict[str, int]:
        return {k: v for k, v in (("task_id", self.task_id), ("init_state_id", self.init_state_id)) if v is not None}


@dataclass(frozen=True)
class EpisodeResult(Episode):
    """A played :class:`EpisodeSpec`: the :class:`~vla_gym.core.episodes.Episode` (``success`` None: the env does not
    report ``info["success"]``), the spec's position ``index`` in the list given to ``run`` and its video."""

    index: int = -1
    spec: EpisodeSpec = EpisodeSpec()
    video: str | None = None


#: recorder(obs, actions, log_probs, jobs): one call per step of a pipeline stage's envs (all envs when
#: pipeline_stages=1) before it is taken, for that stage's rows; ``jobs[i]`` is the index of the episode the stage's
#: env i is running, -1 when it is idle (its transition is to be ignored)
Recorder = Callable[[Any, torch.Tensor, torch.Tensor, np.ndarray], None]


def suite_specs(
    envs: VectorEnv, episodes_per_task: int | None = None, task_ids: Sequence[int] | None = None,
    seed: int = 0, episodes: int | None = None, first_init_state: int = 0,
) -> list[EpisodeSpec]:
    """Every (task, init state) of a vla_gym env, or ``episodes`` seeds for envs without a task list.

    ``episodes_per_task`` caps the init states per task (tasks whose initial state comes from the seed get
    that many seeds; default 10). ``episodes`` (envs without tasks) defaults to ``episodes_per_task`` or 10.
    ``first_init_state`` K starts each task's fixed initial states at K (``K .. K+episodes_per_task-1``, e.g.
    held-out states that no demonstration used).
    """
    tasks = env_attr(envs, "tasks")
    if not tasks:
        return [EpisodeSpec(seed=seed + k) for k in range(episodes or episodes_per_task or 10)]
    specs = []
    for task in tasks:
        if task_ids is not None and task.index not in task_ids:
            continue
        count = task.num_init_states or episodes_per_task or 10
        if task.num_init_states and not 0 <= first_init_state < task.num_init_states:
            raise ValueError(f"first_init_state={first_init_state}: task {task.name!r} has initial states "
                             f"0..{task.num_init_states - 1}")
        start = first_init_state if task.num_init_states else 0
        count = min(count - start, episodes_per_task or count)
        for k in range(start, start + count):
            init = k if task.num_init_states else None
            specs.append(EpisodeSpec(seed=seed + len(specs), task_id=task.index, init_state_id=init))
    return specs


class TaskAffinityQueue:
    """Episodes (indices into ``specs``) waiting for an env, handed out with task affinity.

        >>> specs = [EpisodeSpec(task_id=t) for t in (0, 0, 0, 1, 1, 1)]
        >>> queue = TaskAffinityQueue(specs)
        >>> [queue.take(loaded_task=None) for _ in range(2)]   # two empty envs: one per task
        [0, 3]
        >>> queue.take(loaded_task=1), queue.take(loaded_task=0)   # freed envs keep their task
        (4, 1)

    ``take(loaded_task)`` returns the next episode of ``loaded_task`` if one is queued; else the first
    queued episode of the task with the most queued episodes per env working on it (ties: the task that
    comes first in ``specs``). ``done(task)`` tells it an env finished an episode of ``task``. Specs
    without a task form one first-in-first-out queue.
    """

    def __init__(self, specs: Sequence[EpisodeSpec]):
        self.pending: dict[int | None, collections.deque] = {}
        for index, spec in enumerate(specs):
            self.pending.setdefault(spec.task_id, collections.deque()).append(index)
        self.working: collections.Counter = collections.Counter()

    def __bool__(self) -> bool:
        return bool(self.pending)

    def has(self, task: int | None) -> bool:
        return task in self.pending

    def take(self, loaded_task: int | None) -> int:
        task = loaded_task if loaded_task in self.pending else max(
            self.pending, key=lambda t: len(self.pending[t]) / (self.working[t] + 1))  # max: first of ties
        queue = self.pending[task]
        index = queue.popleft()
        if not queue:
            del self.pending[task]
        self.working[task] += 1
        return index

    def done(self, task: int | None) -> None:
        self.working[task] -= 1


_MISSING = object()


class EpisodeRunner:
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
        # vla_gym envs take a per-env episode through their fixed task / init state attributes
        self._pins = None
        if tasks and env_attr(envs, "fixed_init_state_id", _MISSING) is not _MISSING:
            self._pins = {"task_id": list(envs.get_attr("task_id")),
                          "fixed_init_state_id": list(envs.get_attr("fixed_init_state_id"))}

    # ------------------------------------------------------------------------------------ resetting
    def _reset(self, assignments: dict[int, EpisodeSpec], first: bool, obs_np: Any) -> Any:
        """Reset env i with ``assignments[i]``: one call (pinned episodes) or one per distinct options."""
        for i, spec in assignments.items():
            self.loaded_tasks[i] = spec.task_id  # None: drawn by the env, unknown here
        if self._pins is not None:
            return self._reset_pinned(assignments, first)
        groups: dict[tuple, list[int]] = collections.defaultdict(list)
        for i, spec in assignments.items():
            groups[tuple(sorted(spec.options().items()))].append(i)
        for options_key, rows in groups.items():
            seeds = [assignments[i].seed if i in assignments else None for i in range(self.num_envs)]
            options = dict(options_key)
            if not first:
                mask = np.zeros(self.num_envs, dtype=bool)
                mask[rows] = True
                options["reset_mask"] = mask
            obs_np, _ = self.envs.reset(seed=seeds, options=options)
            first = False
        return obs_np

    def _reset_pinned(self, assignments: dict[int, EpisodeSpec], first: bool) -> Any:
        """Pin each assigned env's task and init state (``set_attr``), then reset them in one call."""
        task_ids, init_ids = list(self._pins["task_id"]), list(self._pins["fixed_init_state_id"])
        for i in range(self.num_envs):
            if i in assignments:
                spec = assignments[i]
                task_ids[i] = spec.task_id if spec.task_id is not None else self._pins["task_id"][i]
                init_ids[i] = spec.init_state_id
            elif self.loaded_tasks[i] is not None:
                task_ids[i] = self.loaded_tasks[i]  # its autoreset keeps the loaded scene
        self.envs.set_attr("task_id", task_ids)
        self.envs.set_attr("fixed_init_state_id", init_ids)
        seeds = [assignments[i].seed if i in assignments else None for i in range(self.num_envs)]
        options = {}
        if not first:
            options["reset_mask"] = np.array([i in assignments for i in range(self.num_envs)])
        return self.envs.reset(seed=seeds, options=options)[0]

    def _unpin(self) -> None:
        if self._pins is not None and not getattr(self.envs, "closed", False):
            for name, values in self._pins.items():
                self.envs.set_attr(name, values)

    # ---------------------------------------------------------------------------------------- running
    @torch.no_grad()  # not inference_mode: in-process sims (ManiSkill) keep tensors made here
    def run(
        self, specs: Sequence[EpisodeSpec], deterministic: bool = True, recorder: Recorder | None = None,
        video_dir: str | os.PathLike | None = None, video_episodes: int = 0, video_prefix: str = "episode",
    ) -> list[EpisodeResult]:
        """Play every spec once; results in spec order."""
        try:
            return self._run(specs, deterministic, recorder, video_dir, video_episodes, video_prefix)
        finally:
            if not self.stepper.stepping:  # else an error left steps in flight: the vector env is unusable anyway
                self._unpin()

    def _run(self, specs, deterministic, recorder, video_dir, video_episodes, video_prefix) -> list[EpisodeResult]:
        n = self.num_envs
        queue = TaskAffinityQueue(specs)
        job = np.full(n, -1)
        counter = EpisodeCounter(n, self.mode)
        frames: dict[int, list[np.ndarray]] = {}
        results: dict[int, EpisodeResult] = {}
        record_video = video_dir is not None and video_episodes > 0

        def assign(envs_free: Sequence[int], first: bool, obs_np: Any) -> Any:
            chosen = {}
            # envs whose loaded task has queued episodes choose first, so that the others do not take them
            for i in sorted(envs_free, key=lambda i: not queue.has(self.loaded_tasks[i])):
                if queue:
                    job[i] = queue.take(self.loaded_tasks[i])
                    chosen[i] = specs[job[i]]
            if first:  # every env needs a first reset, idle ones included: on a task they have (no rebuild)
                for i in range(n):
                    if i not in chosen:
                        task = self.loaded_tasks[i] if self.loaded_tasks[i] is not None else specs[0].task_id
                        chosen[i] = EpisodeSpec(task_id=task) if specs else EpisodeSpec()
            if not chosen:
                return obs_np
            obs_np = self._reset(chosen, first, obs_np)
            counter.restart(chosen)
            for i in chosen:
                if record_video and 0 <= job[i] < video_episodes:
                    frames[job[i]] = [self._frame(_row(obs_np, i), i, 0, 0.0, 0.0, False)]
            return obs_np

        stepper = self.stepper
        # one generator per episode (sampled runs): its actions do not depend on its env slot or batch
        generators = None if deterministic else seeded_generators(len(specs), self.device)
        idle = torch.Generator(device=self.device).manual_seed(0)  # envs without an episode: actions ignored

        def act_and_send(stage: int, stage_obs: Any) -> None:
            rows = stepper.rows[stage]
            obs = to_torch(stage_obs, self.device)
            row_gens = None if generators is None else [generators[job[i]] if job[i] >= 0 else idle for i in rows]
            with row_generators(row_gens):
                actions, log_probs, _ = self.policy.act(obs, deterministic=deterministic)
            if recorder is not None:
                recorder(obs, actions, log_probs, job[rows.start:rows.stop].copy())
            stepper.send(stage, self.policy.env_actions(actions))

        obs_np = assign(range(n), True, None)
        for stage, stage_obs in enumerate(split(obs_np, stepper.rows)):
            act_and_send(stage, stage_obs)
        while True:
            held = []  # stages with an episode end: they step again after this vector step's resets
            for stage in range(stepper.num_stages):
                stage_obs = stepper.wait(stage)
                rows = stepper.rows[stage]
                if (stepper.dones(stage) & (job[rows.start:rows.stop] >= 0)).any():
                    held.append(stage)
                else:  # infer for this stage while the next ones still step
                    act_and_send(stage, stage_obs)
            obs_np, rewards, terminated, truncated, infos = stepper.results()
            if record_video:
                stepper.drain()  # videos may call render() on the envs: no step in flight
            ended = {episode.env_index: episode for episode in counter.step(rewards, terminated, truncated, infos,
                                                                             active=job >= 0)}
            freed = []
            for i in np.flatnonzero(job >= 0):
                if job[i] in frames:
                    final = i in ended and self.mode == AutoresetMode.SAME_STEP
                    last = infos[episodes.FINAL_OBS][i] if final else _row(obs_np, i)
                    frames[job[i]].append(self._frame(last, i, int(counter.lengths[i]), float(rewards[i]),
                                                      float(counter.returns[i]), bool(counter.success[i])))
                if i in ended:
                    results[int(job[i])] = self._result(ended[i], int(job[i]), specs[job[i]], frames.pop(job[i], None),
                                                        video_dir, video_prefix)
                    queue.done(specs[job[i]].task_id)
                    job[i] = -1
                    freed.append(i)
            if freed and queue:
                stepper.drain()  # a reset needs every env idle
                obs_np = assign(freed, False, obs_np)
            if not (job >= 0).any():
                stepper.drain()  # steps of envs left idle: results unused
                break
            for stage in held:
                act_and_send(stage, split(obs_np, [stepper.rows[stage]])[0])
        return [results[k] for k in sorted(results)]

    def _result(self, episode: Episode, index: int, spec: EpisodeSpec, frames: list[np.ndarray] | None,
                video_dir: str | os.PathLike | None, video_prefix: str) -> EpisodeResult:
        task_id = episode.task_id if episode.task_id is not None else spec.task_id
        video = _write_video(frames, video_dir, f"{video_prefix}-{index:04d}", self._fps()) if frames else None
        return EpisodeResult(**dict(asdict(episode), task_id=task_id,
                                    task_name=episode.task_name or self.task_names.get(task_id, "")),
                             index=index, spec=spec, video=video)

    # ----------------------------------------------------------------------------------------- video
    def _frame(self, one: Any, i: int, step: int, reward: float, episode_return: float, success: bool):
        """A video frame from env ``i``'s (unbatched) observation ``one``, or from its ``render()``."""
        if isinstance(one, dict) and one.get("images"):
            from vla_gym.core.video import video_frame

            return video_frame(one["images"], instruction=str(one.get("instruction", "")), step=step, reward=reward,
                               episode_return=episode_return, success=success)
        frame = self.envs.call("render")[i]
        if frame is None:
            raise ValueError("videos need camera images in the observation or an env made with render_mode='rgb_array'")
        return np.asarray(frame)

    def _fps(self) -> float:
        return float(self.envs.metadata.get("render_fps") or env_attr(self.envs, "metadata", {}).get("render_fps") or 20)


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


# ------------------------------------------------------------------------------------------- reports
def summarize(results: Sequence[Episode]) -> dict[str, Any]:
    """Overall and per-task success rate, mean return and mean length (:func:`vla_gym.core.episodes.summarize`)."""
    def stats(rows: Sequence[Episode]) -> dict[str, float]:
        means = episodes.summarize(rows)
        nan = float("nan")
        return {
            "episodes": len(rows),
            "success_rate": means.get(episodes.SUCCESS_ONCE, nan),
            "mean_return": means.get(episodes.RETURN, nan),
            "mean_length": means.get(episodes.LENGTH, nan),
        }

    by_task: dict[str, list[EpisodeResult]] = collections.defaultdict(list)
    for result in results:
        if result.task_name:
            by_task[result.task_name].append(result)
    return {"overall": stats(results), "tasks": {name: stats(rows) for name, rows in sorted(by_task.items())}}


def markdown_table(summary: dict[str, Any]) -> str:
    lines = ["| task | episodes | success rate | mean return | mean length |", "|---|---:|---:|---:|---:|"]
    rows = list(summary["tasks"].items()) + [("**all**", summary["overall"])]
    for name, s in rows:
        rate = "n/a" if math.isnan(s["success_rate"]) else f"{s['success_rate']:.3f}"
        lines.append(f"| {name} | {s['episodes']} | {rate} | {s['mean_return']:.3f} | {s['mean_length']:.1f} |")
    return "\n".join(lines) + "\n"


def write_report(results: Sequence[EpisodeResult], directory: str | os.PathLike, header: str = "") -> dict[str, Any]:
    """Write ``eval.md`` (per-task table) and ``eval.json`` (summary + every episode); returns the summary."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    summary = summarize(results)
    episodes = [dict(asdict(r), spec=asdict(r.spec)) for r in results]
    atomic_write_text(directory / "eval.json", json.dumps({"summary": summary, "episodes": episodes}, indent=2))
    atomic_write_text(directory / "eval.md", (f"{header}\n\n" if header else "") + markdown_table(summary))
    return summary


def atomic_write_text(path: pathlib.Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
