"""Meta-World (Farama ``metaworld`` 3.1.1, MuJoCo) behind the unified schema.

    >>> import gymnasium as gym, vla_gym
    >>> env = gym.make("VLA/MetaWorld-push-v0")                               # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)                                         # doctest: +SKIP
    >>> obs["images"]["main"].shape, obs["state"].shape, obs["instruction"]   # doctest: +SKIP
    ((224, 224, 3), (4,), 'push the puck to the green goal')
    >>> env = gym.make("VLA/MetaWorldMT10-v0", obs_mode="state")  # doctest: +SKIP  (Meta-World's 39-D observation)

Episodes: ``reset(seed=s)`` is Meta-World's own seeded task sampling: the env is seeded with ``env.seed(s)``
and draws its object and goal positions (its ``rand_vec``) from that generator (``seeded_rand_vec``), so the
same seed gives the same positions, and stepping the same actions gives Meta-World's own trajectory, rewards
and success flags step for step (tests/test_metaworld.py). Each task's env is built once and kept (a reset
never rebuilds the MuJoCo model); the goal is part of Meta-World's observation (its MT convention, which its
scripted experts need), and the ML ids hide it from ``obs_mode="state"`` as Meta-World's ML benchmarks do.

Conventions: the action is Meta-World's own, 4-D in [-1, 1]: end-effector delta position (3; 1.0 moves the
mocap target 1 cm) and gripper effort (-1 open, +1 close). ``state`` is Meta-World's proprioception (hand
position (3), gripper opening in [0, 1]); ``obs_mode="state"`` gives the whole 39-D Meta-World observation.
Reward is Meta-World's dense reward (0..10), ``info["success"]`` its success flag; an episode ends on success
(``terminated``, vla_gym's rule) or after 500 steps (Meta-World's ``max_path_length``). Cameras are rendered
only when an observation is wanted, with MuJoCo's own renderer (``MUJOCO_GL=egl`` by default), right side up
(:mod:`vla_gym.backends.metaworld.cameras`).

Multi-task learning from state (docs/metaworld.md, "Demos -> SFT -> RL on MT10"): ``task_one_hot=True`` appends
a one-hot of the task's index in the env's task list to the ``obs_mode="state"`` observation (Meta-World's own MT
convention: its 39 numbers do not say which task runs), and ``fixed_goals=N`` gives every task N fixed initial
states, init state i being Meta-World's draw from ``env.seed(i)`` (the positions ``reset(seed=i)`` gives without
it), so that goals split into training and held-out ranges as LIBERO's init states do (``init_states="0-39"``,
``trainers/eval.py --init-states 40-49``, ``grpo.train_init_states``).

MuJoCo: metaworld 3.1.1 pins ``mujoco==3.3.0``; vla_gym runs it on the MuJoCo that LIBERO uses (3.17). The one
incompatibility, Meta-World writing 11 weld parameters into MuJoCo's ``eq_data`` rows of 12, is bridged by
:func:`patch_mocap_welds` (docs/metaworld.md has the measurements).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from vla_gym.backends.base import Backend, TaskSpec
from vla_gym.backends.metaworld.cameras import CAMERAS, MAIN_CAMERAS, ROTATED_180
from vla_gym.backends.mujoco_gl import GL_ERROR, OpenRenderContexts, explain_gl_errors
from vla_gym.core import schema
from vla_gym.core.env import VLAEnv
from vla_gym.core.errors import MissingSimulatorError
from vla_gym.runtime import fork_guard
from vla_gym.runtime.system import configure_mujoco_gl
from vla_gym.tasks.metaworld import task_specs

SIMULATOR = "Meta-World (MuJoCo EGL)"  # as fork_guard names it
OBS_MODES = ("images", "state")
#: Meta-World's weld parameters for the mocap body that drives the hand (``SawyerMocapBase.reset_mocap_welds``):
#: anchor (3), relative position (3), relative quaternion (4), torque scale (1)
MOCAP_WELD = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 5.0)
#: size of Meta-World's observation: hand (3), gripper (1), objects (14), the previous frame of those (18), goal (3)
OBS_DIM = 39
PROPRIO_DIM = 4
#: Meta-World's control step: frame_skip 5 x timestep 2.5 ms (its metadata's render_fps)
CONTROL_HZ = 80.0
#: backends with a renderer, closed at interpreter exit while EGL still runs
_OPEN_BACKENDS = OpenRenderContexts()
#: no episode limit inside Meta-World (its ``step`` raises past ``max_path_length``): VLAEnv owns the limit
UNLIMITED = 2**62


def _reset_mocap_welds(env) -> None:
    """Meta-World's ``reset_mocap_welds`` for MuJoCo versions whose ``eq_data`` rows hold more than 11 numbers.

    MuJoCo 3.3.x has 11 weld parameters per row, later versions 12: the 12th marks a relative pose that the
    compiler computed, which the simulation does not read (a hand driven with the flag 0 or 1 reaches the same
    position to the last bit; docs/metaworld.md). The 11 numbers Meta-World sets go into the first 11 places.
    """
    import mujoco

    model = env.model
    if model.nmocap > 0 and model.eq_data is not None:
        for i in range(model.eq_data.shape[0]):
            if model.eq_type[i] == mujoco.mjtEq.mjEQ_WELD:
                model.eq_data[i, :len(MOCAP_WELD)] = MOCAP_WELD


def patch_mocap_welds(mocap_base, neq_data: int) -> bool:
    """Install :func:`_reset_mocap_welds` on Meta-World's ``SawyerMocapBase`` when MuJoCo's ``eq_data`` rows are
    longer than Meta-World's 11 numbers (its own method would raise); returns whether it did. Idempotent, and
    a no-op on MuJoCo 3.3 (Meta-World's pin)."""
    if neq_data == len(MOCAP_WELD) or mocap_base.reset_mocap_welds is _reset_mocap_welds:
        return False
    mocap_base.reset_mocap_welds = _reset_mocap_welds
    return True


def import_metaworld() -> dict:
    """Import Meta-World (made to run on the installed MuJoCo) and return its task classes, or explain the install."""
    fork_guard.check_not_forked(SIMULATOR)  # in a fork of a process that rendered, EGL would hang
    configure_mujoco_gl()  # before mujoco is imported: it picks its GL platform then
    with explain_gl_errors():
        try:
            import mujoco
            from metaworld.env_dict import ALL_V3_ENVIRONMENTS
            from metaworld.sawyer_xyz_env import SawyerMocapBase
        except ImportError as exc:
            if GL_ERROR.search(str(exc)):
                raise
            raise MissingSimulatorError("Meta-World", "metaworld", detail=str(exc)) from exc
    patch_mocap_welds(SawyerMocapBase, mujoco.mjNEQDATA)
    return ALL_V3_ENVIRONMENTS


def configure_raw_env(env) -> None:
    """Set up a freshly built Meta-World env the way vla_gym runs it (module docstring): the goal in the
    observation and a new ``rand_vec`` at each reset, drawn from the generator ``env.seed(s)`` seeds. The same
    steps as Meta-World's goal-observable envs take at construction, with ``seeded_rand_vec`` instead of numpy's
    global generator."""
    env._partially_observable = False
    del env.sawyer_observation_space  # a cached property: recomputed with the goal's bounds
    env._set_task_called = True
    env._freeze_rand_vec = False
    env.seeded_rand_vec = True
    env.max_path_length = UNLIMITED


class MetaWorldBackend(Backend):
    """One Meta-World env per task, built on first use and kept; see the module docstring."""

    control_hz = CONTROL_HZ
    action_dim = 4

    def __init__(self, cameras: Sequence[str] = ("main",), image_size=(224, 224), obs_mode: str = "images",
                 main_camera: str = CAMERAS["main"], goal_observable: bool = True, one_hot_tasks: int = 0):
        super().__init__(cameras, image_size)
        self._classes = import_metaworld()
        self.obs_mode = obs_mode
        self.goal_observable = goal_observable
        self.one_hot_tasks = one_hot_tasks  # > 0: the state ends with a one-hot of the task index, this long
        self.state_dim = (OBS_DIM + one_hot_tasks) if obs_mode == "state" else PROPRIO_DIM
        self._camera_names = [main_camera if role == "main" else CAMERAS[role] for role in self.camera_roles]
        self._envs: dict = {}  # Meta-World name -> built env, kept across task switches
        self._env = None
        self._task_one_hot = np.zeros(one_hot_tasks, dtype=np.float32)  # set once per task by load(), not per step
        self._renderer = None
        self._obs: np.ndarray | None = None

    @property
    def metaworld_env(self):
        """The loaded task's Meta-World env (``SawyerXYZEnv``), e.g. for scripted experts; None before load()."""
        return self._env

    @property
    def raw_observation(self) -> np.ndarray:
        """Meta-World's last 39-D observation, goal included (what its scripted policies read)."""
        return self._obs

    # ------------------------------------------------------------------------------------ life cycle
    def load(self, task: TaskSpec) -> None:
        name = task.extra["metaworld_name"]
        if name not in self._envs:
            fork_guard.check_not_forked(SIMULATOR)
            env = self._classes[name]()
            configure_raw_env(env)
            self._envs[name] = env
        if self._env is not self._envs[name]:
            self._close_renderer()  # a renderer holds one model's textures and meshes
        self._env = self._envs[name]
        self._task_one_hot = np.zeros(self.one_hot_tasks, dtype=np.float32)
        if self.one_hot_tasks:
            self._task_one_hot[task.index] = 1.0

    def reset(self, init_state_id: int | None, seed: int) -> None:
        # Meta-World's own generator: this episode's object and goal positions (a fixed goal i: seed i's)
        self._env.seed(seed if init_state_id is None else init_state_id)
        self._obs = self._env.reset()[0]
        # Meta-World's reset moves the goal marker in the model after its last kinematics pass, so the first frame
        # would show it where the previous draw put it; place the markers as its step() does after each step
        # (positions of sites only: nothing in the physics or the observation reads them)
        for site, position in self._env._target_site_config:
            self._env._set_pos_site(site, position)

    def step(self, action: np.ndarray) -> tuple[float, bool]:
        # float32: Meta-World's action space, so the same action moves the hand exactly as in Meta-World's loop
        self._obs, reward, _, _, info = self._env.step(action.astype(np.float32))
        return float(reward), bool(info["success"])

    def close(self) -> None:
        self._close_renderer()
        for env in self._envs.values():
            env.close()
        self._envs.clear()
        self._env = self._obs = None

    def _close_renderer(self) -> None:
        _OPEN_BACKENDS.discard(self)
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ----------------------------------------------------------------------------------- observation
    def state(self) -> np.ndarray:
        if self.obs_mode == "images":
            return self._obs[:PROPRIO_DIM].astype(np.float32)
        state = self._obs.astype(np.float32)
        if not self.goal_observable:
            state[-3:] = 0.0  # as Meta-World's partially observable (ML) envs report it
        if self.one_hot_tasks:
            state = np.concatenate([state, self._task_one_hot])
        return state

    def render(self) -> dict[str, np.ndarray]:
        if not self.camera_roles:
            return {}
        if self._renderer is None:
            self._renderer = self._make_renderer()
        images = {}
        with explain_gl_errors():
            for role, camera in zip(self.camera_roles, self._camera_names):
                self._renderer.update_scene(self._env.data, camera=camera)
                frame = self._renderer.render()
                images[role] = np.ascontiguousarray(frame[::-1, ::-1] if ROTATED_180[camera] else frame)
        return images

    def _make_renderer(self):
        import mujoco

        height, width = self.image_size
        model = self._env.model
        fork_guard.check_not_forked(SIMULATOR)
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)  # room for larger images
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        with explain_gl_errors():
            renderer = mujoco.Renderer(model, height=height, width=width)
        fork_guard.note_initialised(SIMULATOR)
        _OPEN_BACKENDS.add(self)
        return renderer


