"""Building blocks that turn an observation batch into a feature vector ``[B, F]``.

    >>> StateEncoder(spaces.Box(-1, 1, (4,)))(torch.zeros(2, 4)).shape
    torch.Size([2, 4])
    >>> HashedTextEncoder(dim=16)(["push the cube", "open the drawer"]).shape
    torch.Size([2, 16])

``HashedTextEncoder`` embeds an instruction as the mean of hashed word embeddings (crc32, so every
process agrees; Python's ``hash`` is salted per process) and needs no download.
"""
from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence

import torch
from gymnasium import spaces
from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}


def activation(name: str) -> type[nn.Module]:
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def mlp(in_dim: int, hidden_sizes: Sequence[int], act: str) -> tuple[nn.Sequential, int]:
    """``Linear -> act`` per hidden size; returns the module and its output width."""
    layers: list[nn.Module] = []
    for size in hidden_sizes:
        layers += [nn.Linear(in_dim, int(size)), activation(act)()]
        in_dim = int(size)
    return nn.Sequential(*layers), in_dim


def state_space(observation_space: spaces.Space) -> spaces.Box:
    """The flat Box a state encoder reads: the space itself, or a Dict's ``state`` entry."""
    if isinstance(observation_space, spaces.Dict) and "state" in observation_space.spaces:
        observation_space = observation_space["state"]
    if not isinstance(observation_space, spaces.Box):
        raise TypeError(
            f"a state policy needs a Box observation or a Dict with a 'state' Box, got {observation_space}; "
            "use the 'cnn' policy for image observations"
        )
    return observation_space


class RunningNorm(nn.Module):
    """``(x - mean) / std`` clipped to +-``clip``, with statistics the trainer updates between updates.

    The statistics never change inside ``forward``: a rollout and the update that learns from it see the
    same normalisation, so PPO's probability ratios stay exact. They are buffers (saved in checkpoints).
    """

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.rsqrt(self.var + self.eps).float()
        return ((x - self.mean.float()) * scale).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: torch.Tensor, reduce=None) -> None:
        """Merge a batch ``[N, dim]`` into the statistics; ``reduce`` sums a tensor over ranks."""
        x = x.double()
        moments = torch.cat([x.new_tensor([x.shape[0]]), x.sum(0), x.square().sum(0)])
        if reduce is not None:
            moments = reduce(moments).to(x.device)
        n, total, squares = moments[0], moments[1:1 + x.shape[1]], moments[1 + x.shape[1]:]
        if n == 0:
            return
        batch_mean = total / n
        batch_var = (squares / n - batch_mean.square()).clamp_min(0)
        count = self.count + n
        delta = batch_mean - self.mean
        self.var.copy_((self.var * self.count + batch_var * n + delta.square() * self.count * n / count) / count)
        self.mean.add_(delta * n / count)
        self.count.copy_(count)


class StateEncoder(nn.Module):
    """Flattens a Box observation (or ``obs['state']`` of a dict observation) to float32, optionally normalised."""

    def __init__(self, observation_space: spaces.Space, normalize: bool = False):
        super().__init__()
        self.out_dim = math.prod(state_space(observation_space).shape)
        self.norm = RunningNorm(self.out_dim) if normalize else None

    @staticmethod
    def flat(obs) -> torch.Tensor:
        if isinstance(obs, dict):
            obs = obs["state"]
        return obs.flatten(1).float()  # also for an empty batch (a GRPO rank whose groups were all filtered out)

    def forward(self, obs) -> torch.Tensor:
        x = self.flat(obs)
        return self.norm(x) if self.norm is not None else x

    def update_statistics(self, obs, reduce=None) -> None:
        if self.norm is not None:
            self.norm.update(self.flat(obs), reduce)


class ImageEncoder(nn.Module):
    """A small strided CNN (Nature DQN layout) over one uint8 ``[B, H, W, 3]`` camera.

    The last feature map is pooled to at most 8x8, so 224 px images do not blow up the linear layer.
    """

    def __init__(self, image_shape: tuple[int, int, int], features_dim: int = 256):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(image_shape[2], 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(8), nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.conv(torch.zeros(1, image_shape[2], image_shape[0], image_shape[1])).shape[1]
        self.fc = nn.Sequential(nn.Linear(flat, features_dim), nn.ReLU())
        self.out_dim = features_dim

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float().div_(255.0)
        return self.fc(self.conv(x))


class HashedTextEncoder(nn.Module):
    """Mean of hashed word embeddings: no vocabulary, no download, deterministic across processes."""

    def __init__(self, num_buckets: int = 4096, dim: int = 64):
        super().__init__()
        self.num_buckets = num_buckets
        self.embedding = nn.EmbeddingBag(num_buckets, dim, mode="mean")
        self.out_dim = dim
        self._cache: dict[str, list[int]] = {}

    def token_ids(self, text: str) -> list[int]:
        ids = self._cache.get(text)
        if ids is None:
            words = re.findall(r"[a-z0-9]+", text.lower()) or [""]
            ids = [zlib.crc32(word.encode()) % self.num_buckets for word in words]
            self._cache[text] = ids
        return ids

    def forward(self, texts: Sequence[str]) -> torch.Tensor:
        ids = [self.token_ids(text) for text in texts]
        offsets = torch.tensor([0] + [len(i) for i in ids[:-1]], device=self.embedding.weight.device).cumsum(0)
        flat = torch.tensor([i for row in ids for i in row], device=self.embedding.weight.device)
        return self.embedding(flat, offsets)
