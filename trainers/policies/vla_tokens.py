"""``ActionTokenVLAPolicy``: the OpenVLA recipe on any Hugging Face image-text-to-text model.

    >>> policy = make_policy("vla_gym.trainers.policies.vla_tokens:ActionTokenVLAPolicy",
    ...                      env.observation_space, env.action_space,
    ...                      model="google/paligemma-3b-pt-224", lora={"rank": 32}, temperature=1.0)   # doctest: +SKIP
    >>> tokens, log_probs, values = policy.act(obs)        # tokens: int64 [B, K*A]  # doctest: +SKIP
    >>> env.step(policy.env_actions(tokens))               # decoded to [B, A] or [B, K, A] in [-1, 1]  # doctest: +SKIP

The prompt is OpenVLA's; each action dimension is one of 256 bins mapped to the last 256 token ids of
the tokenizer (:class:`vla_gym.trainers.policies.openvla_prompts.ActionTokenizer`). An action chunk of ``K`` steps (an env
wrapped in :class:`~vla_gym.wrappers.ActionChunk`, action space ``(K, A)``) is ``K*A`` tokens, time-major.

- ``act``: ``generate`` with decoding restricted to the action tokens: sampled from
  ``softmax(logits / temperature)`` over the 256 action tokens (``deterministic=True``: the argmax, for
  evaluation). The log-probability is the sum over the chunk's tokens of that same restricted,
  tempered distribution; the value comes from the last prompt token's last hidden state, all from the
  one ``generate`` call.
- ``evaluate``: one teacher-forced forward pass over prompt + stored tokens gives the same
  log-probabilities (the rollout/update consistency PPO's ratio needs), the entropy (summed over
  tokens) and the value.
- ``imitation_loss``: token cross-entropy against expert actions (supervised fine-tuning).

Options: ``model`` (hub name or path), ``cameras`` (roles in the prompt, default main), ``temperature``,
``lora`` (see :mod:`.lora`), ``freeze_vision``, ``dtype`` ("auto": bf16 on CUDA), ``critic`` (False for
GRPO), ``action_stats`` (q01/q99/mask, to un-normalise actions for the env), ``value_hidden``,
``gradient_checkpointing``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from vla_gym.trainers.policies.base import Obs, Policy
from vla_gym.trainers.policies.openvla_prompts import ActionTokenizer
from vla_gym.trainers.policies.vla_common import (
    TrainableStateMixin,
    ValueHead,
    VLMBackbone,
    chunk_shape,
)


class ActionTokenSampler:
    """A ``generate`` logits processor that samples among the action tokens and records log-probs.

    It returns scores that are ``-inf`` everywhere but at the chosen token, so ``generate`` runs greedy
    and no other logits warper (top-k, repetition penalty, ...) can change the distribution.
    """

    def __init__(self, first: int, end: int, temperature: float, deterministic: bool):
        self.first, self.end, self.temperature, self.deterministic = first, end, temperature, deterministic
        self.log_probs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        log_p = torch.log_softmax(scores[:, self.first:self.end].float() / self.temperature, dim=-1)
        if self.deterministic:
            choice = log_p.argmax(-1)
        else:
            choice = torch.multinomial(log_p.exp(), 1).squeeze(-1)
        self.log_probs.append(log_p.gather(-1, choice[:, None]).squeeze(-1))
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(scores.shape[0], device=scores.device), self.first + choice] = 0.0
        return out


class ActionTokenVLAPolicy(TrainableStateMixin, Policy):
    """Actions as language tokens (module docstring)."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        model: str,
        cameras: Sequence[str] = ("main",),
        temperature: float = 1.0,
        lora: Any = None,
        freeze_vision: bool = True,
        dtype: str = "auto",
        critic: bool = True,
        action_stats: dict | None = None,
        value_hidden: int = 256,
        gradient_checkpointing: bool = False,
    ):
        super().__init__(observation_space, action_space)
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 (use act(deterministic=True) for greedy), got {temperature}")
        self.chunk = chunk_shape(action_space)
        self.num_tokens = self.chunk[0] * self.chunk[1]
        self.temperature = float(temperature)
        self.has_critic = bool(critic)
        self.action_stats = action_stats
        self.vlm = VLMBackbone(model, cameras, dtype, lora, freeze_vision, gradient_checkpointing)
        vocab = len(self.vlm.tokenizer)
        if vocab > self.vlm.vocab_size:
            raise ValueError(f"tokenizer has {vocab} tokens but the model's output layer only {self.vlm.vocab_size}")
        self.tokenizer = ActionTokenizer(vocab)
        if self.has_critic:
            self.value_head = ValueHead(self.vlm.hidden_size, value_hidden)

    # ------------------------------------------------------------------------------- decoding
    def env_actions(self, actions: torch.Tensor) -> np.ndarray:
        """Token ids ``[B, K*A]`` -> env actions ``[B, *action_space.shape]`` (un-normalised, clipped)."""
        tokens = actions.detach().cpu().numpy()
        return self.to_env_actions(self.tokenizer.decode(tokens).reshape(tokens.shape[0], *self.action_space.shape))

    def encode_actions(self, actions) -> torch.Tensor:
        """Env actions ``[B, *action_space.shape]`` in [-1, 1] -> token ids ``[B, K*A]`` (for imitation)."""
        actions = actions.detach().cpu().numpy() if torch.is_tensor(actions) else np.asarray(actions)
        return torch.from_numpy(self.tokenizer.encode(actions.reshape(actions.shape[0], -1))).to(self.device)

    # ------------------------------------------------------------------------------- Policy API
    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False, per_dim: bool = False):
        """``per_dim``: one log-prob per action token ``[B, K*A]`` instead of their sum (GRPO's per-token ratio)."""
        from transformers import GenerationConfig, LogitsProcessorList

        inputs = self.vlm.inputs(obs)
        sampler = ActionTokenSampler(self.tokenizer.first_token_id, self.tokenizer.vocab_size, self.temperature,
                                     deterministic)
        config = GenerationConfig(
            max_new_tokens=self.num_tokens, do_sample=False, num_beams=1, eos_token_id=None,
            pad_token_id=self.vlm.tokenizer.pad_token_id, output_hidden_states=self.has_critic,
            return_dict_in_generate=True,
        )
        out = self.vlm.model.generate(**inputs, generation_config=config,
                                      logits_processor=LogitsProcessorList([sampler]))
        tokens = out.sequences[:, inputs["input_ids"].shape[1]:]
        log_probs = torch.stack(sampler.log_probs, dim=1)
        log_probs = log_probs if per_dim else log_probs.sum(1)
        values = self.value_head(out.hidden_states[0][-1][:, -1]) if self.has_critic else None
        return tokens, log_probs, values

    def _forward(self, obs: Obs, tokens: torch.Tensor | None):
        """Teacher-forced pass: (log-softmax over action tokens ``[B, n, 256]`` or None, last prompt hidden)."""
        inputs = self.vlm.inputs(obs)
        prompt_len = inputs["input_ids"].shape[1]
        n = 0 if tokens is None else tokens.shape[1]
        if n:
            ones = torch.ones_like(tokens)
            inputs["input_ids"] = torch.cat([inputs["input_ids"], tokens.to(inputs["input_ids"].device)], 1)
            inputs["attention_mask"] = torch.cat([inputs["attention_mask"], ones], 1)
            if "token_type_ids" in inputs:  # PaliGemma: prefix (image + prompt) 0, generated suffix 1
                inputs["token_type_ids"] = torch.cat([inputs["token_type_ids"], ones], 1)
        out = self.vlm.model(**inputs, output_hidden_states=True, use_cache=False, logits_to_keep=n + 1)
        hidden = out.hidden_states[-1][:, prompt_len - 1]
        if not n:
            return None, hidden
        logits = out.logits[:, :n, self.tokenizer.first_token_id:self.tokenizer.vocab_size].float()
        return torch.log_softmax(logits / self.temperature, dim=-1), hidden

    def evaluate(self, obs: Obs, actions: torch.Tensor, per_dim: bool = False):
        tokens = actions.long()
        log_p, hidden = self._forward(obs, tokens)
        bins = tokens - self.tokenizer.first_token_id
        log_probs = log_p.gather(-1, bins.unsqueeze(-1)).squeeze(-1)
        log_probs = log_probs if per_dim else log_probs.sum(1)
        entropy = -(log_p.exp() * log_p).sum(-1).sum(1)
        return log_probs, entropy, self.value_head(hidden) if self.has_critic else None

    def value(self, obs: Obs) -> torch.Tensor | None:
        if not self.has_critic:
            return None
        return self.value_head(self._forward(obs, None)[1])

    def imitation_loss(self, obs: Obs, expert_actions: torch.Tensor) -> torch.Tensor:
        """Mean per-token cross-entropy of the expert's action tokens (temperature-scaled logits)."""
        log_probs, _, _ = self.evaluate(obs, self.encode_actions(expert_actions))
        return -log_probs.mean() / self.num_tokens
