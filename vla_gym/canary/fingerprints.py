"""The physics canary's fingerprints: the suites, the settings they are recorded with, a case, a trace, reading them.

    >>> from vla_gym.canary.fingerprints import SUITES, Case, load, select
    >>> meta, arrays = load()                      # the shipped ones: vla_gym.assets/canary/fingerprints.{json,npz}
    >>> sorted(case["suite"] for case in select(meta, quick=True)) == sorted(SUITES)   # --quick: one per suite
    True
    >>> case = meta["cases"][0]
    >>> arrays[f"{case['key']}.actions"].shape == (case["steps"], 7)
    True
    >>> Case("object", SUITES["object"], 3, "a task", 0, 0).key
    'object-t3-i0-s0'

A fingerprints file is a JSON (the reference versions of :func:`versions`, the settings, the cases, the tasks left
out with their reasons) with an ``.npz`` beside it holding, per case key, ``<key>.actions``, ``<key>.robot``,
``<key>.objects`` and, for LIBERO, ``<key>.frame_<camera>``. :mod:`vla_gym.canary.recorder` writes them,
:mod:`vla_gym.canary.player` replays them, :mod:`vla_gym.canary.metrics` compares a replay with them.
"""
from __future__ import annotations

import io
import json
import pathlib
import platform
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from vla_gym.runtime.receipt import package_versions

#: ``--suite`` name -> the env id its cases run on
SUITES = {
    "object": "VLA/LiberoObject-v0",
    "spatial": "VLA/LiberoSpatial-v0",
    "goal": "VLA/LiberoGoal-v0",
    "90": "VLA/Libero90-v0",
    "maniskill": "VLA/ManiSkill-PushCube-v0",
}
#: positions are fingerprinted every STRIDE steps (and at the last step); 5 steps = 0.25 s at 20 Hz
STRIDE = 5
#: default drift alarm (m): 5x the most any kept case drifts when its actions move by 1e-6 (STABLE_M), a
#: sixth of LIBERO's 3 cm goal tolerance; docs/evaluation.md ("Physics canary") says how it was chosen
TOLERANCE_M = 0.005
#: the distributions whose versions are stamped into the fingerprints (LIBERO's under whichever name it has)
VERSIONED = ("mujoco", "robosuite", "LIBERO", "mani_skill", "sapien", "torch", "numpy")
ASSET = ("canary", "fingerprints.json")
#: the cameras a LIBERO case fingerprints at its reset (steps here never render): both, FRAME_PX square, pooled
#: into FRAME_POOL x FRAME_POOL blocks
FRAME_PX, FRAME_POOL = 64, 4
LIBERO_ENV_KWARGS = {"cameras": ("main", "wrist"), "image_size": FRAME_PX}
#: default render alarm: the mean absolute difference of the pooled frames, of 255; LIBERO's frames under MuJoCo
#: 2.3.7-3.3.2 and 3.17 with linear textures differ by < 0.1, MuJoCo >= 3.3.3's own sRGB textures by about 36
RENDER_TOLERANCE = 2.0
MANISKILL_ENV_KWARGS = {"obs_mode": "state"}


class CanaryError(RuntimeError):
    """A problem with the command or the fingerprints (exit 2), not a drift."""


@dataclass(frozen=True)
class Case:
    """One canary episode: ``reset(seed, options={task_id, init_state_id})`` on ``env_id``."""

    suite: str
    env_id: str
    task_id: int
    task: str
    init_state_id: int | None
    seed: int

    @property
    def key(self) -> str:
        """A stable name, e.g. ``object-t3-i0-s0`` or ``maniskill-t0-s2``."""
        init = "" if self.init_state_id is None else f"-i{self.init_state_id}"
        return f"{self.suite}-t{self.task_id}{init}-s{self.seed}"


@dataclass
class Trace:
    """What one played episode leaves: the executed actions and the sampled positions (float32)."""

    actions: np.ndarray        # [T, 7]
    robot: np.ndarray          # [S, 3] end-effector position
    objects: np.ndarray        # [S, K, 3] movable objects' positions
    object_names: list[str]
    success: bool              # success at the last step
    length: int | None         # the step of the first success (None: never)
    frames: dict[str, np.ndarray] = field(default_factory=dict)  # role -> pooled reset frame (uint8), LIBERO only


def versions() -> dict[str, str | None]:
    """Versions of the simulators and libraries the physics depends on (None: not installed), from the receipt's
    :func:`~vla_gym.runtime.receipt.package_versions` in the fingerprints' notation (``"LIBERO": "<dist> <version>"``)."""
    installed = package_versions()
    found: dict[str, str | None] = {"python": platform.python_version(), "machine": platform.machine()}
    for name in VERSIONED:
        version = installed.get("libero" if name == "LIBERO" else name)
        if name == "LIBERO" and version is not None and "==" not in version:
            version = f"libero {version}"
        found[name] = None if version is None else version.replace("==", " ")
    return found


def default_path() -> pathlib.Path:
    """The shipped fingerprints (``vla_gym.assets/canary/fingerprints.json``)."""
    return pathlib.Path(str(resources.files("vla_gym.assets").joinpath(*ASSET)))


def load(path: str | pathlib.Path | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """The fingerprints' metadata (JSON) and arrays (the ``.npz`` beside it)."""
    path = pathlib.Path(path) if path is not None else default_path()
    arrays_path = path.with_suffix(".npz")
    if not path.is_file() or not arrays_path.is_file():
        raise CanaryError(f"no fingerprints at {path} (and {arrays_path.name} beside it): record them with "
                          "`python scripts/record_canary.py`")
    with np.load(io.BytesIO(arrays_path.read_bytes())) as npz:
        arrays = {name: npz[name] for name in npz.files}
    return json.loads(path.read_text()), arrays


def select(meta: dict, suites: Iterable[str] | None = None, quick: bool = False) -> list[dict]:
    """The recorded cases of ``suites`` (all when None), only the quick ones with ``quick``."""
    wanted = set(suites) if suites is not None else None
    return [c for c in meta["cases"] if (wanted is None or c["suite"] in wanted) and (c["quick"] or not quick)]
