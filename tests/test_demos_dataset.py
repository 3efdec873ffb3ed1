"""Demonstration datasets in the LeRobot v3.0 layout: writer/reader round trip, a file laid out by hand to the
spec, and ``vla-gym demos`` on real simulators (ManiSkill PushCube: parallel and resumed after a kill; LIBERO).

LeRobot's own loader is not used here: ``lerobot-dataset`` pins huggingface-hub<0.36 and numpy<2.3, which
would downgrade what transformers 5 needs (docs/sft.md). The checks follow LeRobot's published v3 layout.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from vla_gym.data.lerobot import DemoDataset, RecordedEpisode, encode_png, episode_table, write_dataset  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


def synthetic_episode(rng, length: int, task_id: int, instruction: str, init_state_id=None, seed=0, size=16):
    return RecordedEpisode(
        images={"main": [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(length)],
                "wrist": [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(length)]},
        state=rng.standard_normal((length, 8)).astype(np.float32),
        action=rng.uniform(-1, 1, (length, 7)).astype(np.float32),
        reward=np.r_[np.zeros(length - 1), 1.0].astype(np.float32), success=np.r_[np.zeros(length - 1), 1] > 0,
        instruction=instruction, task_id=task_id, task_name=f"task_{task_id}", init_state_id=init_state_id, seed=seed)


def test_round_trip_over_several_data_files(tmp_path):
    rng = np.random.default_rng(0)
    episodes = [synthetic_episode(rng, 5, 0, "put the bowl on the plate", 3),
                synthetic_episode(rng, 7, 1, "pick up the ketchup", 4, seed=9),
                synthetic_episode(rng, 4, 0, "put the bowl on the plate", 5)]
    # a tiny file size: every episode closes its data file, so the reader must follow meta/episodes across files
    info = write_dataset(tmp_path, [episode_table(e, fps=20) for e in episodes], fps=20, robot_type="panda",
                         file_size_mb=1e-6)
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 3 and info["total_frames"] == 16
    assert info["total_tasks"] == 2 and info["splits"] == {"train": "0:3"} and info["video_path"] is None
    assert sorted(p.name for p in (tmp_path / "data" / "chunk-000").iterdir()) == [
        "file-000.parquet", "file-001.parquet", "file-002.parquet"]

    data = DemoDataset(tmp_path)
    assert len(data) == 16 and data.num_episodes == 3 and data.cameras == ["main", "wrist"]
    flat = [(e, t) for e in episodes for t in range(len(e))]
    for i in (0, 4, 5, 11, 12, 15):
        episode, t = flat[i]
        frame = data[i]
        np.testing.assert_array_equal(frame["images"]["main"], episode.images["main"][t])  # PNG is lossless
        np.testing.assert_array_equal(frame["images"]["wrist"], episode.images["wrist"][t])
        np.testing.assert_array_equal(frame["state"], episode.state[t])
        np.testing.assert_array_equal(frame["action"], episode.action[t])
        assert frame["instruction"] == episode.instruction and frame["task_id"] == episode.task_id
        assert frame["init_state_id"] == episode.init_state_id and frame["frame_index"] == t
    assert data[-1]["episode_index"] == 2

    chunk, mask = data.action_chunk(5 + 4, 5)          # episode 1 (frames 5..11), its frame 4 of 7
    np.testing.assert_array_equal(chunk[:3], episodes[1].action[4:7])
    np.testing.assert_array_equal(chunk[3:], np.repeat(episodes[1].action[6:7], 2, axis=0))  # padded with the last
    assert mask.tolist() == [True, True, True, False, False]
    obs, actions, masks = data.batch([0, 15], chunk=3)
    assert obs["images"]["main"].shape == (2, 16, 16, 3) and obs["state"].shape == (2, 8)
    assert actions.shape == (2, 3, 7) and masks.tolist() == [[True] * 3, [True, False, False]]
    assert obs["instruction"] == ["put the bowl on the plate"] * 2

    stats = json.loads((tmp_path / "meta" / "stats.json").read_text())
    all_actions = np.concatenate([e.action for e in episodes])
    np.testing.assert_allclose(stats["action"]["mean"], all_actions.mean(0), rtol=1e-5)
    assert {"min", "max", "mean", "std", "count", "q01", "q99"} <= set(stats["action"])
    assert np.asarray(stats["observation.images.main"]["mean"]).shape == (3, 1, 1)


def test_files_follow_the_published_v3_layout(tmp_path):
    rng = np.random.default_rng(1)
    write_dataset(tmp_path, [episode_table(synthetic_episode(rng, 3, 0, "open the drawer"), fps=10)], fps=10)
    info = json.loads((tmp_path / "meta" / "info.json").read_text())
    for key in ("codebase_version", "robot_type", "total_episodes", "total_frames", "total_tasks", "chunks_size",
                "data_files_size_in_mb", "video_files_size_in_mb", "fps", "splits", "data_path", "video_path",
                "features"):
        assert key in info
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    for name in ("timestamp", "frame_index", "episode_index", "index", "task_index"):  # LeRobot's default features
        assert info["features"][name] == {"dtype": "float32" if name == "timestamp" else "int64", "shape": [1],
                                          "names": None}
    assert info["features"]["observation.images.main"]["dtype"] == "image"

    data_file = pq.read_table(tmp_path / "data" / "chunk-000" / "file-000.parquet")
    assert set(data_file.column_names) == set(info["features"])
    image_type = data_file.schema.field("observation.images.main").type
    assert image_type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])  # datasets.Image storage
    hf = json.loads(data_file.schema.metadata[b"huggingface"])["info"]["features"]
    assert hf["observation.images.main"] == {"_type": "Image"} and hf["action"]["length"] == 7

    tasks = pq.read_table(tmp_path / "meta" / "tasks.parquet")
    assert tasks.to_pydict() == {"task_index": [0], "task": ["open the drawer"]}
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]  # pandas: index named "task"

    episodes = pq.read_table(tmp_path / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    row = episodes[0]
    assert row["tasks"] == ["open the drawer"] and row["length"] == 3
    assert (row["dataset_from_index"], row["dataset_to_index"], row["data/chunk_index"], row["data/file_index"]) \
        == (0, 3, 0, 0)
    assert row["meta/episodes/chunk_index"] == 0 and "stats/action/mean" in row


def test_reader_reads_a_dataset_laid_out_by_hand(tmp_path):
    """A v3 directory written here with pyarrow alone, the way LeRobot lays one out (plain list columns, only the
    standard features, two episodes in two data files), is read by DemoDataset."""
    rng = np.random.default_rng(2)
    lengths, frames, actions = [3, 2], [], []
    for episode, n in enumerate(lengths):
        start = sum(lengths[:episode])
        images = [rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(n)]
        act = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
        frames += images
        actions.append(act)
        table = pa.table({
            "observation.images.top": pa.array([{"bytes": encode_png(im), "path": None} for im in images],
                                               pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            "observation.state": pa.array([[float(t)] * 3 for t in range(n)], pa.list_(pa.float32())),
            "action": pa.array(act.tolist(), pa.list_(pa.float32())),
            "timestamp": pa.array(np.arange(n) / 10.0, pa.float32()), "frame_index": pa.array(range(n), pa.int64()),
            "episode_index": pa.array([episode] * n, pa.int64()), "index": pa.array(range(start, start + n), pa.int64()),
            "task_index": pa.array([episode] * n, pa.int64())})
        (tmp_path / "data" / "chunk-000").mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp_path / "data" / "chunk-000" / f"file-{episode:03d}.parquet")
    (tmp_path / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([
        {"episode_index": e, "tasks": [f"task {e}"], "length": n, "data/chunk_index": 0, "data/file_index": e,
         "dataset_from_index": sum(lengths[:e]), "dataset_to_index": sum(lengths[:e + 1]),
         "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0} for e, n in enumerate(lengths)]),
        tmp_path / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    pq.write_table(pa.table({"task_index": [0, 1], "task": ["task 0", "task 1"]}), tmp_path / "meta" / "tasks.parquet")
    features = {"observation.images.top": {"dtype": "image", "shape": [8, 8, 3], "names": ["height", "width", "channels"]},
                "observation.state": {"dtype": "float32", "shape": [3], "names": None},
                "action": {"dtype": "float32", "shape": [2], "names": None}}
    for name in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        features[name] = {"dtype": "float32" if name == "timestamp" else "int64", "shape": [1], "names": None}
    (tmp_path / "meta" / "info.json").write_text(json.dumps({
        "codebase_version": "v3.0", "fps": 10, "features": features, "total_episodes": 2, "total_frames": 5,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet", "video_path": None}))

    data = DemoDataset(tmp_path)
    assert len(data) == 5 and data.cameras == ["top"] and data.action_dim == 2
    frame = data[3]
    np.testing.assert_array_equal(frame["images"]["top"], frames[3])
    np.testing.assert_array_equal(frame["action"], actions[1][0])
    assert frame["instruction"] == "task 1" and frame["episode_index"] == 1 and frame["task_id"] == 1
    assert frame["init_state_id"] == -1
    chunk, mask = data.action_chunk(3, 3)
    np.testing.assert_array_equal(chunk, actions[1][[0, 1, 1]]) and mask.tolist() == [True, True, False]


def test_reader_errors_name_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="vla-gym demos"):
        DemoDataset(tmp_path)
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v2.1", "features": {}}))
    with pytest.raises(ValueError, match="v2.1"):
        DemoDataset(tmp_path)


def test_jobs_cover_tasks_init_states_and_seeds():
    from vla_gym.data.record import env_tasks, plan_jobs

    jobs = plan_jobs(env_tasks("VLA/LiberoObject-v0"), 2, task_ids=[0, 3], first_init_state=10)
    assert [(j.index, j.task_id, j.init_state_id, j.seed) for j in jobs] == [
        (0, 0, 10, 10), (1, 0, 11, 11), (2, 3, 10, 10), (3, 3, 11, 11)]
    jobs = plan_jobs(env_tasks("VLA/ManiSkill-PushCube-v0"), 3, seed=5)
    assert [(j.index, j.init_state_id, j.seed) for j in jobs] == [(0, None, 5), (1, None, 6), (2, None, 7)]
    with pytest.raises(ValueError, match="has 0..49"):
        plan_jobs(env_tasks("VLA/LiberoObject-v0"), 45, first_init_state=10)
    with pytest.raises(ValueError, match="scripted expert"):
        plan_jobs(env_tasks("VLA/ManiSkill-PickCube-v0"), 1)   # ManiSkill has a PushCube expert only


# ------------------------------------------------------------------------------------ real simulators
def _demos_command(out, *extra):
    return [sys.executable, "-m", "vla_gym.cli", "demos", "VLA/ManiSkill-PushCube-v0", "--episodes-per-task", "3",
            "--cameras", "main", "--image-size", "32", "--noise", "0.3", "--out", str(out), *extra]


def test_maniskill_demos_cli_parallel_and_resumed_after_a_kill(tmp_path, capsys):
    pytest.importorskip("mani_skill")
    env = {**os.environ, "MS_SKIP_ASSET_DOWNLOAD_PROMPT": "1"}
    out = tmp_path / "pushcube"
    first = subprocess.Popen(_demos_command(out, "--workers", "2"), cwd=ROOT, env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not list((out / ".staging").glob("job-*.json")) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)   # the whole run, workers included, mid-way
    first.wait()
    staged = sorted(p.name for p in (out / ".staging").glob("job-*.json"))
    assert staged, first.stderr.read().decode()[-3000:]

    second = subprocess.run(_demos_command(out, "--workers", "2", "--no-progress"), cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    summary = json.loads((out / "meta" / "vla_gym_demos.json").read_text())
    assert summary["resumed_with"] >= len(staged) and summary["attempts"] == 3
    assert not (out / ".staging").exists() and "PushCube" in second.stdout
    assert summary["receipt"]["env"]["id"] == "VLA/ManiSkill-PushCube-v0" and summary["receipt"]["versions"]["sapien"]
    assert [(p["seed"], p["success"]) for p in summary["played"]][:1] == [(0, summary["played"][0]["success"])]
    assert len(summary["played"]) == 3

    data = DemoDataset(out)
    assert data.num_episodes == summary["solved"] >= 2 and len(data) == summary["frames"]
    seeds = [e["seed"] for e in data.episodes]
    assert seeds == sorted(set(seeds)) and set(seeds) <= {0, 1, 2}  # distinct episodes, in job order
    frame = data[0]
    assert frame["images"]["main"].shape == (32, 32, 3) and frame["state"].shape == (8,)
    assert "cube" in frame["instruction"] and frame["init_state_id"] == -1
    assert np.all(np.abs(data.actions) <= 1) and np.all(data.actions[:, 6] == 1.0)  # clean labels, gripper closed
    assert all(e["success"] for e in data.episodes)

    # the same command again, and with other settings, in-process (neither plays an episode)
    from vla_gym.cli import main as cli_main

    assert cli_main(_demos_command(out, "--workers", "2", "--no-progress")[3:]) == 0  # finished, same settings
    capsys.readouterr()
    assert cli_main(_demos_command(out, "--seed", "5", "--no-progress")[3:]) == 2
    assert "another --out" in capsys.readouterr().err


def test_libero_demos_record_every_camera(tmp_path):
    pytest.importorskip("libero")
    from vla_gym.data.record import record_demos

    summary = record_demos("VLA/LiberoObject-v0", tmp_path, episodes_per_task=1, task_ids=[0], first_init_state=3,
                           progress=False, image_size=32)
    data = DemoDataset(tmp_path)
    assert summary["solved"] == data.num_episodes == 1
    assert sorted(data.cameras) == ["main", "wrist"]
    frame = data[len(data) - 1]
    assert frame["images"]["wrist"].shape == (32, 32, 3) and frame["init_state_id"] == 3 and frame["task_id"] == 0
    assert data.episodes[0]["task_name"] and data.episodes[0]["success"]
    assert frame["instruction"] == data.tasks[0] and len(data) < 300


@pytest.mark.quick
def test_several_datasets_read_as_one_for_demos_plus_rollouts(tmp_path):
    from vla_gym.data.lerobot.concat import ConcatDemoDataset

    rng = np.random.default_rng(1)
    demos = [synthetic_episode(rng, 5, 0, "put the bowl on the plate", 3)]
    rollouts = [synthetic_episode(rng, 4, 1, "pick up the ketchup", 7), synthetic_episode(rng, 3, 0, "put the bowl", 8)]
    write_dataset(tmp_path / "demos", [episode_table(e, fps=20) for e in demos], fps=20, robot_type="panda")
    write_dataset(tmp_path / "rollouts", [episode_table(e, fps=20) for e in rollouts], fps=20, robot_type="panda")
    data = ConcatDemoDataset([tmp_path / "demos", tmp_path / "rollouts"])
    assert len(data) == 12 and data.num_episodes == 3 and data.cameras == ["main", "wrist"]
    # frame 5 is the rollouts' first; its chunk of 8 stays inside its own episode (padded, masked)
    obs, actions, mask = data.batch([4, 5, 11], chunk=8)
    np.testing.assert_array_equal(obs["images"]["main"][1], rollouts[0].images["main"][0])
    np.testing.assert_array_equal(actions[1, :4], rollouts[0].action)
    assert mask[1].tolist() == [True] * 4 + [False] * 4 and mask[0].tolist() == [True] + [False] * 7
    assert obs["instruction"] == ["put the bowl on the plate", "pick up the ketchup", "put the bowl"]
    assert data[9]["init_state_id"] == 8
    mixed, mixed_actions, _ = data.batch([11, 4, 9], chunk=8)  # rows of both parts, out of order: order kept
    assert mixed["instruction"] == ["put the bowl", "put the bowl on the plate", "put the bowl"]
    np.testing.assert_array_equal(mixed["images"]["main"][1], demos[0].images["main"][4])
    np.testing.assert_array_equal(mixed_actions[0, 0], rollouts[1].action[2])

    other = [synthetic_episode(rng, 3, 0, "x", 0, size=8)]
    write_dataset(tmp_path / "small", [episode_table(e, fps=20) for e in other], fps=20, robot_type="panda")
    with pytest.raises(ValueError, match="same --cameras and --image-size"):
        ConcatDemoDataset([tmp_path / "demos", tmp_path / "small"])
