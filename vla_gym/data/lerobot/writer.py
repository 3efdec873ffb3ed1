"""Writing a LeRobotDataset v3.0 directory: recorded episodes -> staged episode tables -> the dataset.

:func:`episode_table` turns one recorded episode (:class:`RecordedEpisode`) into a table (images PNG-encoded once,
:func:`encode_png`), and :func:`write_dataset` lays a sequence of such tables out as a dataset with its metadata and
statistics (what ``vla-gym demos`` does at the end). Files are written to a temporary name and renamed into place;
``meta/info.json`` comes last, so a directory with it is complete.
"""
from __future__ import annotations

import io
import json
import os
import pathlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vla_gym.data.lerobot.format import (
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    DATA_FILE_SIZE_MB,
    DATA_PATH,
    EPISODES_PATH,
    IMAGE_PREFIX,
    _feature,
    _hf_features,
    _image_type,
    _numeric,
    _pa,
    _tasks_table,
    decode_png,
)
from vla_gym.data.lerobot.stats import _image_stats, _stats

#: where the per-episode vla_gym fields travel in a staged episode table's schema metadata
EPISODE_META_KEY = b"vla_gym.episode"


@dataclass
class RecordedEpisode:
    """One episode as recorded: per frame t the observation before action t, and what action t led to."""

    images: dict[str, list[np.ndarray]]   # role -> T uint8 HWC frames
    state: np.ndarray                      # [T, D] float32
    action: np.ndarray                     # [T, A] float32 (the expert's clean labels)
    reward: np.ndarray                     # [T] reward after action t
    success: np.ndarray                    # [T] bool, task solved after action t
    instruction: str
    task_id: int
    task_name: str
    init_state_id: int | None
    seed: int | None
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.action)

    @property
    def succeeded(self) -> bool:
        return bool(np.any(self.success))


def encode_png(image: np.ndarray) -> bytes:
    """uint8 HWC -> PNG bytes (lossless; what ``datasets.Image`` embeds in parquet)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image)).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def episode_table(episode: RecordedEpisode, fps: float):
    """A recorded episode as a pyarrow table in the dataset's frame columns (no global indices yet)."""
    pa = _pa()
    n = len(episode)
    if n == 0:
        raise ValueError("an episode needs at least one frame")
    columns: dict[str, Any] = {}
    for role, frames in episode.images.items():
        if len(frames) != n:
            raise ValueError(f"camera {role!r} has {len(frames)} frames for {n} actions")
        columns[IMAGE_PREFIX + role] = pa.array(
            [{"bytes": encode_png(frame), "path": f"frame-{t:06d}.png"} for t, frame in enumerate(frames)],
            type=_image_type(pa))
    state = np.asarray(episode.state, dtype=np.float32).reshape(n, -1)
    action = np.asarray(episode.action, dtype=np.float32).reshape(n, -1)
    columns["observation.state"] = pa.FixedSizeListArray.from_arrays(pa.array(state.ravel()), state.shape[1])
    columns["action"] = pa.FixedSizeListArray.from_arrays(pa.array(action.ravel()), action.shape[1])
    success = np.asarray(episode.success, dtype=bool)
    columns.update({
        "timestamp": pa.array(np.arange(n, dtype=np.float32) / np.float32(fps)),
        "frame_index": pa.array(np.arange(n, dtype=np.int64)),
        "next.reward": pa.array(np.asarray(episode.reward, dtype=np.float32)),
        "next.done": pa.array(np.arange(n) == n - 1),
        "next.success": pa.array(success),
        "task_id": pa.array(np.full(n, episode.task_id, dtype=np.int64)),
        "init_state_id": pa.array(np.full(n, -1 if episode.init_state_id is None else episode.init_state_id,
                                          dtype=np.int64)),
    })
    meta = {"instruction": episode.instruction, "task_id": int(episode.task_id), "task_name": episode.task_name,
            "init_state_id": episode.init_state_id, "seed": episode.seed, "success": episode.succeeded,
            "length": n, **episode.extra}
    return pa.table(columns).replace_schema_metadata({EPISODE_META_KEY: json.dumps(meta).encode()})


def episode_meta(table) -> dict[str, Any]:
    """The per-episode fields :func:`episode_table` stored with a staged table."""
    return json.loads(table.schema.metadata[EPISODE_META_KEY])


