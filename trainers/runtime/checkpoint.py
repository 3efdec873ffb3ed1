"""Atomic checkpoints that keep the last N, plus the RNG states a resumed run needs.

    ckpt = Checkpointer(run_path / "checkpoints", keep_last=3)
    path = ckpt.save(state, update=40)            # writes ckpt_00000040.pt.tmp, fsyncs, renames
    state = load_checkpoint(ckpt.latest())        # or None when there is none
    found = ckpt.load_newest_readable()           # (path, state, skipped) or None: resume's choice

A checkpoint is written to a temporary file in the same directory and renamed with ``os.replace``,
so a run killed at any moment leaves either the previous checkpoint or the new one, never half a
file. Stray ``*.tmp`` files of a killed save are ignored and cleaned up by the next save. A file
damaged anyway (a full disk, a copy cut short) raises :class:`CheckpointError` naming it; resuming
skips it for the newest checkpoint that reads.

:func:`atomic_write_text` writes text files (evaluation reports) by the same rule.
"""
from __future__ import annotations

import os
import pathlib
import pickle
import random
import re
import zipfile
from typing import Any

import numpy as np
import torch

from vla_gym.trainers.policies import make_policy
from vla_gym.trainers.runtime.contract import check_contract, checkpoint_contract

PATTERN = re.compile(r"^ckpt_(\d+)\.pt$")
#: what torch.load raises on a truncated or corrupted file
_UNREADABLE = (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile)


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be read (truncated or corrupted); the message names the file."""


class Checkpointer:
    def __init__(self, directory: str | os.PathLike, keep_last: int = 3):
        if keep_last < 1:
            raise ValueError(f"checkpoint.keep_last must be >= 1, got {keep_last}")
        self.directory = pathlib.Path(directory)
        self.keep_last = keep_last

    def paths(self) -> list[pathlib.Path]:
        """Complete checkpoints, oldest first."""
        if not self.directory.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.directory.iterdir() if (m := PATTERN.match(p.name))]
        return [p for _, p in sorted(found)]

    def latest(self) -> pathlib.Path | None:
        paths = self.paths()
        return paths[-1] if paths else None

    def load_newest_readable(
        self, map_location: str | torch.device = "cpu",
    ) -> tuple[pathlib.Path, dict[str, Any], list[CheckpointError]] | None:
        """The newest checkpoint that can be read: ``(path, state, errors of the newer ones skipped)``.

        None when there is no checkpoint; :class:`CheckpointError` when there are some and none reads.
        """
        skipped: list[CheckpointError] = []
        for path in reversed(self.paths()):
            try:
                return path, load_checkpoint(path, map_location), skipped
            except CheckpointError as exc:
                skipped.append(exc)
        if skipped:
            raise CheckpointError(f"none of the {len(skipped)} checkpoints in {self.directory} can be read "
                                  f"(newest: {skipped[0]}); move them away to start over, or set "
                                  "checkpoint.resume=null")
        return None

    def save(self, state: dict[str, Any], update: int) -> pathlib.Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = atomic_save(state, self.directory / f"ckpt_{update:08d}.pt")
        self._prune()
        return path

    def _prune(self) -> None:
        for old in self.paths()[: -self.keep_last]:
            old.unlink(missing_ok=True)
        for stray in self.directory.glob("*.pt.tmp"):
            stray.unlink(missing_ok=True)


def atomic_save(state: dict[str, Any], path: str | os.PathLike) -> pathlib.Path:
    """``torch.save`` to ``path.tmp``, fsync, then rename over ``path``."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _write_and_rename(path, path.with_name(path.name + ".tmp"), lambda handle: torch.save(state, handle))


