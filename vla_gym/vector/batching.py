"""Batching for vla_gym's vector envs: vector info dicts, rows of observation batches, reset seeds and masks.

Pure functions over gymnasium's public space utilities, shared by :class:`~vla_gym.vector.sync_env.VLASyncVectorEnv`
and :class:`~vla_gym.vector.async_env.VLAAsyncVectorEnv`.

    >>> import numpy as np
    >>> infos = add_info({}, {"success": True, "final_info": {"x": 1.5}}, 1, 2)
    >>> infos["success"], infos["_success"], infos["final_info"]["x"]
    (array([False,  True]), array([False,  True]), array([0. , 1.5]))
    >>> seeds_and_mask(7, None, 3)[0]                      # reset(seed=7): sub-env i gets 7 + i
    [7, 8, 9]

The info layout is gymnasium's vector one: every key of a sub-env's info becomes an array with one entry per
sub-env (numbers: a numeric array; numpy arrays: stacked; anything else: an object array) next to a ``_key`` bool
mask of the sub-envs that reported it; dict values nest the same way; ``final_obs`` is always an object array.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import iterate

from vla_gym.core.env import sub_env_options


def add_info(infos: dict[str, Any], info: Mapping[str, Any], index: int, size: int) -> dict[str, Any]:
    """Put sub-env ``index``'s ``info`` into the vector info dict ``infos`` of ``size`` sub-envs (module docstring);
    returns ``infos``."""
    for key, value in info.items():
        if key == "final_obs":  # one observation tree per sub-env, easiest to use unbatched
            array = infos.get(key)
            if array is None:
                array = np.full(size, None, dtype=object)
            array[index] = value
        elif isinstance(value, dict):
            array = add_info(infos.get(key, {}), value, index, size)
        else:
            array = infos.get(key)
            if array is None:
                if type(value) in (int, float, bool) or isinstance(value, np.number):
                    array = np.zeros(size, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    array = np.zeros((size, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(size, None, dtype=object)
            array[index] = value
        mask = infos.get("_" + key)
        if mask is None:
            mask = np.zeros(size, dtype=np.bool_)
        mask[index] = True
        infos[key], infos["_" + key] = array, mask
    return infos


def concat_infos(infos: Sequence[Mapping[str, Any]], sizes: Sequence[int]) -> dict[str, Any]:
    """One vector info dict from those of consecutive blocks of sub-envs (``sizes[k]`` sub-envs in ``infos[k]``,
    e.g. :meth:`VLAAsyncVectorEnv.step_rows_wait`'s of rows ``0..k-1``, ``k..2k-1``, ...), as the whole vector env's
    step would have built it: keys missing in a block are zeros / None there, with their ``_key`` mask False.

        >>> a = {"success": np.array([True, False]), "_success": np.array([True, True])}
        >>> concat_infos([a, {}], [2, 1])["success"], concat_infos([a, {}], [2, 1])["_success"]
        (array([ True, False, False]), array([ True,  True, False]))
    """
    if len(infos) != len(sizes):
        raise ValueError(f"concat_infos needs one size per info dict, got {len(infos)} dicts and {len(sizes)} sizes")
    out: dict[str, Any] = {}
    keys = list(dict.fromkeys(key for part in infos for key in part))
    for key in keys:
        present = [part.get(key) for part in infos]
        first = next(value for value in present if value is not None)
        if isinstance(first, Mapping):
            out[key] = concat_infos([value if value is not None else {} for value in present], sizes)
            continue
        blocks = [np.asarray(value) if value is not None else _blank(first, size)
                  for value, size in zip(present, sizes)]
        out[key] = np.concatenate(blocks).astype(first.dtype, copy=False)  # the first sub-env's type, as gymnasium's
    return out


def _blank(like: np.ndarray, size: int) -> np.ndarray:
    if like.dtype == object:
        return np.full(size, None, dtype=object)
    return np.zeros((size, *like.shape[1:]), dtype=like.dtype)


def take_rows(space: gym.Space, batch: Any, rows: Sequence[int]) -> Any:
    """Rows ``rows`` of a batched observation of the single-env ``space``, copied (shared memory gets rewritten)."""
    if isinstance(space, spaces.Dict):
        return {key: take_rows(sub, batch[key], rows) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(take_rows(sub, part, rows) for sub, part in zip(space.spaces, batch))
    if isinstance(space, spaces.Text):
        return tuple(batch[row] for row in rows)
    return np.asarray(batch)[list(rows)]


def row(space: gym.Space, batch: Any, i: int) -> Any:
    """A copy of row ``i`` of a batched observation of the single-env ``space`` (one observation, unbatched)."""
    if isinstance(space, spaces.Dict):
        return {key: row(sub, batch[key], i) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(row(sub, part, i) for sub, part in zip(space.spaces, batch))
    if isinstance(space, spaces.Text):
        return batch[i]
    return np.array(batch[i], copy=True)


def seeds_and_mask(seed, options: Mapping[str, Any] | None, num_envs: int) -> tuple[list, np.ndarray]:
    """gymnasium's reading of ``reset(seed=...)`` (None: none; an int ``s``: ``s + i``; a list: one each) and of
    ``options["reset_mask"]`` (a bool array of the sub-envs to reset; all when absent)."""
    if seed is None:
        seeds = [None] * num_envs
    elif isinstance(seed, (int, np.integer)):
        seeds = [int(seed) + i for i in range(num_envs)]
    else:
        seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"If seeds are passed as a list the length must match num_envs={num_envs} but got "
                         f"length={len(seeds)}.")
    mask = None if options is None else options.get("reset_mask")
    if mask is None:
        return seeds, np.ones(num_envs, dtype=np.bool_)
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        raise TypeError(f"options['reset_mask'] must be a numpy array of dtype np.bool_, got {mask!r}")
    if mask.shape != (num_envs,) or not mask.any():
        raise ValueError(f"options['reset_mask'] must have shape ({num_envs},) and a True value, got {mask!r}")
    return seeds, mask


def reset_options(options: Mapping[str, Any] | None, num_envs: int) -> list[dict[str, Any] | None]:
    """The ``options`` each sub-env's ``reset`` gets: its own under ``options["per_env"]``
    (:func:`vla_gym.core.env.sub_env_options`), else ``options`` less the vector env's ``reset_mask``."""
    per_env = sub_env_options(options, num_envs)
    if per_env is not None:
        return per_env
    shared = None if options is None else {key: value for key, value in options.items() if key != "reset_mask"}
    return [shared] * num_envs


def split_batch(space: gym.Space, batch: Any, n: int, what: str = "actions") -> list[Any]:
    """The ``n`` items of ``batch`` (an element of the batched ``space``), or ValueError naming ``what``."""
    items = list(iterate(space, batch))
    if len(items) != n:
        raise ValueError(f"got {len(items)} {what} for {n} sub-envs")
    return items


def check_rows(rows: Iterable[int], num_envs: int) -> list[int]:
    """``rows`` as a list of distinct sub-env indices, or ValueError."""
    rows = [int(r) for r in rows]
    if not rows or len(set(rows)) != len(rows) or not all(0 <= r < num_envs for r in rows):
        raise ValueError(f"rows must be distinct sub-env indices in 0..{num_envs - 1}, got {rows}")
    return rows
