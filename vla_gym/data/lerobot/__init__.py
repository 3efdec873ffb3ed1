"""Demonstration datasets in LeRobot's v3 layout (parquet episodes, ``meta/info.json``, stats).

    >>> from vla_gym.data.lerobot import DemoDataset, RecordedEpisode, episode_table, write_dataset
    >>> tables = [episode_table(episode, fps=20) for episode in episodes]   # RecordedEpisode -> table  # doctest: +SKIP
    >>> info = write_dataset("data/pushcube", tables, fps=20, robot_type="panda")                      # doctest: +SKIP
    >>> data = DemoDataset("data/pushcube")                                                            # doctest: +SKIP
    >>> frame = data[0]   # images {role: uint8 HWC}, state, action, instruction, ...                  # doctest: +SKIP
    >>> actions, mask = data.action_chunk(0, 8)   # (8, 7) from frame 0 on, padded                     # doctest: +SKIP

Split as LeRobot splits its datasets package: :mod:`~vla_gym.data.lerobot.format` (the v3.0 layout: paths,
feature schema, tasks table), :mod:`~vla_gym.data.lerobot.stats` (per-feature statistics),
:mod:`~vla_gym.data.lerobot.writer` (recorded episodes -> a dataset) and :mod:`~vla_gym.data.lerobot.reader`
(:class:`DemoDataset`). pyarrow (``pip install "vla-gym[data]"``) is imported only when a table is made or read.
"""
from vla_gym.data.lerobot.format import (
    ACTION_NAMES,
    CODEBASE_VERSION,
    IMAGE_PREFIX,
    decode_png,
)
from vla_gym.data.lerobot.reader import DemoDataset
from vla_gym.data.lerobot.writer import (
    RecordedEpisode,
    encode_png,
    episode_meta,
    episode_table,
    write_dataset,
)

__all__ = [
    "ACTION_NAMES",
    "CODEBASE_VERSION",
    "IMAGE_PREFIX",
    "DemoDataset",
    "RecordedEpisode",
    "decode_png",
    "encode_png",
    "episode_meta",
    "episode_table",
    "write_dataset",
]
