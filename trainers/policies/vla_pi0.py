"""``PI0Policy``: openpi's PI0 through transformers' native ``PI0ForConditionalGeneration``, as an RL policy.

    >>> policy = make_policy("vla_gym.trainers.policies.vla_pi0:PI0Policy", env.observation_space,
    ...                      env.action_space, model="/path/to/pi0-checkpoint", num_steps=10)   # doctest: +SKIP
    >>> chains, log_probs, values = policy.act(obs)   # [B, S+1, H, 32] denoising trajectories  # doctest: +SKIP
    >>> env.step(policy.env_actions(chains))   # each chain's last step: [B, K, A] or [B, A]  # doctest: +SKIP

Inputs: up to three cameras (``cameras``, default ``main``, ``wrist``, ``right_wrist``; a role the env
does not have is masked out with PI0's ``pixel_attention_mask``, so a one-wrist robot uses two slots),
the instruction (PI0's prompt: image tokens, ``<bos>``, the text, a newline) and the proprioceptive state
(standardised with ``state_stats`` mean/std when given, zero-padded to ``max_state_dim``).

Sampling is PI0's flow-matching Euler integration from noise (t=1) to actions (t=0) in ``num_steps``
steps, with the VLM prefix computed once and cached. For RL, Gaussian noise of scale
``noise_std * sqrt(dt)`` is injected into every Euler step (as Flow-GRPO / ReinFlow do): each step is then
a Gaussian transition whose log-density is known, and a chunk's log-probability is the sum over steps
(over the env's ``K x A`` action entries). The stored "action" is the whole denoising chain, so
``evaluate`` recomputes the velocities at the stored points under the current weights: the same
log-probabilities at rollout and update time. ``deterministic=True`` integrates without noise. The value
head reads the mean of the VLM prefix's last hidden states. PI0's images are preprocessed in torch
(resize, [-1, 1]) rather than by its processor (which needs torchvision).

Options: ``model`` (path or hub name), ``cameras``, ``num_steps``, ``noise_std``, ``lora``, ``freeze_vision``,
``freeze_vlm`` (train the action expert only, default), ``dtype``, ``critic``, ``state_stats``, ``action_stats``,
``max_prompt_tokens``, ``value_hidden``. ``tests/random_vlms.py`` writes a random-weight
checkpoint (tests, benchmarks).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from vla_gym.trainers.policies.base import Obs, Policy
from vla_gym.trainers.policies.lora import LoraSpec, apply_lora
from vla_gym.trainers.policies.pretrained import require_pretrained
from vla_gym.trainers.policies.vla_common import (
    VISION_PARTS,
    TrainableStateMixin,
    ValueHead,
    chunk_shape,
    resolve_dtype,
)

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class PI0Policy(TrainableStateMixin, Policy):
    """PI0 with noise-injected flow sampling (module docstring)."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        model: str,
        cameras: Sequence[str] = ("main", "wrist", "right_wrist"),
        num_steps: int = 10,
        noise_std: float = 0.3,
        lora: Any = None,
        freeze_vision: bool = True,
        freeze_vlm: bool = True,
        dtype: str = "auto",
        critic: bool = True,
        state_stats: dict | None = None,
        action_stats: dict | None = None,
        max_prompt_tokens: int = 48,
        value_hidden: int = 256,
    ):
        super().__init__(observation_space, action_space)
        model = require_pretrained(model)
        from transformers import AutoTokenizer, PI0ForConditionalGeneration

        if num_steps < 1 or noise_std <= 0:
            raise ValueError(f"need num_steps >= 1 and noise_std > 0, got {num_steps}, {noise_std}")
        self.chunk = chunk_shape(action_space)
        images = observation_space["images"].spaces if isinstance(observation_space, spaces.Dict) else {}
        self.cameras = [role for role in cameras if role in images]
        if not self.cameras or len(cameras) > 3:
            raise ValueError(f"PI0 takes 1 to 3 cameras present in the env; asked {list(cameras)}, env has {sorted(images)}")
        self.num_slots = len(cameras)
        self.num_steps, self.noise_std = int(num_steps), float(noise_std)
        self.has_critic = bool(critic)
        self.state_stats, self.action_stats = state_stats, action_stats
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model))
        net = PI0ForConditionalGeneration.from_pretrained(str(model), dtype=resolve_dtype(dtype))
        self.config = net.config
        if self.chunk[0] > net.config.chunk_size or self.chunk[1] > net.config.max_action_dim:
            raise ValueError(f"env chunk {self.chunk} exceeds PI0's chunk_size/max_action_dim "
                             f"({net.config.chunk_size}, {net.config.max_action_dim})")
        for name, param in net.named_parameters():
            frozen = (freeze_vlm and ".vlm." in f".{name}") or (freeze_vision and any(p in name for p in VISION_PARTS))
            param.requires_grad_(not frozen)
        spec = LoraSpec.from_config(lora)
        self.pi0 = apply_lora(net, spec) if spec is not None else net
        vision = net.config.vlm_config.vision_config
        self.image_size = int(vision.image_size)
        self.tokens_per_image = (vision.image_size // vision.patch_size) ** 2
        self.image_token = "<image>"
        if self.has_critic:
            self.value_head = ValueHead(net.config.vlm_config.text_config.hidden_size, value_hidden)

    @property
    def _core(self):
        return self.pi0.get_base_model() if hasattr(self.pi0, "get_base_model") else self.pi0

    # ------------------------------------------------------------------------------------- inputs
    def inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        """input_ids / attention_mask (right-padded), pixel_values [B, slots, 3, S, S], pixel_attention_mask, state."""
        device, dtype = self.device, self._core.dtype
        batch = len(obs["instruction"])
        prompts = [self.image_token * (self.tokens_per_image * len(self.cameras)) + self.tokenizer.bos_token
                   + text.strip().lower() + "\n" for text in obs["instruction"]]
        text = self.tokenizer(prompts, padding="max_length", truncation=False, return_tensors="pt",
                              max_length=self.tokens_per_image * len(self.cameras) + self.max_prompt_tokens)
        pixels = torch.zeros(batch, self.num_slots, 3, self.image_size, self.image_size, device=device, dtype=dtype)
        mask = torch.zeros(batch, self.num_slots, dtype=torch.bool, device=device)
        for slot, role in enumerate(self.cameras):
            x = obs["images"][role].to(device).permute(0, 3, 1, 2).float()
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", antialias=True)
            pixels[:, slot] = (x / 127.5 - 1.0).to(dtype)
            mask[:, slot] = True
        state = obs["state"].float().to(device)
        if self.state_stats is not None:
            mean = torch.as_tensor(self.state_stats["mean"], device=device, dtype=torch.float32)
            std = torch.as_tensor(self.state_stats["std"], device=device, dtype=torch.float32)
            state = (state - mean) / (std + 1e-8)
        state = F.pad(state, (0, self.config.max_state_dim - state.shape[-1]))
        return {"input_ids": text["input_ids"].to(device), "attention_mask": text["attention_mask"].to(device),
                "pixel_values": pixels, "pixel_attention_mask": mask, "state": state.to(dtype)}

    # ----------------------------------------------------------------------------------- sampling
    def _prefix(self, inputs: dict):
        core = self._core
        embeds = core.model.embed_prefix(inputs["input_ids"], inputs["pixel_values"], inputs["pixel_attention_mask"])
        mask = inputs["attention_mask"]
        out = core.model.vlm(inputs_embeds=embeds, attention_mask=mask, position_ids=mask.cumsum(-1) - 1,
                             token_type_ids=torch.zeros_like(mask), use_cache=True)
        weights = mask.unsqueeze(-1).float()
        pooled = (out.last_hidden_state.float() * weights).sum(1) / weights.sum(1)
        return out.past_key_values, pooled

    def _denoise(self, inputs: dict, chain: torch.Tensor | None, deterministic: bool = False):
        """Run (chain None) or replay (teacher-forced at the stored chain) the Euler steps.

        Returns (chain [B, S+1, H, D], step means [B, S, H, D], pooled prefix features).
        """
        cache, pooled = self._prefix(inputs)
        prefix_len = cache.get_seq_length()
        batch, dt = inputs["state"].shape[0], -1.0 / self.num_steps
        shape = (batch, self.config.chunk_size, self.config.max_action_dim)
        x = torch.randn(shape, device=self.device, dtype=torch.float32) if chain is None else chain[:, 0].float()
        points, means = [x], []
        for step in range(self.num_steps):
            t = torch.full((batch,), 1.0 + step * dt, device=self.device, dtype=torch.float32)
            out = self.pi0(state=inputs["state"], noise=x.to(self._core.dtype), timestep=t,
                           attention_mask=inputs["attention_mask"], pixel_attention_mask=inputs["pixel_attention_mask"],
                           past_key_values=cache)
            cache.crop(prefix_len - cache.get_seq_length())  # drop this step's action tokens
            mean = x + dt * out.logits.float()
            means.append(mean)
            if chain is not None:
                x = chain[:, step + 1].float()
            elif deterministic:
                x = mean
            else:
                x = mean + self.noise_std * math.sqrt(-dt) * torch.randn_like(mean)
            points.append(x)
        return torch.stack(points, 1), torch.stack(means, 1), pooled

    def _log_prob(self, chain: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
        k, a = self.chunk
        std = self.noise_std * math.sqrt(1.0 / self.num_steps)
        z = (chain[:, 1:, :k, :a].float() - means[:, :, :k, :a]) / std
        return (-0.5 * z.square() - math.log(std) - _LOG_SQRT_2PI).flatten(1).sum(1)

    def _entropy(self, batch: int) -> torch.Tensor:
        std = self.noise_std * math.sqrt(1.0 / self.num_steps)
        per_dim = 0.5 + _LOG_SQRT_2PI + math.log(std)
        return torch.full((batch,), per_dim * self.num_steps * self.chunk[0] * self.chunk[1], device=self.device)

    # ------------------------------------------------------------------------------- Policy API
    def act(self, obs: Obs, deterministic: bool = False):
        with torch.no_grad():
            chain, means, pooled = self._denoise(self.inputs(obs), None, deterministic)
            values = self.value_head(pooled) if self.has_critic else None
            return chain, self._log_prob(chain, means), values

    def evaluate(self, obs: Obs, actions: torch.Tensor):
        chain, means, pooled = self._denoise(self.inputs(obs), actions)
        values = self.value_head(pooled) if self.has_critic else None
        return self._log_prob(chain, means), self._entropy(chain.shape[0]), values

    def value(self, obs: Obs) -> torch.Tensor | None:
        if not self.has_critic:
            return None
        return self.value_head(self._prefix(self.inputs(obs))[1])

    def env_actions(self, actions: torch.Tensor) -> np.ndarray:
        k, a = self.chunk
        array = actions[:, -1, :k, :a].detach().float().cpu().numpy().reshape(actions.shape[0], *self.action_space.shape)
        return self.to_env_actions(array)

    def imitation_loss(self, obs: Obs, expert_actions: torch.Tensor) -> torch.Tensor:
        """PI0's own flow-matching loss on expert chunks (zero-padded to chunk_size x max_action_dim)."""
        inputs = self.inputs(obs)
        k, a = self.chunk
        target = torch.zeros(len(obs["instruction"]), self.config.chunk_size, self.config.max_action_dim,
                             device=self.device)
        target[:, :k, :a] = expert_actions.to(self.device).reshape(-1, k, a).float()
        out = self.pi0(state=inputs["state"], input_ids=inputs["input_ids"], pixel_values=inputs["pixel_values"],
                       pixel_attention_mask=inputs["pixel_attention_mask"], attention_mask=inputs["attention_mask"],
                       actions=target.to(self._core.dtype))
        return out.loss
