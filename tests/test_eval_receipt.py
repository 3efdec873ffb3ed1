"""Receipts and replays (issue 29, item 1): what a report, a run and a dataset were made with, and
``trainers/eval.py --replay`` playing a report's episodes again on the real simulators."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from vla_gym.runtime.receipt import camera_contract, file_sha256, package_versions, receipt, version_differences
from vla_gym.trainers.evaluation.replay import ReplayError, failed_starts, load_replay

ROOT = pathlib.Path(__file__).resolve().parents[1]
SFT = ROOT / "experiments/libero_miniature/models/libero_object_seed0_sft_3demos_fitted.pt"


def run_eval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "trainers/eval.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.mark.quick
def test_a_receipt_names_the_simulators_the_commit_and_the_checkpoint(tmp_path):
    versions = package_versions()
    assert versions["python"].startswith("3.") and versions["mujoco"] and versions["gymnasium"]
    assert versions["libero"] is None or "==" in versions["libero"] or versions["libero"][0].isdigit()
    checkpoint = tmp_path / "c.pt"
    checkpoint.write_bytes(b"weights")
    stamp = receipt("VLA/LiberoObject-v0", {"cameras": ("main",)}, checkpoint)
    assert stamp["env"] == {"id": "VLA/LiberoObject-v0", "kwargs": {"cameras": ["main"]}}
    assert stamp["checkpoint"]["sha256"] == file_sha256(checkpoint) and len(stamp["checkpoint"]["sha256"]) == 64
    commit = stamp["vla_gym"]["commit"]
    assert commit is None or len(commit) == 40
    json.dumps(stamp)  # plain JSON


@pytest.mark.quick
def test_version_differences_name_each_change():
    before = {"versions": {"mujoco": "3.1.6", "torch": "2.13.0"}, "vla_gym": {"commit": "a", "dirty": False},
              "checkpoint": {"sha256": "1" * 64}}
    after = {"versions": {"mujoco": "3.17.0", "torch": "2.13.0"}, "vla_gym": {"commit": "a", "dirty": False},
             "checkpoint": {"sha256": "2" * 64}}
    assert version_differences(before, after) == ["mujoco: 3.1.6 -> 3.17.0", "checkpoint sha256: 111111111111 -> "
                                                  "222222222222"]
    assert version_differences(before, before) == []


@pytest.mark.quick
def test_a_report_without_a_receipt_is_refused_with_the_fix(tmp_path):
    old = tmp_path / "eval.json"
    old.write_text(json.dumps({"summary": {}, "episodes": []}))
    with pytest.raises(ReplayError, match="evaluate the checkpoint again"):
        load_replay(old)
    ood = tmp_path / "ood.json"
    ood.write_text(json.dumps({"rows": []}))
    with pytest.raises(ReplayError, match="replay one of its rows"):
        load_replay(ood)
    result = run_eval("--replay", str(tmp_path / "missing.json"))
    assert result.returncode == 2 and "no report" in result.stderr


def test_a_libero_report_replays_bit_for_bit_and_a_changed_outcome_is_named(tmp_path):
    """The committed SFT model on LIBERO-Object (task 1, init states 0-1, 24-step episodes): the report carries the
    receipt, the instructions and the camera contract; its replay plays the same outcomes (exit 0); an edited
    outcome is found and named (exit 1)."""
    pytest.importorskip("libero.libero")
    out = tmp_path / "eval"
    first = run_eval("--checkpoint", str(SFT), "--allow-render-shift", "--tasks", "1", "--init-states", "0-1", "--out", str(out),
                     "env.kwargs.max_episode_steps=24")
    assert first.returncode == 0, first.stderr[-3000:]
    report = json.loads((out / "eval.json").read_text())
    stamp = report["receipt"]
    assert stamp["env"]["id"] == "VLA/LiberoObject-v0" and stamp["env"]["kwargs"]["max_episode_steps"] == 24
    assert stamp["env"]["cameras"] == {"roles": {"main": [128, 128]}, "flip": None, "textures": "linear"}
    assert stamp["env"]["wrappers"][0]["name"] == "ActionChunk"
    assert stamp["checkpoint"]["sha256"] == file_sha256(SFT) and stamp["versions"]["robosuite"]
    assert report["settings"]["deterministic"] is True
    assert report["settings"]["render_shift"] == [  # the committed model's contract against LIBERO's own frames
        "MuJoCo >= 3.3.3's sRGB textures (darker frames) (env renders linear textures (LIBERO's frames))"]
    episodes = report["episodes"]
    assert [(e["spec"]["task_id"], e["spec"]["init_state_id"]) for e in episodes] == [(1, 0), (1, 1)]
    assert all(e["instruction"].startswith("pick up the") for e in episodes)

    again = run_eval("--replay", str(out / "eval.json"))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "2 of 2 episodes as reported (all)" in again.stdout
    replayed = json.loads((out / "replay" / "eval.json").read_text())["episodes"]
    assert [(e["length"], e["success"]) for e in replayed] == [(e["length"], e["success"]) for e in episodes]

    episodes[1]["length"] = 3  # as if another simulator had ended it early
    report["episodes"] = episodes
    (out / "eval.json").write_text(json.dumps(report))
    moved = run_eval("--replay", str(out / "eval.json"), "--out", str(tmp_path / "replay2"))
    assert moved.returncode == 1
    assert "episode 1 (pick_up_the" in moved.stdout and "length 3 -> 24" in moved.stdout
    assert "1 of 2 episodes as reported" in moved.stdout

    # --only-failed-in: of the selected starts, only those the report failed, each with its seed in the full plan
    episodes[0]["success"], episodes[1]["success"] = True, False
    report["episodes"] = episodes
    (out / "eval.json").write_text(json.dumps(report))
    failed = run_eval("--checkpoint", str(SFT), "--allow-render-shift", "--tasks", "1", "--init-states", "0-1",
                      "--only-failed-in", str(out / "eval.json"), "--out", str(tmp_path / "failed"),
                      "env.kwargs.max_episode_steps=24")
    assert failed.returncode == 0, failed.stderr[-3000:]
    played = json.loads((tmp_path / "failed" / "eval.json").read_text())
    assert [e["spec"] for e in played["episodes"]] == [{"seed": 1, "task_id": 1, "init_state_id": 1}]
    assert played["settings"]["only_failed_in"] == [[1, 1]]


@pytest.mark.quick
def test_failed_starts_are_the_pairs_with_no_success(tmp_path):
    """A (task, init state) played twice counts as solved when either play succeeded; a file without episodes is
    refused with the fix."""
    def episode(task, init, success):
        return {"spec": {"seed": 0, "task_id": task, "init_state_id": init}, "success": success}

    report = tmp_path / "eval.json"
    report.write_text(json.dumps({"episodes": [episode(0, 0, False), episode(0, 0, True), episode(0, 1, False),
                                               episode(1, 0, None)]}))
    assert failed_starts(report) == {(0, 1), (1, 0)}
    report.write_text(json.dumps({"rows": []}))
    with pytest.raises(ReplayError, match="lists no episodes"):
        failed_starts(report)


@pytest.mark.quick
def test_camera_contract_reads_roles_and_sizes_from_the_space():
    from vla_gym.core import schema

    space = schema.observation_space(("main", "wrist"), (128, 96), 8)
    assert camera_contract(space, {"flip": "both"}) == {"roles": {"main": [128, 96], "wrist": [128, 96]},
                                                        "flip": "both", "textures": None}
