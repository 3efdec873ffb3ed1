"""Rollouts saved as datasets (issue 29, item 6): ``trainers/eval.py --record-dataset DIR`` writes the evaluated
LIBERO episodes in the LeRobot v3 layout of ``vla-gym demos``; the frames line up with the actions (an open-loop
replay of the recorded actions renders the recorded frames) and ``trainers/sft.py`` trains on the result.

The same evaluation's report carries the receipts of issue 29, item 1 (tests/test_eval_receipt.py holds the checks
that need no simulator): ``--replay`` plays its episodes again and names a changed outcome, ``--only-failed-in``
plays the starts it failed. One evaluation (the user's command, a subprocess) serves every test of this module; the
commands that follow it run in-process (``trainers.eval.main``), each still building its own LIBERO env.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SFT = ROOT / "experiments/libero_miniature/models/libero_object_seed0_sft_3demos_fitted.pt"
STEPS = 20  # per episode: policy decisions (8-step chunks) at frames 0, 8 and 16, the last chunk cut to 4


def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The committed SFT model on LIBERO-Object task 1, init states 0-1, in 2 async envs: report and dataset."""
    pytest.importorskip("libero.libero")
    root = tmp_path_factory.mktemp("rollouts")
    result = run("trainers/eval.py", "--checkpoint", str(SFT), "--allow-render-shift", "--tasks", "1", "--init-states", "0-1",
                 "--num-envs", "2", "--out", str(root / "eval"), "--record-dataset", str(root / "data"),
                 f"env.kwargs.max_episode_steps={STEPS}", "env.vectorization=async")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"dataset: {root / 'data'} (2 episodes, {2 * STEPS} frames" in result.stdout
    return root


def edited_report(recorded: pathlib.Path, directory: pathlib.Path, edit) -> pathlib.Path:
    """A copy of the evaluation's report in ``directory`` with ``edit(episodes)`` applied."""
    report = json.loads((recorded / "eval" / "eval.json").read_text())
    edit(report["episodes"])
    path = directory / "eval.json"
    path.write_text(json.dumps(report))
    return path


def test_the_dataset_holds_the_evaluated_episodes_with_their_receipt(recorded):
    from vla_gym.data.lerobot import DemoDataset

    data = DemoDataset(recorded / "data")
    assert data.num_episodes == 2 and len(data) == 40
    assert [(e["task_id"], e["init_state_id"], e["seed"]) for e in data.episodes] == [(1, 0, 0), (1, 1, 1)]
    assert np.all(np.abs(data.actions) <= 1) and data.actions.shape == (40, 7)
    summary = json.loads((recorded / "data" / "meta" / "vla_gym_rollouts.json").read_text())
    assert summary["receipt"]["env"]["id"] == "VLA/LiberoObject-v0" and summary["settings"]["deterministic"]
    assert [e["length"] for e in summary["episodes_played"]] == [20, 20]
    assert not (recorded / "data" / ".staging").exists()
    evaluated = json.loads((recorded / "eval" / "eval.json").read_text())["episodes"]
    assert [e["success"] for e in evaluated] == [e["success"] for e in summary["episodes_played"]]