def checkpoint_state(algo: str, cfg, policy, *, policy_state: dict[str, Any], optimizer: Any, counters: dict[str, int],
                     contract: dict[str, Any], policy_name: str | None, policy_kwargs: dict[str, Any] | None,
                     rng: list[Any] | None, **extra: Any) -> dict[str, Any]:
    """The one checkpoint format every trainer writes: what the run was (``algo``; its config with only that
    algorithm's section; the policy's spaces and the env ``contract`` it was trained on; ``policy_name`` and
    ``policy_kwargs`` to rebuild it, None when it was passed in as an instance), the trained state
    (``policy_state``, ``optimizer``), ``counters``, every rank's ``rng`` and the algorithm's own ``extra`` entries
    (PPO/GRPO's ``extra``, residual RL's ``td3`` critics, ...). :func:`load_policy` and ``trainers/eval.py`` read any
    of them.

        state = checkpoint_state("sft", cfg, policy, policy_state=policy.state_dict(), optimizer=opt.state_dict(),
                                 counters={"num_updates": 3}, contract=contract, policy_name=cfg.policy.name,
                                 policy_kwargs=dict(cfg.policy.kwargs), rng=None)
    """
    from vla_gym.trainers.runtime.config import config_dict  # config imports the policies that import this module

    return {"algo": algo, "config": config_dict(cfg, algo), "policy": policy_state, "optimizer": optimizer,
            "counters": counters, "observation_space": policy.observation_space, "action_space": policy.action_space,
            "contract": contract, "policy_name": policy_name, "policy_kwargs": policy_kwargs, "rng": rng, **extra}


#: what a checkpoint needs to be evaluated and to start another run (no optimizer, RNG states or extras)
POLICY_KEYS = ("algo", "config", "policy", "observation_space", "action_space", "policy_name", "policy_kwargs",
               "contract")


def save_policy_only(checkpoint: str | os.PathLike, path: str | os.PathLike,
                     dtype: torch.dtype | None = None) -> pathlib.Path:
    """A copy of ``checkpoint`` with only the trained parameters and what rebuilds the policy (``POLICY_KEYS``):
    ``trainers/eval.py --checkpoint``, :func:`load_policy` and ``grpo.init_checkpoint`` take it; a fraction of the
    size (no Adam moments), for committing a result's models. ``dtype=torch.float16`` stores the floating-point
    parameters at half that size; loading casts them back to the policy's own dtype (float32 on a CPU).

    >>> save_policy_only("runs/x/checkpoints/ckpt_00000040.pt", "experiments/x/models/x.pt")   # doctest: +SKIP
    """
    return atomic_save(_policy_only(load_checkpoint(checkpoint), dtype), path)


def export_policy(checkpoint: str | os.PathLike, directory: str | os.PathLike, name: str,
                  dtype: torch.dtype | None = None, replace: bool = True) -> pathlib.Path:
    """:func:`save_policy_only` into ``directory / name``, unless a ``.pt`` file there already holds the same model
    (equal trained parameters, ``policy_name`` and ``policy_kwargs``; stored in ``dtype`` when given): then that file
    is returned and nothing is written (``name`` first, then the others by name). A model exported for several result
    rows is stored once, and re-exporting it leaves the committed file as it is. ``replace=False`` refuses
    (FileExistsError) to write over another model already at ``directory / name``, which rows may name.

    >>> export_policy("runs/x/sft/final.pt", "experiments/x/models", "libero_object_seed0_sft.pt")   # doctest: +SKIP
    """
    directory = pathlib.Path(directory)
    exported = _policy_only(load_checkpoint(checkpoint), dtype)
    candidates = sorted(directory.glob("*.pt"), key=lambda path: (path.name != name, path.name))
    for candidate in candidates if exported.get("policy") else []:
        try:
            if _same_model(exported, load_checkpoint(candidate)):
                return candidate
        except CheckpointError:  # a damaged file is no match (and is overwritten when it bears ``name``)
            continue
    if not replace and (directory / name).is_file():
        raise FileExistsError(f"{directory / name} holds another model (other parameters, dtype or kwargs), which "
                              "rows may name: export under another name, or convert that file deliberately first")
    return atomic_save(exported, directory / name)


def _policy_only(state: dict[str, Any], dtype: torch.dtype | None = None) -> dict[str, Any]:
    kept = {key: state[key] for key in POLICY_KEYS if key in state}
    if dtype is not None and "policy" in kept:
        kept["policy"] = {key: value.to(dtype) if torch.is_tensor(value) and value.is_floating_point() else value
                          for key, value in kept["policy"].items()}
    return kept


