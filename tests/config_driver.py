"""Run many user commands in one Python process, one after another: one interpreter start-up (torch,
transformers, the simulators imported once) instead of one per command.

    results = run_jobs([Job("cartpole", ["python", "trainers/ppo.py", "--config", cfg, *overrides])], tmp_dir)
    assert_ok(results["cartpole"])          # a subprocess.CompletedProcess, as run_command gives

Each job runs the way its command line would, in this process: ``python script.py args`` executes the script as
``__main__`` (``runpy.run_path``, ``sys.argv`` and ``sys.path[0]`` as the interpreter sets them), ``python -m mod``
runs the module, ``python -c code`` the code (in a fresh namespace) and a console script (``vla-gym ...``) its entry
point. ``torchrun --nproc_per_node=1 ...`` (one process on one node: the launcher adds nothing but the rank
variables) runs its script with torchrun's environment (``RANK=0``, ``WORLD_SIZE=1``, ...): torchrun itself, with
several processes, is what the tests that start it for real check. The job's stdout and stderr are captured at the
file-descriptor level (what worker processes print too), its exit code is the script's ``sys.exit`` code, 1 with the
traceback on stderr after an uncaught exception, as the interpreter would. Between jobs the working directory,
``sys.argv``, ``sys.path`` and ``os.environ`` are put back.

After each job the driver records what it left behind (child processes still alive, threads other than the ones it
started with, open file descriptors, memory, torch's process group, default dtype and grad mode):
``results[id].leftovers``; a job that leaves a child process alive fails (``returncode`` -2, the processes named on
its stderr: an interpreter's exit would have ended or waited for them, here they would run on into the next
command), and so does one that leaves torch's process group, default dtype or grad mode changed (-3: the next command
would not start as in a fresh interpreter).

The driver itself: ``python tests/config_driver.py JOBS.json RESULTS.json`` (``RESULTS.json`` is rewritten after every
job, so a crash mid-way still says which jobs ran and which one it died in).
"""
from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import gc
import json
import os
import pathlib
import runpy
import shlex
import signal
import subprocess
import sys
import threading
import time
import traceback

#: exit code recorded for a job the driver never finished (it crashed or timed out in it, or never reached it)
NOT_FINISHED = -1000
#: exit code of a job that left child processes running after it returned
LEFT_PROCESSES = -2
#: exit code of a job that left torch's global state (FRESH) changed for the jobs after it
LEFT_STATE = -3
#: torch's global state in a fresh interpreter
FRESH = {"process_group": False, "default_dtype": "torch.float32", "grad_enabled": True}


@dataclasses.dataclass
class Job:
    """One command: its id, its argv as a user types it, where it runs, extra environment variables."""
    id: str
    argv: list[str]
    cwd: str | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ test side
