"""Learning-signal metrics around a GRPO update (``grpo.signal_metrics``: off by default, they cost two extra
backward passes): do the update's gradients carry signal, and how far does the policy move?

    class GRPO(SignalMetrics, OnPolicyAlgorithm): ...      # trainers/grpo.py: ``_update`` measures around the step

- ``train/actor/mean_shift_std``: mean over a probe batch (up to ``batch_size`` valid rows, all dims the env ran) of
  ``|mu_after - mu_before| / std_before`` of the Gaussian's mean across the update; ``train/actor/std_mean``: the
  Gaussian's mean std after it (Gaussian policies).
- ``train/actor/kl_ref`` with ``kl_coef = 0``: k3 KL(policy || initial policy) on the probe batch after the update,
  when the policy is small enough to keep a frozen copy.
- ``train/actor/grad_cosine_halves``: cosine between the policy-loss gradients of two random halves of the probe
  batch, before the update (under ddp the halves span the ranks; not under fsdp). Near 0: the batch's gradient is
  mostly noise.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from vla_gym.trainers.algorithms.losses import kl_to_reference
from vla_gym.trainers.algorithms.ratio_levels import chunk_view, executed_mask, masked_row_mean
from vla_gym.trainers.rollout.batch import index
from vla_gym.trainers.rollout.buffer import RolloutBuffer

#: measured around the update on a probe batch
PROBE_KEYS = ("train/actor/mean_shift_std", "train/actor/std_mean", "train/actor/kl_ref")


class SignalMetrics:
    """Wraps an on-policy algorithm's ``_update`` with the metrics above when ``self.hp.signal_metrics`` is set.
    Needs GRPO's ``_policy_terms``, ``_noise_mask``, ``_level_tokens``, ``reference`` and ``_steps``."""

    def _optimise(self, buffer: RolloutBuffer, num_minibatches: int) -> dict[str, float]:
        if not self.hp.signal_metrics or num_minibatches == 0:  # the same on every rank
            return super()._optimise(buffer, num_minibatches)
        probe = self._probe(buffer)
        before = self._gaussian_snapshot(probe)
        cosine = self._grad_cosine(probe)
        metrics = super()._optimise(buffer, num_minibatches)
        metrics.update(self._probe_metrics(probe, before))
        if cosine is not None:
            metrics["train/actor/grad_cosine_halves"] = cosine
        return metrics

    def _probe(self, buffer: RolloutBuffer) -> dict[str, Any]:
        """Up to ``batch_size`` (over all ranks) random valid rows of this rank; weight 0 (row 0) when it has none.
        Its own generator: the minibatches' stay as without the metrics."""
        rows = torch.nonzero(buffer.valid.flatten()).squeeze(-1).cpu()
        if rows.numel() == 0:
            return buffer.batch(torch.zeros(1, dtype=torch.long), weight=0.0)
        size = max(2, math.ceil(self.hp.batch_size / self.dist.world_size))
        order = np.random.default_rng([self.cfg.seed, self.num_updates, self.dist.rank, 1]).permutation(rows.numel())
        return buffer.batch(rows[torch.as_tensor(order[:size])], weight=1.0)

    def _gaussian_snapshot(self, probe) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The Gaussian's (mean, log_std) on the probe rows (None: not a Gaussian policy, or no rows here)."""
        with torch.no_grad(), self.dist.gathered(self.policy):  # collective under fsdp: every rank enters
            if not probe["weight"] or not callable(getattr(self.policy, "distribution", None)):
                return None
            dist = self.policy.distribution(probe["obs"])
            if not (hasattr(dist, "mean") and hasattr(dist, "log_std")):
                return None
            return dist.mean.detach().clone(), dist.log_std.detach().clone()

    def _grad_cosine(self, probe) -> float | None:
        """Cosine between the policy-loss gradients of two random halves of the probe rows (module docstring)."""
        if self.dist.enabled and self.cfg.distributed.strategy == "fsdp":
            return None
        n = probe["advantages"].shape[0]
        weight = float(probe["weight"]) if n >= 2 else 0.0  # ddp: a rank without rows still runs both passes
        order = np.random.default_rng([self.cfg.seed, self.num_updates, self.dist.rank, 2]).permutation(n)
        halves = [order[: n // 2], order[n // 2:]] if n >= 2 else [order, order]
        first = None
        for half in halves:
            self.optimizer.zero_grad(set_to_none=True)
            loss, _, _ = self._policy_terms(_rows(probe, torch.as_tensor(half)), self.model)
            (loss * weight).backward()
            if first is None:
                first = [None if p.grad is None else p.grad.detach().clone() for p in self._params]
        dot = norm_a = norm_b = 0.0
        for a, p in zip(first, self._params):
            b = p.grad
            if a is not None:
                norm_a += a.double().square().sum().item()
            if b is not None:
                norm_b += b.double().square().sum().item()
            if a is not None and b is not None:
                dot += (a.double() * b.double()).sum().item()
        self.optimizer.zero_grad(set_to_none=True)
        if not norm_a or not norm_b:
            return None
        return dot / math.sqrt(norm_a * norm_b)

    def _probe_metrics(self, probe, before) -> dict[str, float]:
        """Mean shift in stds and mean std after the update; KL to the reference when the loss has no KL term."""
        sums = dict.fromkeys(PROBE_KEYS, 0.0)
        counts = dict.fromkeys(PROBE_KEYS, 0.0)
        with torch.no_grad(), self.dist.gathered(self.policy):
            if probe["weight"]:
                mask = executed_mask(probe.get("sub_steps"), self._steps)
                if before is not None:
                    dist = self.policy.distribution(probe["obs"])
                    mean_before, log_std_before = before
                    shift = chunk_view((dist.mean - mean_before).abs() * torch.exp(-log_std_before), self._steps)
                    ran = torch.ones_like(shift, dtype=torch.bool) if mask is None else mask.unsqueeze(-1).expand_as(shift)
                    sums["train/actor/mean_shift_std"] = shift[ran].sum().item()
                    counts["train/actor/mean_shift_std"] = float(ran.sum())
                    sums["train/actor/std_mean"] = dist.log_std.exp().mean().item()
                    counts["train/actor/std_mean"] = 1.0
                if self.reference is not None and self.hp.kl_coef == 0:
                    obs, actions = probe["obs"], probe["actions"]
                    noise_mask = self._noise_mask(probe.get("sub_steps"), chunk_view(actions, self._steps))
                    new, token_mask = self._level_tokens(self.policy, obs, actions, noise_mask)
                    ref, _ = self._level_tokens(self.reference, obs, actions, noise_mask)
                    kl = masked_row_mean(kl_to_reference(new, ref), token_mask)
                    sums["train/actor/kl_ref"] = kl.sum().item()
                    counts["train/actor/kl_ref"] = float(kl.numel())
        return self.dist.weighted_mean(sums, counts)


def _rows(batch: dict[str, Any], rows: torch.Tensor) -> dict[str, Any]:
    """The rows ``rows`` of a minibatch dict."""
    out = {key: value[rows.to(value.device)] for key, value in batch.items() if isinstance(value, torch.Tensor)}
    out["obs"] = index(batch["obs"], rows)
    out["weight"] = batch["weight"]
    return out
