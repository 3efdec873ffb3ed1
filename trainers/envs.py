"""Build a rank's shard of vector envs from an :class:`~vla_gym.trainers.config.EnvConfig`.

    envs = make_envs(cfg.env, num_envs=4)                      # gymnasium VectorEnv
    envs = make_envs(cfg.env, num_envs=1, kwargs={"render_mode": "rgb_array"})   # eval with video

``VLA/...`` ids go through :func:`vla_gym.make_vec` (wrappers, async workers; config wrapper entries are
names from :mod:`vla_gym.wrappers` or ``{name: ActionChunk, chunk_size: 8}``); any other gymnasium id
(CartPole-v1, ...) through gymnasium's Sync/AsyncVectorEnv in SAME_STEP autoreset mode. The
trainers handle both autoreset modes (NEXT_STEP and SAME_STEP), whichever the vector env reports.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from vla_gym.trainers.config import EnvConfig


def make_envs(cfg: EnvConfig, num_envs: int, kwargs: dict[str, Any] | None = None) -> VectorEnv:
    """``num_envs`` copies of ``cfg.id`` with ``cfg.kwargs`` updated by ``kwargs``."""
    env_kwargs = {**cfg.kwargs, **(kwargs or {})}
    if cfg.id.startswith("VLA/"):
        import vla_gym

        wrappers = [resolve_wrapper(spec) for spec in cfg.wrappers]
        return vla_gym.make_vec(cfg.id, num_envs, vectorization=cfg.vectorization, wrappers=wrappers, **env_kwargs)
    if cfg.wrappers:
        raise ValueError(f"env.wrappers applies to vla_gym ids (VLA/...), not {cfg.id!r}; remove it")
    factory = functools.partial(gym.make, cfg.id, **env_kwargs)
    vector_cls = AsyncVectorEnv if cfg.vectorization == "async" else SyncVectorEnv
    return vector_cls([factory] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)


def resolve_wrapper(spec: Any):
    """A wrapper from a config entry: ``"EpisodeMetrics"`` (a name in :mod:`vla_gym.wrappers`),
    ``"package.module:Class"``, ``{"name": "ActionChunk", "chunk_size": 8}`` (keyword arguments), or a callable."""
    if callable(spec):
        return spec
    if isinstance(spec, str):
        name, kwargs = spec, {}
    elif isinstance(spec, dict) and "name" in spec:
        kwargs = dict(spec)
        name = kwargs.pop("name")
    else:
        raise ValueError(f"env.wrappers entry {spec!r}: use a wrapper name, 'module:Class' or {{name: ..., kwarg: ...}}")
    if ":" in name:
        module, _, attr = name.partition(":")
        cls = getattr(importlib.import_module(module), attr)
    else:
        import vla_gym.wrappers

        if not hasattr(vla_gym.wrappers, name):
            raise ValueError(f"env.wrappers: no wrapper {name!r} in vla_gym.wrappers ({', '.join(vla_gym.wrappers.__all__)})")
        cls = getattr(vla_gym.wrappers, name)
    return functools.partial(cls, **kwargs) if kwargs else cls


def autoreset_mode(envs: VectorEnv) -> AutoresetMode:
    """The vector env's autoreset mode (gymnasium's default, NEXT_STEP, when it does not say)."""
    mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    mode = AutoresetMode(mode)
    if mode == AutoresetMode.DISABLED:
        raise ValueError("vector envs with autoreset disabled are not supported: use NEXT_STEP or SAME_STEP")
    return mode


def env_attr(envs: VectorEnv, name: str, default: Any = None) -> Any:
    """Attribute ``name`` of the first sub-env (through its wrappers), or ``default``."""
    try:
        return envs.get_attr(name)[0]
    except AttributeError:
        return default
