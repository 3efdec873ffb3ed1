"""A LIBERO worker's memory and speed over many resets with task changes: does RSS stay flat?

    python experiments/reliability_soaks/memory_soak.py --resets 2000   # rows in results/memory_soak_libero130.jsonl
    python experiments/reliability_soaks/memory_soak.py --summary --plot runs/memory_soak/rss.png
    nice -n 19 python experiments/reliability_soaks/memory_soak.py --breakdown   # what the baseline RSS is made of
    python experiments/reliability_soaks/memory_soak.py --resets 3 --out /tmp/soak.jsonl --summary \
        --results /tmp/soak.json                                                  # short form

One sub-env of ``--env`` (``VLA/Libero130-v0``: 130 tasks, so nearly every reset rebuilds the scene) runs in the
worker process of an async vector env (``vla_gym.make_vec(..., vectorization="async")``), main camera only,
``--image-size`` px. Reset ``i`` is ``reset(seed=--seed + i)``: the env's own seeded draw picks the task and the
initial state, so the order of tasks is fixed and a resumed run goes on with the same episodes. Each episode takes
``--steps`` random actions. After every episode one JSON row is appended to ``--out`` (flushed, so a stopped run
loses at most the episode it was in): ``reset`` (index), ``task_id``, ``task_changed``, ``worker_rss_mb`` (VmRSS
of the worker process that holds the simulator, from /proc/PID/status; ``worker_anon_mb`` / ``worker_file_mb`` its
anonymous and file-backed parts, ``worker_hwm_mb`` its peak), ``parent_rss_mb`` (this process), ``reset_s``,
``steps_per_s``, ``worker_pid`` and ``worker_resets`` (resets this worker process has done: a resumed run starts a
new worker, and the growth slope is measured within each worker's life).

The rows are kept with the results (``experiments/reliability_soaks/results/memory_soak_libero130.jsonl``, about
450 bytes a reset), so a run stopped on one machine goes on from a fresh clone on the next. ``--resets N`` is the
total wanted: a file that already holds N rows is not extended (run again with a larger N to go on). ``--summary``
prints the curve (RSS at resets 0/100/500/1000/2000, growth in MB per 100 resets after ``--warmup`` resets, median
steps/s and reset seconds in the first vs the last decile) and writes it to ``--results``
(``experiments/reliability_soaks/results/memory_soak.json``); ``--plot PNG`` draws RSS and steps/s against the reset
index (matplotlib).
``--breakdown`` measures, in fresh processes, what a worker's RSS is made of (python, vla_gym, robosuite/LIBERO,
torch, a built scene, its first render, MuJoCo's asset cache, the mappings that hold it) and stores it under
``breakdown`` in ``--results``.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import pathlib
import sys
import time

import numpy as np

from vla_gym.runtime.cli_args import script_parser
from vla_gym.runtime.memory import proc_status
from vla_gym.runtime.receipt import package_versions

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results" / "memory_soak.json"
ROWS = HERE / "results" / "memory_soak_libero130.jsonl"
CHECKPOINTS = (0, 100, 500, 1000, 2000)
MB = 1024.0


def read_rows(path: pathlib.Path) -> list[dict]:
    """The rows of a soak file; a last line cut by a stopped run is dropped."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def soak(env_id: str, resets: int, out: pathlib.Path, steps: int, image_size: int, seed: int) -> list[dict]:
    """Run (or go on with) the soak until ``out`` holds ``resets`` rows."""
    import vla_gym

    rows = read_rows(out)
    if rows and rows[-1].get("env_id", env_id) != env_id:
        raise SystemExit(f"{out} holds a soak of {rows[-1]['env_id']}, not {env_id}: choose another --out")
    start = len(rows)
    if start >= resets:
        print(f"{out} already holds {start} resets (>= --resets {resets}); pass a larger --resets to go on")
        return rows
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(row) + "\n" for row in rows))  # drops a cut last line
    print(f"soak of {env_id}: resets {start}..{resets - 1} -> {out}", flush=True)
    envs = vla_gym.make_vec(env_id, 1, vectorization="async", cameras=("main",), image_size=image_size,
                            step_timeout=600, on_worker_failure="respawn", max_worker_restarts=3)
    rng = np.random.default_rng([seed, start])
    previous_task = rows[-1]["task_id"] if rows else None
    worker_resets, worker_pid = 0, None
    try:
        with out.open("a") as sink:
            for index in range(start, resets):
                started = time.perf_counter()
                _, infos = envs.reset(seed=seed + index)
                reset_s = time.perf_counter() - started
                started = time.perf_counter()
                for _ in range(steps):
                    envs.step(rng.uniform(-1, 1, size=envs.action_space.shape).astype(envs.action_space.dtype))
                step_s = time.perf_counter() - started
                pid = envs.processes[0].pid
                if pid != worker_pid:
                    worker_pid, worker_resets = pid, 0
                worker, parent = proc_status(pid), proc_status()
                task = int(infos["task_id"][0])
                row = {
                    "reset": index, "env_id": env_id, "task_id": task, "task_name": str(infos["task_name"][0]),
                    "task_changed": task != previous_task,
                    "worker_rss_mb": round(worker.get("VmRSS", float("nan")), 1),
                    "worker_anon_mb": round(worker.get("RssAnon", float("nan")), 1),
                    "worker_file_mb": round(worker.get("RssFile", float("nan")), 1),
                    "worker_hwm_mb": round(worker.get("VmHWM", float("nan")), 1),
                    "parent_rss_mb": round(parent["VmRSS"], 1),
                    "reset_s": round(reset_s, 3), "steps_per_s": round(steps / step_s, 2) if steps else None,
                    "worker_pid": pid, "worker_resets": worker_resets, "worker_restarts": envs.worker_restarts,
                    "image_size": image_size, "steps": steps, "time": round(time.time(), 1),
                }
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                rows.append(row)
                previous_task, worker_resets = task, worker_resets + 1
                if index % 25 == 0 or index == resets - 1:
                    print(f"reset {index}: task {task:3d}  worker RSS {row['worker_rss_mb']:7.1f} MB  "
                          f"parent {row['parent_rss_mb']:6.1f} MB  reset {reset_s:5.2f} s  "
                          f"{row['steps_per_s']} steps/s", flush=True)
    finally:
        envs.close()
    return rows


