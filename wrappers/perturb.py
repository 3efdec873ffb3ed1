"""``Perturb``: one seeded out-of-distribution perturbation, the same on LIBERO and ManiSkill.

    >>> import gymnasium as gym, vla_gym
    >>> from vla_gym.wrappers import Perturb
    >>> env = Perturb(gym.make("VLA/LiberoObject-v0", task_id=0), "camera_pose", strength=0.05)  # doctest: +SKIP
    >>> env = Perturb(env, "action_delay", strength=1)                   # composable: stack several  # doctest: +SKIP
    >>> obs, info = env.reset(seed=4)                                    # doctest: +SKIP
    >>> info["perturbation"]["camera_pose"]["offset"]                    # the same again after reset(seed=4)  # doctest: +SKIP
    [0.013..., -0.041..., 0.022...]

Config form (wrapper specs)::

    env:
      wrappers: [{name: Perturb, kwargs: {kind: lighting, strength: 0.5}}, {name: ActionChunk, kwargs: {chunk_size: 8}}]

Put it innermost (first in the list, below ActionChunk): action noise and delay then act on every sub-step
and image noise on every rendered frame. The kinds, their categories and what ``strength`` means are in
:mod:`vla_gym.ood.perturbations` (docs/ood.md). The perturbation is drawn at every reset from the episode's seed
and recorded in ``info["perturbation"][kind]`` (``strength`` plus the drawn parameters) at every step;
stacked Perturb wrappers each add their own entry. It needs a vla_gym env (``VLA/...`` ids): it reaches the
simulator through ``env.unwrapped.episode_hooks`` and ``backend.scene_controls()``.
"""
from __future__ import annotations

import gymnasium as gym
from gymnasium import spaces

from vla_gym.core.instruction_space import InstructionText
from vla_gym.ood.perturbations import HELD_OUT_TEMPLATES, episode_generator, make_perturbation

KEY = "perturbation"


class Perturb(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Apply perturbation ``kind`` at ``strength`` (None: its default) to every episode (see the module docstring)."""

    def __init__(self, env: gym.Env, kind: str, strength: float | None = None):
        gym.utils.RecordConstructorArgs.__init__(self, kind=kind, strength=strength)
        super().__init__(env)
        self.perturbation = make_perturbation(kind, strength)
        self.kind = kind
        base = env.unwrapped
        if not isinstance(getattr(base, "episode_hooks", None), list):
            raise TypeError(f"Perturb needs a vla_gym env (gym.make('VLA/...')), got {type(base).__name__}; "
                            "the GPU-batched ManiSkill vector env has no perturbations")
        # a backend without scene perturbations fails here, naming the ones it has
        self._controls = base.backend.scene_controls() if self.perturbation.scene_method else None
        self._base = base
        self._params: dict | None = None
        self._rng = None
        base.episode_hooks.append(self._start_episode)
        if kind == "paraphrase":
            self.observation_space = _with_room_for_paraphrases(env.observation_space, base.tasks)

    def _start_episode(self, episode) -> None:
        """Called by VLAEnv.reset after the simulator's reset, before the first render."""
        self._rng = episode_generator(episode.seed, self.kind)
        drawn = self.perturbation.draw(self._rng, episode, self._controls)
        self._params = {"strength": self.perturbation.strength, **drawn}
        self.perturbation.start(self._params)
        if self._controls is not None:
            self.perturbation.apply_scene(self._controls, self._params)

    @property
    def params(self) -> dict | None:
        """This episode's parameters (what ``info["perturbation"][kind]`` holds); None before a reset."""
        return self._params

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.refresh_observation(obs), self._info(info)

    def step(self, action):
        if self._params is None:
            raise RuntimeError("call reset() before step()")
        action = self.perturbation.action(action, self._params, self._rng)
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs = self.perturbation.observation(obs, self._params, self._rng, bool(info.get("observed", True)))
        return obs, reward, terminated, truncated, self._info(info)

    def refresh_observation(self, obs):
        """This episode's observation transform applied to a freshly rendered ``obs``: after a reset, and when
        ActionChunk above renders the final observation of a chunk that ended on a skipped sub-step."""
        return self.perturbation.observation(obs, self._params, self._rng, True)

    def _info(self, info: dict) -> dict:
        info[KEY] = {**info.get(KEY, {}), self.kind: self._params}
        return info

    def detach(self) -> gym.Env:
        """Stop perturbing: the scene's lights, colours and cameras are put back from the next render on and
        later resets draw nothing; returns the wrapped env (to go on using it unperturbed)."""
        if self._start_episode in self._base.episode_hooks:
            self._base.episode_hooks.remove(self._start_episode)
            if self._controls is not None and self._params is not None:
                self.perturbation.restore_scene(self._controls)
        return self.env

    def close(self):
        self.detach()
        super().close()


def _with_room_for_paraphrases(space: spaces.Dict, tasks) -> spaces.Dict:
    """The observation space with an instruction space long enough for every held-out paraphrase."""
    text = space["instruction"]
    longest = max(len(template.format(task.instruction)) for template in HELD_OUT_TEMPLATES for task in tasks)
    if longest <= text.max_length:
        return space
    fields = dict(space.spaces)
    fields["instruction"] = InstructionText(max_length=longest, min_length=0, charset=text.character_set)
    return spaces.Dict(fields)
