"""vla_gym ids under other libraries' vector envs: {ManiSkill, LIBERO} x vectorizer x parent state.

The default run covers one (family, parent state) cell per family, ``DEFAULT_CELLS``: LIBERO with a parent that
holds an env (the fork that must fail fast, gymnasium's default start method switched to spawn, in-process envs) and
ManiSkill from a fresh parent (fork, in process through gymnasium and TorchRL), with the cases of ``DEFAULT_CASES``:
between them every way a worker starts (forkserver in the benchmark's quick form), and both outcomes of a fork.
``-m slow`` runs the whole matrix: every vectorizer in both parent states for both families.
Each (family, parent state) group runs in its own Python process under a hard timeout, so a hang fails the
test instead of stalling CI; the group's process runs this file as a script (``python tests/test_interop.py
maniskill fresh out.jsonl err.log``) and reports one JSON line per vectorizer. In every case: build 2
sub-envs, reset, 5 random steps with a 3-step episode limit (every sub-env ends its episode on step 3 and
the vector env auto-resets it and goes on), close, and nothing printed on stderr while closing (nor at exit).

Parent states: ``fresh`` (the test process has made no env of the family; the vectorizers whose outcome
depends on the parent, those that fork, run first) and ``held`` (the parent made, reset and stepped an env
first and keeps it open, as with an evaluation env or a notebook cell). Outcomes: every case works except
``fork`` after the parent started the simulator, which must fail within seconds with
:class:`vla_gym.runtime.fork_guard.ForkedAfterInitError` naming the remedy (the worker raises it; SB3's parent then
reports the closed pipe). BEHAVIOR ids (Isaac Sim, not installable here) must give their "needs Isaac Sim"
error in the parent (gymnasium builds one env there) and in a worker.
"""
from __future__ import annotations

import gc
import importlib.util
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

# run as a script too (the group process): the drivers live in benchmarks/ (pytest.ini's pythonpath for tests)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

FAMILIES = {
    "maniskill": ("VLA/ManiSkill-PushCube-v0", {"obs_mode": "state"}, "mani_skill"),
    "libero": ("VLA/LiberoSpatial-v0", {"task_id": 0, "cameras": ("main",), "image_size": 32, "settle_steps": 1},
               "libero"),
}
#: the order a group runs them in: those that fork first, while a fresh parent is still fresh
ORDER = ("sb3-subproc-fork", "gymnasium-async", "sb3-subproc-forkserver", "sb3-subproc-spawn",
         "gymnasium-async-spawn", "torchrl-parallel", "gymnasium-sync", "sb3-dummy", "torchrl-gymenv")
#: the cases of the default run, one per way a worker comes to be: fork (works from a fresh parent, fails fast from one
#: that holds an env), spawn (gymnasium's default start method once the parent started a simulator: the fork guard
#: switches it), in process (gymnasium, SB3 and TorchRL's wrapper); SB3's default, forkserver, builds, steps and
#: closes ManiSkill in test_bench_vectorizers_quick_form. The whole matrix runs with ``-m slow``: forkserver and
#: explicit spawn contexts here too, and TorchRL's ParallelEnv (every worker start imports and builds a simulator:
#: 5-20 s each on 2 cores, 40 s for TorchRL's)
DEFAULT_CASES = {
    "fresh": ("sb3-subproc-fork", "gymnasium-sync", "torchrl-gymenv"),
    "held": ("sb3-subproc-fork", "gymnasium-async", "sb3-dummy"),
}
#: the (family, parent state) cells of the default run: one per family, the two parent states between them
DEFAULT_CELLS = (("libero", "held"), ("maniskill", "fresh"))
NUM_ENVS, EPISODE_STEPS, STEPS = 2, 3, 5
#: hard limit per case (the group process is killed with its workers when one case takes longer); generous
#: because the CI machine may be shared: a case takes 2-20 s of CPU
CASE_TIMEOUT_S = 300
HAS_TORCHRL = importlib.util.find_spec("torchrl") is not None


def expected_outcome(vectorizer: str, parent_started_simulator: bool) -> str:
    return "clear error" if vectorizer == "sb3-subproc-fork" and parent_started_simulator else "works"


# ------------------------------------------------------------------------------ the group process (script)
def _mark(text: str) -> None:
    sys.stderr.flush()
    os.write(2, f"\n@@{text}@@\n".encode())


def _close_quietly(name: str, close) -> None:
    _mark(f"CLOSE {name}")
    close()
    gc.collect()  # a renderer freed late would print here, inside the markers
    _mark(f"CLOSED {name}")