# ------------------------------------------------------------------------------------------------ summary
def within_worker_slope(rows: list[dict], warmup: int) -> float | None:
    """Growth of the worker's RSS in MB per 100 resets: least squares within each worker's life (its
    ``worker_resets`` >= ``warmup``), pooled over workers (a resumed run starts a new worker at its own RSS)."""
    groups: dict[int, list[tuple[float, float]]] = {}
    for row in rows:
        if row["worker_resets"] >= warmup:
            groups.setdefault(row["worker_pid"], []).append((row["worker_resets"], row["worker_rss_mb"]))
    num = den = 0.0
    for points in groups.values():
        x, y = np.array(points).T
        num += float(((x - x.mean()) * (y - y.mean())).sum())
        den += float(((x - x.mean()) ** 2).sum())
    return round(100.0 * num / den, 2) if den > 0 else None


def decile_medians(values: list[float]) -> dict[str, float | None]:
    """Medians of the first and the last tenth (medians: a run paused or slowed for a moment moves no figure)."""
    values = [v for v in values if v is not None]
    if not values:
        return {"first_decile": None, "last_decile": None}
    k = max(1, len(values) // 10)
    return {"first_decile": round(float(np.median(values[:k])), 3),
            "last_decile": round(float(np.median(values[-k:])), 3)}


def summarize(rows: list[dict], warmup: int) -> dict:
    """The curve's figures (module docstring)."""
    if not rows:
        raise SystemExit("no rows yet: run the soak first (--resets N --out FILE)")
    by_index = {row["reset"]: row for row in rows}
    workers = list(dict.fromkeys(row["worker_pid"] for row in rows))
    rss = np.array([row["worker_rss_mb"] for row in rows])
    step = max(1, len(rows) // 200)
    return {
        "env_id": rows[0]["env_id"], "image_size": rows[0]["image_size"], "steps_per_episode": rows[0]["steps"],
        "resets": len(rows), "task_changes": sum(row["task_changed"] for row in rows),
        "worker_processes": len(workers), "worker_restarts": max(row["worker_restarts"] for row in rows),
        "hours": round((rows[-1]["time"] - rows[0]["time"]) / 3600, 2),
        "checkpoints": [
            {key: by_index[k][key] for key in ("reset", "task_id", "worker_rss_mb", "worker_anon_mb", "worker_file_mb",
                                                "parent_rss_mb", "worker_resets")}
            for k in CHECKPOINTS if k in by_index],
        "warmup_resets": warmup,
        "slope_mb_per_100_resets": within_worker_slope(rows, warmup),
        "worker_rss_mb": {"min": float(rss.min()), "median": float(np.median(rss)), "max": float(rss.max()),
                          "last_100_mean": round(float(rss[-100:].mean()), 1)},
        "parent_rss_mb": {"first": rows[0]["parent_rss_mb"], "last": rows[-1]["parent_rss_mb"]},
        "steps_per_s": decile_medians([row["steps_per_s"] for row in rows]),
        "reset_s": decile_medians([row["reset_s"] for row in rows]),
        "curve": [[row["reset"], row["worker_rss_mb"], row["worker_anon_mb"]] for row in rows[::step]],
    }


def print_summary(summary: dict) -> None:
    print(f"{summary['env_id']}: {summary['resets']} resets ({summary['task_changes']} task changes), "
          f"{summary['worker_processes']} worker process(es), {summary['hours']} h")
    print("reset  task  worker RSS MB  (anon / file)  parent RSS MB")
    for row in summary["checkpoints"]:
        print(f"{row['reset']:5d}  {row['task_id']:4d}  {row['worker_rss_mb']:13.1f}  "
              f"({row['worker_anon_mb']:.0f} / {row['worker_file_mb']:.0f})  {row['parent_rss_mb']:13.1f}")
    print(f"growth after {summary['warmup_resets']} resets: {summary['slope_mb_per_100_resets']} MB per 100 resets; "
          f"worker RSS min/median/max {summary['worker_rss_mb']['min']:.0f}/{summary['worker_rss_mb']['median']:.0f}/"
          f"{summary['worker_rss_mb']['max']:.0f} MB")
    print(f"steps/s, median of the first vs the last decile: {summary['steps_per_s']['first_decile']} -> "
          f"{summary['steps_per_s']['last_decile']}; reset s: {summary['reset_s']['first_decile']} -> "
          f"{summary['reset_s']['last_decile']}")


def plot(rows: list[dict], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [row["reset"] for row in rows]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(x, [row["worker_rss_mb"] for row in rows], label="worker RSS (MB)")
    ax.plot(x, [row["worker_anon_mb"] for row in rows], label="worker anonymous RSS (MB)", alpha=0.7)
    ax.set_xlabel("reset")
    ax.set_ylabel("MB")
    twin = ax.twinx()
    speed = [row["steps_per_s"] or 0.0 for row in rows]
    rolling = [float(np.median(speed[max(0, i - 25):i + 1])) for i in range(len(speed))]
    twin.plot(x, rolling, color="gray", alpha=0.8, label="steps/s (median of 25)")
    twin.set_ylabel("steps/s (median of the last 25 episodes)")
    ax.legend(loc="upper left")
    ax.set_title(f"{rows[0]['env_id']}, {rows[0]['image_size']} px, {rows[0]['steps']} steps per episode")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def update_results(path: pathlib.Path, key: str | None, data: dict) -> None:
    """Write ``data`` (under ``key``, or as the top level but for the other key kept) to ``path`` with the commit."""
    from vla_gym.trainers.runtime.results import git_commit, write_results

    old = json.loads(path.read_text()) if path.is_file() else {}
    new = {**old, key: data} if key else {**data, **({"breakdown": old["breakdown"]} if "breakdown" in old else {})}
    new["commit"] = git_commit()
    write_results(path, new)
    print(f"results: {path}")


# ---------------------------------------------------------------------------------------------- breakdown
def _smaps_groups(pid: int | str = "self", top: int = 8) -> list[list]:
    """The mappings that hold the most RSS, grouped by file (anonymous ones as ``[anon]`` / ``[heap]``), in MB."""
    groups: dict[str, float] = {}
    name = "[anon]"
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            first = line.split()
            if first and "-" in first[0] and len(first) >= 5 and not first[0].endswith(":"):
                name = os.path.basename(first[5]) if len(first) >= 6 else "[anon]"
            elif first and first[0] == "Rss:":
                groups[name] = groups.get(name, 0.0) + int(first[1]) / MB
    return [[key, round(value, 1)] for key, value in sorted(groups.items(), key=lambda kv: -kv[1])[:top]]


def _breakdown_child(queue, env_id: str, image_size: int, with_torch: bool, task_changes: int) -> None:
    stages = [["python started", proc_status()["VmRSS"]]]
    try:
        if with_torch:
            import torch  # noqa: F401 - what a trainer's worker holds: spawn re-imports trainers/grpo.py there

            stages.append(["import torch", proc_status()["VmRSS"]])
        import gymnasium as gym

        import vla_gym  # noqa: F401 - registers the ids
        stages.append(["import vla_gym, gymnasium", proc_status()["VmRSS"]])
        from vla_gym.backends.libero.env import import_libero

        import_libero()
        stages.append(["import robosuite, LIBERO", proc_status()["VmRSS"]])
        env = gym.make(env_id, cameras=("main",), image_size=image_size)
        stages.append(["gym.make (no scene yet)", proc_status()["VmRSS"]])
        backend = env.unwrapped.backend
        backend.load(env.unwrapped.tasks[0])  # the scene and its EGL context; no render yet
        stages.append(["scene built (MjModel, EGL context), task 0", proc_status()["VmRSS"]])
        env.reset(seed=0, options={"task_id": 0})
        stages.append(["first reset with render, task 0", proc_status()["VmRSS"]])
        sim = backend.robosuite_env.sim
        model = sim.model._model
        import tempfile

        import mujoco

        scene_xml = os.path.join(tempfile.mkdtemp(), "scene.xml")
        mujoco.mj_saveLastXML(scene_xml, model)  # task 0's compiled scene, rebuilt part by part below
        sizes = {"texture_bytes_mb": round(model.ntexdata / MB / MB, 1), "textures": int(model.ntex),
                 "mesh_vertices": int(model.nmeshvert), "model_buffer_mb": round(model.nbuffer / MB / MB, 1),
                 "data_buffer_mb": round((sim.data._data.nbuffer + sim.data._data.narena) / MB / MB, 1),
                 "offscreen_buffer": [int(model.vis.global_.offwidth), int(model.vis.global_.offheight)]}
        for k in range(task_changes):
            env.reset(seed=k + 1, options={"task_id": (k + 1) * 37 % len(env.unwrapped.tasks)})
        stages.append([f"after {task_changes} more task changes", proc_status()["VmRSS"]])
        status, mappings, threads = proc_status(), _smaps_groups(), len(os.listdir("/proc/self/task"))
        cache = mujoco.mj_getCache()  # MuJoCo's compiler keeps decoded meshes and textures here across builds
        sizes.update(asset_cache_mb=round(mujoco.mj_getCacheSize(cache) / MB / MB, 1),
                     asset_cache_capacity_mb=round(mujoco.mj_getCacheCapacity(cache) / MB / MB, 1))
        backend.close()  # the scene, its MjModel and EGL context freed
        import gc

        gc.collect()
        stages.append(["scene closed (env.close, gc)", proc_status()["VmRSS"]])
        from vla_gym.runtime.memory import release_freed_memory

        trimmed = release_freed_memory()
        stages.append(["malloc_trim(0): freed heap returned to the OS", proc_status()["VmRSS"]])
        # task 0's scene again, part by part, each trimmed: what one loaded scene holds
        from robosuite.utils.binding_utils import MjRenderContextOffscreen, MjSim

        model = mujoco.MjModel.from_xml_path(scene_xml)
        release_freed_memory()
        stages.append(["task 0's MjModel alone (compiled again, trimmed)", proc_status()["VmRSS"]])
        sim = MjSim(model)
        stages.append(["+ MjData (robosuite MjSim)", proc_status()["VmRSS"]])
        MjRenderContextOffscreen(sim, device_id=-1)
        stages.append(["+ MuJoCo render context (EGL, textures and meshes uploaded)", proc_status()["VmRSS"]])
        sim.render(camera_name="agentview", width=image_size, height=image_size)
        stages.append(["+ one render", proc_status()["VmRSS"]])
        sim.free()
        queue.put({"stages": [[label, round(rss, 1)] for label, rss in stages], "model": sizes,
                   "status": {k: round(v, 1) for k, v in status.items()}, "mappings": mappings,
                   "malloc_trim": trimmed, "gl": os.environ.get("MUJOCO_GL"), "threads": threads})
        env.close()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put({"error": f"{type(exc).__name__}: {exc}", "stages": stages})


def breakdown(env_id: str, image_size: int, task_changes: int) -> dict:
    """Each process is fresh (spawn), as a vector env's worker is; with and without torch imported first."""
    ctx = multiprocessing.get_context("spawn")
    out = {}
    for label, with_torch in (("worker", False), ("worker_with_torch", True)):
        queue = ctx.Queue()
        process = ctx.Process(target=_breakdown_child, args=(queue, env_id, image_size, with_torch, task_changes))
        process.start()
        out[label] = queue.get(timeout=1800)
        process.join(timeout=60)
        print(f"{label}:")
        print(json.dumps(out[label], indent=1))
    out.update(env_id=env_id, image_size=image_size, nproc=os.cpu_count())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--env", default="VLA/Libero130-v0", help="a multi-task LIBERO id")
    parser.add_argument("--resets", type=int, default=0, help="resets the --out file should hold in all")
    parser.add_argument("--out", default=str(ROWS), help="the JSONL rows (resumed; kept beside the results, so a "
                        "run goes on from a fresh clone)")
    parser.add_argument("--steps", type=int, default=10, help="random-action steps per episode")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0, help="reset i uses seed SEED + i")
    parser.add_argument("--summary", action="store_true", help="print the curve's figures and write --results")
    parser.add_argument("--warmup", type=int, default=100, help="resets of a worker left out of the growth slope")
    parser.add_argument("--results", default=str(RESULTS), help="the results JSON (--summary, --breakdown)")
    parser.add_argument("--plot", default=None, help="a PNG of RSS and steps/s over resets (needs matplotlib)")
    parser.add_argument("--breakdown", action="store_true", help="measure what a worker's RSS is made of")
    parser.add_argument("--task-changes", type=int, default=5, help="task changes --breakdown makes")
    args = parser.parse_args(argv)
    if not (args.resets or args.summary or args.breakdown or args.plot):
        parser.error("nothing to do: pass --resets N, --summary, --plot PNG or --breakdown")
    out = pathlib.Path(args.out)
    if args.breakdown:
        update_results(pathlib.Path(args.results), "breakdown", breakdown(args.env, args.image_size, args.task_changes))
    rows = soak(args.env, args.resets, out, args.steps, args.image_size, args.seed) if args.resets else read_rows(out)
    if args.summary:
        summary = summarize(rows, min(args.warmup, len(rows) // 10))
        from vla_gym.trainers.runtime.results import repo_relative

        summary.update(mujoco=package_versions()["mujoco"], rows_file=repo_relative(out),
                       command=f"python experiments/reliability_soaks/memory_soak.py --resets {len(rows)} "
                       f"--out {repo_relative(out)} --steps {rows[0]['steps']} --image-size {rows[0]['image_size']}")
        print_summary(summary)
        update_results(pathlib.Path(args.results), None, summary)
    if args.plot:
        plot(rows, pathlib.Path(args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
