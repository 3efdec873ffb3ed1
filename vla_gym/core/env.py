"""``VLAEnv``: the one gymnasium.Env every simulator is served through.

It owns everything that is the same across simulators: spaces, seeding, drawing a task and an
initial state per reset, the per-task time limit, action checks, ``info`` and ``render()``.
A :class:`~vla_gym.backends.base.Backend` owns the simulator.

    >>> import gymnasium as gym, vla_gym
    >>> env = gym.make("VLA/Libero10-v0", task_id=3)              # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)                              # doctest: +SKIP
    >>> obs["images"]["main"].shape, obs["state"].shape, obs["instruction"]   # doctest: +SKIP
    ((224, 224, 3), (8,), 'put both the black bowl and the ...')

``paraphrase_instructions=True`` draws the instruction per reset among the task's paraphrases
(training); the default keeps the task's one canonical instruction (evaluation).

``reset(options=...)`` accepts ``task_id`` and ``init_state_id`` to pin one episode (evaluation
loops, GRPO groups), and ``keep_task=True`` to keep that episode's task for the resets after it that pass
neither a seed nor options (a vector env's autoresets: a multi-task env then does not draw, and build, another
task at each episode end) until the next reset that passes a seed or options. vla_gym's vector envs take one
options dict per sub-env in a single call: ``reset(seed=[...], options={"per_env": [{"task_id": 3,
"init_state_id": 7, "keep_task": True}, None, ...], "reset_mask": mask})`` (:func:`sub_env_options`).

Seeds (:func:`draw_episode`, the one rule for every family and for the GPU-batched ManiSkill env):
``reset(seed=s)`` seeds the env's generator with ``s``, draws the task from it when the env has several
and none is pinned, and starts *the simulator's own episode s*: ManiSkill's ``reset(seed=s)``, LIBERO's
initial state ``s % 50`` (so seeds 0..49 are the official evaluation episodes 0..49 of a task). An
unseeded ``reset()`` draws the initial state / simulator seed from the generator: fresh episodes, and the
same sequence again after the same ``reset(seed=s)``.

``step(action, observe=False)`` on the unwrapped env advances the physics without rendering the cameras; the returned images are then the last rendered ones and
``info['observed']`` is False. The same through any wrappers: steps taken inside
``with env.unwrapped.skip_rendering():`` render nothing; the action-chunk wrapper steps all but the last
sub-step of a chunk that way.
"""
from __future__ import annotations

import argparse
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from vla_gym.backends.base import Backend, TaskSpec
from vla_gym.core import schema
from vla_gym.runtime.cli_args import parse_ids

#: simulator seeds drawn for unseeded resets lie in [0, SEED_BOUND): valid for every simulator
SEED_BOUND = 2**31 - 1
#: ``reset(options={PER_ENV_OPTIONS: [...]})`` on a vla_gym vector env: one options dict (or None) per sub-env
PER_ENV_OPTIONS = "per_env"
#: ``reset(options={KEEP_TASK: True, ...})``: later resets without a seed or options keep this reset's task
KEEP_TASK = "keep_task"


def sub_env_options(options: Mapping[str, Any] | None, num_envs: int) -> list[dict[str, Any] | None] | None:
    """Each sub-env's reset options from a vector env's ``options`` (None: no per-env options were given).

    ``options[PER_ENV_OPTIONS]`` holds one dict (or None) per sub-env; sub-env ``i`` gets the other keys of
    ``options`` updated by its own dict. ``reset_mask`` / ``env_idx`` (which sub-envs reset) are the vector
    env's and are not passed on; entries of sub-envs that do not reset are ignored.

        >>> sub_env_options({"per_env": [{"task_id": 1}, None], "reset_mask": None, "x": 0}, 2)
        [{'x': 0, 'task_id': 1}, {'x': 0}]
        >>> sub_env_options({"task_id": 1}, 2) is None
        True
    """
    if not options or PER_ENV_OPTIONS not in options:
        return None
    per_env = options[PER_ENV_OPTIONS]
    if isinstance(per_env, (str, Mapping)) or not isinstance(per_env, Sequence) or len(per_env) != num_envs:
        raise ValueError(f"options[{PER_ENV_OPTIONS!r}] must be a list of one options dict (or None) per sub-env "
                         f"({num_envs}), got {per_env!r}")
    shared = {k: v for k, v in options.items() if k not in (PER_ENV_OPTIONS, "reset_mask", "env_idx")}
    out = []
    for i, own in enumerate(per_env):
        if own is not None and not isinstance(own, Mapping):
            raise ValueError(f"options[{PER_ENV_OPTIONS!r}][{i}] must be a dict or None, got {own!r}")
        out.append({**shared, **(own or {})})
    return out


