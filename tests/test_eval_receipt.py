"""Receipts and replays (issue 29, item 1): what a report, a run and a dataset were made with, and
``trainers/eval.py --replay`` playing a report's episodes again on the real simulators.

The LIBERO report, its replay and ``--only-failed-in`` are checked in tests/test_rollout_dataset.py, on the
evaluation that module records (one LIBERO evaluation for both); the checks here need no simulator."""
from __future__ import annotations

import json

import pytest

from vla_gym.runtime.receipt import camera_contract, file_sha256, package_versions, receipt, version_differences
from vla_gym.trainers.evaluation.replay import ReplayError, failed_starts, load_replay


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
def test_a_report_without_a_receipt_is_refused_with_the_fix(tmp_path, capsys):
    old = tmp_path / "eval.json"
    old.write_text(json.dumps({"summary": {}, "episodes": []}))
    with pytest.raises(ReplayError, match="evaluate the checkpoint again"):
        load_replay(old)
    ood = tmp_path / "ood.json"
    ood.write_text(json.dumps({"rows": []}))
    with pytest.raises(ReplayError, match="replay one of its rows"):
        load_replay(ood)
    from vla_gym.trainers.eval import main as eval_main

    assert eval_main(["--replay", str(tmp_path / "missing.json")]) == 2
    assert "no report" in capsys.readouterr().err


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
