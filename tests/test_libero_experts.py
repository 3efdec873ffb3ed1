"""Scripted LIBERO experts on the real simulator, and LIBERO-130's per-suite episode limits.

Physics only: the envs render one 32 px camera at reset (LIBERO needs one) and never while stepping.
"""
import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import vla_gym  # noqa: F401  (registers the ids)
from vla_gym.data.experts.libero import libero_expert
from vla_gym.data.experts.libero_tasks import SUPPORTED
from vla_gym.tasks.libero import SUITE_MAX_STEPS, suite_tasks

pytest.importorskip("libero.libero")


def run_expert(env, task_id: int, init_state_id: int) -> tuple[bool, int]:
    """LIBERO's evaluation episode ``init_state_id`` of the task: its initial state, and its seed, which places the
    fixtures (cabinets, stoves). The experts solve 92.6 % of Spatial's episodes, not all: e.g. Spatial task 4 (bowl
    in the cabinet's drawer) fails from init state 1 with seed 0's cabinet placement and succeeds with seeds 1-4."""
    env.reset(seed=init_state_id, options={"task_id": task_id, "init_state_id": init_state_id})
    expert = libero_expert(env)
    steps, done, success = 0, False, False
    while not done:
        action = expert()
        assert action.shape == (7,) and action.dtype == np.float32 and np.all(np.abs(action) <= 1)
        _, _, success, truncated, _ = env.unwrapped.step(action, observe=False)
        steps += 1
        done = success or truncated
    return success, steps


@pytest.mark.parametrize("env_id, task_id, init_state_id", [
    # cream cheese (flat box): in the slow tier, as LIBERO-Object tasks 0-1 x init states 0-1 are solved in the
    # default run by experiments/mujoco_versions/measure.py's short form (tests/test_canary.py)
    pytest.param("VLA/LiberoObject-v0", 1, 0, marks=pytest.mark.slow),
    ("VLA/LiberoObject-v0", 6, 3),                                      # butter
    ("VLA/LiberoSpatial-v0", 4, 1),                                     # bowl in the cabinet's drawer
    # bowl on the ramekin: a pick-and-place onto an object, the family of Goal's cream cheese in the bowl (below)
    pytest.param("VLA/LiberoSpatial-v0", 5, 2, marks=pytest.mark.slow),
])
def test_expert_solves_sample_tasks(env_id, task_id, init_state_id):
    env = gym.wrappers.RecordEpisodeStatistics(gym.make(env_id, cameras=("main",), image_size=32))
    try:
        success, steps = run_expert(env, task_id, init_state_id)
        assert success, f"{env_id} task {task_id} init state {init_state_id}: no success in {steps} steps"
    finally:
        env.close()


@pytest.mark.parametrize("env_id, task_name", [
    ("VLA/LiberoGoal-v0", "put_the_cream_cheese_in_the_bowl"),   # pick-and-place onto an object
    ("VLA/LiberoGoal-v0", "turn_on_the_stove"),                  # turn a knob
])
def test_expert_solves_goal_task_families(env_id, task_name):
    env = gym.make(env_id, cameras=("main",), image_size=32)
    try:
        task_id = next(t.index for t in env.unwrapped.tasks if t.name == task_name)
        success, steps = run_expert(env, task_id, 0)
        assert success, f"{env_id} {task_name} init state 0: no success in {steps} steps"
    finally:
        env.close()


def test_supported_lists_every_object_and_spatial_task_and_some_goal_and_libero90_tasks():
    assert {suite for suite, _ in SUPPORTED} == {"libero_object", "libero_spatial", "libero_goal", "libero_90"}
    for suite in ("libero_object", "libero_spatial"):
        assert {(suite, t.name) for t in suite_tasks(suite)} <= SUPPORTED
    names = {t.name for t in suite_tasks("libero_130")}
    assert all(name in names for _, name in SUPPORTED), "SUPPORTED names a task LIBERO does not have"
    assert ("libero_goal", "open_the_middle_drawer_of_the_cabinet") not in SUPPORTED


def test_libero130_keeps_each_suites_limit():
    tasks = suite_tasks("libero_130")
    for suite, limit in SUITE_MAX_STEPS.items():
        assert {t.max_episode_steps for t in tasks if t.suite == suite} == {limit}
    assert SUITE_MAX_STEPS["libero_10"] == 520 and SUITE_MAX_STEPS["libero_spatial"] == 220


def test_libero130_episode_truncates_at_the_suites_limit_and_unsupported_task_raises():
    env = gym.make("VLA/Libero130-v0", cameras=("main",), image_size=32)
    try:
        goal_task = next(t.index for t in env.unwrapped.tasks if t.suite == "libero_goal")
        env.reset(seed=0, options={"task_id": goal_task, "init_state_id": 0})
        with pytest.raises(KeyError, match="no scripted LIBERO expert.*libero_object"):
            libero_expert(env)
        hold = np.array([0, 0, 0, 0, 0, 0, -1], np.float32)
        steps, truncated = 0, False
        while not truncated:
            *_, truncated, info = env.unwrapped.step(hold, observe=False)
            steps += 1
        assert steps == SUITE_MAX_STEPS["libero_goal"] == 300
    finally:
        env.close()


def test_measure_script_writes_tables(tmp_path):
    out = tmp_path / "measure"
    result = subprocess.run(
        [sys.executable, "experiments/scripted_experts/measure_libero_experts.py", "--suites", "libero_object",
         "--tasks", "0", "--init-states", "0", "--workers", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads((out / "table.json").read_text())
    assert data["suites"]["libero_object"]["episodes"] == 1
    assert data["suites"]["libero_object"]["successes"] == 1
    assert "| libero_object | 0: " in (out / "table.md").read_text()
