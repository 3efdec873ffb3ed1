"""The scripted PushCube expert (privileged ManiSkill state) solves episodes and records clean labels; the
SFT -> GRPO example runs in its short form."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mani_skill")

from vla_gym.data.expert_episodes import collect_demos


def test_push_cube_expert_demos():
    demos = collect_demos("VLA/ManiSkill-PushCube-v0", episodes=2, seed=0, noise=0.0, cameras=["main"], image_size=32)
    n = len(demos["actions"])
    assert demos["success_rate"] == 1.0 and len(demos["seeds"]) == 2
    assert demos["images"]["main"].shape == (n, 32, 32, 3) and demos["state"].shape == (n, 8)
    assert len(demos["instruction"]) == n and "cube" in demos["instruction"][0]
    assert np.all(np.abs(demos["actions"]) <= 1.0) and np.all(demos["actions"][:, 6] == 1.0)
    assert sorted(set(demos["episode"].tolist())) == [0, 1]


def test_sft_then_rl_short_form(tmp_path):
    """examples/sft_then_rl.py end to end in miniature through the product commands: vla-gym demos -> trainers/sft.py
    -> trainers/eval.py -> trainers/grpo.py (from the SFT checkpoint) -> trainers/eval.py; table and curve."""
    import json
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "examples/sft_then_rl.py", "--demos", "2", "--bc-epochs", "1", "--eval-episodes", "1",
         "--rl-steps", "16", "--group-size", "2", "--groups", "1", "--image-size", "64", "--num-envs", "1",
         "--max-episode-steps", "8", "--out", str(tmp_path)],  # one GRPO update: a group of two 8-step episodes
        cwd=root, capture_output=True, text=True, timeout=1500, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["after_sft"]["episodes"] == results["after_rl"]["episodes"] == 1
    assert all(0 < results[k]["mean_length"] <= 8 for k in ("after_sft", "after_rl"))  # --max-episode-steps
    assert results["demos"]["episodes"] >= 1 and results["curve"] and results["curve"][-1]["steps"] >= 16
    assert (tmp_path / "curve.png").exists() and "SFT + GRPO" in (tmp_path / "results.md").read_text()
    for command in ("$ vla-gym demos", "$ python trainers/sft.py", "$ python trainers/grpo.py", "$ python trainers/eval.py"):
        assert command in result.stdout  # the driver shows the product commands it runs
