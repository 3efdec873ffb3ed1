"""The update of residual RL on a frozen base: twin critics with LayerNorm, n-step TD targets, a delayed actor
(TD3's rules), all on the base's features, never on images (``trainers/residual.py`` plays the episodes).

    >>> critics = TwinCritics(feature_dim=4, action_dim=2, hidden_sizes=(16, 16))
    >>> critics(torch.zeros(3, 4), torch.zeros(3, 2)).shape      # [2 critics, B]
    torch.Size([2, 3])

One call of :meth:`ResidualTD3.update` on a replay batch (:class:`~vla_gym.trainers.algorithms.replay.FeatureReplay`):

- critic: ``y = R_n + gamma^n * min_i Q'_i(s_{t+n}, a')`` with ``a'`` the target residual policy's action at
  ``s_{t+n}`` plus clipped Gaussian noise (target policy smoothing); loss: the mean squared error of both critics.
- actor (every ``actor_every`` critic steps, once ``actor_warmup`` critic steps are done, so the actor follows a
  critic that has seen the base's outcomes first): maximise ``Q_1(s, base(s) + residual(s)) / mean|Q_1|`` with
  ``Q_1`` the first critic (:meth:`ResidualTD3.actor_q`; TD3+BC's
  normalisation, Fujimoto & Gu 2021) minus ``residual_l2`` times the mean square of ``residual / scale``: a
  residual at its bound in every dimension must buy a relative Q gain of ``residual_l2``, so it stays near the base
  where the critic has no clear gradient (without it the actor went to the bound in every dimension within a few
  hundred steps, chasing the critic's extrapolation: experiments/libero_miniature/README.md).
- targets: Polyak averaging with ``tau`` after each step.

:meth:`ResidualTD3.action_gains` says whether the critic gives the actor anything to follow: the relative Q gain of
the actor's residual and of the best residual within the bound (a few steps of gradient ascent), both in units of
``mean|Q|`` like the actor's loss. A best gain far below ``residual_l2`` means the penalty rightly keeps the residual
at the base: the critic has not learnt which actions succeed (``train/critic/best_gain``, ``train/actor/q_gain``).

Critics see the executed action chunk flattened (``[B, K x A]``) beside the features; LayerNorm after every hidden
layer keeps the Q values of unseen actions from running away (ResFiT, RLPD) (:class:`TwinCritics`).
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class TwinCritics(nn.Module):
    """TD3's two Q networks, ``Linear -> LayerNorm -> ReLU`` per hidden size, on ``[features, action chunk
    flattened]``; ``forward`` gives ``[2, B]``."""

    def __init__(self, feature_dim: int, action_dim: int, hidden_sizes: Sequence[int] = (512, 512)):
        super().__init__()
        self.nets = nn.ModuleList(self._net(feature_dim + action_dim, hidden_sizes) for _ in range(2))

    @staticmethod
    def _net(width: int, hidden_sizes: Sequence[int]) -> nn.Sequential:
        layers: list[nn.Module] = []
        for size in hidden_sizes:
            layers += [nn.Linear(width, int(size)), nn.LayerNorm(int(size)), nn.ReLU()]
            width = int(size)
        return nn.Sequential(*layers, nn.Linear(width, 1))

    def q(self, index: int, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Critic ``index``'s values ``[B]`` of the action chunks ``actions`` (``[B, ...]``, flattened here)."""
        return self.nets[index](torch.cat([features, actions.flatten(1)], dim=1)).squeeze(-1)

    def forward(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Both critics' values, ``[2, B]``."""
        return torch.stack([self.q(index, features, actions) for index in range(len(self.nets))])


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


class ResidualTD3:
    """Critics, their targets, the target actor and both optimizers around a
    :class:`~vla_gym.trainers.policies.residual.ResidualPolicy` (module docstring)."""

    def __init__(self, policy, settings: TD3Settings, critic_hidden: Sequence[int] = (512, 512)):
        self.policy, self.settings = policy, settings
        action_dim = 1
        for size in policy.action_shape:
            action_dim *= int(size)
        self.critics = TwinCritics(policy.feature_dim, action_dim, critic_hidden)
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        self.actor_params = [p for layer in policy.actor_layers() for p in layer.parameters()]
        self.target_actor = tuple(copy.deepcopy(layer).requires_grad_(False) for layer in policy.actor_layers())
        self.critic_optimizer = torch.optim.Adam(self.critics.parameters(), lr=settings.critic_lr)
        self.actor_optimizer = torch.optim.Adam(self.actor_params, lr=settings.actor_lr)
        self.critic_steps = 0
        self.actor_steps = 0

    def values(self, features: torch.Tensor, action: torch.Tensor, target: bool = False) -> torch.Tensor:
        """Both critics' values ``[2, B]`` of executing ``action`` (the target critics' with ``target``)."""
        return (self.target_critics if target else self.critics)(features, action)

    def actor_q(self, features: torch.Tensor, base: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """The value ``[B]`` of executing ``base + residual`` that the actor climbs: the first critic's (TD3)."""
        return self.critics.q(0, features, self.policy.executed_actions(base + residual))

    def critic_loss(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> tuple[torch.Tensor, dict]:
        s = self.settings
        with torch.no_grad():
            nxt, next_base = batch["next_features"], batch["next_base_actions"]
            noise = (torch.randn(next_base.shape, generator=generator) * s.target_noise).clamp(
                -s.target_noise_clip, s.target_noise_clip)
            next_action = self.policy.executed_actions(
                next_base + self.policy.residual(nxt, next_base, self.target_actor) + noise)
            next_q = self.values(nxt, next_action, target=True).min(0).values
            target = batch["returns"] + batch["discounts"] * next_q
        q = self.values(batch["features"], batch["actions"])
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


def polyak(target: nn.Module, live: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * live``, parameter by parameter."""
    with torch.no_grad():
        for t, p in zip(target.parameters(), live.parameters()):
            t.lerp_(p.detach(), tau)
