"""The update of residual RL on a frozen base: twin critics (or an ensemble) with LayerNorm, n-step TD targets, a
delayed actor (TD3's rules), all on the base's features, never on images (``trainers/residual.py`` plays the episodes).

    >>> critics = CriticEnsemble(feature_dim=4, action_dim=2, hidden_sizes=(16, 16))
    >>> critics(torch.zeros(3, 4), torch.zeros(3, 2)).shape      # [2 critics, B]
    torch.Size([2, 3])

One call of :meth:`ResidualTD3.update` on a replay batch (:class:`~vla_gym.trainers.algorithms.replay.FeatureReplay`):

- critic: ``y = R_n + gamma^n * min_i Q'_i(s_{t+n}, a')`` with ``a'`` the target residual policy's action at
  ``s_{t+n}`` plus clipped Gaussian noise (target policy smoothing); loss: the mean squared error of every critic.
  With ``num_critics`` > 2 the minimum is over a pair drawn afresh each step (REDQ, Chen et al. 2021; ResFiT uses 10).
- actor (every ``actor_every`` critic steps, once ``actor_warmup`` critic steps are done, so the actor follows a
  critic that has seen the base's outcomes first): maximise ``Q(s, base(s) + residual(s)) / mean|Q|`` with ``Q``
  the first critic of a twin (TD3) or the ensemble's mean (REDQ), less ``actor_pessimism`` standard deviations
  across the critics if set (:meth:`ResidualTD3.actor_q`; TD3+BC's
  normalisation, Fujimoto & Gu 2021) minus ``residual_l2`` times the mean square of ``residual / scale``: a
  residual at its bound in every dimension must buy a relative Q gain of ``residual_l2``, so it stays near the base
  where the critic has no clear gradient (without it the actor went to the bound in every dimension within a few
  hundred steps, chasing the critic's extrapolation: experiments/libero_miniature/README.md).
- targets: Polyak averaging with ``tau`` after each step.

:meth:`ResidualTD3.action_gains` says whether the critic gives the actor anything to follow: the relative Q gain of
the actor's residual and of the best residual within the bound (a few steps of gradient ascent), both in units of
``mean|Q|`` like the actor's loss. A best gain far below ``residual_l2`` means the penalty rightly keeps the residual
at the base: the critic has not learnt which actions succeed (``train/critic/best_gain``, ``train/actor/q_gain``).

Critics see the executed action chunk flattened (``[B, K x A]``) beside the features (``critic_action="executed"``),
or the base's chunk and the offset from it in units of the bound (``"offset"``: ``[base, (action - base) / scale]``,
the same information with the part the rollouts vary at unit scale instead of a few hundredths beside actions that
span [-1, 1]); LayerNorm after every hidden layer keeps the Q values of unseen actions from running away (ResFiT,
RLPD) (:func:`critic_action_input`). ``critic_feature_dim`` squeezes the features first (:class:`CriticEnsemble`).
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vla_gym.trainers.runtime.config import CRITIC_ACTIONS


class CriticEnsemble(nn.Module):
    """``count`` Q networks (2: TD3's twins), ``Linear -> LayerNorm -> ReLU`` per hidden size; ``forward`` gives
    ``[count, B]``. With ``feature_dim_squeezed`` each first maps the features to that many dims (``Linear ->
    LayerNorm -> tanh``, RLPD's and SERL's encoder head) before the action joins them, so a 56-d action is not one
    input in thirty.

    >>> CriticEnsemble(feature_dim=64, action_dim=2, hidden_sizes=(16,), feature_dim_squeezed=8).nets[0][0].in_features
    10
    """

    def __init__(self, feature_dim: int, action_dim: int, hidden_sizes: Sequence[int] = (512, 512),
                 feature_dim_squeezed: int | None = None, count: int = 2):
        super().__init__()
        width = feature_dim_squeezed or feature_dim
        self.nets = nn.ModuleList(self._net(width + action_dim, hidden_sizes) for _ in range(count))
        self.squeezes = nn.ModuleList(
            nn.Sequential(nn.Linear(feature_dim, width), nn.LayerNorm(width), nn.Tanh()) for _ in range(count)
        ) if feature_dim_squeezed else None

    @staticmethod
    def _net(width: int, hidden_sizes: Sequence[int]) -> nn.Sequential:
        layers: list[nn.Module] = []
        for size in hidden_sizes:
            layers += [nn.Linear(width, int(size)), nn.LayerNorm(int(size)), nn.ReLU()]
            width = int(size)
        return nn.Sequential(*layers, nn.Linear(width, 1))

    def q(self, index: int, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Critic ``index``'s values ``[B]`` (``actions`` as the critics see them, flattened)."""
        if self.squeezes is not None:
            features = self.squeezes[index](features)
        return self.nets[index](torch.cat([features, actions.flatten(1)], dim=1)).squeeze(-1)

    def forward(self, features: torch.Tensor, actions: torch.Tensor, indices: Sequence[int] | None = None
                ) -> torch.Tensor:
        """The values of critics ``indices`` (all by default), ``[len(indices), B]``."""
        chosen = range(len(self.nets)) if indices is None else indices
        return torch.stack([self.q(int(index), features, actions) for index in chosen])


@dataclass
class TD3Settings:
    """The update's hyperparameters (``residual.*`` in the config)."""

    critic_lr: float = 3e-4
    actor_lr: float = 1e-4
    tau: float = 0.005
    actor_every: int = 2
    actor_warmup: int = 1000
    target_noise: float = 0.02
    target_noise_clip: float = 0.05
    residual_l2: float = 0.0
    max_grad_norm: float = 10.0
    critic_action: str = "executed"
    critic_feature_dim: int | None = None
    num_critics: int = 2
    actor_pessimism: float = 0.0


class ResidualTD3:
    """Critics, their targets, the target actor and both optimizers around a
    :class:`~vla_gym.trainers.policies.residual.ResidualPolicy` (module docstring)."""

    def __init__(self, policy, settings: TD3Settings, critic_hidden: Sequence[int] = (512, 512)):
        self.policy, self.settings = policy, settings
        action_dim = 1
        for size in policy.action_shape:
            action_dim *= int(size)
        if settings.critic_action not in CRITIC_ACTIONS:
            raise ValueError(f"residual.critic_action={settings.critic_action!r}: one of {', '.join(CRITIC_ACTIONS)}")
        offset = settings.critic_action == "offset"
        self.critics = CriticEnsemble(policy.feature_dim, action_dim * (2 if offset else 1), critic_hidden,
                                      settings.critic_feature_dim, settings.num_critics)
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        self.actor_params = [p for layer in policy.actor_layers() for p in layer.parameters()]
        self.target_actor = tuple(copy.deepcopy(layer).requires_grad_(False) for layer in policy.actor_layers())
        self.critic_optimizer = torch.optim.Adam(self.critics.parameters(), lr=settings.critic_lr)
        self.actor_optimizer = torch.optim.Adam(self.actor_params, lr=settings.actor_lr)
        self.critic_steps = 0
        self.actor_steps = 0

    def critic_action(self, base: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """What the critics see of ``action`` where the base chose ``base`` (:func:`critic_action_input`)."""
        return critic_action_input(self.settings.critic_action, base, action, self.policy.scale)

    def values(self, features: torch.Tensor, base: torch.Tensor, action: torch.Tensor, target: bool = False,
               indices: Sequence[int] | None = None) -> torch.Tensor:
        """Every critic's value ``[num_critics, B]`` of executing ``action`` where the base chose ``base`` (the target
        critics' with ``target``; only critics ``indices`` if given): every caller goes through here, so each sees
        the action as the critics do."""
        critics = self.target_critics if target else self.critics
        return critics(features, self.critic_action(base, action), indices)

    def actor_q(self, features: torch.Tensor, base: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """The value of executing ``base + residual`` that the actor climbs, ``[B]``: the first critic of a twin
        (TD3), the mean of a larger ensemble (REDQ); with ``actor_pessimism`` > 0 the critics' mean minus that many
        standard deviations across them, a lower confidence bound (SUNRISE, EDAC): an action the critics disagree
        on is worth less, so the actor cannot climb one critic's extrapolation."""
        action = self.policy.executed_actions(base + residual)
        seen = self.critic_action(base, action)
        if self.settings.actor_pessimism > 0:
            values = self.critics(features, seen)
            return values.mean(0) - self.settings.actor_pessimism * values.std(0)
        if len(self.critics.nets) == 2:
            return self.critics.q(0, features, seen)
        return self.critics(features, seen).mean(0)

    def target_pair(self, generator: torch.Generator) -> list[int]:
        """The critics whose minimum makes the TD target: both twins, or a pair of the ensemble drawn with
        ``generator`` (REDQ); only those target critics are evaluated."""
        count = len(self.critics.nets)
        return [0, 1] if count == 2 else torch.randperm(count, generator=generator)[:2].tolist()

    def critic_loss(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> tuple[torch.Tensor, dict]:
        s = self.settings
        with torch.no_grad():
            nxt, next_base = batch["next_features"], batch["next_base_actions"]
            noise = (torch.randn(next_base.shape, generator=generator) * s.target_noise).clamp(
                -s.target_noise_clip, s.target_noise_clip)
            next_action = self.policy.executed_actions(
                next_base + self.policy.residual(nxt, next_base, self.target_actor) + noise)
            pair = self.target_pair(generator)
            next_q = self.values(nxt, next_base, next_action, target=True, indices=pair).min(0).values
            target = batch["returns"] + batch["discounts"] * next_q
        q = self.values(batch["features"], batch["base_actions"], batch["actions"])
        loss = F.mse_loss(q, target.expand_as(q))
        return loss, {"train/critic/loss": loss.item(), "train/critic/q_mean": q.mean().item(),
                      "train/critic/target_mean": target.mean().item()}

    def actor_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        features, base = batch["features"], batch["base_actions"]
        residual = self.policy.residual(features, base)
        q = self.actor_q(features, base, residual)
        penalty = (residual / self.policy.scale).square().mean()
        q_scale = q.abs().mean().detach().clamp(min=1e-3)  # TD3+BC: the Q term in units of its batch magnitude
        loss = -q.mean() / q_scale + self.settings.residual_l2 * penalty
        return loss, {"train/actor/loss": loss.item(), "train/actor/q": q.mean().item(),
                      "train/actor/residual_abs": residual.abs().mean().item(),
                      "train/actor/residual_max_frac": (residual.abs().max() / self.policy.scale).item()}

    def action_gains(self, batch: dict[str, torch.Tensor], steps: int = 20, lr: float = 0.1) -> dict[str, float]:
        """The relative gain of the actor's ``Q`` (:meth:`actor_q`) over the base's action on ``batch``: of the
        actor's residual (``train/actor/q_gain``) and of the best residual within the bound that ``steps`` of Adam find
        (``train/critic/best_gain``), with that residual's mean size in units of the bound."""
        features, base = batch["features"], batch["base_actions"]

        def q(residual: torch.Tensor) -> torch.Tensor:
            return self.actor_q(features, base, residual)

        scale = self.policy.scale
        with torch.no_grad():
            q_base = q(torch.zeros_like(base))
            q_scale = q_base.abs().mean().clamp(min=1e-3)
            actor_gain = (q(self.policy.residual(features, base)) - q_base).mean() / q_scale
        raw = torch.zeros_like(base, requires_grad=True)
        optimizer = torch.optim.Adam([raw], lr=lr)
        for _ in range(steps):
            loss = -q(scale * torch.tanh(raw)).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        self.critics.zero_grad(set_to_none=True)
        with torch.no_grad():
            best = scale * torch.tanh(raw)
            best_gain = (q(best) - q_base).mean() / q_scale
        return {"train/actor/q_gain": actor_gain.item(), "train/critic/best_gain": best_gain.item(),
                "train/critic/best_residual_frac": (best.abs().mean() / scale).item()}

    def update(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, float]:
        """One critic step, maybe one actor step, then the targets; returns the step's metrics."""
        s = self.settings
        loss, metrics = self.critic_loss(batch, generator)
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.critics.parameters(), s.max_grad_norm)
        self.critic_optimizer.step()
        self.critic_steps += 1
        if self.critic_steps > s.actor_warmup and self.critic_steps % s.actor_every == 0:
            actor_loss, actor_metrics = self.actor_loss(batch)
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
            nn.utils.clip_grad_norm_(self.actor_params, s.max_grad_norm)
            self.actor_optimizer.step()
            self.critics.zero_grad(set_to_none=True)  # the actor's pass left gradients in the critics
            self.actor_steps += 1
            metrics.update(actor_metrics)
            for target, live in zip(self.target_actor, self.policy.actor_layers()):
                polyak(target, live, s.tau)
        polyak(self.target_critics, self.critics, s.tau)
        return metrics

    def state_dict(self) -> dict:
        return {"critics": self.critics.state_dict(), "target_critics": self.target_critics.state_dict(),
                "target_actor": [layer.state_dict() for layer in self.target_actor],
                "critic_optimizer": self.critic_optimizer.state_dict(),
                "actor_optimizer": self.actor_optimizer.state_dict(),
                "critic_steps": self.critic_steps, "actor_steps": self.actor_steps}

    def load_state_dict(self, state: dict) -> None:
        self.critics.load_state_dict(state["critics"])
        self.target_critics.load_state_dict(state["target_critics"])
        for layer, saved in zip(self.target_actor, state["target_actor"]):
            layer.load_state_dict(saved)
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_steps, self.actor_steps = int(state["critic_steps"]), int(state["actor_steps"])


def critic_action_input(mode: str, base: torch.Tensor, action: torch.Tensor, scale: float) -> torch.Tensor:
    """What the critics see of an executed ``action`` chunk taken where the base chose ``base`` (both ``[B, ...]``),
    flattened: the action itself (``mode="executed"``), or ``[base, (action - base) / scale]`` (``"offset"``).

    >>> base, action = torch.zeros(1, 2, 1), torch.full((1, 2, 1), 0.25)  # a chunk of 2 one-dim actions
    >>> critic_action_input("offset", base, action, scale=0.5).tolist()   # offsets of half the bound
    [[0.0, 0.0, 0.5, 0.5]]
    >>> critic_action_input("executed", base, action, scale=0.5).tolist()
    [[0.25, 0.25]]
    """
    if mode == "offset":
        return torch.cat([base.flatten(1), ((action - base) / scale).flatten(1)], dim=1)
    return action.flatten(1)


def polyak(target: nn.Module, live: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * live``, parameter by parameter."""
    with torch.no_grad():
        for t, p in zip(target.parameters(), live.parameters()):
            t.lerp_(p.detach(), tau)
