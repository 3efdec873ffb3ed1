"""experiments/main_job_seeds/runs.py in its short form: the README's main job per seed -> a JSON row per run; and
the study README's table equal to its results.json."""
from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_main_job_runs_records_each_seed(tmp_path):
    out = tmp_path / "main_job.json"
    result = subprocess.run(
        [sys.executable, "experiments/main_job_seeds/runs.py", "--seeds", "3", "--out", str(out), "--workdir", str(tmp_path),
         # one PPO update of 8 env steps (one env per rank, 4 steps each) on 8-step episodes; one closing episode:
         # rank 1 evaluates none
         "total_timesteps=8", "env.num_envs=2", "ppo.n_steps=4", "ppo.batch_size=8", "ppo.n_epochs=1",
         "env.kwargs.max_episode_steps=8", "eval.episodes=1", "eval.video=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["command"].startswith("torchrun --nproc_per_node=2 trainers/ppo.py --config")
    assert data["eval_episodes"] == 1  # the override's, which the README tables print beside the successes
    [run] = data["runs"]
    assert run["seed"] == 3 and run["env_steps"] == 8 and run["env_steps_per_s"] > 0
    assert 0.0 <= run["final_success"] <= 1.0 and run["wall_minutes"] > 0 and run["commit"]
    assert (tmp_path / "main_job_seed3" / "eval" / "eval.json").is_file()

    # the study's analysis of that run: its evaluation split by the cube's start (experiments/main_job_seeds/starts.py)
    # --ends: the last checkpoint replayed on each failed episode, where gripper and cube end
    split = subprocess.run([sys.executable, "experiments/main_job_seeds/starts.py", str(tmp_path / "main_job_seed3"),
                            "--json", str(tmp_path / "starts.json"), "--ends"], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert split.returncode == 0, split.stderr[-3000:]
    [row] = json.loads((tmp_path / "starts.json").read_text())
    assert row["behind"][1] + row["rest"][1] == 1 and f"behind {row['behind'][0]}/{row['behind'][1]}" in split.stdout
    failed = row["behind"][1] - row["behind"][0] + row["rest"][1] - row["rest"][0]
    assert len(row["failed"]) == failed
    for end in row["failed"]:  # an 8-step episode of a policy trained for one update
        assert end["end"] in ("aside", "off the table", "short") and not end["replayed_success"]
        assert f"seed {end['seed']}" in split.stdout


@pytest.mark.quick
def test_readme_table_is_the_results_json():
    """experiments/main_job_seeds/README.md's table = its results.json (``runs.py readme --check``)."""
    spec = importlib.util.spec_from_file_location("main_job_runs", ROOT / "experiments" / "main_job_seeds" / "runs.py")
    runs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runs)
    assert runs.main(["readme", "--check"]) == 0, "run: python experiments/main_job_seeds/runs.py readme"
