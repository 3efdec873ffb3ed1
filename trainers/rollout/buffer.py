"""``RolloutBuffer``: ``[T, N]`` transitions of one rollout, then shuffled minibatches for the update.

    buffer = RolloutBuffer(n_steps=128, num_envs=8, device="cpu")
    buffer.add(obs, actions, log_probs, values, rewards, dones, valid)   # PPO: once per vector step
    buffer.bootstrap(t, rows, gamma * final_values)                      # truncated episodes, if any
    buffer.compute_gae(last_values, gamma=0.99, gae_lambda=0.95)         # advantages and returns
    buffer.add(obs, actions, log_probs, valid=valid, advantages=adv,     # GRPO: advantages given per step,
               extras={"sub_steps": steps})                          #   per-row extras minibatched by name
    for mb in buffer.minibatches(num_minibatches=4, generator=g): ...     # dicts of tensors

The buffer is the only writer of its tensors: everything goes in through these methods, and the
rollout, PPO and GRPO only read them.

``log_probs`` is ``[T, N]``, or ``[T, N, ...]`` when the first ``add`` passes per-dimension log-probs (GRPO with a
``per_dim`` policy). ``extras`` are further per-row tensors (the same keys at every ``add``), handed out in the
minibatches under their names.

``valid`` marks transitions to learn from. It is False for the step a NEXT_STEP vector env spends
resetting a finished sub-env (its action is ignored) and, in GRPO, for steps after an episode ended.
Every rank makes the same number of minibatches whatever its number of valid rows, so
DistributedDataParallel's gradient all-reduces stay paired.
"""
from __future__ import annotations

from collections.abc import Iterator

import torch

from vla_gym.trainers.algorithms.advantages import gae
from vla_gym.trainers.rollout.batch import ObsStorage, index


