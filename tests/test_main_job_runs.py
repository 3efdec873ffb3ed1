"""scripts/main_job_runs.py in its short form: the README's main job per seed -> a JSON row per run."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_main_job_runs_records_each_seed(tmp_path):
    out = tmp_path / "main_job.json"
    result = subprocess.run(
        [sys.executable, "scripts/main_job_runs.py", "--seeds", "3", "--out", str(out), "--workdir", str(tmp_path),
         "total_timesteps=800", "eval.episodes=1", "eval.video=false"],  # one episode: rank 1 evaluates none
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["command"].startswith("torchrun --nproc_per_node=2 trainers/ppo.py --config")
    [run] = data["runs"]
    assert run["seed"] == 3 and run["env_steps"] == 800 and run["env_steps_per_s"] > 0
    assert 0.0 <= run["final_success"] <= 1.0 and run["wall_minutes"] > 0 and run["commit"]
    assert (tmp_path / "main_job_seed3" / "eval" / "eval.json").is_file()