def _run_case(name: str, env_id: str, env_kwargs: dict) -> dict:
    from interop_drivers import make_vectorized

    from vla_gym.runtime import fork_guard

    record = {"case": name, "parent_started_simulator": bool(fork_guard.started_here())}
    num_envs = 1 if name == "torchrl-gymenv" else NUM_ENVS
    _mark(f"CASE {name}")
    start = time.monotonic()
    try:
        run = make_vectorized(name, env_id, num_envs, max_episode_steps=EPISODE_STEPS, **env_kwargs)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which decides
        record.update(outcome="error", error=f"{type(exc).__name__}: {exc}"[:500], seconds=time.monotonic() - start)
        return record
    try:
        run.reset(seed=0)
        dones = [run.step(run.random_actions()).tolist() for _ in range(STEPS)]
    finally:
        _close_quietly(name, run.close)
    record.update(outcome="ran", dones=dones, seconds=time.monotonic() - start)
    return record


def group_main(family: str, parent: str, out_path: str, err_path: str, cases: str = ",".join(ORDER)) -> None:
    """Run the vectorizers ``cases`` (comma-separated, in ORDER's order) for ``family`` with the parent ``fresh`` or
    ``held``."""
    err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(err, 2)  # workers inherit it: their output lands in the same file, in time order
    import gymnasium as gym

    import vla_gym  # noqa: F401

    env_id, env_kwargs, _ = FAMILIES[family]
    held = None
    if parent == "held":
        held = gym.make(env_id, **env_kwargs)
        held.reset(seed=0)
        held.step(held.action_space.sample())
    with open(out_path, "a") as out:
        for name in ORDER:
            if name not in cases.split(",") or (name.startswith("torchrl") and not HAS_TORCHRL):
                continue
            out.write(json.dumps(_run_case(name, env_id, env_kwargs)) + "\n")
            out.flush()
    if held is not None:
        _close_quietly("held env", held.close)
    _mark("END")


def behavior_main(out_path: str, err_path: str) -> None:
    """BEHAVIOR: the parent-side and worker-side errors of the same calls."""
    err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(err, 2)
    from interop_drivers import make_vectorized

    import vla_gym

    env_id = next(i for i, entry in vla_gym.ENTRIES.items() if entry.backend == "behavior")
    with open(out_path, "a") as out:
        for name in ("gymnasium-async", "gymnasium-sync", "sb3-subproc-forkserver"):
            _mark(f"CASE {name}")
            start = time.monotonic()
            try:
                make_vectorized(name, env_id, NUM_ENVS).close()
                record = {"case": name, "outcome": "ran"}
            except Exception as exc:  # noqa: BLE001
                record = {"case": name, "outcome": "error", "error": f"{type(exc).__name__}: {exc}"[:2000]}
            record["seconds"] = time.monotonic() - start
            out.write(json.dumps(record) + "\n")
            out.flush()
    _mark("END")


# ------------------------------------------------------------------------------------------ the tests
def _run_group(tmp_path: pathlib.Path, *args: str) -> tuple[list[dict], str]:
    """Run ``python tests/test_interop.py FAMILY PARENT OUT ERR [CASES]`` (or ``behavior OUT ERR``)."""
    out, err = tmp_path / "out.jsonl", tmp_path / "err.log"
    head, cases = (args[:2], args[2:]) if args[0] != "behavior" else (args[:1], ())
    command = [sys.executable, __file__, *head, str(out), str(err), *cases]
    process = subprocess.Popen(command, start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    last_count, deadline = 0, time.monotonic() + CASE_TIMEOUT_S
    while process.poll() is None:  # the deadline restarts whenever a case reports
        count = len(out.read_text().splitlines()) if out.exists() else 0
        if count != last_count:
            last_count, deadline = count, time.monotonic() + CASE_TIMEOUT_S
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)  # the group process and every worker it started
            process.wait()
            break
        time.sleep(1)
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    stderr = err.read_text(errors="replace") if err.exists() else ""
    if process.returncode != 0:
        done = [r["case"] for r in records]
        pending = [c for c in ORDER if c not in done]
        pytest.fail(f"group {args} exited with {process.returncode} (killed: a case ran over {CASE_TIMEOUT_S} s?) "
                    f"after {done}; "
                    f"stuck in {pending[:1]}; stderr tail:\n{stderr[-3000:]}")
    return records, stderr


