"""Build a rank's shard of vector envs from an :class:`~vla_gym.trainers.runtime.config.EnvConfig`.

    envs = make_envs(cfg.env, num_envs=4)                      # gymnasium VectorEnv
    envs = make_envs(cfg.env, num_envs=1, kwargs={"render_mode": "rgb_array"})   # eval with video

``VLA/...`` ids go through :func:`vla_gym.make_vec` (wrappers, async workers; ``env.wrappers`` entries are
wrapper specs, parsed by :mod:`vla_gym.vector.wrapper_spec`: ``EpisodeMetrics``, ``package.module:Class`` or
``{name: ActionChunk, kwargs: {chunk_size: 8}}``); any other gymnasium id
(CartPole-v1, ...) through vla_gym's Sync/Async vector envs (gymnasium's, plus per-sub-env reset options and
stepping a subset of the sub-envs for pipelined rollouts: :mod:`vla_gym.vector.envs`) in SAME_STEP autoreset mode. The
trainers handle both autoreset modes (NEXT_STEP and SAME_STEP), whichever the vector env reports.

Async envs get ``env.step_timeout``, ``env.on_worker_failure`` and ``env.max_worker_restarts`` (defaults 120 s,
respawn, 3): a hung, dead or raising worker is restarted and its episode ends as truncated with
``info["env_failure"]`` (:mod:`vla_gym.vector.respawn`, docs/reliability.md).

Before the envs are built, the objects alive so far (imports, the policy) are collected once and frozen out of
the cyclic garbage collector (``gc.collect(); gc.freeze()``): ManiSkill runs ``gc.collect()`` whenever it builds or
closes an env, and each such pass over torch's and the simulators' objects cost about 0.2 s (under cProfile, a
24-env rank of the main job spent 13 s in them between start-up and close). Only live objects are frozen (the
collection first), so nothing leaks.
"""
from __future__ import annotations

import functools
import gc
from typing import Any

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, VectorEnv

from vla_gym.core.make import make
from vla_gym.core.registry import check_env_id
from vla_gym.trainers.runtime.config import EnvConfig
from vla_gym.vector.envs import VLAAsyncVectorEnv, VLASyncVectorEnv, make_vec
from vla_gym.vector.wrapper_spec import parse_wrappers


def make_envs(cfg: EnvConfig, num_envs: int, kwargs: dict[str, Any] | None = None) -> VectorEnv:
    """``num_envs`` copies of ``cfg.id`` with ``cfg.kwargs`` updated by ``kwargs``."""
    gc.collect()
    gc.freeze()  # the live objects out of the collector's later passes (module docstring)
    env_kwargs = {**cfg.kwargs, **(kwargs or {})}
    if cfg.id.startswith("VLA/"):
        wrappers = parse_wrappers(cfg.wrappers, key="env.wrappers")
        if not check_env_id(cfg.id).available():
            # its simulator is not installed: making one env here raises the backend's own error (what to
            # install), cheaply and once, instead of a traceback from every worker process
            make(cfg.id, **env_kwargs).close()
        on_gpu = str(env_kwargs.get("device") or "").startswith("cuda")
        faults = failure_options(cfg) if cfg.vectorization == "async" and not on_gpu else {}
        return make_vec(cfg.id, num_envs, vectorization=cfg.vectorization, wrappers=wrappers, **faults, **env_kwargs)
    if cfg.wrappers:
        raise ValueError(f"env.wrappers applies to vla_gym ids (VLA/...), not {cfg.id!r}; remove it")
    factory = functools.partial(gym.make, cfg.id, **env_kwargs)
    if cfg.vectorization == "async":
        return VLAAsyncVectorEnv([factory] * num_envs, env_id=cfg.id, autoreset_mode=AutoresetMode.SAME_STEP,
                                 **failure_options(cfg))
    return VLASyncVectorEnv([factory] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)


def failure_options(cfg: EnvConfig) -> dict[str, Any]:
    """The keywords of an async vector env's step timeout and worker respawn, from ``cfg``."""
    return {"step_timeout": cfg.step_timeout, "on_worker_failure": cfg.on_worker_failure,
            "max_worker_restarts": cfg.max_worker_restarts}


def worker_restarts(envs: VectorEnv) -> int | None:
    """Workers restarted so far (:mod:`vla_gym.vector.respawn`); None for envs without worker processes."""
    return getattr(getattr(envs, "unwrapped", envs), "worker_restarts", None)


def autoreset_mode(envs: VectorEnv) -> AutoresetMode:
    """The vector env's autoreset mode (gymnasium's default, NEXT_STEP, when it does not say)."""
    mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    mode = AutoresetMode(mode)
    if mode == AutoresetMode.DISABLED:
        raise ValueError("vector envs with autoreset disabled are not supported: use NEXT_STEP or SAME_STEP")
    return mode


def env_attr(envs: VectorEnv, name: str, default: Any = None) -> Any:
    """Attribute ``name`` of the first sub-env (through its wrappers), or ``default``."""
    if isinstance(envs, AsyncVectorEnv) and not envs.call("has_wrapper_attr", name)[0]:
        return default  # asking a worker for a missing attribute would shut the workers down
    try:
        return envs.get_attr(name)[0]
    except AttributeError:
        return default
