"""The LeRobotDataset v3.0 layout: version and path constants, the feature schema of frame columns, the tasks table.

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
(``dtype: video``) are part of the spec but not written here; :class:`~vla_gym.data.lerobot.reader.DemoDataset`
says so if it meets one.

Everything here that touches pyarrow imports it inside the function (:func:`_pa`): pyarrow is the optional
``vla-gym[data]`` extra, and importing this module does not need it.
"""
from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
CHUNKS_SIZE = 1000          # files per chunk directory
DATA_FILE_SIZE_MB = 100     # a data file is closed once it passes this size
IMAGE_PREFIX = "observation.images."
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


def decode_png(data: bytes) -> np.ndarray:
    """PNG bytes (an image feature's ``bytes``) -> uint8 HWC RGB."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def _image_type(pa):
    return pa.struct([("bytes", pa.binary()), ("path", pa.string())])


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