@dataclass(frozen=True)
class EpisodeStart:
    """What one reset starts: the task, its initial state, the instruction, the simulator's seed, the step limit."""

    task: TaskSpec
    init_state_id: int | None
    instruction: str
    seed: int
    max_steps: int


def draw_episode(
    rng: np.random.Generator, tasks: Sequence[TaskSpec], seed: int | None, options: Mapping[str, Any] | None = None,
    task_id: int | None = None, init_state_id: int | None = None, paraphrase: bool = False,
    max_episode_steps: int | None = None, init_states: Sequence[int] | None = None,
    task_pool: Sequence[int] | None = None,
) -> EpisodeStart:
    """The episode a reset starts, shared by :class:`VLAEnv` and the GPU-batched ManiSkill env.

    ``rng`` is the env's generator, already reseeded with ``seed`` when one is given. In this order:
    the task (``options["task_id"]``, else the env's fixed ``task_id``, else drawn from ``rng``, among the ids of
    ``task_pool`` where it is given: the tasks that can be built here, the others only pinned); the
    initial state of a task that has fixed ones (``options["init_state_id"]``, else the env's fixed one,
    else ``seed % num_init_states``, else drawn from ``rng``; ``init_states`` narrows the last two to a pool:
    ``init_states[seed % len(init_states)]`` or a draw from it); the instruction (drawn from ``rng`` among the
    paraphrases with ``paraphrase=True``); the simulator's seed (``seed`` itself, else drawn from ``rng``);
    the step limit (``max_episode_steps`` or the task's own).

        >>> rng = np.random.default_rng(7)
        >>> task = TaskSpec(0, "suite", "t", "do it", 50, num_init_states=50)
        >>> draw_episode(rng, [task], seed=7).init_state_id, draw_episode(rng, [task], seed=7).seed
        (7, 7)
    """
    options = options or {}
    chosen = options.get("task_id", task_id)
    if chosen is None:
        chosen = int(rng.integers(len(tasks))) if task_pool is None else int(task_pool[int(rng.integers(len(task_pool)))])
    task = tasks[schema.check_index("task_id", chosen, len(tasks))]
    init = options.get("init_state_id", init_state_id)
    if init is not None:
        check_init_state(task, init)
    elif task.num_init_states:
        pool = init_states if init_states is not None else range(task.num_init_states)
        init = int(pool[seed % len(pool) if seed is not None else int(rng.integers(len(pool)))])
    instruction = task.instruction
    if paraphrase and task.paraphrases:
        choices = (task.instruction, *task.paraphrases)
        instruction = choices[int(rng.integers(len(choices)))]
    sim_seed = int(seed) if seed is not None else int(rng.integers(SEED_BOUND))
    return EpisodeStart(task, init, instruction, sim_seed, max_episode_steps or task.max_episode_steps)


def check_init_state(task: TaskSpec, init_state_id: int) -> None:
    """ValueError unless ``init_state_id`` names one of ``task``'s fixed initial states."""
    if task.num_init_states is None:
        raise ValueError(
            f"task {task.name!r} has no fixed initial states (its initial state comes from the seed); "
            "drop init_state_id and pass reset(seed=...) instead"
        )
    schema.check_index(f"init_state_id for task {task.name!r}", init_state_id, task.num_init_states)


