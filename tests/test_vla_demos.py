"""The scripted PushCube expert (privileged ManiSkill state) solves episodes and records clean labels."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mani_skill")

from vla_gym.demos import collect_demos


def test_push_cube_expert_demos():
    demos = collect_demos("VLA/ManiSkill-PushCube-v0", episodes=2, seed=0, noise=0.0, cameras=["main"], image_size=32)
    n = len(demos["actions"])
    assert demos["success_rate"] == 1.0 and len(demos["seeds"]) == 2
    assert demos["images"]["main"].shape == (n, 32, 32, 3) and demos["state"].shape == (n, 8)
    assert len(demos["instruction"]) == n and "cube" in demos["instruction"][0]
    assert np.all(np.abs(demos["actions"]) <= 1.0) and np.all(demos["actions"][:, 6] == 1.0)
    assert sorted(set(demos["episode"].tolist())) == [0, 1]
