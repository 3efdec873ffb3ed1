"""trainers/rft.py (rejection-sampling fine-tuning) in short form on real LIBERO: an SFT from a dataset given twice
(``sft.dataset=A,A``, the several-datasets path), then one RFT round (sample with noise, keep successes, fit from
the sampling policy with ``--fit continue``, evaluate, keeping the greedy evaluations' successes too and sampling
only where the greedy evaluation failed), a second round that samples nothing (``--samples-per-start 0``: the greedy
evaluations' successes are its data), then the same command again, which finds every step's output and plays
nothing. Each command runs in this test's process, as trainers/rft.py calls its own steps (trainers/rft.py as a
process of its own: tests/test_libero_rl_campaign.py's campaign).

The 8-step episodes never succeed, so the round fits the demos alone; keeping and cloning successes is
tests/test_rollout_dataset.py's (``--record-dataset --successes-only``) and tests/test_demos_dataset.py's (several
datasets read as one).
"""
from __future__ import annotations

import json

import pytest
import yaml

pytest.importorskip("pyarrow")
pytest.importorskip("libero")

from short_runs import ROOT, SHORT_IMAGE_SIZE  # noqa: E402

CONFIG = ROOT / "experiments" / "libero_miniature" / "configs" / "libero_object_miniature_sft.yaml"


#: the SFT config shrunk to two optimizer steps on 8-step episodes (the RFT round's fit takes them too), with a small
#: CNN in place of the study's pretrained small VLA (whose encoders every evaluation and fit would load again: the
#: rounds are what is tested here, the policy families' cloning is tests/test_sft.py's)
TINY_POLICY = ["policy.name=cnn", "policy.kwargs={image_features: 16, hidden_sizes: [32], critic: false}"]
SHORT = ["device=cpu", "torch_threads=1", "sft.max_steps=2", "sft.batch_size=4",
         f"env.kwargs.image_size={SHORT_IMAGE_SIZE}", "env.kwargs.max_episode_steps=8", "env.num_envs=1",
         "env.vectorization=sync", "eval.episodes=0", "logging.progress_bar=false", "checkpoint.resume=null",
         *TINY_POLICY]


def rft_here(capfd, argv: list[str]) -> str:
    """``python trainers/rft.py ARGV`` in this process (its steps are calls in its own process too); its stdout."""
    from vla_gym.trainers.rft import main

    capfd.readouterr()
    assert main(argv) == 0
    return capfd.readouterr().out


@pytest.mark.usefixtures("one_torch_thread")  # the fits set torch_threads=1 in this process: restored after
def test_rft_round_runs_in_short_form_and_resumes(tmp_path, capfd, monkeypatch):
    from vla_gym.data.record import record_demos
    from vla_gym.trainers.sft import main as sft

    monkeypatch.chdir(ROOT)  # the product commands run from the repository root
    demos = tmp_path / "demos"
    record_demos("VLA/LiberoObject-v0", demos, episodes_per_task=1, task_ids=[0], keep_failures=True,
                 progress=False, cameras=["main"], image_size=SHORT_IMAGE_SIZE, max_episode_steps=8)
    assert sft(["--config", str(CONFIG), f"run_dir={tmp_path}", "name=sft0", f"sft.dataset={demos},{demos}",
                *SHORT]) == 0
    assert (tmp_path / "sft0" / "final.pt").is_file()

    argv = ["--sft-config", str(CONFIG), "--demos", str(demos), "--init-checkpoint", str(tmp_path / "sft0" / "final.pt"),
            "--out", str(tmp_path / "rft"), "--rounds", "1", "--samples-per-start", "1", "--tasks", "0", "--init-states",
            "0", "--num-envs", "1", "--sync", "--fit", "continue", "--keep-greedy-successes", "--sample-failed-only",
            "--seed", "1", *SHORT]
    first = rft_here(capfd, argv)
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
    assert f"--only-failed-in {out}/round_0/eval/eval.json" in first and settings["only_failed_in"] == [[0, 0]]
    # --keep-greedy-successes: the greedy evaluations record their successes (none here), but the last round's
    recording = "--out {out}/round_{r}/eval --record-dataset {out}/round_{r}/eval_rollouts --successes-only"
    assert recording.format(out=out, r=0) in first and recording.format(out=out, r=1) not in first

    # a second round that samples nothing new: its data are the greedy evaluations' successes (none here)
    argv[argv.index("--rounds") + 1], argv[argv.index("--samples-per-start") + 1] = "2", "0"
    second = rft_here(capfd, argv)
    # round 1's greedy evaluation again, now recording (round 2 fits its successes), round 2's fit and evaluation
    assert second.count("running:") == 3 and recording.format(out=out, r=1) in second
    row = json.loads((out / "rft.json").read_text())["rows"][2]
    assert row["sampled"] is None and row["sampled_episodes"] == 0 and row["env_steps"] == 0
    assert row["greedy_successes_kept"] == 0 and not list((out / "round_2").glob("sample_*"))

    again = rft_here(capfd, argv)  # the same command once more: it finds every step's output and plays nothing
    assert "running:" not in again and "round 2:" in again


