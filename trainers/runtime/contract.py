"""The observation and action contract a checkpoint was trained on, and the preflight that checks an env against
it before the first step (``trainers/eval.py``, ``ppo/grpo.init_checkpoint``, SFT resume).

    >>> expected = checkpoint_contract(state)              # what the policy was trained on           # doctest: +SKIP
    >>> check_contract(expected, env_contract(envs), "trainers/eval.py")  # ContractError on a mismatch  # doctest: +SKIP

A contract (:func:`contract_of`) is plain data: the camera roles and their ``[height, width]``, the image flip
(LIBERO's ``flip``; None: unknown or not applicable), the texture look (LIBERO's ``texture_colorspace`` as rendered:
``linear`` or ``auto``; None: unknown), the state and action shapes (a chunked action is
``[K, A]``) and whether the observation carries the instruction. A checkpoint stores its contract under
``"contract"``; an older one gets it from the spaces it stores (flip unknown). :func:`contract_problems` lists
what the env lacks, each with the setting that fixes it, e.g.::

    checkpoint expects main at 128 px; env gives main at 224 px: pass env.kwargs.image_size=128

An env may give more than the checkpoint reads (an extra camera for videos); it may not give less or other.
"""
from __future__ import annotations

from typing import Any

from gymnasium import spaces


class ContractError(ValueError):
    """The env does not give what the checkpoint was trained on; the message names the settings that fix it."""


def contract_of(observation_space: spaces.Space, action_space: spaces.Space, flip: str | None = None,
                textures: str | None = None) -> dict:
    """The contract of an observation and action space (and the image flip and texture look, when known)."""
    parts = getattr(observation_space, "spaces", None)
    if parts is None:  # a flat observation (CartPole, a state vector)
        return {"cameras": {}, "flip": flip, "textures": None, "state_shape": list(observation_space.shape or ()),
                "action_shape": list(action_space.shape or ()), "instruction": False}
    images = parts.get("images")
    cameras = {role: list(space.shape[:2]) for role, space in getattr(images, "spaces", {}).items()}
    state = parts.get("state")
    return {"cameras": cameras, "flip": flip if cameras else None, "textures": textures if cameras else None,
            "state_shape": None if state is None else list(state.shape),
            "action_shape": list(action_space.shape or ()), "instruction": "instruction" in parts}


def checkpoint_contract(state: dict[str, Any]) -> dict:
    """A checkpoint's stored contract, or (older checkpoints) the one its stored spaces give (flip unknown)."""
    if state.get("contract") is not None:
        return state["contract"]
    return contract_of(state["observation_space"], state["action_space"])


def env_contract(envs, flip: str | None = None) -> dict:
    """The contract a vector env gives (``flip``: its image flip; read from the env when not given)."""
    from vla_gym.trainers.runtime.envs import env_attr

    if flip is None:
        flip = env_attr(envs, "image_flip")
    return contract_of(envs.single_observation_space, envs.single_action_space, flip,
                       env_attr(envs, "texture_colorspace"))


def contract_problems(expected: dict, actual: dict) -> tuple[list[str], list[str]]:
    """(what differs, the settings that fix it) between a checkpoint's contract and an env's."""
    problems, fixes = [], []
    want, have = expected.get("cameras", {}), actual.get("cameras", {})
    missing = [role for role in want if role not in have]
    if missing:
        roles = list(dict.fromkeys([*want, *have]))
        problems.append(f"cameras {'+'.join(want)} (env lacks {'+'.join(missing)})")
        fixes.append(f"env.kwargs.cameras=[{','.join(r for r in roles if r in want)}]")
    sizes = {role: (want[role], have[role]) for role in want if role in have and list(want[role]) != list(have[role])}
    if sizes:
        wanted = {tuple(w) for w, _ in sizes.values()}
        problems.append("; ".join(f"{role} at {_size(w)} (env gives {_size(h)})" for role, (w, h) in sizes.items()))
        if len(wanted) == 1:
            height, width = next(iter(wanted))
            fixes.append(f"env.kwargs.image_size={height}" if height == width else
                         f"env.kwargs.image_size=[{height},{width}]")
    if expected.get("flip") and actual.get("flip") and expected["flip"] != actual["flip"]:
        problems.append(f"flip={expected['flip']} (env flips {actual['flip']})")
        fixes.append(f"env.kwargs.flip={expected['flip']}")
    if expected.get("textures") and actual.get("textures") and expected["textures"] != actual["textures"]:
        problems.append(f"{_LOOKS[expected['textures']]} (env renders {_LOOKS[actual['textures']]})")
        fixes.append(f"env.kwargs.texture_colorspace={expected['textures']}" +
                     (" on MuJoCo >= 3.3.3 (pip install 'mujoco>=3.3.3')" if expected["textures"] == "auto" else ""))
    if expected.get("state_shape") != actual.get("state_shape"):
        problems.append(f"state of shape {expected.get('state_shape')} (env gives {actual.get('state_shape')})")
        fixes.append("an env id of the same robot (env.id=...)")
    if list(expected.get("action_shape", [])) != list(actual.get("action_shape", [])):
        want_shape, have_shape = list(expected["action_shape"]), list(actual.get("action_shape", []))
        problems.append(f"actions of shape {want_shape} (env takes {have_shape})")
        if len(want_shape) == 2:
            fixes.append(f"env.wrappers with {{name: ActionChunk, kwargs: {{chunk_size: {want_shape[0]}}}}}")
        elif len(have_shape) == 2:
            fixes.append("env.wrappers without ActionChunk")
        else:
            fixes.append("an env id of the same robot (env.id=...)")
    if expected.get("instruction") and not actual.get("instruction"):
        problems.append("the instruction in the observation (env gives none)")
        fixes.append("a vla_gym env id (VLA/...)")
    return problems, fixes


def check_contract(expected: dict, actual: dict, where: str, waive: tuple[str, ...] = ()) -> list[str]:
    """Raise :class:`ContractError` naming what differs and how to fix it (``where``: the command or setting).

    ``waive``: contract keys (``flip``, ``textures``) whose difference is accepted, for a deliberate shift such as
    evaluating a policy on another MuJoCo's frames; the waived differences are returned (to print and record).
    """
    kept = {key: (None if key in waive else value) for key, value in expected.items()}
    problems, fixes = contract_problems(kept, actual)
    if problems:
        raise ContractError(f"{where}: the checkpoint was trained on {'; '.join(problems)}: pass "
                            f"{' '.join(dict.fromkeys(fixes))}")
    return contract_problems(expected, actual)[0]


#: the texture looks (vla_gym.backends.mujoco_textures) as a contract problem names them
_LOOKS = {"linear": "linear textures (LIBERO's frames)", "auto": "MuJoCo >= 3.3.3's sRGB textures (darker frames)"}


def _size(hw) -> str:
    height, width = hw
    return f"{height} px" if height == width else f"{height}x{width} px"