def test_a_libero_report_names_what_it_was_made_with(recorded):
    """The receipt, the instructions and the camera contract of the evaluation's report."""
    from vla_gym.backends.mujoco_textures import has_colorspaces
    from vla_gym.runtime.receipt import file_sha256

    report = json.loads((recorded / "eval" / "eval.json").read_text())
    stamp = report["receipt"]
    assert stamp["env"]["id"] == "VLA/LiberoObject-v0" and stamp["env"]["kwargs"]["max_episode_steps"] == STEPS
    assert stamp["env"]["cameras"] == {"roles": {"main": [128, 128]}, "flip": None, "textures": "linear"}
    assert stamp["env"]["wrappers"][0]["name"] == "ActionChunk"
    assert stamp["checkpoint"]["sha256"] == file_sha256(SFT) and stamp["versions"]["robosuite"]
    assert report["settings"]["deterministic"] is True
    # the committed model's contract ("auto": MuJoCo's own decoding, trained on 3.17) against LIBERO's own frames:
    # a shift where MuJoCo decodes textures as sRGB (>= 3.3.3); up to 3.3.2 both are linear, nothing is waived
    assert report["settings"]["render_shift"] == ([
        "MuJoCo >= 3.3.3's sRGB textures (darker frames) (env renders linear textures (LIBERO's frames))"]
        if has_colorspaces() else [])
    episodes = report["episodes"]
    assert [(e["spec"]["task_id"], e["spec"]["init_state_id"]) for e in episodes] == [(1, 0), (1, 1)]
    assert all(e["instruction"].startswith("pick up the") for e in episodes)


def test_a_replay_plays_the_reports_outcomes_and_names_a_changed_one(recorded, tmp_path, capsys):
    """``--replay`` of the report with episode 1's length edited (as if another simulator had ended it early):
    exit 1, that episode named; the replay's own report has the evaluation's outcomes, which the replay check
    passes as they are (exit 0, all as reported)."""
    from vla_gym.trainers.eval import main as eval_main
    from vla_gym.trainers.eval import replay_outcome
    from vla_gym.trainers.evaluation.replay import load_replay

    def shorten(episodes):
        episodes[1]["length"] = 3

    edited = edited_report(recorded, tmp_path, shorten)
    assert eval_main(["--replay", str(edited), "--out", str(tmp_path / "replay")]) == 1
    printed = capsys.readouterr().out
    assert "episode 1 (pick_up_the" in printed and f"length 3 -> {STEPS}" in printed
    assert "1 of 2 episodes as reported" in printed and "episode 0 " not in printed

    episodes = json.loads((recorded / "eval" / "eval.json").read_text())["episodes"]
    replayed = json.loads((tmp_path / "replay" / "eval.json").read_text())["episodes"]
    assert [(e["length"], e["success"]) for e in replayed] == [(e["length"], e["success"]) for e in episodes]
    assert replay_outcome(load_replay(recorded / "eval" / "eval.json"), {}, tmp_path / "replay") == 0
    assert "2 of 2 episodes as reported (all)" in capsys.readouterr().out


def test_only_failed_in_plays_the_failed_starts_and_successes_only_with_no_success_writes_no_dataset(
        recorded, tmp_path, capsys):
    """One run, two selections: ``--only-failed-in`` keeps, of the selected starts, those the report failed (each
    with its seed in the full plan); ``--successes-only`` with no success writes the report but no dataset, says why
    and exits 1."""
    from vla_gym.trainers.eval import main as eval_main

    def first_solved(episodes):
        episodes[0]["success"], episodes[1]["success"] = True, False

    report = edited_report(recorded, tmp_path, first_solved)
    code = eval_main(["--checkpoint", str(SFT), "--allow-render-shift", "--tasks", "1", "--init-states", "0-1",
                      "--only-failed-in", str(report), "--out", str(tmp_path / "failed"),
                      "--record-dataset", str(tmp_path / "data"), "--successes-only", "env.kwargs.max_episode_steps=8"])
    assert code == 1
    assert "none of the 1 episodes succeeded (--successes-only)" in capsys.readouterr().err
    played = json.loads((tmp_path / "failed" / "eval.json").read_text())
    assert [e["spec"] for e in played["episodes"]] == [{"seed": 1, "task_id": 1, "init_state_id": 1}]
    assert played["settings"]["only_failed_in"] == [[1, 1]]
    assert not (tmp_path / "data" / "meta").exists()


