"""Action heads: features ``[B, F]`` -> an action distribution over the env's action space.

    >>> head = make_action_head(spaces.Box(-1, 1, (4, 7)), in_dim=64)   # an action chunk K=4 x 7
    >>> dist = head(torch.zeros(2, 64))
    >>> dist.sample().shape, dist.log_prob(dist.mode()).shape
    (torch.Size([2, 4, 7]), torch.Size([2]))

Box spaces of any shape (action chunks included) get a diagonal Gaussian with a state-independent
log standard deviation; ``log_prob`` and ``entropy`` sum over every action dimension (``log_prob(actions,
per_dim=True)`` keeps them: ``[B, *shape]``, what GRPO's per-dimension and per-step ratios need). Discrete
spaces get a Categorical (``per_dim=True``: ``[B, 1]``). Both ignore Box bounds: the policy clips before the
env (as SB3 does).

The noise of an action chunk ``[K, A]`` is drawn per step (``noise="step"``: K x A independent draws, the default)
or once per chunk (``noise="chunk"``, :class:`ChunkGaussian`: A draws shared by the chunk's K steps, so the arm
drifts one way for the whole chunk instead of jittering, and an episode carries K times fewer noise dimensions for
the policy gradient to credit):

    >>> chunked = GaussianHead(64, (4, 7), log_std_init=-2.3, noise="chunk")(torch.zeros(2, 64))
    >>> noise = chunked.sample() - chunked.mode()
    >>> bool(torch.allclose(noise[:, 0], noise[:, 3]))
    True

A :class:`TokenHead` is the other head for Box spaces: per action dimension a categorical over 256 bins (action
tokens), sampled at a temperature (:class:`BinnedCategorical`).

Sampling noise comes from torch's global generator, or, inside ``with row_generators(gens):``, row ``i`` of a batch
from ``gens[i]`` (one ``torch.Generator`` per row): then a row's sample does not depend on which other rows share
its batch, which is what lets pipelined rollouts (``trainers/rollout/pipeline.py``) split the envs into stages and still
draw the same actions. ``standard_normal`` / ``standard_exponential`` are the two noise sources; a policy that
samples outside these heads uses them too to honour the row generators.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence

import torch
from gymnasium import spaces
from torch import nn

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


_ROW_GENERATORS: contextvars.ContextVar[Sequence[torch.Generator] | None] = contextvars.ContextVar(
    "row_generators", default=None)


@contextlib.contextmanager
def row_generators(generators: Sequence[torch.Generator] | None) -> Iterator[None]:
    """Inside the block, row ``i`` of every sampled batch draws its noise from ``generators[i]`` (None: the global
    generator, as outside)."""
    token = _ROW_GENERATORS.set(None if generators is None else list(generators))
    try:
        yield
    finally:
        _ROW_GENERATORS.reset(token)


def _noise(like: torch.Tensor, fill: str) -> torch.Tensor:
    generators = _ROW_GENERATORS.get()
    if generators is None:
        return getattr(torch.empty_like(like), fill)()
    if len(generators) != like.shape[0]:
        raise ValueError(f"row_generators: {len(generators)} generators for a batch of {like.shape[0]} rows")
    return torch.stack([getattr(torch.empty(like.shape[1:], dtype=like.dtype, device=like.device), fill)(generator=g)
                        for g in generators])


def standard_normal(like: torch.Tensor) -> torch.Tensor:
    """N(0, 1) noise shaped like ``like`` (``[B, ...]``), per row from the :func:`row_generators` if set."""
    if _ROW_GENERATORS.get() is None:
        return torch.randn_like(like)
    return _noise(like, "normal_")


def standard_exponential(like: torch.Tensor) -> torch.Tensor:
    """Exp(1) noise shaped like ``like`` (``[B, ...]``), per row from the :func:`row_generators` if set."""
    return _noise(like, "exponential_")


class DiagGaussian:
    """Diagonal Gaussian over ``[B, *shape]`` with per-sample log_prob/entropy ``[B]``."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor):
        self.mean, self.log_std = mean, log_std.expand_as(mean)

    def sample(self) -> torch.Tensor:
        return self.mean + standard_normal(self.mean) * self.log_std.exp()

    def mode(self) -> torch.Tensor:
        return self.mean

    def log_prob(self, actions: torch.Tensor, per_dim: bool = False) -> torch.Tensor:
        """``[B]``: summed over every action dimension; ``per_dim``: ``[B, *shape]``, one per dimension."""
        z = (actions - self.mean) * torch.exp(-self.log_std)
        per_dim_log_probs = -0.5 * z.square() - self.log_std - _LOG_SQRT_2PI
        return per_dim_log_probs if per_dim else per_dim_log_probs.flatten(1).sum(1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 + _LOG_SQRT_2PI).flatten(1).sum(1)


