"""ManiSkill3's GPU simulation behind vla_gym's schema: N envs in one process, observations on the device.

    >>> import torch, vla_gym
    >>> envs = vla_gym.make_vec("VLA/ManiSkill-PickCube-v0", num_envs=256, device="cuda")    # doctest: +SKIP
    >>> obs, info = envs.reset(seed=0)                                                      # doctest: +SKIP
    >>> obs["images"]["main"].shape, obs["state"].shape, len(obs["instruction"])           # doctest: +SKIP
    (torch.Size([256, 224, 224, 3]), torch.Size([256, 8]), 256)
    >>> obs, reward, terminated, truncated, info = envs.step(torch.zeros(256, 7, device="cuda"))  # doctest: +SKIP

The contract is the CPU vector envs' (:func:`vla_gym.make_vec`), so the trainers, the rollout collector
and the episode runner take either:

- observations: the schema batched, as torch tensors on the device (the images never leave the GPU):
  ``images`` {role: uint8 [N, H, W, 3]}, ``state`` float32 [N, D] (8-D proprioception, or ManiSkill's
  privileged state with ``obs_mode="state"``, which has no ``images``), ``instruction`` a tuple of N str;
- reward float32 [N], terminated (success) and truncated (time limit) bool [N], and the info arrays
  (``success``, ``elapsed_steps``, ``task_id``, ``task_name``, ...) as numpy arrays, as gymnasium's
  vector envs return them;
- actions: [N, 7] (numpy or torch) in [-1, 1], gripper -1 open / +1 close (flipped for ManiSkill inside,
  by the same function as on the CPU); other control modes pass through unchanged.

Resets: ``reset(seed=s)`` gives sub-env i the seed ``s + i``, ``reset(seed=[s0, s1, ...])`` one seed each;
each sub-env then draws its episode by :func:`vla_gym.core.env.draw_episode`, the rule ``VLAEnv`` uses (seed
``s`` is ManiSkill's episode ``s``; unseeded resets draw a seed from the sub-env's generator).
``options={"task_id": k}`` is accepted for the env's own task; ``options={"reset_mask": mask}``
(gymnasium) or ``{"env_idx": rows}`` (ManiSkill) resets only those sub-envs; ``options={"per_env": [options_0,
...]}`` gives each sub-env its own options, as vla_gym's CPU vector envs do
(:func:`vla_gym.core.env.sub_env_options`). ManiSkill's GPU simulation seeds its torch generator with the batch's first seed, so a GPU sub-env's episode for seed ``s + i`` is not
the CPU env's episode for that seed (nor is GPU physics bitwise the CPU's); on ManiSkill's CPU simulation
(``device="cpu"``, ``num_envs=1``) this env equals the CPU vector env step for step (tests/test_fidelity.py).

Auto-reset: SAME_STEP, like :func:`vla_gym.make_vec` on the CPU. A sub-env whose episode ended is reset
inside the same ``step``: its row of the returned observation starts the next episode; as in gymnasium,
``info["final_obs"]`` is an object array holding the finished episodes' last observations (per-env
dicts of tensor rows, None elsewhere), ``info["final_info"]`` their infos (arrays with ``_key`` masks),
and ``info["_final_obs"]`` / ``info["_final_info"]`` mark those rows.

All sub-envs run one task (ManiSkill's GPU scene is built once for all of them): for
``VLA/ManiSkillTabletop-v0`` pass ``task_id=``. ``device="cpu"`` runs the same code on ManiSkill's CPU
simulation with ``num_envs=1`` (what the tests on machines without CUDA exercise).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from vla_gym.backends.maniskill.cameras import CAMERAS
from vla_gym.backends.maniskill.env import (
    DEFAULT_CONTROL_MODE,
    capture_images,
    check_action_space,
    check_options,
    default_render_backend,
    flips_gripper,
    import_maniskill,
    make_maniskill_env,
    proprio_state,
    step_reward,
    to_maniskill_action,
)
from vla_gym.core import schema
from vla_gym.core.env import PER_ENV_OPTIONS, EpisodeStart, draw_episode, episode_info, sub_env_options
from vla_gym.core.registry import check_env_id
from vla_gym.tasks.maniskill import task_specs


def enable_physx_gpu() -> None:
    """Load SAPIEN's PhysX GPU library, which SAPIEN downloads from GitHub on first use; explain if it can't."""
    import sapien

    try:
        sapien.physx.enable_gpu()
    except Exception as exc:  # requests' ConnectionError, a bad zip, a missing libcuda
        version = sapien.physx.version()
        raise RuntimeError(
            f"SAPIEN could not load its PhysX GPU library: {exc}\n"
            "SAPIEN downloads it on first use. On a machine without access to GitHub, fetch\n"
            f"    https://github.com/sapien-sim/physx-precompiled/releases/download/{version}/linux-so.zip\n"
            f"elsewhere and unzip it into ~/.sapien/physx/{version}/ (it holds libPhysXGpu_64.so)."
        ) from exc


def make_gpu_vector_env(env_id: str, num_envs: int, device: str = "cuda", **kwargs) -> VectorEnv:
    """A :class:`ManiSkillGPUVectorEnv` for a registered ``VLA/ManiSkill...`` id (see the module docstring)."""
    entry = check_env_id(env_id)
    if entry.backend != "maniskill":
        raise ValueError(f"device={device!r} batches ManiSkill envs on the GPU only; {env_id} is a {entry.backend} env")
    return ManiSkillGPUVectorEnv(entry.kwargs["tasks"], num_envs, device=device, **kwargs)


class ManiSkillGPUVectorEnv(VectorEnv):
    """N copies of one ManiSkill task simulated together on the GPU (see the module docstring).

    Keywords as for :class:`vla_gym.backends.maniskill.env.ManiSkillEnv`: ``task_id``, ``obs_mode``,
    ``cameras``, ``image_size``, ``control_mode``, ``reward_mode``, ``max_episode_steps``,
    ``paraphrase_instructions``, ``show_goal``. ``tasks`` and ``task_id`` are those of the id (as on
    ``VLAEnv``); the env runs ``tasks[task_id]``. ``reset(options={"per_env": [...]})`` takes one options dict
    per sub-env (module docstring).
    """

    #: reset(options={"per_env": [...]}) gives each sub-env its own options (as vla_gym's CPU vector envs)
    accepts_per_env_options = True

    def __init__(self, tasks: Sequence[str], num_envs: int, device: str = "cuda", task_id: int | None = None,
                 obs_mode: str = "images", cameras: Sequence[str] | None = None,
                 image_size: int | tuple[int, int] = 224, control_mode: str = DEFAULT_CONTROL_MODE,
                 reward_mode: str = "normalized_dense", max_episode_steps: int | None = None,
                 paraphrase_instructions: bool = False, show_goal: bool = True):
        import torch

        self.tasks = task_specs(tasks)
        if task_id is None and len(self.tasks) > 1:
            raise ValueError("the GPU simulation runs one task for all sub-envs: pass task_id= "
                             f"(0..{len(self.tasks) - 1}: {[s.name for s in self.tasks]})")
        self.task_id = schema.check_index("task_id", task_id, len(self.tasks)) or 0
        self.task = self.tasks[self.task_id]
        cameras = check_options(cameras, obs_mode, reward_mode)
        cuda = str(device).startswith("cuda")
        if cuda and not torch.cuda.is_available():
            raise RuntimeError(f"device={device!r} needs a CUDA GPU and a CUDA build of torch; none is available here. "
                               "Use the CPU vector env (vla_gym.make_vec without device=) instead.")
        if not cuda and num_envs != 1:
            raise ValueError(f"device={device!r}: ManiSkill's CPU simulation runs num_envs=1 per process")
        if isinstance(image_size, int):
            image_size = (image_size, image_size)
        if cuda:
            import_maniskill()
            enable_physx_gpu()  # before ManiSkill does, to explain a failed download

        self.num_envs = num_envs
        self.obs_mode = obs_mode
        self.camera_roles = cameras
        self._sensor_uids = [CAMERAS[role] for role in self.camera_roles]
        self.show_goal = show_goal
        self.flip_gripper = flips_gripper(control_mode)
        self.paraphrase_instructions = paraphrase_instructions
        self.max_episode_steps_override = max_episode_steps
        self._env = make_maniskill_env(
            self.task.extra["maniskill_id"], num_envs, obs_mode, control_mode, reward_mode, tuple(image_size),
            sim_backend=str(device), render_backend=str(device) if cuda else default_render_backend(),
        )
        self.device = self._env.device
        self._success_reward = self._env.reward_mode == "none"
        action_dim = check_action_space(self._env.single_action_space, control_mode)
        state_dim = 8 if obs_mode == "images" else int(self._env.single_observation_space.shape[-1])

        self.single_action_space = schema.action_space(action_dim)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.single_observation_space = schema.observation_space(
            self.camera_roles, tuple(image_size), state_dim,
            max_instruction_length=max(len(t) for t in (self.task.instruction, *self.task.paraphrases)),
        )
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_fps": float(self._env.control_freq)}
        self._rngs = [seeding.np_random()[0] for _ in range(num_envs)]  # one generator per sub-env, as VLAEnv's
        self._episodes: list[EpisodeStart | None] = [None] * num_envs
        self._elapsed = np.zeros(num_envs, dtype=np.int64)
        self._max_steps = np.zeros(num_envs, dtype=np.int64)
        self._ms_obs = None

    # ----------------------------------------------------------------------------------- gym API
    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        """Reset every sub-env, or those in ``options["reset_mask"]`` / ``options["env_idx"]`` (module docstring)."""
        import torch

        options = dict(options or {})
        per_env = sub_env_options(options, self.num_envs)  # None: every sub-env gets ``options``
        options.pop(PER_ENV_OPTIONS, None)
        rows = self._rows_to_reset(options)
        if len(rows) < self.num_envs and None in self._episodes:
            raise ValueError("a partial reset (reset_mask / env_idx) needs a full reset() first")
        seeds = self._seeds(seed)
        for i in rows:
            if seeds[i] is not None:
                self._rngs[i] = seeding.np_random(seeds[i])[0]
            episode = draw_episode(self._rngs[i], self.tasks, seeds[i], options if per_env is None else per_env[i],
                                   self.task_id, None,
                                   self.paraphrase_instructions, self.max_episode_steps_override)
            if episode.task is not self.task:
                raise ValueError(f"options['task_id']={episode.task.index} ({episode.task.name}): this batched env "
                                 f"simulates task_id={self.task_id} ({self.task.name}) only; make one per task")
            self._episodes[i] = episode
            self._elapsed[i] = 0
            self._max_steps[i] = episode.max_steps
        if rows:  # every sub-env's current seed: ManiSkill takes one per sub-env and resets those in env_idx
            sim_seeds = [episode.seed for episode in self._episodes]
            partial = len(rows) < self.num_envs
            self._ms_obs, _ = self._env.reset(
                seed=sim_seeds, options={"env_idx": torch.as_tensor(rows, device=self.device)} if partial else None)
        success = np.zeros(self.num_envs, dtype=bool)
        return self._observation(), self._infos(success, observed=True)

    def step(self, actions):
        import torch

        actions = self._check_actions(actions)
        self._ms_obs, reward, _, _, ms_info = self._env.step(actions)
        self._elapsed += 1
        success = ms_info["success"].cpu().numpy().astype(bool)
        reward = step_reward(reward, ms_info["success"], self._success_reward)
        reward = reward.to(torch.float32).cpu().numpy().reshape(self.num_envs)
        terminated = success.copy()
        truncated = self._elapsed >= self._max_steps
        obs = self._observation()
        info = self._infos(success, observed=True)
        done = terminated | truncated
        if done.any():
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = _row(obs, i)
            final_info = dict(info, **{f"_{key}": done.copy() for key in info if not key.startswith("_")})
            # the reset re-renders every sub-env: the rows that go on are unchanged by a partial reset
            obs, _ = self.reset(options={"reset_mask": done})
            info = dict(self._infos(success & ~done, observed=True), final_obs=final_obs, final_info=final_info,
                        _final_obs=done, _final_info=done.copy())  # as gymnasium: a reset row's info is the reset's
        return obs, reward, terminated, truncated, info

    def get_attr(self, name: str) -> tuple:
        """``name`` of every sub-env (they share this object's attributes), like gymnasium's vector envs."""
        return tuple(getattr(self, name) for _ in range(self.num_envs))

    def close_extras(self, **kwargs):
        if getattr(self, "_env", None) is not None:
            self._env.close()
            self._env = None

    # --------------------------------------------------------------------------------- helpers
    def _rows_to_reset(self, options: dict[str, Any]) -> list[int]:
        mask, env_idx = options.pop("reset_mask", None), options.pop("env_idx", None)
        if mask is not None and env_idx is not None:
            raise ValueError("options may hold 'reset_mask' or 'env_idx', not both")
        if mask is not None:
            mask = np.asarray(mask.cpu() if hasattr(mask, "cpu") else mask)
            if mask.shape != (self.num_envs,) or mask.dtype != bool:
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({self.num_envs},), "
                                 f"got {mask.dtype} {mask.shape}")
            return np.flatnonzero(mask).tolist()
        if env_idx is not None:
            rows = [int(i) for i in (env_idx.tolist() if hasattr(env_idx, "tolist") else env_idx)]
            for i in rows:
                schema.check_index("options['env_idx'] entry", i, self.num_envs)
            return sorted(set(rows))
        return list(range(self.num_envs))

    def _seeds(self, seed) -> list[int | None]:
        """Per-env seeds from ``reset(seed=...)``: gymnasium's rule (int s -> s + i; a list -> one each)."""
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            return [int(seed) + i for i in range(self.num_envs)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"reset(seed=[...]) needs one seed per sub-env ({self.num_envs}), got {len(seeds)}")
        return [None if s is None else int(s) for s in seeds]

    def _check_actions(self, actions):
        """Batched actions as a float32 tensor on the device, clipped, gripper flipped; ValueError if malformed."""
        import torch

        shape = (self.num_envs, self.single_action_space.shape[0])
        actions = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        if tuple(actions.shape) != shape:
            raise ValueError(f"actions must have shape {shape} (num_envs, action_dim), got {tuple(actions.shape)}")
        if not bool(torch.isfinite(actions).all()):
            raise ValueError("actions contain NaN or inf; expected finite values in [-1, 1]")
        return to_maniskill_action(actions.clamp(-1.0, 1.0), self.flip_gripper)  # clamp: never the caller's tensor

    def _infos(self, success: np.ndarray, observed: bool) -> dict[str, Any]:
        """VLAEnv's info keys (:func:`vla_gym.core.env.episode_info`) as arrays over the sub-envs, with masks."""
        infos: dict[str, Any] = {}
        for key, value in episode_info(self.task, None, 0, False, observed).items():
            if key == "success":
                array = success.copy()
            elif key == "elapsed_steps":
                array = self._elapsed.copy()
            elif key == "init_state_id":
                array = np.full(self.num_envs, None, dtype=object)
            else:
                array = np.full(self.num_envs, value, dtype=object if isinstance(value, str) else type(value))
            infos[key] = array
            infos[f"_{key}"] = np.ones(self.num_envs, dtype=bool)
        return infos

    def _observation(self) -> dict[str, Any]:
        import torch

        obs = {}
        if self._sensor_uids:
            images = capture_images(self._env, self._sensor_uids, self.show_goal)
            obs["images"] = {role: images[uid].clone(memory_format=torch.contiguous_format)  # never SAPIEN's buffer
                             for role, uid in zip(self.camera_roles, self._sensor_uids)}
        if self.obs_mode == "state":
            obs["state"] = self._ms_obs.to(torch.float32).clone()
        else:
            obs["state"] = proprio_state(self._env.agent)
        obs["instruction"] = tuple(episode.instruction if episode else "" for episode in self._episodes)
        return obs

    def __repr__(self) -> str:
        return f"ManiSkillGPUVectorEnv({self.task.name}, num_envs={self.num_envs}, device={self.device})"


def _row(obs: dict[str, Any], i: int) -> dict[str, Any]:
    """Sub-env ``i``'s observation out of a batched one (tensor rows; the instruction string)."""
    row: dict[str, Any] = {key: value[i] for key, value in obs.items() if key != "images"}
    if "images" in obs:
        row["images"] = {role: image[i] for role, image in obs["images"].items()}
    return row

