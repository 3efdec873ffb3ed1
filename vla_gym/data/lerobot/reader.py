"""Reading a LeRobotDataset v3.0 directory (image features) frame by frame, for behaviour cloning.

    >>> from vla_gym.data.lerobot.reader import DemoDataset
    >>> data = DemoDataset("data/libero_object")                      # doctest: +SKIP
    >>> len(data), data.num_episodes, data.cameras                     # doctest: +SKIP
    (20412, 98, ['main', 'wrist'])
    >>> frame = data[0]   # images {role: uint8 HWC}, state, action, instruction, ...  # doctest: +SKIP
    >>> actions, mask = data.action_chunk(0, 8)   # (8, 7) from frame 0 on, padded      # doctest: +SKIP
    >>> obs, actions, mask = data.batch([0, 5, 9], chunk=8)   # stacked for a policy    # doctest: +SKIP

:class:`DemoDataset` raises :class:`FileNotFoundError` for a directory without ``meta/info.json`` (not a finished
dataset), :class:`ValueError` for another codebase version or no episodes, and :class:`NotImplementedError` for
video features. ``env_id`` is the env the frames were recorded in, from the receipt ``vla-gym demos``
(``meta/vla_gym_demos.json``) or ``trainers/eval.py --record-dataset`` (``meta/vla_gym_rollouts.json``) wrote
(None for datasets from elsewhere).
"""
from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from vla_gym.data.lerobot.format import IMAGE_PREFIX, _numeric, _pa, decode_png

#: the summaries (with a receipt naming the env) that vla_gym's recorders write next to meta/info.json
RECEIPT_FILES = ("meta/vla_gym_demos.json", "meta/vla_gym_rollouts.json")


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

        if not (self.root / "meta" / "tasks.parquet").is_file():
            raise FileNotFoundError(f"{self.root / 'meta' / 'tasks.parquet'} not found: {self.root} is not a finished "
                                    "LeRobot v3 dataset (make one with `vla-gym demos ENV_ID --out DIR`)")
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
            raise ValueError(f"{self.root}: no episodes under meta/episodes/ (an empty dataset: record episodes with "
                             "`vla-gym demos ENV_ID --out DIR`)")
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

    @property
    def decision_period(self) -> int | None:
        """Env steps between the policy's decisions in a ``trainers/eval.py --record-dataset`` rollout (its recorded
        ``ActionChunk`` chunk size: the policy was queried at frames 0, K, 2K, ... of each episode and the frames
        between replay that chunk open loop); None for demos and rollouts played one action per decision."""
        path = self.root / "meta" / "vla_gym_rollouts.json"
        if not path.is_file():
            return None
        wrappers = ((json.loads(path.read_text()).get("receipt") or {}).get("env") or {}).get("wrappers") or []
        for wrapper in wrappers:
            if isinstance(wrapper, dict) and wrapper.get("name") == "ActionChunk":
                size = int((wrapper.get("kwargs") or {}).get("chunk_size", 1))
                return size if size > 1 else None
        return None

    def decision_rows(self) -> np.ndarray:
        """The frames where the recording policy chose its actions (every frame of demos; frames 0, K, 2K, ... of a
        chunked rollout's episodes, :attr:`decision_period`): the labels there are that policy's own output."""
        period = self.decision_period
        rows = np.arange(len(self))
        return rows if period is None else rows[self.frame_index % period == 0]

    @property
    def env_id(self) -> str | None:
        """The env id the frames were recorded in (the receipt of ``vla-gym demos`` or ``trainers/eval.py
        --record-dataset``), None when the dataset carries no receipt."""
        for name in RECEIPT_FILES:
            path = self.root / name
            if path.is_file():
                try:
                    env_id = ((json.loads(path.read_text()).get("receipt") or {}).get("env") or {}).get("id")
                except (ValueError, AttributeError):  # not JSON, or not the recorders' layout
                    continue
                if env_id:
                    return str(env_id)
        return None

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
