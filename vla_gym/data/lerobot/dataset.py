"""Demonstration datasets in the LeRobotDataset v3.0 layout: a writer and a reader, on pyarrow alone.

    >>> from vla_gym.data.lerobot.dataset import DemoDataset
    >>> data = DemoDataset("data/libero_object")                      # doctest: +SKIP
    >>> len(data), data.num_episodes, data.cameras                     # doctest: +SKIP
    (20412, 98, ['main', 'wrist'])
    >>> frame = data[0]   # images {role: uint8 HWC}, state, action, instruction, ...  # doctest: +SKIP
    >>> actions, mask = data.action_chunk(0, 8)   # (8, 7) from frame 0 on, padded      # doctest: +SKIP
    >>> obs, actions, mask = data.batch([0, 5, 9], chunk=8)   # stacked for a policy    # doctest: +SKIP

The layout is LeRobot's v3.0 (``codebase_version: "v3.0"``), so LeRobot's ``LeRobotDataset(repo_id, root=...)``
and other readers of that format load these datasets too::

    meta/info.json                         features (dtype, shape, names), fps, counts, path templates
    meta/stats.json                        per feature: min, max, mean, std, count, q01 q10 q50 q90 q99
    meta/tasks.parquet                     instruction (pandas index "task") -> task_index
    meta/episodes/chunk-000/file-000.parquet   one row per episode: length, tasks, where its rows are, stats/...
    data/chunk-000/file-000.parquet        one row per frame; a new file-NNN every ~100 MB

Frame columns: ``observation.images.<role>`` (``dtype: image``: PNG bytes in a ``{bytes, path}`` struct, as
Hugging Face ``datasets.Image`` stores them), ``observation.state``, ``action`` (the expert's clean label),
``timestamp``, ``frame_index``, ``episode_index``, ``index``, ``task_index`` (LeRobot's standard five), and
vla_gym's ``next.reward``, ``next.done``, ``next.success`` (after this frame's action), ``task_id`` (the task's
index in the env id's task list) and ``init_state_id`` (-1 when the initial state came from the seed). Episode
rows add ``task_id``, ``task_name``, ``init_state_id``, ``seed`` and ``success``. Video features
(``dtype: video``) are part of the spec but not written here; :class:`DemoDataset` says so if it meets one.

Writing: :func:`episode_table` turns one recorded episode into a table (images PNG-encoded once), and
:func:`write_dataset` lays a sequence of such tables out as a dataset (what ``vla-gym demos`` does at the end).
"""
from __future__ import annotations

import io
import json
import os
import pathlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
CHUNKS_SIZE = 1000          # files per chunk directory
DATA_FILE_SIZE_MB = 100     # a data file is closed once it passes this size
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
IMAGE_PREFIX = "observation.images."
#: where the per-episode vla_gym fields travel in a staged episode table's schema metadata
EPISODE_META_KEY = b"vla_gym.episode"
#: names of the 7-D single-arm action (docs/schema.md)
ACTION_NAMES = ["dx", "dy", "dz", "drx", "dry", "drz", "gripper"]


def _pa():
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError as error:
        raise ImportError('demonstration datasets need pyarrow: pip install "vla-gym[data]" (or pip install pyarrow)') \
            from error
    return pyarrow


# ------------------------------------------------------------------------------------------- writing
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