def check_init_states(tasks: Sequence[TaskSpec], init_states: str | Sequence[int] | None) -> list[int] | None:
    """The pool of initial states that unpinned resets draw from (``"0-39"`` or a list), checked against every
    task's fixed initial states; None: all of them."""
    if init_states is None:
        return None
    try:
        pool = parse_ids(init_states if isinstance(init_states, str) else [str(i) for i in init_states])
    except argparse.ArgumentTypeError as error:
        raise ValueError(f"init_states: {error}") from None
    if not pool:
        raise ValueError("init_states is empty: give ids such as 0-39, or None for all initial states")
    for task in tasks:
        if task.num_init_states is None:
            raise ValueError(f"init_states={init_states!r}: task {task.name!r} has no fixed initial states (its "
                             "initial state comes from the seed); drop init_states")
        if pool[-1] >= task.num_init_states:
            raise ValueError(f"init_states={init_states!r}: task {task.name!r} has {task.num_init_states} initial "
                             f"states (ids 0-{task.num_init_states - 1})")
    return pool


def episode_info(task: TaskSpec, init_state_id: int | None, elapsed: int, success: bool, observed: bool) -> dict:
    """The ``info`` of one step (the batched ManiSkill env builds its arrays from the same keys)."""
    return {
        "success": bool(success),
        "suite": task.suite,
        "task_id": task.index,
        "task_name": task.name,
        "init_state_id": init_state_id,
        "elapsed_steps": elapsed,
        "observed": observed,
    }


