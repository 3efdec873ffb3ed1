"""experiments/reliability_soaks/memory_soak.py: a LIBERO worker's RSS over many resets, resumable, and its
summary.

The short form runs the real simulator in an async worker: 2 resets, then a resumed run to 3 (after a cut last line,
as a stopped run leaves), then ``--summary``. The figures it measures are in experiments/reliability_soaks/README.md.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest

from vla_gym.runtime.memory import release_freed_memory

SOAKS = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "reliability_soaks"
sys.path.insert(0, str(SOAKS))  # the study's scripts, imported by their module names below


@pytest.mark.quick
def test_the_study_readme_tables_equal_their_json():
    """experiments/reliability_soaks/table.py readme --check: every table of the study's README is what its
    results/ JSON renders (run ``table.py readme`` after a new measurement)."""
    spec = importlib.util.spec_from_file_location("reliability_soaks_table", SOAKS / "table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    assert table.main(["readme", "--check"]) == 0


@pytest.mark.quick
def test_slope_is_measured_within_each_workers_life():
    from memory_soak import summarize, within_worker_slope

    # two workers (a resumed run), each growing 1 MB per reset from its own start: 100 MB per 100 resets
    rows = [{"reset": i, "env_id": "VLA/Libero130-v0", "task_id": i % 7, "task_changed": True, "worker_pid": pid,
             "worker_resets": k, "worker_rss_mb": base + k, "worker_anon_mb": base + k - 200.0,
             "worker_file_mb": 200.0, "parent_rss_mb": 220.0, "worker_restarts": 0, "reset_s": 1.0,
             "steps_per_s": 10.0, "image_size": 128, "steps": 10, "time": float(i)}
            for i, (pid, k, base) in enumerate([(1, k, 2000.0) for k in range(30)] + [(2, k, 1500.0) for k in range(30)])]
    assert within_worker_slope(rows, warmup=5) == pytest.approx(100.0)
    summary = summarize(rows, warmup=5)
    assert summary["resets"] == 60 and summary["worker_processes"] == 2
    assert [row["reset"] for row in summary["checkpoints"]] == [0]
    assert summary["steps_per_s"] == {"first_decile": 10.0, "last_decile": 10.0}


@pytest.mark.quick
def test_a_resumed_runs_memory_is_read_one_process_at_a_time():
    """A resumed run's clock and memory start again: memory_run.py fits each trainer process's life on its own."""
    from memory_run import segments, summarize

    elapsed = {100: 60.0, 200: 120.0, 300: 180.0, 400: 30.0, 500: 90.0, 600: 150.0, 700: 210.0}
    rss = {100: 900.0, 200: 1000.0, 300: 1100.0, 400: 800.0, 500: 800.0, 600: 800.0, 700: 800.0}
    assert segments(elapsed) == [[100, 200, 300], [400, 500, 600, 700]]
    scalars = {"time/elapsed_s": elapsed, "proc/rss_mb": rss}
    first, last = summarize(scalars, 0.0, segment=0), summarize(scalars, 0.0)
    assert first["proc/rss_mb"]["growth_mb_per_hour"] == pytest.approx(6000.0)  # 100 MB a minute
    assert last["segment"] == 1 and last["segments"] == 2 and last["env_steps"] == [400, 700]
    assert last["proc/rss_mb"]["growth_mb_per_hour"] == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(SystemExit, match="2 segment"):
        summarize(scalars, 0.0, segment=2)


@pytest.mark.quick
def test_release_freed_memory_runs():
    assert release_freed_memory() in (True, False)


def test_short_soak_resumes_and_summarizes(tmp_path, capsys):
    """The script's ``main`` three times in this process (a resumed run, then one with nothing left to do); the soak's
    LIBERO env runs in a spawned worker process either way, a new one for each run."""
    pytest.importorskip("libero.libero", reason='LIBERO is not installed: pip install -e ".[libero]"')
    from memory_soak import main as soak_main

    out, results = tmp_path / "soak.jsonl", tmp_path / "memory_soak.json"
    small = ["--out", str(out), "--image-size", "32", "--steps", "2"]
    assert soak_main(["--resets", "2", *small]) == 0
    first = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["reset"] for row in first] == [0, 1]
    with out.open("a") as sink:
        sink.write('{"reset": 2, "env_id": "VLA/Lib')  # a run stopped in the middle of a row
    capsys.readouterr()
    assert soak_main(["--resets", "3", *small, "--summary", "--results", str(results)]) == 0
    stdout = capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["reset"] for row in rows] == [0, 1, 2] and rows[:2] == first
    assert rows[2]["worker_pid"] != rows[1]["worker_pid"] and rows[2]["worker_resets"] == 0  # a new worker
    for row in rows:
        assert 0 <= row["task_id"] < 130 and row["worker_rss_mb"] > 100 and row["parent_rss_mb"] > 0
        assert row["reset_s"] > 0 and row["steps_per_s"] > 0
    summary = json.loads(results.read_text())
    assert summary["resets"] == 3 and summary["worker_processes"] == 2 and summary["commit"]
    assert summary["mujoco"] and summary["rows_file"] == str(out)  # outside the repository: the path as given
    assert summary["checkpoints"][0]["reset"] == 0 and "slope_mb_per_100_resets" in summary
    assert "growth after" in stdout
    # a file that holds the resets asked for is not extended
    assert soak_main(["--resets", "3", "--out", str(out)]) == 0
    assert "already holds 3 resets" in capsys.readouterr().out and len(out.read_text().splitlines()) == 3


def test_a_training_runs_memory_curve_is_read_from_its_tensorboard(tmp_path, capsys):
    """A PPO run on 2 async CartPole workers logs env/worker_rss_mb and proc/rss_mb every update;
    experiments/reliability_soaks/memory_run.py reads them back as the curve and the growth per hour (the LIBERO
    GRPO measurement of experiments/reliability_soaks/README.md, in short form)."""
    from vla_gym.trainers import PPO
    from vla_gym.trainers.runtime.config import config_from_dict

    cfg = config_from_dict({
        "run_dir": str(tmp_path), "name": "ppo", "env": {"id": "CartPole-v1", "num_envs": 2, "vectorization": "async"},
        "total_timesteps": 64, "policy": {"kwargs": {"hidden_sizes": [8]}},
        "ppo": {"n_steps": 4, "batch_size": 8, "n_epochs": 1}, "logging": {"progress_bar": False},
        "eval": {"episodes": 0}, "checkpoint": {"every": 0},
    })
    PPO.from_config(cfg).learn().close()
    from memory_run import main as memory_run_main

    out = tmp_path / "memory.json"
    capsys.readouterr()
    assert memory_run_main([str(tmp_path / "ppo"), "--warmup-minutes", "0", "--json", str(out)]) == 0
    stdout = capsys.readouterr().out
    summary = json.loads(out.read_text())
    assert summary["updates"] == 8 and summary["commit"]
    workers = summary["env/worker_rss_mb"]
    assert 10 < workers["first"] <= workers["max"] < 4000 and len(workers["curve"]) == 8
    assert summary["proc/rss_mb"]["last"] > 50 and workers["growth_mb_per_hour"] is not None
    assert "env/worker_rss_mb" in stdout and summary["steps_per_s"]["first_fifth"] > 0
