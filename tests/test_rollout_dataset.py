"""Rollouts saved as datasets (issue 29, item 6): ``trainers/eval.py --record-dataset DIR`` writes the evaluated
LIBERO episodes in the LeRobot v3 layout of ``vla-gym demos``; the frames line up with the actions (an open-loop
replay of the recorded actions renders the recorded frames) and ``trainers/sft.py`` trains on the result."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SFT = ROOT / "experiments/libero_miniature/models/libero_object_seed0_sft_3demos_fitted.pt"


def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    pytest.importorskip("libero.libero")
    root = tmp_path_factory.mktemp("rollouts")
    result = run("trainers/eval.py", "--checkpoint", str(SFT), "--allow-render-shift", "--tasks", "1", "--init-states", "0-1",
                 "--num-envs", "2", "--out", str(root / "eval"), "--record-dataset", str(root / "data"),
                 "env.kwargs.max_episode_steps=20", "env.vectorization=async")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"dataset: {root / 'data'} (2 episodes, 40 frames" in result.stdout
    return root


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


def test_sft_trains_on_the_recorded_rollouts(recorded, tmp_path):
    result = run("trainers/sft.py", "--config", "experiments/libero_miniature/configs/libero_object_miniature_sft.yaml",
                 f"run_dir={tmp_path}", "name=bc", f"sft.dataset={recorded / 'data'}", "sft.epochs=1",
                 "logging.progress_bar=false")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "bc" / "final.pt").is_file()


def test_sft_can_train_on_the_policys_decision_frames_only(recorded, tmp_path):
    """The policy chose an 8-step chunk at frames 0, 8, 16 of each 20-step episode; there the label chunk is its own
    greedy output (clipped to the action space), in between it is a chunk replayed open loop.
    ``sft.rollout_frames=decisions`` trains on those frames only."""
    import torch

    from trainers.sft import SFT as Trainer
    from vla_gym.data.lerobot import DemoDataset
    from vla_gym.data.lerobot.concat import ConcatDemoDataset
    from vla_gym.trainers.runtime.checkpoint import load_checkpoint, load_policy
    from vla_gym.trainers.runtime.config import config_from_dict

    data = DemoDataset(recorded / "data")
    assert data.decision_period == 8
    assert data.decision_rows().tolist() == [0, 8, 16, 20, 28, 36]
    assert ConcatDemoDataset([data, data]).decision_rows().tolist() == [0, 8, 16, 20, 28, 36, 40, 48, 56, 60, 68, 76]

    state = load_checkpoint(SFT, map_location="cpu")
    overrides = [f"sft.dataset={recorded / 'data'}", "device=cpu", "eval.episodes=0",
                 "sft.rollout_frames=decisions", "sft.batch_size=2", f"run_dir={tmp_path}"]
    sft = Trainer.from_config(config_from_dict(state["config"], overrides), write_run=False)
    assert sorted(sft.epoch_order(0).tolist()) == [0, 8, 16, 20, 28, 36] and sft.steps_per_epoch == 3
    policy = load_policy(state, "cpu").eval()  # the policy that recorded the rollouts
    with torch.no_grad():
        at_decisions = policy.imitation_loss(*sft.load_batch([0, 8, 16, 20, 28, 36])).item()
        between = policy.imitation_loss(*sft.load_batch([3, 5, 11, 23, 31, 39])).item()
    assert at_decisions < between / 10, (at_decisions, between)  # clipping to the action space: not quite 0
    sft.close()


def test_successes_only_with_no_success_writes_no_dataset_and_says_why(recorded, tmp_path):
    result = run("trainers/eval.py", "--checkpoint", str(SFT), "--allow-render-shift", "--tasks", "1", "--init-states", "0",
                 "--out", str(tmp_path / "eval"), "--record-dataset", str(tmp_path / "data"), "--successes-only",
                 "env.kwargs.max_episode_steps=8")
    assert result.returncode == 1
    assert "none of the 1 episodes succeeded (--successes-only)" in result.stderr
    assert (tmp_path / "eval" / "eval.json").is_file() and not (tmp_path / "data" / "meta").exists()