def test_an_open_loop_replay_of_the_recorded_actions_renders_the_recorded_frames(recorded):
    """Frame t is the observation before action t, rendered fresh at every sub-step of the action chunks."""
    import gymnasium as gym

    import vla_gym  # noqa: F401
    from vla_gym.data.lerobot import DemoDataset

    data = DemoDataset(recorded / "data")
    env = gym.make("VLA/LiberoObject-v0", cameras=["main"], image_size=128)
    try:
        obs, _ = env.reset(seed=1, options={"task_id": 1, "init_state_id": 1})
        start = data.episodes[1]["dataset_from_index"]
        for t in range(11):  # across the first chunk boundary (chunks of 8)
            frame = data[start + t]
            assert np.array_equal(frame["images"]["main"], obs["images"]["main"]), t
            assert np.allclose(frame["state"], obs["state"], atol=1e-5), t
            obs, *_ = env.step(data.actions[start + t])
    finally:
        env.close()


def test_sft_trains_on_the_recorded_rollouts_decision_frames_only(recorded, tmp_path):
    """The policy chose an 8-step chunk at frames 0, 8, 16 of each 20-step episode; there the label chunk is its own
    greedy output clipped to the action space (every action of it inside the episode: the chunk at frame 16 is cut
    to 4 and padded), in between it is a chunk replayed open loop. ``sft.rollout_frames=decisions`` trains on those
    frames only; the trainer (trainers/sft.py's, in-process) trains on the recording and writes its final.pt."""
    import torch
    import torch.nn.functional as F

    from trainers.sft import SFT as Trainer
    from vla_gym.data.lerobot import DemoDataset
    from vla_gym.data.lerobot.concat import ConcatDemoDataset
    from vla_gym.trainers.runtime.checkpoint import load_checkpoint, load_policy
    from vla_gym.trainers.runtime.config import config_from_dict

    data = DemoDataset(recorded / "data")
    assert data.decision_period == 8
    decisions = [0, 8, 16, 20, 28, 36]
    assert data.decision_rows().tolist() == decisions
    assert ConcatDemoDataset([data, data]).decision_rows().tolist() == [0, 8, 16, 20, 28, 36, 40, 48, 56, 60, 68, 76]

    state = load_checkpoint(SFT, map_location="cpu")
    overrides = [f"sft.dataset={recorded / 'data'}", "device=cpu", "eval.episodes=0", "name=bc",
                 "sft.rollout_frames=decisions", "sft.batch_size=2", "sft.epochs=1", f"run_dir={tmp_path}",
                 "logging.progress_bar=false"]
    sft = Trainer.from_config(config_from_dict(state["config"], overrides))
    try:
        assert sorted(sft.epoch_order(0).tolist()) == decisions and sft.steps_per_epoch == 3
        policy = load_policy(state, "cpu").eval()  # the policy that recorded the rollouts

        def label_error(rows):
            """Per row: the largest difference between its label chunk and the policy's clipped greedy chunk."""
            obs, labels = sft.load_batch(rows)
            mask = torch.from_numpy(data.batch(rows, chunk=8)[2])
            executed = policy.act(obs, deterministic=True, executed=True)[0]
            error = (executed - labels.reshape(executed.shape)).abs().amax(-1)
            return torch.where(mask, error, torch.zeros_like(error)).amax(-1)

        assert label_error(decisions).max() < 1e-4  # the feature cache keeps half precision
        between = label_error([3, 5, 11, 23, 31, 39])
        assert between.min() > 0.05, between
        full = [0, 8, 20, 28]  # decisions whose chunk lies inside the episode: the loss is the clipping's alone
        obs, labels = sft.load_batch(full)
        mode, executed = (policy.act(obs, deterministic=True, executed=clip)[0] for clip in (False, True))
        with torch.no_grad():
            loss = policy.imitation_loss(obs, labels).item()
        assert loss == pytest.approx(F.mse_loss(mode, executed).item(), rel=1e-4, abs=1e-7)

        sft.learn()
        assert sft.num_updates == 3 and (tmp_path / "bc" / "final.pt").is_file()
    finally:
        sft.close()
