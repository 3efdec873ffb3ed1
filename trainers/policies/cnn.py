"""``cnn``: images + state + instruction -> one feature vector -> actor-critic MLPs.

    >>> env = vla_gym.make("VLA/ManiSkill-PushCube-v0", image_size=64)       # doctest: +SKIP
    >>> policy = make_policy("cnn", env.observation_space, env.action_space)    # doctest: +SKIP

Each camera role gets its own small CNN; the instruction is a hashed bag-of-words embedding
(:class:`~.encoders.HashedTextEncoder`, no download); the state passes through unchanged. The encoder is
shared by actor and critic (as Stable-Baselines3 does for its ``CnnPolicy``).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from gymnasium import spaces
from torch import nn

from vla_gym.trainers.policies.actor_critic import ActorCriticPolicy
from vla_gym.trainers.policies.encoders import HashedTextEncoder, ImageEncoder


class MultiModalEncoder(nn.Module):
    """Concatenates per-camera CNN features, the state and an instruction embedding."""

    def __init__(
        self, observation_space: spaces.Dict, image_features: int = 256, use_state: bool = True,
        use_instruction: bool = True, text_dim: int = 64, text_buckets: int = 4096,
    ):
        super().__init__()
        if not isinstance(observation_space, spaces.Dict) or not len(observation_space.get("images", {})):
            raise TypeError(
                "the 'cnn' policy needs a dict observation with at least one camera under 'images' "
                f"(a vla_gym env with obs_mode including rgb); got {observation_space}; use 'mlp' for state only"
            )
        self.roles = list(observation_space["images"].spaces)
        self.cameras = nn.ModuleDict(
            {role: ImageEncoder(observation_space["images"][role].shape, image_features) for role in self.roles}
        )
        self.use_state = use_state and "state" in observation_space.spaces
        self.text = HashedTextEncoder(text_buckets, text_dim) if use_instruction else None
        self.out_dim = image_features * len(self.roles)
        if self.use_state:
            self.out_dim += observation_space["state"].shape[0]
        if self.text is not None:
            self.out_dim += text_dim

    def forward(self, obs: dict) -> torch.Tensor:
        parts = [self.cameras[role](obs["images"][role]) for role in self.roles]
        if self.use_state:
            parts.append(obs["state"].float())
        if self.text is not None:
            parts.append(self.text(obs["instruction"]))
        return torch.cat(parts, dim=-1)


class CNNPolicy(ActorCriticPolicy):
    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        image_features: int = 256,
        hidden_sizes: Sequence[int] = (256,),
        activation: str = "relu",
        use_state: bool = True,
        use_instruction: bool = True,
        text_dim: int = 64,
        critic: bool = True,
        log_std_init: float = 0.0,
        ortho_init: bool = True,
        noise: str = "step",
    ):
        encoder = MultiModalEncoder(observation_space, image_features, use_state, use_instruction, text_dim)
        super().__init__(
            observation_space, action_space, encoder, pi_sizes=hidden_sizes, vf_sizes=hidden_sizes,
            activation=activation, critic=critic, log_std_init=log_std_init, ortho_init=ortho_init, noise=noise,
        )