class VLAEnv(gym.Env):
    """Unified env over a backend and a list of tasks (see the module docstring)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        backend: Backend,
        tasks: Sequence[TaskSpec],
        task_id: int | None = None,
        init_state_id: int | None = None,
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        paraphrase_instructions: bool = False,
        init_states: str | Sequence[int] | None = None,
        task_pool: Sequence[int] | None = None,
    ):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if render_mode is not None and not backend.camera_roles:
            raise ValueError("render_mode='rgb_array' needs a camera; this env has none (state-only)")
        self.backend = backend
        self.tasks = list(tasks)
        self.task_id = schema.check_index("task_id", task_id, len(self.tasks))
        self.fixed_init_state_id = init_state_id
        if task_id is not None and init_state_id is not None:
            check_init_state(self.tasks[self.task_id], init_state_id)
        self.init_states = check_init_states(self.tasks, init_states)
        #: the task ids unpinned resets draw from (None: all); the others are pinned by id only
        self.task_pool = None if task_pool is None else [schema.check_index("task_pool", i, len(self.tasks))
                                                         for i in task_pool]
        self.max_episode_steps_override = max_episode_steps
        self.render_mode = render_mode
        self.paraphrase_instructions = paraphrase_instructions
        self.metadata = dict(self.metadata, render_fps=backend.control_hz,
                             render_modes=["rgb_array"] if backend.camera_roles else [])

        self.action_space = schema.action_space(backend.action_dim)
        self.observation_space = schema.observation_space(
            backend.camera_roles, backend.image_size, backend.state_dim,
            max_instruction_length=max(len(text) for t in self.tasks for text in (t.instruction, *t.paraphrases)),
        )
        self.task: TaskSpec | None = None
        self._kept_task: int | None = None  # reset(options={"keep_task": True}): the task of option-less resets
        self.instruction: str = ""
        self.init_state_id: int | None = None
        self._images: dict[str, np.ndarray] | None = None
        self._elapsed = 0
        self._max_steps = 0
        self._render_paused = 0  # > 0 inside skip_rendering()
        #: callables hook(episode: EpisodeStart) run by reset() after the simulator's reset, before the first
        #: render (vla_gym.wrappers.Perturb draws and applies its seeded perturbation there)
        self.episode_hooks: list = []

    # ----------------------------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        told = seed is not None or options is not None  # else an autoreset: it keeps a kept task
        task_id = self.task_id if told or self._kept_task is None else self._kept_task
        episode = draw_episode(self.np_random, self.tasks, seed, options, task_id, self.fixed_init_state_id,
                               self.paraphrase_instructions, self.max_episode_steps_override, self.init_states,
                               self.task_pool)
        if told:
            self._kept_task = episode.task.index if (options or {}).get(KEEP_TASK) else None
        if episode.task is not self.task:
            self.backend.load(episode.task)
            self.task = episode.task
        self.init_state_id = episode.init_state_id
        self.instruction = episode.instruction
        self.backend.reset(episode.init_state_id, seed=episode.seed)
        for hook in self.episode_hooks:
            hook(episode)
        self._elapsed = 0
        self._max_steps = episode.max_steps
        self._images = self.backend.render()
        return self._observation(), self._info(success=False, observed=True)

    def step(self, action, observe: bool = True):
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        action = schema.check_action(action, self.backend.action_dim)
        reward, success = self.backend.step(action)
        self._elapsed += 1
        observe = observe and not self._render_paused
        if observe:
            self._images = self.backend.render()
        elif self._images:  # new arrays all the same: no two observations share an object (gymnasium's rule)
            self._images = {role: image.copy() for role, image in self._images.items()}
        truncated = self._elapsed >= self._max_steps
        return self._observation(), float(reward), bool(success), truncated, self._info(success, observe)

    @contextlib.contextmanager
    def skip_rendering(self):
        """Steps taken inside the block, through whatever wrappers, advance the physics without rendering.

        Their observations keep the last rendered images and their ``info["observed"]`` is False; ``reset()``
        and :meth:`observe` still render. A wrapper that steps the env several times per step (ActionChunk)
        reaches the flag through ``env.unwrapped``, so every wrapper in between still sees every step::

            with env.unwrapped.skip_rendering():
                obs, reward, terminated, truncated, info = env.step(action)   # info["observed"] is False
        """
        self._render_paused += 1
        try:
            yield self
        finally:
            self._render_paused -= 1

    def observe(self) -> dict[str, Any]:
        """Render the cameras now and return the observation (e.g. after ``step(..., observe=False)``)."""
        if self.task is None:
            raise RuntimeError("call reset() before observe()")
        self._images = self.backend.render()
        return self._observation()

    def render_snapshot(self):
        """What the cameras would show now, kept to render later with :meth:`images_from` (a few KB for MuJoCo
        simulators), or None when the simulator cannot: then render now (:meth:`observe`)."""
        if self.task is None:
            raise RuntimeError("call reset() before render_snapshot()")
        return self.backend.render_snapshot()

    def images_from(self, snapshot) -> dict[str, np.ndarray]:
        """The camera images as they were when :meth:`render_snapshot` returned ``snapshot`` (the same pixels an
        immediate render gave); the simulation is left as it is."""
        return self.backend.render_from(snapshot)

    def render(self):
        """The main camera's last rendered frame (``render_mode='rgb_array'``)."""
        if self.render_mode is None:
            gym.logger.warn("render() called with render_mode=None; pass render_mode='rgb_array'")
            return None
        if self._images is None:
            return None
        return self._images[self.backend.camera_roles[0]].copy()

    def close(self):
        self.backend.close()
        self._images = None

    # --------------------------------------------------------------------------------- helpers
    @property
    def image_flip(self) -> str | None:
        """How camera frames are flipped from the simulator's (LIBERO: ``vertical`` or ``both``; None: as rendered)."""
        return self.backend.image_flip

    @property
    def texture_colorspace(self) -> str | None:
        """How the scene's textures look (LIBERO: ``linear`` or ``auto``, vla_gym.backends.mujoco_textures); None:
        not applicable."""
        return self.backend.texture_look

    @property
    def elapsed_steps(self) -> int:
        return self._elapsed

    def _observation(self) -> dict[str, Any]:
        obs = {"images": dict(self._images)} if self.backend.camera_roles else {}  # none: state-only env
        obs["state"] = self.backend.state()
        obs["instruction"] = self.instruction
        return obs

    def _info(self, success: bool, observed: bool) -> dict[str, Any]:
        return episode_info(self.task, self.init_state_id, self._elapsed, success, observed)