def decode_png(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def _image_type(pa):
    return pa.struct([("bytes", pa.binary()), ("path", pa.string())])


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


def _feature(table, name: str) -> dict[str, Any]:
    """LeRobot feature entry (dtype, shape, names) of a frame column."""
    pa = _pa()
    column_type = table.schema.field(name).type
    if name.startswith(IMAGE_PREFIX):
        h, w, c = decode_png(table.column(name)[0].as_py()["bytes"]).shape
        return {"dtype": "image", "shape": [h, w, c], "names": ["height", "width", "channels"]}
    if pa.types.is_fixed_size_list(column_type):
        size = column_type.list_size
        names = ACTION_NAMES if name == "action" and size == len(ACTION_NAMES) else [f"{name.split('.')[-1]}_{i}"
                                                                                      for i in range(size)]
        return {"dtype": _dtype_name(column_type.value_type), "shape": [size], "names": names}
    return {"dtype": _dtype_name(column_type), "shape": [1], "names": None}


def _dtype_name(arrow_type) -> str:
    name = str(arrow_type)
    return {"float": "float32", "double": "float64"}.get(name, name)


def _hf_features(features: dict[str, dict]) -> dict[str, Any]:
    """The ``huggingface`` schema metadata that lets ``datasets`` decode the columns (images included)."""
    out = {}
    for name, feature in features.items():
        if feature["dtype"] == "image":
            out[name] = {"_type": "Image"}
        elif feature["shape"] == [1]:
            out[name] = {"dtype": feature["dtype"], "_type": "Value"}
        else:
            out[name] = {"feature": {"dtype": feature["dtype"], "_type": "Value"}, "length": feature["shape"][0],
                         "_type": "List"}
    return {"info": {"features": out}}


def _numeric(table, name: str) -> np.ndarray:
    """A non-image column as a float64 array [N, D]."""
    types = _pa().types
    column = table.column(name).combine_chunks()
    if types.is_fixed_size_list(column.type) or types.is_list(column.type) or types.is_large_list(column.type):
        # fixed-size lists (datasets' List(length=n)) and plain lists of equal lengths (older writers)
        return column.flatten().to_numpy(zero_copy_only=False).astype(np.float64).reshape(len(column), -1)
    return column.to_numpy(zero_copy_only=False).astype(np.float64).reshape(-1, 1)


def _stats(values: np.ndarray) -> dict[str, list]:
    """min/max/mean/std/count and quantiles over axis 0 of [N, D] values."""
    out = {"min": values.min(0), "max": values.max(0), "mean": values.mean(0), "std": values.std(0),
           "count": np.array([len(values)])}
    for q in QUANTILES:
        out[f"q{int(round(q * 100)):02d}"] = np.quantile(values, q, axis=0)
    return {key: value.tolist() for key, value in out.items()}


def _image_stats(frames: list[np.ndarray]) -> dict[str, list]:
    """Per-channel statistics of images scaled to [0, 1], shaped (3, 1, 1) as LeRobot keeps them."""
    pixels = np.stack(frames).reshape(-1, 3).astype(np.float64) / 255.0
    return {key: (np.asarray(value)[:, None, None].tolist() if key != "count" else [len(frames)])
            for key, value in _stats(pixels).items()}


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


def _tasks_table(instructions: list[str]):
    """meta/tasks.parquet as pandas writes a DataFrame indexed by "task" with a "task_index" column."""
    pa = _pa()
    pandas_meta = {
        "index_columns": ["task"], "column_indexes": [],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
             "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.2.0",
    }
    table = pa.table({"task_index": pa.array(range(len(instructions)), type=pa.int64()),
                      "task": pa.array(instructions, type=pa.string())})
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


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


# ------------------------------------------------------------------------------------------- reading
class DemoDataset:
    """Frames of a LeRobotDataset v3.0 directory (image features), for behaviour cloning.

    ``len`` is the number of frames; ``[i]`` is frame ``i`` (the dataset's ``index`` order) as
    ``{"images": {role: uint8 HWC}, "state", "action", "instruction", "task_id", "init_state_id",
    "episode_index", "frame_index"}``. Images are decoded on access; everything else is held in memory.
    """

    def __init__(self, root: str | os.PathLike):
        pa = _pa()
        import pyarrow.parquet as pq

        self.root = pathlib.Path(root)
        info_path = self.root / "meta" / "info.json"
        if not info_path.exists():
            raise FileNotFoundError(f"{info_path} not found: {self.root} is not a finished LeRobot v3 dataset "
                                    "(make one with `vla-gym demos ENV_ID --out DIR`; an interrupted run resumes "
                                    "when started again)")
        self.info = json.loads(info_path.read_text())
        version = str(self.info.get("codebase_version", ""))
        if not version.startswith("v3."):
            raise ValueError(f"{self.root}: codebase_version {version!r}; this reader reads LeRobotDataset v3.x "
                             "(convert v2.1 datasets with LeRobot's convert_dataset_v21_to_v30)")
        self.features: dict[str, dict] = self.info["features"]
        videos = [k for k, f in self.features.items() if f["dtype"] == "video"]
        if videos:
            raise NotImplementedError(f"{self.root} stores {videos} as videos; DemoDataset reads image features "
                                      "only (load it with LeRobot's LeRobotDataset, or re-record with vla-gym demos)")
        self.fps = float(self.info["fps"])
        self.image_keys = [k for k, f in self.features.items() if f["dtype"] == "image"]
        self.cameras = [k[len(IMAGE_PREFIX):] for k in self.image_keys]
        self.stats = json.loads((self.root / "meta" / "stats.json").read_text()) \
            if (self.root / "meta" / "stats.json").exists() else {}

        tasks = pq.read_table(self.root / "meta" / "tasks.parquet").to_pydict()
        task_column = "task" if "task" in tasks else "__index_level_0__"
        self.tasks = {int(i): str(t) for i, t in zip(tasks["task_index"], tasks[task_column])}

        episode_files = sorted((self.root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
        wanted = ["episode_index", "length", "dataset_from_index", "dataset_to_index", "data/chunk_index",
                  "data/file_index"]
        optional = ["task_id", "task_name", "init_state_id", "seed", "success"]
        rows: list[dict] = []
        for path in episode_files:
            names = pq.read_schema(path).names
            rows += pq.read_table(path, columns=[c for c in wanted + optional if c in names]).to_pylist()
        if not rows:
            raise ValueError(f"{self.root}: no episodes under meta/episodes/")
        self.episodes = sorted(rows, key=lambda r: r["episode_index"])

        files = sorted({(r["data/chunk_index"], r["data/file_index"]) for r in self.episodes})
        tables = [pq.read_table(self.root / self.info["data_path"].format(chunk_index=c, file_index=f),
                                memory_map=True) for c, f in files]
        table = pa.concat_tables(tables)
        index = table.column("index").to_numpy()
        if not np.array_equal(index, np.arange(len(index))):
            table = table.take(pa.array(np.argsort(index)))
        self._table = table
        self._images = {key: table.column(key) for key in self.image_keys}
        self.state = _numeric(table, "observation.state").astype(np.float32) if "observation.state" in self.features \
            else np.zeros((table.num_rows, 0), np.float32)
        self.actions = _numeric(table, "action").astype(np.float32)
        self.episode_index = table.column("episode_index").to_numpy().astype(np.int64)
        self.frame_index = table.column("frame_index").to_numpy().astype(np.int64)
        self.task_index = table.column("task_index").to_numpy().astype(np.int64)
        self.task_id = table.column("task_id").to_numpy().astype(np.int64) if "task_id" in self.features \
            else self.task_index
        self.init_state_id = table.column("init_state_id").to_numpy().astype(np.int64) \
            if "init_state_id" in self.features else np.full(len(self.actions), -1)
        by_episode = {r["episode_index"]: r for r in self.episodes}
        self._episode_end = np.array([by_episode[e]["dataset_to_index"] for e in self.episode_index], dtype=np.int64)

    # --------------------------------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self.actions)

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    @property
    def action_dim(self) -> int:
        return self.actions.shape[1]

    def image(self, role: str, i: int) -> np.ndarray:
        """Camera ``role``'s frame ``i`` as uint8 HWC."""
        cell = self._images[IMAGE_PREFIX + role][int(i)].as_py()
        return decode_png(cell["bytes"])

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = int(i)
        if not -len(self) <= i < len(self):
            raise IndexError(f"frame {i} out of range for {len(self)} frames")
        i %= len(self)
        return {
            "images": {role: self.image(role, i) for role in self.cameras},
            "state": self.state[i], "action": self.actions[i], "instruction": self.tasks[int(self.task_index[i])],
            "task_id": int(self.task_id[i]), "init_state_id": int(self.init_state_id[i]),
            "episode_index": int(self.episode_index[i]), "frame_index": int(self.frame_index[i]),
        }

    def action_chunk(self, i: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(k, A)`` actions of frame ``i``'s episode from ``i`` on, padded with its last action, and a bool
        ``(k,)`` mask that is False on the padding."""
        steps = int(i) + np.arange(k)
        mask = steps < self._episode_end[int(i)]
        return self.actions[np.minimum(steps, self._episode_end[int(i)] - 1)], mask

    def batch(self, indices: Sequence[int], chunk: int | None = None, cameras: Sequence[str] | None = None):
        """Frames ``indices`` stacked as a policy observation batch plus their action (chunk) labels.

        Returns ``(obs, actions, mask)``: ``obs = {"images": {role: [B, H, W, 3]}, "state": [B, D],
        "instruction": [B]}`` (numpy), ``actions`` ``[B, A]`` (``chunk`` None) or ``[B, chunk, A]``, and the
        padding mask ``[B]`` / ``[B, chunk]``.
        """
        indices = [int(i) for i in indices]
        obs = {"images": {role: np.stack([self.image(role, i) for i in indices]) for role in (cameras or self.cameras)},
               "state": self.state[indices], "instruction": [self.tasks[int(self.task_index[i])] for i in indices]}
        if chunk is None:
            return obs, self.actions[indices], np.ones(len(indices), dtype=bool)
        pairs = [self.action_chunk(i, chunk) for i in indices]
        return obs, np.stack([a for a, _ in pairs]), np.stack([m for _, m in pairs])