def _same_model(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Equal ``policy_name``, ``policy_kwargs`` and trained parameters (keys, dtypes, shapes and values)."""
    if (first.get("policy_name"), first.get("policy_kwargs")) != (second.get("policy_name"), second.get("policy_kwargs")):
        return False
    mine, theirs = first["policy"], second.get("policy") or {}
    return mine.keys() == theirs.keys() and all(
        torch.is_tensor(mine[key]) and torch.is_tensor(theirs[key]) and mine[key].dtype == theirs[key].dtype
        and mine[key].shape == theirs[key].shape and torch.equal(mine[key], theirs[key]) for key in mine)


def atomic_write_text(path: str | os.PathLike, text: str) -> pathlib.Path:
    """Write ``text`` to ``path`` through a temporary file (``.<name>.<pid>.tmp``), fsync and a rename: a reader
    never sees half a file (reports: ``eval.json``, ``eval.md``, ``ood.json``)."""
    path = pathlib.Path(path)
    return _write_and_rename(path, path.with_name(f".{path.name}.{os.getpid()}.tmp"),
                             lambda handle: handle.write(text.encode()))


def _write_and_rename(path: pathlib.Path, tmp: pathlib.Path, write) -> pathlib.Path:
    """The one atomic-write rule of this module: ``write(handle)`` into ``tmp``, fsync, rename over ``path``."""
    with open(tmp, "wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by :class:`Checkpointer` (it holds gym spaces, hence weights_only=False).

    Raises FileNotFoundError for a missing file and :class:`CheckpointError` for one that cannot be read.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file {path}")
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except _UNREADABLE as exc:
        cause = str(exc).split("\n")[0].split(". ")[0]  # torch's first sentence; the rest is advice
        raise CheckpointError(f"cannot read checkpoint {path} (truncated or corrupted?): "
                              f"{type(exc).__name__}: {cause}") from exc


def load_policy(checkpoint: str | os.PathLike | dict[str, Any], device: str | torch.device = "cpu"):
    """The policy of a PPO/GRPO checkpoint, rebuilt from the spaces and policy options it stores.

    >>> policy = load_policy("runs/pushcube/checkpoints/ckpt_00000100.pt")   # doctest: +SKIP
    >>> actions, _, _ = policy.act(obs_batch, deterministic=True)           # doctest: +SKIP
    """
    state = checkpoint if isinstance(checkpoint, dict) else load_checkpoint(checkpoint, map_location=device)
    if state.get("policy_name") is None:
        raise ValueError("this checkpoint's policy was passed to the trainer as an instance: build it the same way "
                         "and call policy.load_state_dict(state['policy'])")
    policy = make_policy(state["policy_name"], state["observation_space"], state["action_space"], **state["policy_kwargs"])
    policy.load_state_dict(state["policy"])
    return policy.to(device).eval()


#: parameter-name prefixes of a policy's critic (value network and value head)
CRITIC_PREFIXES = ("vf_net.", "value_head.")


def load_actor_weights(policy, path: str | os.PathLike, setting: str, device: str | torch.device = "cpu",
                       contract: dict | None = None) -> list[str]:
    """Start ``policy`` from the actor of a PPO, GRPO or SFT checkpoint; returns the checkpoint's dropped tensors.

    ``contract``: the env's (:func:`~vla_gym.trainers.runtime.contract.env_contract`), checked against the
    checkpoint's first (:class:`~vla_gym.trainers.runtime.contract.ContractError` naming the fix). Every actor
    tensor of ``policy`` must be in the checkpoint, else the error names ``setting`` (the config key, e.g.
    ``grpo.init_checkpoint``). A critic in the checkpoint that ``policy`` lacks is dropped (GRPO); a critic
    ``policy`` has that the checkpoint lacks keeps its fresh initialisation (PPO after SFT).
    """
    full = load_checkpoint(path, map_location=device)
    if contract is not None:
        check_contract(checkpoint_contract(full), contract, f"{setting}={path}")
    state = full["policy"]
    own = policy.state_dict()
    missing = [key for key in own if key not in state and not key.startswith(CRITIC_PREFIXES)]
    reshaped = [key for key in own if key in state and state[key].shape != own[key].shape]
    if missing or reshaped:
        what = f"lacks parameters {missing[:5]}" if missing else f"has other shapes for {reshaped[:5]}"
        raise ValueError(f"{setting}={path} {what}: it was trained with another policy "
                         "(compare policy.name / policy.kwargs)")
    policy.load_state_dict({**own, **{key: value for key, value in state.items() if key in own}})
    return [key for key in state if key not in own]


def rng_state(generators: dict[str, torch.Generator] | None = None) -> dict[str, Any]:
    """Python, numpy, torch (and CUDA) global RNG states plus named torch generators."""
    state = {
        "python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
        "generators": {name: g.get_state() for name, g in (generators or {}).items()},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], generators: dict[str, torch.Generator] | None = None) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    for name, g in (generators or {}).items():
        if name in state["generators"]:
            g.set_state(state["generators"][name])