def run_jobs(jobs: list[Job], work: pathlib.Path, cwd: str | pathlib.Path | None = None,
             timeout: float = 850, job_timeout: float = 600) -> dict[str, subprocess.CompletedProcess]:
    """Run ``jobs`` in one driver process (started in ``cwd``); {job id: CompletedProcess}. A job the driver did
    not finish gets ``returncode`` NOT_FINISHED and the driver's own stderr."""
    from short_runs import ROOT, child_env

    work = pathlib.Path(work)
    work.mkdir(parents=True, exist_ok=True)
    jobs_file, results_file = work / "jobs.json", work / "results.json"
    jobs_file.write_text(json.dumps([dataclasses.asdict(job) for job in jobs], indent=1))
    results_file.unlink(missing_ok=True)
    driver = subprocess.Popen(
        [sys.executable, __file__, str(jobs_file), str(results_file), str(job_timeout)], cwd=cwd or ROOT,
        env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = driver.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # the jobs it finished keep their results
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and the workers its job started
        stdout, stderr = driver.communicate()
        stderr += f"\n[driver killed after {timeout:.0f} s]"
    except BaseException:  # pytest's timeout, Ctrl-C: no driver left running
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        raise
    driver = subprocess.CompletedProcess(driver.args, driver.returncode, stdout, stderr)
    done = json.loads(results_file.read_text()) if results_file.exists() else {}
    results = {}
    for n, job in enumerate(jobs):
        entry = done.get(job.id)
        if entry is None or entry.get("returncode") is None:
            logs = [work / "logs" / f"{n:02d}.{kind}" for kind in ("out", "err")]
            out, err = (path.read_text(errors="replace") if path.exists() else "" for path in logs)
            message = (f"\n--- the driver did not finish this job (driver exit code {driver.returncode}; it died in "
                       f"{next((k for k, v in done.items() if v.get('returncode') is None), 'none of them')})\n"
                       f"--- driver stderr (end)\n{driver.stderr[-6000:]}")
            entry = {"returncode": NOT_FINISHED, "stdout": out, "stderr": err + message}
        result = subprocess.CompletedProcess(job.argv, entry["returncode"], entry["stdout"], entry["stderr"])
        result.seconds = entry.get("seconds")
        result.leftovers = entry.get("leftovers", {})
        results[job.id] = result
    return results


# ------------------------------------------------------------------------------------------ driver side
@contextlib.contextmanager
def _captured(out_path: pathlib.Path, err_path: pathlib.Path):
    """fds 1 and 2 (and so sys.stdout / sys.stderr and any child process) into two files."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter exits with for ``sys.exit(code)``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _torchrun_env(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """``torchrun [launcher flags] script args`` on one process of one node -> (``python script args``, the rank
    variables torchrun sets)."""
    flags = {}
    while args and args[0].startswith("--"):
        key, _, value = args.pop(0)[2:].partition("=")
        flags[key.replace("-", "_")] = value
    unknown = set(flags) - {"standalone", "nproc_per_node", "nnodes"}
    if unknown or int(flags.get("nproc_per_node", "1")) != 1 or int(flags.get("nnodes", "1")) != 1:
        raise ValueError(f"only one-process torchrun commands run in-process, not torchrun {flags}")
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0",
           "ROLE_RANK": "0", "ROLE_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
           "TORCHELASTIC_RUN_ID": "none"}
    return ["python", *args], env


def _run(argv: list[str]) -> int:
    """Run one command line in this process; its exit code."""
    program, *args = argv
    if program in ("python", "python3"):
        if args[0] == "-c":
            sys.argv = ["-c", *args[2:]]
            sys.path.insert(0, "")
            exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        elif args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(args[0])
            sys.argv = list(args)
            sys.path.insert(0, os.path.dirname(script))
            runpy.run_path(script, run_name="__main__")
        return 0
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="console_scripts") if ep.name == program]
    if not found:
        raise ValueError(f"{program}: neither python nor a console script of an installed package")
    sys.argv = [program, *args]
    code = found[0].load()()
    return code if isinstance(code, int) else (0 if code is None else 1)


#: processes an interpreter keeps for its whole life once something used them (a fresh one would have them too)
INTERPRETER_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _leftovers(threads_before: set[int]) -> dict[str, list[str]]:
    """Child processes still alive (but multiprocessing's own helpers) and threads started since the driver began."""
    import multiprocessing

    alive = multiprocessing.active_children()  # joins the finished ones
    try:
        import psutil  # installed with peft (the vla extra)
    except ImportError:
        return {"processes": [f"{p.name} (pid {p.pid})" for p in alive], "threads": [], "state": {}}
    children = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            command = " ".join(process.cmdline())
        except psutil.NoSuchProcess:
            continue
        if not any(helper in command for helper in INTERPRETER_HELPERS):
            children.append(f"{command[:200]} (pid {process.pid})")
    threads = [t.name for t in threading.enumerate() if t.ident not in threads_before and t.is_alive()]
    state = {"open_fds": len(os.listdir("/proc/self/fd")), "rss_mb": psutil.Process().memory_info().rss >> 20}
    torch = sys.modules.get("torch")
    if torch is not None:  # what a command could leave set for the next one
        state.update(process_group=torch.distributed.is_available() and torch.distributed.is_initialized(),
                     default_dtype=str(torch.get_default_dtype()), grad_enabled=torch.is_grad_enabled())
    return {"processes": children, "threads": threads, "state": state}


def _main(jobs_file: str, results_file: str, job_timeout: float) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # tests/ is not on a user's path
    from vla_gym.runtime.system import configure_mujoco_gl

    configure_mujoco_gl()  # as a fresh interpreter that imports vla_gym does, before anything imports MuJoCo
    jobs = [Job(**job) for job in json.loads(pathlib.Path(jobs_file).read_text())]
    results_path = pathlib.Path(results_file)
    logs = results_path.parent / "logs"
    logs.mkdir(exist_ok=True)
    results: dict[str, dict] = {}
    start_dir, start_path, start_env = os.getcwd(), list(sys.path), dict(os.environ)
    threads_before = {t.ident for t in threading.enumerate()}
    for n, job in enumerate(jobs):
        results[job.id] = {"returncode": None, "argv": job.argv}
        results_path.write_text(json.dumps(results))
        out, err = logs / f"{n:02d}.out", logs / f"{n:02d}.err"
        argv, env = list(job.argv), dict(job.env)
        print(f"[driver] {job.id}: {shlex.join(argv)}", file=sys.stderr, flush=True)
        began = time.perf_counter()
        faulthandler.dump_traceback_later(job_timeout, exit=True)  # a hung job: every thread's stack, then exit
        with _captured(out, err):
            try:
                if argv[0] == "torchrun":
                    argv, torchrun_env = _torchrun_env(argv[1:])
                    env.update(torchrun_env)
                os.environ.update(env)
                if job.cwd:
                    os.chdir(job.cwd)
                code = _run(argv)
            except SystemExit as exc:
                code = _exit_code(exc)
            except BaseException:  # what the interpreter prints for an uncaught exception, and its exit code
                traceback.print_exc()
                code = 1
            finally:
                os.chdir(start_dir)
                sys.path[:] = start_path
                os.environ.clear()
                os.environ.update(start_env)
                gc.collect()
            left = _leftovers(threads_before)
            if left["processes"]:
                print(f"[driver] child processes still running after the command returned: {left['processes']}",
                      file=sys.stderr)
                code = LEFT_PROCESSES
            changed = {key: value for key, value in left["state"].items() if key in FRESH and value != FRESH[key]}
            if changed:  # the next command would not start as in a fresh interpreter
                print(f"[driver] the command left torch's global state changed: {changed} (fresh: {FRESH})",
                      file=sys.stderr)
                code = LEFT_STATE
        faulthandler.cancel_dump_traceback_later()
        seconds = time.perf_counter() - began
        print(f"[driver] {job.id}: exit {code} in {seconds:.1f} s", file=sys.stderr, flush=True)
        results[job.id] = {"returncode": code, "argv": job.argv, "seconds": round(seconds, 2), "leftovers": left,
                           "stdout": out.read_text(errors="replace"), "stderr": err.read_text(errors="replace")}
        results_path.write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 600))
