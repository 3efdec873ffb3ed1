"""Warn once per process when LIBERO runs on a MuJoCo version the canary has not passed.

LIBERO's success rates move with the MuJoCo version (docs/evaluation.md, "Which MuJoCo"). The versions on which
``vla-gym canary`` replayed every fingerprint without a drift, a flipped success or changed frames are listed in
``vla_gym.assets/canary/passed_mujoco.json``, written by ``experiments/mujoco_versions/measure.py``:

    >>> "3.3.0" in passed_versions()
    True
    >>> unchecked_mujoco_message("3.3.0") is None
    True
    >>> print(unchecked_mujoco_message("9.9.9"))            # doctest: +ELLIPSIS
    LIBERO runs on MuJoCo 9.9.9, which the canary has not passed (passed: ...): success rates may differ ...
"""
from __future__ import annotations

import functools
import json
import warnings
from importlib import resources

ASSET = ("canary", "passed_mujoco.json")


class UncheckedSimulatorWarning(UserWarning):
    """The simulator's version is not one the canary passed; results may not match published ones."""


@functools.cache
def passed_versions() -> tuple[str, ...]:
    """MuJoCo versions on which every canary case replayed without DRIFT, FLIP or RENDER."""
    asset = resources.files("vla_gym.assets").joinpath(*ASSET)
    return tuple(json.loads(asset.read_text())["passed"])


def unchecked_mujoco_message(version: str) -> str | None:
    """The warning for ``version``, or None when the canary passed it."""
    passed = passed_versions()
    if version in passed:
        return None
    return (f"LIBERO runs on MuJoCo {version}, which the canary has not passed (passed: {', '.join(passed)}): "
            f"success rates may differ from those measured on a passed version. Run `vla-gym canary` to see how far "
            f"this install drifts, or install a passed one: pip install mujoco=={passed[-1]}")


_warned = False


def warn_if_unchecked_mujoco() -> None:
    """Warn (:class:`UncheckedSimulatorWarning`), once per process, if the imported MuJoCo is not a passed one."""
    global _warned
    if _warned:
        return
    import mujoco

    message = unchecked_mujoco_message(mujoco.__version__)
    _warned = True
    if message is not None:
        warnings.warn(message, UncheckedSimulatorWarning, stacklevel=3)