def check_options(cameras: Sequence[str] | None, obs_mode: str, main_camera: str, task_one_hot: bool = False,
                  fixed_goals: int | None = None, init_states=None) -> tuple[str, ...]:
    """Check the keyword arguments; return the camera roles to render."""
    if obs_mode not in OBS_MODES:
        raise ValueError(f"obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
    if task_one_hot and obs_mode != "state":
        raise ValueError("task_one_hot=True extends Meta-World's 39-D observation: it needs obs_mode='state' (image "
                         "policies read the instruction to tell the tasks apart)")
    if fixed_goals is not None and (isinstance(fixed_goals, bool) or not isinstance(fixed_goals, int)
                                    or fixed_goals < 1):
        raise ValueError(f"fixed_goals must be a positive number of goals per task (e.g. 50) or None, "
                         f"got {fixed_goals!r}")
    if init_states is not None and fixed_goals is None:
        raise ValueError(f"init_states={init_states!r} picks among fixed goals: add fixed_goals=N (e.g. 50; Meta-World's "
                         "goals otherwise come from the seed)")
    if main_camera not in MAIN_CAMERAS:
        raise ValueError(f"main_camera must be one of Meta-World's cameras {list(MAIN_CAMERAS)}, got {main_camera!r}")
    if cameras is None:
        return ("main",) if obs_mode == "images" else ()
    cameras = tuple(cameras)
    unknown = [role for role in cameras if role not in CAMERAS]
    if unknown:
        raise ValueError(f"unknown Meta-World camera roles {unknown}; choose from {list(CAMERAS)}")
    if obs_mode == "images" and not cameras:
        raise ValueError(f"obs_mode='images' needs at least one camera role from {list(CAMERAS)}")
    return cameras


class MetaWorldEnv(VLAEnv):
    """Meta-World tasks as a :class:`VLAEnv` (the entry point of the ``VLA/MetaWorld*`` ids).

    Args:
        tasks: task names from :data:`vla_gym.tasks.metaworld.TASKS` (set by the registered id).
        task_id: fixed index into ``tasks``, or None to draw one per reset (``reset(options={"task_id": t})``
            pins one for a reset).
        obs_mode: ``"images"`` (cameras + 4-D proprioception: hand position, gripper opening) or ``"state"``
            (no cameras by default; ``state`` is Meta-World's 39-D observation).
        cameras: roles from ``main`` and ``wrist`` (the hand camera ``gripperPOV``); default ``("main",)``
            with ``obs_mode="images"``, none with ``"state"`` (naming some renders them beside the state).
        image_size: int or (height, width), default 224.
        main_camera: the Meta-World camera that is ``main``: ``corner4`` (default: a close view of the table
            from the front corner), ``corner``, ``corner2``, ``corner3`` or ``topview``; all right side up.
        goal_observable: whether ``obs_mode="state"`` shows the goal position (its last 3 numbers); the ML ids
            set False, as Meta-World's ML benchmarks hide it.
        task_one_hot: with ``obs_mode="state"``, append a one-hot of the task's index in ``tasks`` to the state
            (39 + len(tasks) numbers): Meta-World's multi-task convention, without which a state policy cannot
            tell e.g. drawer-open from drawer-close.
        fixed_goals: N gives every task N fixed initial states: init state i is the object and goal positions
            Meta-World draws from ``env.seed(i)``, and ``reset(seed=s)`` plays init state ``s % N`` (the same
            positions as without it for s < N). None (default): every seed is its own draw.
        init_states: with ``fixed_goals``, the init states that resets not pinned by ``init_state_id`` take
            (``"0-39"`` or a list): training goals, the others held out.
        max_episode_steps: overrides Meta-World's limit of 500 steps.
    """

    def __init__(self, tasks: Sequence[str], task_id: int | None = None, obs_mode: str = "images",
                 cameras: Sequence[str] | None = None, image_size: int | tuple[int, int] = 224,
                 main_camera: str = CAMERAS["main"], goal_observable: bool = True, task_one_hot: bool = False,
                 fixed_goals: int | None = None, init_states: str | Sequence[int] | None = None,
                 max_episode_steps: int | None = None, render_mode: str | None = None):
        if isinstance(image_size, int):
            image_size = (image_size, image_size)
        roles = check_options(cameras, obs_mode, main_camera, task_one_hot, fixed_goals, init_states)
        specs = task_specs(tasks)
        if fixed_goals is not None:
            specs = tuple(dataclasses.replace(spec, num_init_states=fixed_goals) for spec in specs)
        task_id = schema.check_index("task_id", task_id, len(specs))
        backend = MetaWorldBackend(roles, tuple(image_size), obs_mode=obs_mode, main_camera=main_camera,
                                   goal_observable=goal_observable, one_hot_tasks=len(specs) if task_one_hot else 0)
        super().__init__(backend, specs, task_id=task_id, max_episode_steps=max_episode_steps,
                         render_mode=render_mode, init_states=init_states)
