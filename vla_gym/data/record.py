"""``vla-gym demos``: record scripted-expert episodes into a LeRobot v3 dataset, in parallel and resumably.

    vla-gym demos VLA/LiberoObject-v0 --episodes-per-task 20 --image-size 128 --out data/libero_object --workers 2
    vla-gym demos VLA/ManiSkill-PushCube-v0 --episodes-per-task 30 --noise 0.3 --cameras main --out data/pushcube
    vla-gym demos VLA/MetaWorldMT10-v0 --episodes-per-task 20 --out data/mt10

    >>> from vla_gym.data.record import record_demos
    >>> summary = record_demos("VLA/ManiSkill-PushCube-v0", "data/pushcube", episodes_per_task=4)   # doctest: +SKIP
    >>> summary["episodes"], summary["attempts"]                                                     # doctest: +SKIP
    (4, 4)

Episodes (jobs) are fixed up front: for every task of the env id that has an expert
(:func:`vla_gym.data.experts.dispatch.has_expert`; ``--tasks`` narrows them), ``--episodes-per-task`` attempts: initial states
``--init-states`` (default 0..N-1) for tasks with fixed initial states (LIBERO), or simulator seeds
``seed .. seed+N-1`` for tasks whose initial state comes from the seed (ManiSkill, Meta-World). ``--workers`` processes
(spawned, each with its own env, jobs handed out in task order so a worker rarely rebuilds a scene) record
them; each finished episode is written at once to ``OUT/.staging/`` (parquet, then a small JSON marker, both
atomic). A killed run keeps those: the same command again runs only the missing jobs. When all are done the
successful episodes (all with ``--keep-failures``) are laid out as the dataset (:func:`vla_gym.data.lerobot.write_dataset`),
``OUT/meta/vla_gym_demos.json`` records the command and per-task expert success, and the staging folder goes.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import pathlib
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from vla_gym.core.errors import MissingSimulatorError
from vla_gym.core.registry import check_env_id
from vla_gym.data.expert_episodes import record_episode
from vla_gym.data.experts.dispatch import has_expert
from vla_gym.data.lerobot import episode_table, write_dataset
from vla_gym.runtime.cli_args import (
    add_init_states,
    add_legacy_first_init_state,
    add_tasks,
    first_missing_folder,
    init_state_range,
    parser_with_examples,
)
from vla_gym.runtime.receipt import receipt
from vla_gym.tasks.libero import suite_tasks
from vla_gym.tasks.libero_pro import benchmark_name
from vla_gym.tasks.maniskill import task_specs
from vla_gym.tasks.metaworld import task_specs as metaworld_task_specs

SUMMARY_PATH = "meta/vla_gym_demos.json"
ROBOT_TYPES = {"libero": "panda", "maniskill": "panda", "metaworld": "sawyer"}


@dataclass(frozen=True)
class DemoJob:
    """One episode to record: ``reset(seed=seed, options={task_id, init_state_id})``."""

    index: int
    task_id: int
    init_state_id: int | None
    seed: int


def env_tasks(env_id: str) -> tuple:
    """The TaskSpecs of a registered id, from the task tables (no simulator is built)."""
    entry = check_env_id(env_id)
    if entry.backend == "libero":
        perturbation = entry.kwargs.get("perturbation")  # a LIBERO-PRO id: its own tasks
        return suite_tasks(benchmark_name(entry.kwargs["suite"], perturbation) if perturbation else entry.kwargs["suite"])
    if entry.backend == "maniskill":
        return task_specs(entry.kwargs["tasks"])
    if entry.backend == "metaworld":
        return metaworld_task_specs(entry.kwargs["tasks"])
    raise ValueError(f"{env_id}: vla-gym demos records LIBERO, ManiSkill and Meta-World ids (scripted experts need "
                     f"privileged simulator state); {entry.backend} has no expert")


def plan_jobs(tasks: Sequence, episodes_per_task: int, seed: int = 0, task_ids: Sequence[int] | None = None,
              first_init_state: int = 0) -> list[DemoJob]:
    """Every episode to record, in task order (module docstring)."""
    if episodes_per_task < 1:
        raise ValueError(f"--episodes-per-task must be >= 1, got {episodes_per_task}")
    chosen = [t for t in tasks if task_ids is None or t.index in task_ids]
    if task_ids is not None and len(chosen) != len(set(task_ids)):
        raise ValueError(f"--tasks {sorted(task_ids)}: this env has task ids 0..{len(tasks) - 1}")
    with_expert = [t for t in chosen if has_expert(t)]
    if not with_expert:
        raise ValueError(f"none of the {len(chosen)} chosen tasks has a scripted expert "
                         f"(e.g. {chosen[0].suite}/{chosen[0].name}); see vla_gym/data/experts/dispatch.py")
    jobs: list[DemoJob] = []
    for task in with_expert:
        if task.num_init_states:
            ids = range(first_init_state, first_init_state + episodes_per_task)
            if ids.start < 0 or ids.stop > task.num_init_states:
                raise ValueError(f"initial states {ids.start}..{ids.stop - 1} asked, but task {task.name!r} has "
                                 f"0..{task.num_init_states - 1}: choose --init-states within them")
            starts = [(i, seed + i) for i in ids]
        else:
            starts = [(None, seed + k) for k in range(episodes_per_task)]
        for init_state_id, episode_seed in starts:
            jobs.append(DemoJob(len(jobs), task.index, init_state_id, episode_seed))
    return jobs


# ------------------------------------------------------------------------------------------ workers
_ENV_CACHE: dict[str, Any] = {}


def _worker_env(env_id: str, env_kwargs: dict):
    key = json.dumps([env_id, env_kwargs], sort_keys=True)
    if key not in _ENV_CACHE:
        import gymnasium as gym

        import vla_gym  # noqa: F401  (registers the ids)

        for old in _ENV_CACHE.values():
            old.close()
        _ENV_CACHE.clear()
        _ENV_CACHE[key] = gym.make(env_id, **env_kwargs)
    return _ENV_CACHE[key]


def _close_worker_envs() -> None:
    for env in _ENV_CACHE.values():
        env.close()
    _ENV_CACHE.clear()


def run_job(env_id: str, env_kwargs: dict, job: DemoJob, noise: float, staging: str, keep_failures: bool) -> dict:
    """Record one episode and stage it (parquet if kept, then the JSON marker); returns the marker."""
    import pyarrow.parquet as pq  # the [data] extra

    env = _worker_env(env_id, env_kwargs)
    rng = np.random.default_rng([job.seed, job.task_id, 0 if job.init_state_id is None else 1 + job.init_state_id])
    episode = record_episode(env, seed=job.seed, task_id=job.task_id, init_state_id=job.init_state_id, noise=noise,
                             rng=rng)
    staging = pathlib.Path(staging)
    fps = float(env.unwrapped.metadata.get("render_fps", 20))
    if episode.succeeded or keep_failures:
        path = staging / f"job-{job.index:06d}.parquet"
        tmp = staging / f".job-{job.index:06d}.{os.getpid()}.tmp"
        pq.write_table(episode_table(episode, fps), tmp)
        os.replace(tmp, path)
    marker = {**asdict(job), "success": episode.succeeded, "length": len(episode), "task_name": episode.task_name,
              "fps": fps}
    _write_json(staging / f"job-{job.index:06d}.json", marker)
    return marker


def _write_json(path: pathlib.Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------- driver
def record_demos(env_id: str, out: str | os.PathLike, episodes_per_task: int = 10, workers: int = 1, seed: int = 0,
                 noise: float = 0.0, task_ids: Sequence[int] | None = None, first_init_state: int = 0,
                 keep_failures: bool = False, progress: bool = True, **env_kwargs) -> dict[str, Any]:
    """Record (or finish recording) the dataset at ``out``; returns the summary (module docstring)."""
    out = pathlib.Path(out)
    spec = {"env_id": env_id, "env_kwargs": env_kwargs, "episodes_per_task": episodes_per_task, "seed": seed,
            "noise": noise, "task_ids": sorted(task_ids) if task_ids is not None else None,
            "first_init_state": first_init_state, "keep_failures": keep_failures}
    staging = out / ".staging"
    summary_path = out / SUMMARY_PATH
    if summary_path.exists() and not staging.exists():
        done = json.loads(summary_path.read_text())
        if done["spec"] != spec:
            raise ValueError(f"{out} already holds a finished dataset made with {done['spec']}; "
                             "choose another --out (or delete it) to record with other settings")
        return done
    if staging.exists() and (staging / "spec.json").exists():
        previous = json.loads((staging / "spec.json").read_text())
        if previous != spec:
            raise ValueError(f"{out} holds an unfinished recording with other settings ({previous}); rerun that "
                             f"command to finish it, or delete {staging} to start over")
    tasks = env_tasks(env_id)  # bad ids, tasks and init states fail here, before anything is written
    jobs = plan_jobs(tasks, episodes_per_task, seed, task_ids, first_init_state)
    made = first_missing_folder(staging)  # what a failure before the first recorded episode removes again
    staging.mkdir(parents=True, exist_ok=True)
    _write_json(staging / "spec.json", spec)

    markers = {job.index: json.loads((staging / f"job-{job.index:06d}.json").read_text())
               for job in jobs if (staging / f"job-{job.index:06d}.json").exists()}
    pending = [job for job in jobs if job.index not in markers]
    resumed = len(markers)
    bar = _progress(len(jobs), len(markers), env_id, progress)
    _show(bar, markers)
    args = (noise, str(staging), keep_failures)
    try:
        if workers <= 1 or len(pending) <= 1:
            for job in pending:
                markers[job.index] = run_job(env_id, env_kwargs, job, *args)
                _show(bar, markers, advance=True)
        else:
            context = multiprocessing.get_context("spawn")  # a fork after SAPIEN / EGL start-up hangs (FACTS)
            with concurrent.futures.ProcessPoolExecutor(min(workers, len(pending)), mp_context=context) as pool:
                futures = [pool.submit(run_job, env_id, env_kwargs, job, *args) for job in pending]
                try:
                    for future in concurrent.futures.as_completed(futures):
                        marker = future.result()
                        markers[marker["index"]] = marker
                        _show(bar, markers, advance=True)
                except BaseException:
                    pool.shutdown(wait=False, cancel_futures=True)  # a failed job (or Ctrl-C) stops the run now
                    raise
    except BaseException:
        if made is not None and not any(staging.glob("job-*.json")):  # nothing recorded: leave nothing behind
            shutil.rmtree(made, ignore_errors=True)
        raise
    finally:
        _close_worker_envs()
        if bar is not None:
            bar.close()
    return _finish(out, staging, spec, jobs, markers, tasks, env_id, resumed)


def _progress(total: int, done: int, env_id: str, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=done, unit="episode", desc=f"demos {env_id}", dynamic_ncols=True)


def _show(bar, markers: dict, advance: bool = False) -> None:
    if bar is None:
        return
    if advance:
        bar.update(1)
    kept = sum(m["success"] for m in markers.values())
    bar.set_postfix({"solved": f"{kept}/{len(markers)}"}, refresh=False)


def _finish(out: pathlib.Path, staging: pathlib.Path, spec: dict, jobs: list[DemoJob], markers: dict, tasks,
            env_id: str, resumed: int) -> dict[str, Any]:

    kept = [job for job in jobs if markers[job.index]["success"] or spec["keep_failures"]]
    if not kept:
        raise RuntimeError(f"the expert solved none of the {len(jobs)} episodes of {env_id}; nothing to write "
                           f"(staged outcomes are in {staging})")
    fps = markers[jobs[0].index]["fps"]
    info = write_dataset(out, [staging / f"job-{job.index:06d}.parquet" for job in kept], fps=fps,
                         robot_type=ROBOT_TYPES.get(check_env_id(env_id).backend))
    per_task: dict[str, dict[str, int]] = {}
    for job in jobs:
        row = per_task.setdefault(tasks[job.task_id].name, {"task_id": job.task_id, "attempts": 0, "solved": 0})
        row["attempts"] += 1
        row["solved"] += int(markers[job.index]["success"])
    played = [{"task_id": job.task_id, "init_state_id": job.init_state_id, "seed": job.seed,
               "success": bool(markers[job.index]["success"]), "kept": job in kept} for job in jobs]
    summary = {"spec": spec, "episodes": info["total_episodes"], "frames": info["total_frames"],
               "attempts": len(jobs), "solved": sum(r["solved"] for r in per_task.values()),
               "resumed_with": resumed, "tasks": per_task, "played": played,
               "receipt": receipt(env_id, spec["env_kwargs"])}
    _write_json(out / SUMMARY_PATH, summary)
    shutil.rmtree(staging)
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    lines = ["| task | solved / attempts |", "|---|---:|"]
    for name, row in summary["tasks"].items():
        lines.append(f"| {row['task_id']}: {name} | {row['solved']} / {row['attempts']} |")
    lines.append(f"| **all** | {summary['solved']} / {summary['attempts']} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- CLI
EXAMPLES = (
    "vla-gym demos VLA/ManiSkill-PushCube-v0 --episodes-per-task 20 --out data/pushcube",
    "vla-gym demos VLA/LiberoObject-v0 --init-states 0-14 --image-size 128 --workers 2 --out data/libero_object",
    "vla-gym demos VLA/LiberoSpatial-v0 --tasks 0-3 --init-states 0 1 2 --out data/spatial_0_3",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser_with_examples(None, "Record scripted-expert episodes as a LeRobot v3 dataset (docs/sft.md).", EXAMPLES,
                         parser=parser)
    parser.add_argument("env_id", help="a VLA/... id with scripted experts (LIBERO Object/Spatial, ManiSkill PushCube, Meta-World)")
    parser.add_argument("--out", required=True, help="dataset directory (LeRobot v3); rerun to resume")
    parser.add_argument("--episodes-per-task", type=int, default=None,
                        help="episodes attempted per task (default 10; with --init-states: one per init state)")
    parser.add_argument("--workers", type=int, default=1, help="processes, each with its own env")
    parser.add_argument("--seed", type=int, default=0, help="first simulator seed")
    parser.add_argument("--noise", type=float, default=0.0,
                        help="DART: std of Gaussian noise on the executed actions (labels stay clean), e.g. 0.3")
    add_tasks(parser)
    add_init_states(parser, "initial states of each task with fixed ones (LIBERO; default 0 .. EPISODES_PER_TASK-1)")
    add_legacy_first_init_state(parser)
    parser.add_argument("--keep-failures", action="store_true", help="keep episodes the expert did not solve")
    parser.add_argument("--image-size", type=int, help="camera resolution (env default otherwise)")
    parser.add_argument("--cameras", nargs="+", help="camera roles to record (env default otherwise)")
    parser.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE",
                        help="extra env constructor argument (YAML value), repeatable")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def env_kwargs_from_args(args: argparse.Namespace) -> dict[str, Any]:
    import yaml

    kwargs: dict[str, Any] = {}
    if args.image_size is not None:
        kwargs["image_size"] = args.image_size
    if args.cameras:
        kwargs["cameras"] = list(args.cameras)
    for item in args.env_kwarg:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--env-kwarg {item!r}: write KEY=VALUE")
        try:
            kwargs[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ValueError(f"--env-kwarg {item!r}: the value is not valid YAML; quote it") from None
    return kwargs


#: the flag that sets each env keyword argument (others: --env-kwarg KEY=VALUE)
_KWARG_FLAGS = {"image_size": "--image-size", "cameras": "--cameras"}


def _name_the_flags(message: str, kwargs: dict[str, Any]) -> str:
    """``message`` plus the flags that gave the env keyword arguments it names, for an env's own errors."""
    named = [key for key in kwargs if re.search(rf"\b{re.escape(key)}\b", message)]
    if not named:
        return message
    flags = [_KWARG_FLAGS.get(key, f"--env-kwarg {key}=...") for key in named]
    return f"{message} (fix or drop {', '.join(flags)})"