def _atomic_json(path: pathlib.Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def _write_parquet(table, path: pathlib.Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)



def write_dataset(root: str | os.PathLike, episodes: Iterable[Any], fps: float, robot_type: str | None = None,
                  image_stats_frames: int = 8, file_size_mb: float = DATA_FILE_SIZE_MB) -> dict[str, Any]:
    """Lay out episode tables (from :func:`episode_table`, or parquet paths of them) as a v3.0 dataset.

    Episodes are numbered in the order given. Data files are closed after ``file_size_mb``; image statistics
    use ``image_stats_frames`` evenly spaced frames per episode. ``meta/info.json`` is written last, so a
    directory with it is complete. Returns the info dict.
    """
    pa = _pa()
    import pyarrow.parquet as pq

    root = pathlib.Path(root)
    features: dict[str, dict] | None = None
    task_index: dict[str, int] = {}
    episode_rows: list[dict[str, Any]] = []
    numeric: dict[str, list[np.ndarray]] = {}
    image_samples: dict[str, list[np.ndarray]] = {}
    writer, file_rows, file_index, total = None, [], 0, 0
    data_dir = root / "data"

    def close_file():
        nonlocal writer
        if writer is not None:
            writer.close()
            final = root / DATA_PATH.format(chunk_index=file_index // CHUNKS_SIZE, file_index=file_index % CHUNKS_SIZE)
            os.replace(final.with_name(final.name + ".partial"), final)
            writer = None

    for item in episodes:
        table = pq.read_table(item, memory_map=True) if isinstance(item, (str, os.PathLike)) else item
        meta = episode_meta(table)
        n = table.num_rows
        episode_index = len(episode_rows)
        instruction = meta["instruction"]
        task_index.setdefault(instruction, len(task_index))
        table = table.append_column("episode_index", pa.array(np.full(n, episode_index, dtype=np.int64)))
        table = table.append_column("index", pa.array(np.arange(total, total + n, dtype=np.int64)))
        table = table.append_column("task_index", pa.array(np.full(n, task_index[instruction], dtype=np.int64)))
        if features is None:
            order = [c for c in table.column_names if c.startswith(IMAGE_PREFIX)] + [
                c for c in table.column_names if not c.startswith(IMAGE_PREFIX)]
            features = {name: _feature(table, name) for name in order}
            schema = pa.schema([table.schema.field(name) for name in order]).with_metadata(
                {b"huggingface": json.dumps(_hf_features(features)).encode()})
        if sorted(table.column_names) != sorted(features):
            raise ValueError(f"episode {episode_index} has columns {table.column_names}, the first had {list(features)}")
        table = table.select(list(features)).cast(schema)
        if writer is None:
            if file_index == 0 and data_dir.exists():
                for old in data_dir.glob("chunk-*/file-*.parquet"):
                    old.unlink()
            path = root / DATA_PATH.format(chunk_index=file_index // CHUNKS_SIZE, file_index=file_index % CHUNKS_SIZE)
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = pq.ParquetWriter(path.with_name(path.name + ".partial"), schema)
        writer.write_table(table)  # one row group per episode
        episode_stats = {}
        for name, feature in features.items():
            if feature["dtype"] == "image":
                picks = np.unique(np.linspace(0, n - 1, min(n, image_stats_frames)).round().astype(int))
                frames = [decode_png(table.column(name)[int(i)].as_py()["bytes"]) for i in picks]
                image_samples.setdefault(name, []).extend(frames)
                episode_stats[name] = _image_stats(frames)
            else:
                values = _numeric(table, name)
                numeric.setdefault(name, []).append(values)
                episode_stats[name] = _stats(values)
        chunk, file = divmod(file_index, CHUNKS_SIZE)
        row = {"episode_index": episode_index, "tasks": [instruction], "length": n,
               "data/chunk_index": chunk, "data/file_index": file,
               "dataset_from_index": total, "dataset_to_index": total + n,
               "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0,
               "task_id": int(meta["task_id"]), "task_name": str(meta["task_name"]),
               "init_state_id": -1 if meta.get("init_state_id") is None else int(meta["init_state_id"]),
               "seed": -1 if meta.get("seed") is None else int(meta["seed"]), "success": bool(meta["success"])}
        for name, stats in episode_stats.items():
            for key, value in stats.items():
                row[f"stats/{name}/{key}"] = value
        episode_rows.append(row)
        total += n
        file_rows.append(n)
        if writer is not None and (root / DATA_PATH.format(chunk_index=chunk, file_index=file)).with_name(
                f"file-{file:03d}.parquet.partial").stat().st_size > file_size_mb * 2**20:
            close_file()
            file_index += 1
    close_file()
    if features is None:
        raise ValueError("no episodes to write (did the expert solve none?)")

    _write_parquet(pa.Table.from_pylist(episode_rows), root / EPISODES_PATH.format(chunk_index=0, file_index=0))
    _write_parquet(_tasks_table(list(task_index)), root / "meta" / "tasks.parquet")
    stats = {name: _stats(np.concatenate(parts)) for name, parts in numeric.items()}
    stats.update({name: _image_stats(frames) for name, frames in image_samples.items()})
    _atomic_json(root / "meta" / "stats.json", stats)
    info = {
        "codebase_version": CODEBASE_VERSION, "robot_type": robot_type, "total_episodes": len(episode_rows),
        "total_frames": total, "total_tasks": len(task_index), "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": int(file_size_mb) or 1, "video_files_size_in_mb": 200,
        "fps": int(round(fps)), "splits": {"train": f"0:{len(episode_rows)}"},
        "data_path": DATA_PATH, "video_path": None, "features": features,
    }
    _atomic_json(root / "meta" / "info.json", info)
    return info