class ChunkGaussian(DiagGaussian):
    """Gaussian over action chunks ``[B, K, A]`` whose noise is drawn once per chunk and shared by its K steps.

    ``log_std`` ``[K, A]`` (or ``[A]``) gives one std per action dimension (the mean over the K rows). A chunk's
    density is that of its noise, read as the mean over the chunk of ``actions - mean`` (exactly the drawn noise
    before any clipping): ``log_prob`` sums A terms; ``per_dim=True`` gives ``[B, K, A]`` with those A terms at
    step 0 and zeros at the other steps, which carry no noise of their own (GRPO's ratio then counts
    only step 0's tokens).
    """

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor):
        chunk_log_std = log_std if log_std.dim() == 1 else log_std.mean(-2)
        super().__init__(mean, chunk_log_std.unsqueeze(-2))
        self.chunk_log_std = chunk_log_std.expand(mean.shape[0], mean.shape[-1])

    def sample(self) -> torch.Tensor:
        return self.mean + standard_normal(self.mean[:, :1]) * self.log_std.exp()

    def log_prob(self, actions: torch.Tensor, per_dim: bool = False) -> torch.Tensor:
        z = (actions - self.mean).mean(-2) * torch.exp(-self.chunk_log_std)
        log_probs = -0.5 * z.square() - self.chunk_log_std - _LOG_SQRT_2PI  # [B, A]
        if not per_dim:
            return log_probs.sum(1)
        rest = log_probs.new_zeros(log_probs.shape[0], self.mean.shape[1] - 1, log_probs.shape[1])
        return torch.cat([log_probs.unsqueeze(1), rest], dim=1)

    def entropy(self) -> torch.Tensor:
        return (self.chunk_log_std + 0.5 + _LOG_SQRT_2PI).sum(1)


NOISE_SHAPES = ("step", "chunk")


class Categorical:
    """Categorical over ``n`` actions from logits ``[B, n]``; actions are int64 ``[B]``."""

    def __init__(self, logits: torch.Tensor):
        self.logits = logits.log_softmax(-1)

    def sample(self) -> torch.Tensor:
        # Gumbel-max (-log of an Exp(1) draw is Gumbel): a few times faster than torch.multinomial on CPU
        return (self.logits - standard_exponential(self.logits).log()).argmax(-1)

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)

    def log_prob(self, actions: torch.Tensor, per_dim: bool = False) -> torch.Tensor:
        """``[B]`` (``per_dim``: ``[B, 1]``, the one dimension there is)."""
        log_probs = self.logits.gather(-1, actions.long().unsqueeze(-1))
        return log_probs if per_dim else log_probs.squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)