class RolloutBuffer:
    def __init__(self, n_steps: int, num_envs: int, device: torch.device | str = "cpu"):
        self.n_steps, self.num_envs, self.device = n_steps, num_envs, torch.device(device)
        shape = (n_steps, num_envs)
        self.obs = ObsStorage(n_steps, num_envs, self.device)
        self.actions: torch.Tensor | None = None
        self.log_probs = torch.zeros(shape, device=self.device)
        self.values = torch.zeros(shape, device=self.device)
        self.rewards = torch.zeros(shape, device=self.device)
        self.dones = torch.zeros(shape, dtype=torch.bool, device=self.device)
        self.valid = torch.ones(shape, dtype=torch.bool, device=self.device)
        self.advantages = torch.zeros(shape, device=self.device)
        self.returns = torch.zeros(shape, device=self.device)
        self.extras: dict[str, torch.Tensor] = {}
        self.pos = 0

    def reset(self) -> None:
        self.pos = 0

    @property
    def full(self) -> bool:
        return self.pos == self.n_steps

    def add(self, obs, actions, log_probs, values=None, rewards=None, dones=None, valid=None, advantages=None,
            extras: dict[str, torch.Tensor] | None = None) -> None:
        """Store one vector step (``[N]`` each; actions ``[N, ...]``; log_probs ``[N]`` or ``[N, ...]``; extras
        ``{name: [N, ...]}``) at the next row.

        Left out: value 0, reward 0, not done, valid, advantage 0 (PPO's come from :meth:`compute_gae`).
        """
        if self.full:
            raise RuntimeError("RolloutBuffer is full: call reset() before adding a new rollout")
        t = self.pos
        if self.actions is None:
            with torch.inference_mode(False):  # normal tensors: the update takes views of them into autograd
                self.actions = torch.zeros((self.n_steps, *actions.shape), dtype=actions.dtype, device=self.device)
        log_probs = torch.as_tensor(log_probs)
        if t == 0 and log_probs.dim() > 1 and tuple(self.log_probs.shape[1:]) != tuple(log_probs.shape):
            with torch.inference_mode(False):  # per-dimension log-probs
                self.log_probs = torch.zeros((self.n_steps, *log_probs.shape), device=self.device)
        extras = extras or {}
        if set(extras) != set(self.extras) and t > 0:
            raise ValueError(f"RolloutBuffer.add: extras {sorted(extras)} differ from the first add's "
                             f"{sorted(self.extras)}")
        for key, value in extras.items():
            value = torch.as_tensor(value)
            if key not in self.extras:
                with torch.inference_mode(False):
                    self.extras[key] = torch.zeros((self.n_steps, *value.shape), dtype=value.dtype, device=self.device)
            self.extras[key][t] = value.to(self.device)
        self.obs.write(t, obs)
        self.actions[t] = actions
        self.log_probs[t] = log_probs
        self.values[t] = 0.0 if values is None else values
        self.rewards[t] = 0.0 if rewards is None else torch.as_tensor(rewards, dtype=torch.float32)
        self.dones[t] = False if dones is None else torch.as_tensor(dones)
        self.valid[t] = True if valid is None else torch.as_tensor(valid)
        self.advantages[t] = 0.0 if advantages is None else torch.as_tensor(advantages).to(self.device)
        self.pos += 1

    def bootstrap(self, step: int, rows: torch.Tensor, discounted_values: torch.Tensor) -> None:
        """Add ``discounted_values`` (``gamma * V(final observation)``) to the rewards of ``rows`` at ``step``:
        the value of a truncated episode's future, for an env that reports it a step late (NEXT_STEP)."""
        self.rewards[step, rows.to(self.device)] += discounted_values.to(self.device)

    def compute_gae(self, last_values: torch.Tensor, gamma: float, gae_lambda: float) -> None:
        """Advantages and returns of the stored rollout by GAE, bootstrapped with ``last_values`` ``[N]``.

        Written in place: the buffer's tensors stay the ones the update reads.
        """
        advantages, returns = gae(self.rewards, self.values, self.dones, last_values.to(self.device),
                                  gamma, gae_lambda)
        self.advantages.copy_(advantages)
        self.returns.copy_(returns)

    def minibatches(self, num_minibatches: int, generator: torch.Generator | None = None) -> Iterator[dict]:
        """Shuffled minibatches over the valid rows (always ``num_minibatches`` of them).

        A minibatch with no rows (fewer valid rows than minibatches) holds row 0 with weight 0,
        so the caller still runs its backward pass and distributed ranks stay in step.
        """
        obs, flat = self.obs.flat(), self._flat()
        if num_minibatches == 1 and bool(self.valid.all()):  # one full batch: its order does not matter
            yield dict(flat, obs=obs, weight=1.0)
            return
        rows = torch.nonzero(self.valid.flatten()).squeeze(-1).cpu()
        rows = rows[torch.randperm(rows.numel(), generator=generator)]
        for chunk in torch.tensor_split(rows, num_minibatches):
            weight = 1.0
            if chunk.numel() == 0:
                chunk, weight = torch.zeros(1, dtype=torch.long), 0.0
            yield self.batch(chunk, weight, obs=obs, flat=flat)

    def batch(self, rows: torch.Tensor, weight: float = 1.0, obs=None, flat=None) -> dict:
        """The minibatch dict of the given flat row indices (``t * N + n``)."""
        obs = self.obs.flat() if obs is None else obs
        flat = self._flat() if flat is None else flat
        batch = {key: value[rows.to(value.device)] for key, value in flat.items()}
        batch["obs"] = index(obs, rows)
        batch["weight"] = weight
        return batch

    def _flat(self) -> dict[str, torch.Tensor]:
        flat = {
            "actions": self.actions.reshape(-1, *self.actions.shape[2:]),
            "log_probs": self.log_probs.reshape(-1, *self.log_probs.shape[2:]), "values": self.values.flatten(),
            "advantages": self.advantages.flatten(), "returns": self.returns.flatten(),
        }
        flat.update({key: value.reshape(-1, *value.shape[2:]) for key, value in self.extras.items()})
        return flat