def _between(text: str, start: str, end: str) -> str:
    return text.split(f"@@{start}@@", 1)[1].split(f"@@{end}@@", 1)[0]


MATRIX = [pytest.param(family, parent, DEFAULT_CASES[parent], id=f"{family}-{parent}")
          for family, parent in DEFAULT_CELLS] + [
    pytest.param(family, parent, ORDER, id=f"{family}-{parent}-all", marks=pytest.mark.slow)
    for family in FAMILIES for parent in ("fresh", "held")]


@pytest.mark.parametrize(("family", "parent", "cases"), MATRIX)
def test_vectorizer_matrix(family, parent, cases, tmp_path):
    pytest.importorskip(FAMILIES[family][2])
    records, stderr = _run_group(tmp_path, family, parent, ",".join(cases))
    assert [r["case"] for r in records] == [c for c in ORDER if c in cases and (HAS_TORCHRL or not c.startswith("torchrl"))]
    problems = []
    for record in records:
        name, expected = record["case"], expected_outcome(record["case"], record["parent_started_simulator"])
        case_err = _between(stderr, f"CASE {name}", "END").split("@@CASE", 1)[0]
        if expected == "works":
            if record["outcome"] != "ran":
                problems.append(f"{name}: {record.get('error')}")
                continue
            dones = record["dones"]
            if not all(dones[EPISODE_STEPS - 1]) or any(any(d) for d in dones[:EPISODE_STEPS - 1]):
                problems.append(f"{name}: episodes did not all end on step {EPISODE_STEPS}: {dones}")
            closing = _between(stderr, f"CLOSE {name}", f"CLOSED {name}").strip()
            if closing:
                problems.append(f"{name}: close printed on stderr:\n{closing[-1500:]}")
        else:
            if record["outcome"] != "error" or record["seconds"] > 60:
                problems.append(f"{name}: expected a fast error, got {record}")
            elif "ForkedAfterInitError" not in case_err or "spawn" not in case_err:
                problems.append(f"{name}: the worker's error does not name the cause and remedy:\n{case_err[-1500:]}")
    if parent == "held":
        closing = _between(stderr, "CLOSE held env", "CLOSED held env").strip()
        if closing:
            problems.append(f"closing the parent's env printed:\n{closing[-1500:]}")
    at_exit = stderr.split("@@END@@", 1)[1].strip()
    if at_exit:
        problems.append(f"printed at exit:\n{at_exit[-1500:]}")
    summary = ", ".join(f"{r['case']} {r['outcome']} {r['seconds']:.0f}s" for r in records)
    assert not problems, "\n".join(problems) + f"\n({summary})"


def test_behavior_needs_isaac_sim_in_parent_and_worker(tmp_path):
    records, stderr = _run_group(tmp_path, "behavior")
    by_case = {r["case"]: r for r in records}
    for name in ("gymnasium-async", "gymnasium-sync"):  # gymnasium builds the first env in the parent
        assert by_case[name]["outcome"] == "error" and "Isaac Sim" in by_case[name]["error"], by_case[name]
    worker = by_case["sb3-subproc-forkserver"]  # SB3 builds envs only in its workers
    assert worker["outcome"] == "error" and worker["seconds"] < 120, worker
    assert "Isaac Sim" in _between(stderr, "CASE sb3-subproc-forkserver", "END"), stderr[-3000:]


def _make_talker():
    import gymnasium as gym
    from gymnasium import spaces

    from vla_gym.core.instruction_space import InstructionText
    from vla_gym.core.schema import INSTRUCTION_CHARSET

    class Talker(gym.Env):
        observation_space = spaces.Dict({"instruction": InstructionText(32, min_length=0, charset=INSTRUCTION_CHARSET)})
        action_space = spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return {"instruction": "pick up the cube"}, {}

        def step(self, action):
            self.t += 1
            return {"instruction": f"step {self.t}"}, 0.0, False, False, {}

    return Talker()


def test_instructions_survive_gymnasium_shared_memory():
    """gymnasium's AsyncVectorEnv (shared memory, its default) returns each step's instruction, not the first."""
    import gymnasium as gym

    envs = gym.vector.AsyncVectorEnv([_make_talker] * 2, context="fork")  # no simulator: fork is fine
    try:
        assert envs.reset(seed=0)[0]["instruction"] == ("pick up the cube",) * 2
        envs.step([0, 1])
        assert envs.step([0, 1])[0]["instruction"] == ("step 2",) * 2
    finally:
        envs.close()