class BinnedCategorical:
    """Per action dimension, a categorical over ``n_bins`` uniform bins of ``[low, high]`` (the OpenVLA layout of
    :class:`~vla_gym.trainers.policies.openvla_prompts.ActionTokenizer`: bin ``i`` decodes to its centre), from
    logits ``[B, *shape, n_bins]`` divided by ``temperature``. Actions are continuous ``[B, *shape]``: a sample or the
    mode is a bin centre; ``log_prob`` reads each action's bin, so a clipped or demonstrated action has the
    log-prob of the bin it falls in. ``per_dim=True``: one log-prob per action dimension (one token each).

        >>> dist = BinnedCategorical(torch.zeros(1, 2, 4), temperature=1.0)     # 2 dims, 4 bins of [-1, 1]
        >>> dist.mode().tolist(), round(dist.log_prob(torch.tensor([[0.9, -0.1]])).item(), 4)
        ([[-0.75, -0.75]], -2.7726)
    """

    def __init__(self, logits: torch.Tensor, temperature: float = 1.0, low: float = -1.0, high: float = 1.0):
        self.logits = (logits / temperature).log_softmax(-1)
        self.n_bins, self.low, self.high = logits.shape[-1], low, high
        self.width = (high - low) / self.n_bins

    def bins(self, actions: torch.Tensor) -> torch.Tensor:
        """The bin index of each action value (values outside ``[low, high]`` in the end bins); in float64, as
        :class:`~vla_gym.trainers.policies.openvla_prompts.ActionTokenizer` bins."""
        index = torch.floor((actions.double() - self.low) / self.width).long()
        return index.clamp(0, self.n_bins - 1)

    def centres(self, bins: torch.Tensor) -> torch.Tensor:
        return self.low + (bins.to(self.logits.dtype) + 0.5) * self.width

    def sample(self) -> torch.Tensor:
        return self.centres((self.logits - standard_exponential(self.logits).log()).argmax(-1))  # Gumbel-max

    def mode(self) -> torch.Tensor:
        return self.centres(self.logits.argmax(-1))

    def log_prob(self, actions: torch.Tensor, per_dim: bool = False) -> torch.Tensor:
        """``[B]``: summed over every action dimension; ``per_dim``: ``[B, *shape]``."""
        actions = actions.reshape(self.logits.shape[:-1])
        per_dim_log_probs = self.logits.gather(-1, self.bins(actions).unsqueeze(-1)).squeeze(-1)
        return per_dim_log_probs if per_dim else per_dim_log_probs.flatten(1).sum(1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).flatten(1).sum(1)


class TokenHead(nn.Module):
    """Features -> per action dimension a categorical over ``n_bins`` bins (:class:`BinnedCategorical`): action
    tokens, as the anchors' VLAs emit them. Rollouts sample at ``temperature`` (SimpleVLA-RL and RLinf: 1.6); the
    mode (greedy) is the most likely bin's centre whatever the temperature.

    As in a VLA, where every action token's hidden state goes through the one language-model head, each token (chunk
    step x action dimension) gets its own ``token_dim`` features (``mean``, named like GaussianHead's output layer)
    and one layer shared by all tokens turns them into bin logits (``bins``): 0.47M parameters for 8 x 7 tokens from
    256 features instead of 3.7M for a separate output per token and bin (the small policy's exported model 4.3 MB
    instead of 17, which the repository's size budget for kept models needs).

        >>> head = TokenHead(in_dim=256, shape=(8, 7), temperature=1.6)
        >>> head(torch.zeros(2, 256)).logits.shape
        torch.Size([2, 8, 7, 256])
    """

    noise = "step"

    def __init__(self, in_dim: int, shape: tuple[int, ...], n_bins: int = 256, temperature: float = 1.0,
                 low: float = -1.0, high: float = 1.0, token_dim: int = 32):
        super().__init__()
        self.shape, self.n_bins, self.low, self.high = tuple(shape), int(n_bins), float(low), float(high)
        if self.n_bins < 2:
            raise ValueError(f"n_bins must be at least 2, got {n_bins}")
        self.temperature = check_temperature(temperature)
        self.token_dim = int(token_dim)
        self.mean = nn.Linear(in_dim, math.prod(self.shape) * self.token_dim)  # each token's features
        self.bins = nn.Linear(self.token_dim, self.n_bins)  # shared by every token, as a VLA's output layer

    def forward(self, features: torch.Tensor, temperature: float | None = None) -> BinnedCategorical:
        logits = self.bins(self.mean(features).view(-1, *self.shape, self.token_dim))
        return BinnedCategorical(logits, self.temperature if temperature is None else temperature, self.low,
                                 self.high)

    def set_exploration(self, std: float | None = None, noise: str | None = None,
                        temperature: float | None = None) -> None:
        """Sample at ``temperature`` from now on (a token head has no std: ``std`` is refused)."""
        if std is not None:
            raise ValueError("an action-token head samples at a temperature, not with a std: set its temperature "
                             "(policy.kwargs.temperature) instead of an exploration std")
        if noise not in (None, "step"):
            raise ValueError(f"noise {noise!r}: an action-token head draws every token on its own (noise 'step')")
        if temperature is not None:
            self.temperature = check_temperature(temperature)