@pytest.mark.usefixtures("one_torch_thread")
def test_an_action_token_policy_samples_its_rounds_at_a_temperature(tmp_path, capfd, monkeypatch):
    """``--temperature``: the small VLA with its token head (``policy.kwargs.head=tokens``) samples the round's
    episodes at that temperature (eval.py --temperature, no std), and the round fits the token head again; with
    ``--hold-entropy`` a second round samples at the temperature that gives its policy the SFT's entropy at 1.6,
    recorded before it samples; ``--std`` and ``--temperature`` together, or ``--hold-entropy`` without
    ``--temperature``, are refused."""
    from vla_gym.data.record import record_demos
    from vla_gym.trainers.rft import main as rft
    from vla_gym.trainers.sft import main as sft

    monkeypatch.chdir(ROOT)
    demos = tmp_path / "demos"
    record_demos("VLA/LiberoObject-v0", demos, episodes_per_task=1, task_ids=[0], keep_failures=True,
                 progress=False, cameras=["main"], image_size=SHORT_IMAGE_SIZE, max_episode_steps=8)
    tokens = [setting for setting in SHORT if not setting.startswith("policy.")] + ["policy.kwargs.head=tokens"]
    assert sft(["--config", str(CONFIG), f"run_dir={tmp_path}", "name=sft0", f"sft.dataset={demos}", *tokens]) == 0
    argv = ["--sft-config", str(CONFIG), "--demos", str(demos), "--init-checkpoint", str(tmp_path / "sft0" / "final.pt"),
            "--out", str(tmp_path / "rft"), "--rounds", "1", "--samples-per-start", "1", "--tasks", "0", "--init-states",
            "0", "--num-envs", "1", "--sync", "--temperature", "1.6", *tokens]
    out = rft_here(capfd, argv)
    assert "--stochastic --temperature 1.6 --seed 1001" in out and "--std" not in out
    settings = json.loads((tmp_path / "rft" / "round_1" / "sample_1" / "eval.json").read_text())["settings"]
    assert settings["deterministic"] is False and settings["temperature"] == 1.6 and settings["std"] is None
    fitted = yaml.safe_load((tmp_path / "rft" / "round_1" / "sft" / "config.yaml").read_text())
    assert fitted["policy"]["kwargs"]["head"] == "tokens"

    argv[argv.index("--rounds") + 1] = "2"
    out = rft_here(capfd, [*argv, "--hold-entropy"])  # round 1 is found on disk; round 2 at the matched temperature
    held = json.loads((tmp_path / "rft" / "round_2" / "temperature.json").read_text())
    assert 0.05 <= held["temperature"] <= 20.0 and held["frames"] > 0 and held["entropy"] > 0
    assert f"--stochastic --temperature {held['temperature']} --seed 2001" in out
    rows = json.loads((tmp_path / "rft" / "rft.json").read_text())["rows"]
    assert [row.get("temperature") for row in rows] == [None, 1.6, held["temperature"]]

    with pytest.raises(SystemExit):
        rft([*argv, "--std", "0.05"])
    assert "give one of them" in capfd.readouterr().err
    with pytest.raises(SystemExit):
        rft([arg if arg != "--temperature" else "--hold-entropy" for arg in argv if arg != "1.6"])
    assert "give --temperature" in capfd.readouterr().err
