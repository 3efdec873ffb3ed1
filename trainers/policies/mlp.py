"""``mlp``: an actor-critic MLP over a flat state (a Box observation or ``obs['state']``).

    >>> policy = make_policy("mlp", env.observation_space, env.action_space, hidden_sizes=[256, 256, 256])  # doctest: +SKIP

With the defaults this is Stable-Baselines3's ``MlpPolicy`` (two 64-unit tanh layers for each of
actor and critic). Images and instructions of dict observations are ignored: use ``cnn`` for them.
``normalize_obs=True`` standardises the state with running statistics (like SB3's ``VecNormalize``),
which the trainer updates after every update from that rollout's observations, over all ranks.
"""
from __future__ import annotations

from collections.abc import Sequence

from gymnasium import spaces

from vla_gym.trainers.policies.actor_critic import ActorCriticPolicy
from vla_gym.trainers.policies.encoders import StateEncoder


class MLPPolicy(ActorCriticPolicy):
    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        critic: bool = True,
        log_std_init: float = 0.0,
        ortho_init: bool = True,
        normalize_obs: bool = False,
        noise: str = "step",
    ):
        super().__init__(
            observation_space, action_space, StateEncoder(observation_space, normalize=normalize_obs),
            pi_sizes=hidden_sizes, vf_sizes=hidden_sizes, activation=activation, critic=critic,
            log_std_init=log_std_init, ortho_init=ortho_init, noise=noise,
        )
