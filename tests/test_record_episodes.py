"""``RecordEpisodes(successes_only=True)`` renders the frames an action chunk skipped only for successes, from the
poses kept at each skipped step (``VLAEnv.render_snapshot()``), and those frames are the pixels an immediate
render gives: the scripted expert's successful LIBERO episode is recorded as it is played, every frame rendered at
once, and its actions are replayed in chunks recorded with ``successes_only``; the two are compared frame by frame.
A failure is staged as its marker alone."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("libero")
pytest.importorskip("pyarrow")

from short_runs import SHORT_IMAGE_SIZE  # noqa: E402

TASK, INIT_STATE, CHUNK = 1, 0, 8  # LIBERO-Object "pick up the cream cheese ...": the expert needs ~90 steps


def make_env():
    import gymnasium as gym

    import vla_gym  # noqa: F401

    return gym.make("VLA/LiberoObject-v0", cameras=["main", "wrist"], image_size=SHORT_IMAGE_SIZE)


def record_expert(env, directory) -> tuple[np.ndarray, list[dict]]:
    """The scripted expert's episode up to its success, recorded step by step with every frame rendered at once:
    (its actions, which the chunked recorder replays; the staged episodes)."""
    from vla_gym.data.experts.dispatch import expert_for
    from vla_gym.wrappers import RecordEpisodes
    from vla_gym.wrappers.record_episodes import staged_episodes

    recorder = RecordEpisodes(env, directory, successes_only=False)
    recorder.reset(seed=0, options={"task_id": TASK, "init_state_id": INIT_STATE})
    expert, actions = expert_for(recorder), []
    for _ in range(300):
        actions.append(np.asarray(expert(), np.float32))
        *_, terminated, _, _ = recorder.step(actions[-1])
        if terminated:
            return np.asarray(actions, np.float32), staged_episodes(directory)
    pytest.fail("the scripted expert did not succeed")


def record(env, directory, actions: np.ndarray, successes_only: bool) -> list[dict]:
    from vla_gym.wrappers import ActionChunk, RecordEpisodes
    from vla_gym.wrappers.record_episodes import staged_episodes

    chunked = ActionChunk(RecordEpisodes(env, directory, successes_only=successes_only), chunk_size=CHUNK)
    chunked.reset(seed=0, options={"task_id": TASK, "init_state_id": INIT_STATE})
    for start in range(0, len(actions), CHUNK):
        *_, terminated, truncated, _ = chunked.step(actions[start:start + CHUNK])
        if terminated or truncated:
            break
    return staged_episodes(directory)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    env = make_env()
    try:
        root = tmp_path_factory.mktemp("recorded")
        actions, now = record_expert(env, root / "now")
        later = record(env, root / "later", actions, successes_only=True)
        # a failure: the same start, the first chunk only, cut by the time limit
        env.unwrapped.max_episode_steps_override = CHUNK
        failed = record(env, root / "failed", actions[:CHUNK], successes_only=True)
    finally:
        env.close()
    return root, actions, now, later, failed


def test_deferred_frames_of_a_success_are_the_immediately_rendered_ones(recorded):
    import pyarrow.parquet as pq

    root, actions, now, later, _ = recorded
    assert [m["success"] for m in now] == [True] and [m["success"] for m in later] == [True]
    assert now[0]["length"] == later[0]["length"] == len(actions)
    immediate = pq.read_table(root / "now" / now[0]["file"]).to_pydict()
    deferred = pq.read_table(root / "later" / later[0]["file"]).to_pydict()
    assert immediate.keys() == deferred.keys()
    for key in immediate:
        assert immediate[key] == deferred[key], key  # every column: images (PNG bytes), state, action, ...
    assert len({frame["bytes"] for frame in deferred["observation.images.main"]}) > len(actions) // 2


def test_a_failure_with_successes_only_is_staged_as_its_marker_alone(recorded):
    root, _, _, _, failed = recorded
    assert len(failed) == 1 and failed[0]["success"] is False and failed[0]["file"] is None
    assert failed[0]["length"] == CHUNK and not list((root / "failed").glob("*.parquet"))
    assert json.loads(next((root / "failed").glob("ep-*.json")).read_text())["task_id"] == TASK


def test_the_record_cost_benchmark_runs_in_short_form(tmp_path):
    """benchmarks/record_cost.py --quick, its ``main`` in this process: the success played each way once at 32 px (it
    claims nothing at this size: it must run)."""
    import importlib.util

    from short_runs import ROOT

    spec = importlib.util.spec_from_file_location("record_cost", ROOT / "benchmarks" / "record_cost.py")
    record_cost = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record_cost)
    out = tmp_path / "cost.json"
    assert record_cost.main(["--quick", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["episode"], r["mode"]) for r in rows] == [("success", "unrecorded"), ("success", "recorded"),
                                                         ("success", "recorded, successes only")]
    assert all(r["ms_per_step"] > 0 for r in rows) and rows[0]["ratio"] == 1.0