LEFT_OPEN_SCRIPT = """
import sys, gymnasium as gym, vla_gym
kwargs = dict(task_id=0, cameras=("main",), image_size=32, settle_steps=1)
closed, left_open = gym.make("VLA/LiberoSpatial-v0", **kwargs), gym.make("VLA/LiberoSpatial-v0", **kwargs)
closed.reset(seed=0); left_open.reset(seed=0)
sys.stderr.flush(); print("@@CLOSE@@", file=sys.stderr, flush=True)
closed.close()
"""


def test_libero_close_and_exit_print_nothing():
    """Closing one LIBERO env and exiting with another still open prints no EGLError (issue 11)."""
    pytest.importorskip("libero")
    result = subprocess.run([sys.executable, "-c", LEFT_OPEN_SCRIPT], capture_output=True, text=True,
                            timeout=CASE_TIMEOUT_S, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.split("@@CLOSE@@", 1)[1].strip() == ""


def test_list_says_which_maniskill_ids_run_offline_and_how_to_download_the_rest():
    pytest.importorskip("mani_skill")
    import io

    from vla_gym.backends.maniskill.env import missing_assets
    from vla_gym.cli import list_envs
    from vla_gym.tasks.maniskill import TASKS, env_id

    out = io.StringIO()
    assert list_envs("maniskill", out=out) == 0
    rows = {line.split()[0]: line for line in out.getvalue().splitlines()[1:-1]}
    for name, (maniskill_id, _, downloads) in TASKS.items():
        row = rows[env_id(name)]
        if downloads and missing_assets(maniskill_id):  # the truth, from ManiSkill's own asset table
            assert row.endswith(f"no (assets not downloaded: python -m mani_skill.utils.download_asset {maniskill_id})")
        else:
            assert row.endswith("  yes"), row
    assert rows["VLA/ManiSkillTabletop-v0"].endswith("  yes")


def _run_bench_vectorizers(capsys, *flags: str) -> tuple[list[dict], str]:
    """benchmarks/bench_vectorizers.py ``--quick --num-envs 1 FLAGS``, its ``main`` called in this process (its vector
    envs' workers are processes of their own either way; two envs each are the matrix's business)."""
    import bench_vectorizers

    capsys.readouterr()
    rows = bench_vectorizers.main(["--quick", "--num-envs", "1", *flags])
    stdout = capsys.readouterr().out
    assert [json.loads(line) for line in stdout.splitlines() if line.startswith("{")] == rows
    return rows, stdout


def test_bench_vectorizers_quick_form(capsys):
    """benchmarks/bench_vectorizers.py --quick: every vectorizer builds, steps and reports a rate, every block's
    rate, its ratio to vla_gym in the same rounds and the CPU time per simulator step of it and its workers."""
    pytest.importorskip("mani_skill")
    rows, stdout = _run_bench_vectorizers(capsys)
    assert [row["vectorizer"] for row in rows] == ["vla_gym-async", "gymnasium-async-spawn", "sb3-subproc-forkserver"]
    assert all(row["sim_steps_per_s"] > 0 and len(row["blocks"]) == 2 for row in rows)
    assert rows[0]["vs_vla_gym"] == 1.0 and all(row["vs_vla_gym"] > 0 for row in rows)
    # workers are counted: one simulator step costs far more CPU than this process alone spends sending it
    assert all(row["cpu_ms_per_sim_step"] > 0.1 for row in rows)
    assert "| config | envs | chunk | vectorizer |" in stdout


def test_bench_vectorizers_sequential_form(capsys):
    """--sequential (one vector env alive at a time, rebuilt every round) times the same way."""
    pytest.importorskip("mani_skill")
    rows, stdout = _run_bench_vectorizers(capsys, "--sequential", "--rounds", "1", "--vectorizers", "vla_gym-async")
    assert [row["vectorizer"] for row in rows] == ["vla_gym-async"]
    assert all(row["sequential"] and len(row["blocks"]) == 1 and row["cpu_ms_per_sim_step"] > 0.1 for row in rows)
    assert "maniskill-state (sequential)" in stdout


def test_torchrl_cases_ran():
    """The matrix leaves the TorchRL cases out when torchrl is missing; this says so instead of passing quietly."""
    if not HAS_TORCHRL:
        pytest.skip("torchrl is not installed (pip install -e '.[test]'): the TorchRL GymEnv/ParallelEnv cases did not run")


if __name__ == "__main__":
    if sys.argv[1] == "behavior":
        behavior_main(*sys.argv[2:4])
    else:
        group_main(*sys.argv[1:6])