def main(args: argparse.Namespace) -> int:
    """``vla-gym demos``: bad input ends in one line naming the flag (exit 2; 1: the simulator is not installed),
    and a recording that fails before its first episode leaves no directory behind."""
    kwargs: dict[str, Any] = {}
    try:
        kwargs = env_kwargs_from_args(args)
        episodes, first = init_state_range(args.init_states, args.first_init_state, args.episodes_per_task)
        summary = record_demos(
            args.env_id, args.out, episodes_per_task=10 if episodes is None else episodes, workers=args.workers, seed=args.seed,
            noise=args.noise, task_ids=args.tasks, first_init_state=first, keep_failures=args.keep_failures,
            progress=not args.no_progress, **kwargs)
    except MissingSimulatorError as error:  # the message says what to install
        print(f"vla-gym demos: {args.env_id} cannot run on this machine.\n{error}", file=sys.stderr)
        return 1
    except (ValueError, KeyError, TypeError, RuntimeError, argparse.ArgumentTypeError) as error:
        text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
        text = str(text).split(" was raised from the environment creator for ")[0]  # gymnasium.make's suffix
        print(f"vla-gym demos: {_name_the_flags(' '.join(str(text).split()), kwargs)}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    print(f"{summary['episodes']} episodes, {summary['frames']} frames -> {args.out} (LeRobot v3.0)")
    return 0