def check_temperature(temperature: float) -> float:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return float(temperature)


class GaussianHead(nn.Module):
    """Features -> a diagonal Gaussian with a learned, state-independent ``log_std`` of the action's shape;
    ``noise="chunk"`` (chunks ``[K, A]`` only) shares each draw over the chunk's steps (:class:`ChunkGaussian`)."""

    def __init__(self, in_dim: int, shape: tuple[int, ...], log_std_init: float = 0.0, noise: str = "step"):
        super().__init__()
        self.shape = tuple(shape)
        self.noise = check_noise(noise, self.shape)
        self.mean = nn.Linear(in_dim, math.prod(self.shape))
        self.log_std = nn.Parameter(torch.full(self.shape, float(log_std_init)))

    def forward(self, features: torch.Tensor) -> DiagGaussian:
        mean = self.mean(features).view(-1, *self.shape)
        return ChunkGaussian(mean, self.log_std) if self.noise == "chunk" else DiagGaussian(mean, self.log_std)

    def set_exploration(self, std: float | None = None, noise: str | None = None,
                        temperature: float | None = None) -> None:
        """Sample with standard deviation ``std`` in every dimension and/or with noise shape ``noise`` from now on
        (e.g. RL exploration after an SFT whose MSE never trained ``log_std``)."""
        if temperature is not None:
            raise ValueError("a Gaussian action head samples with a std, not at a temperature: set an exploration "
                             "std, or train the policy with policy.kwargs.head=tokens")
        if std is not None:
            if not std > 0:
                raise ValueError(f"exploration std must be > 0, got {std}")
            with torch.no_grad():
                self.log_std.fill_(math.log(std))
        if noise is not None:
            self.noise = check_noise(noise, self.shape)


def check_noise(noise: str, shape: tuple[int, ...]) -> str:
    if noise not in NOISE_SHAPES:
        raise ValueError(f"noise {noise!r}: use one of {', '.join(NOISE_SHAPES)}")
    if noise == "chunk" and len(shape) != 2:
        raise ValueError(f"noise 'chunk' needs an action chunk [K, A] (ActionChunk wrapper), got action shape {shape}")
    return noise


class CategoricalHead(nn.Module):
    def __init__(self, in_dim: int, n: int):
        super().__init__()
        self.mean = nn.Linear(in_dim, n)  # named like GaussianHead's output layer for shared init

    def forward(self, features: torch.Tensor) -> Categorical:
        return Categorical(self.mean(features))


def make_action_head(action_space: spaces.Space, in_dim: int, log_std_init: float = 0.0,
                     noise: str = "step") -> nn.Module:
    """Gaussian head for Box spaces (any shape; ``noise``: its shape over an action chunk), Categorical for
    Discrete."""
    if isinstance(action_space, spaces.Box):
        return GaussianHead(in_dim, action_space.shape, log_std_init, noise)
    if isinstance(action_space, spaces.Discrete):
        return CategoricalHead(in_dim, int(action_space.n))
    raise TypeError(
        f"no action head for {action_space}: built-in policies support Box (Gaussian, action chunks "
        "included) and Discrete (Categorical); register a custom policy for other spaces"
    )
