"""trainers/rft.py (rejection-sampling fine-tuning) in short form on real LIBERO: an SFT from a dataset given twice
(``sft.dataset=A,A``, the several-datasets path), then one RFT round (sample with noise, keep successes, fit from
the sampling policy with ``--fit continue``, evaluate, keeping the greedy evaluations' successes too and sampling
only where the greedy evaluation failed), a second round that samples nothing (``--samples-per-start 0``: the greedy
evaluations' successes are its data), then the same command again (in the test's process), which finds every step's
output and plays nothing.

The 8-step episodes never succeed, so the round fits the demos alone; keeping and cloning successes is
tests/test_rollout_dataset.py's (``--record-dataset --successes-only``) and tests/test_demos_dataset.py's (several
datasets read as one).
"""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

pytest.importorskip("pyarrow")
pytest.importorskip("libero")

from short_runs import ROOT, SHORT_IMAGE_SIZE, child_env, executable  # noqa: E402

CONFIG = ROOT / "experiments" / "libero_miniature" / "configs" / "libero_object_miniature_sft.yaml"


#: the SFT config shrunk to two optimizer steps on 8-step episodes (the RFT round's fit takes them too), with a small
#: CNN in place of the study's pretrained small VLA (whose encoders every evaluation and fit would load again: the
#: rounds are what is tested here, the policy families' cloning is tests/test_sft.py's)
TINY_POLICY = ["policy.name=cnn", "policy.kwargs={image_features: 16, hidden_sizes: [32], critic: false}"]
SHORT = ["device=cpu", "torch_threads=1", "sft.max_steps=2", "sft.batch_size=4",
         f"env.kwargs.image_size={SHORT_IMAGE_SIZE}", "env.kwargs.max_episode_steps=8", "env.num_envs=1",
         "env.vectorization=sync", "eval.episodes=0", "logging.progress_bar=false", "checkpoint.resume=null",
         *TINY_POLICY]


def test_rft_round_runs_in_short_form_and_resumes(tmp_path, capfd):
    from vla_gym.data.record import record_demos

    demos = tmp_path / "demos"
    record_demos("VLA/LiberoObject-v0", demos, episodes_per_task=1, task_ids=[0], keep_failures=True,
                 progress=False, cameras=["main"], image_size=SHORT_IMAGE_SIZE, max_episode_steps=8)
    sft = subprocess.run([*executable("python"), "trainers/sft.py", "--config", str(CONFIG),
                          f"run_dir={tmp_path}", "name=sft0", f"sft.dataset={demos},{demos}", *SHORT],
                         cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=600, check=False)
    assert sft.returncode == 0, sft.stdout[-2000:] + sft.stderr[-3000:]
    assert (tmp_path / "sft0" / "final.pt").is_file()

    command = [*executable("python"), "trainers/rft.py", "--sft-config", str(CONFIG), "--demos", str(demos),
               "--init-checkpoint", str(tmp_path / "sft0" / "final.pt"), "--out", str(tmp_path / "rft"),
               "--rounds", "1", "--samples-per-start", "1", "--tasks", "0", "--init-states", "0", "--num-envs", "1",
               "--sync", "--fit", "continue", "--keep-greedy-successes", "--sample-failed-only", "--seed", "1", *SHORT]
    first = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=900,
                           check=False)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    out = tmp_path / "rft"
    rows = json.loads((out / "rft.json").read_text())["rows"]
    assert [r["round"] for r in rows] == [0, 1]
    assert rows[1]["sampled"] == 0.0 and rows[1]["successes_kept"] == 0 and rows[1]["env_steps"] == 8
    assert rows[1]["sft_steps"] == 2 and rows[1]["train_minutes"] > 0
    assert (out / "round_1" / "sft" / "final.pt").is_file() and (out / "round_1" / "eval" / "eval.json").is_file()
    fitted_config = yaml.safe_load((out / "round_1" / "sft" / "config.yaml").read_text())
    fitted = fitted_config["sft"]
    assert fitted_config["seed"] == 1  # --seed: the fit's training seed
    assert fitted["init_checkpoint"] == str(tmp_path / "sft0" / "final.pt")  # --fit continue: from the sampler
    settings = json.loads((out / "round_1" / "sample_1" / "eval.json").read_text())["settings"]
    # --seed 1: round 1's sample 1 plays seed 100,000 * 1 + 1000 * 1 + 1
    assert settings["deterministic"] is False and settings["std"] == 0.05 and settings["seed"] == 101001
    # --sample-failed-only: the sampling plays the starts round 0's greedy evaluation failed (here all)
    assert f"--only-failed-in {out}/round_0/eval/eval.json" in first.stdout and settings["only_failed_in"] == [[0, 0]]
    # --keep-greedy-successes: the greedy evaluations record their successes (none here), but the last round's
    recording = "--out {out}/round_{r}/eval --record-dataset {out}/round_{r}/eval_rollouts --successes-only"
    assert recording.format(out=out, r=0) in first.stdout and recording.format(out=out, r=1) not in first.stdout

    # a second round that samples nothing new: its data are the greedy evaluations' successes (none here)
    command[command.index("--rounds") + 1], command[command.index("--samples-per-start") + 1] = "2", "0"
    second = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=900,
                            check=False)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    # round 1's greedy evaluation again, now recording (round 2 fits its successes), round 2's fit and evaluation
    assert second.stdout.count("running:") == 3 and recording.format(out=out, r=1) in second.stdout
    row = json.loads((out / "rft.json").read_text())["rows"][2]
    assert row["sampled"] is None and row["sampled_episodes"] == 0 and row["env_steps"] == 0
    assert row["greedy_successes_kept"] == 0 and not list((out / "round_2").glob("sample_*"))

    # the same command once more, in this process (it finds every step's output: no process to start)
    from vla_gym.trainers.rft import main

    capfd.readouterr()
    assert main(command[len(executable("python")) + 1:]) == 0
    again = capfd.readouterr().out
    assert "running:" not in again and "round 2:" in again
