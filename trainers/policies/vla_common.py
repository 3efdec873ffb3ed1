"""What every VLA policy shares: loading a Hugging Face VLM, turning observations into its inputs,
value heads, chunk shapes and checkpoints that keep only the trained parameters.

    >>> vlm = VLMBackbone("google/paligemma-3b-pt-224", cameras=["main"], lora={"rank": 32})   # doctest: +SKIP
    >>> inputs = vlm.inputs(obs)   # processor output on the policy's device, prompts left-padded  # doctest: +SKIP
    >>> out = vlm.model(**inputs, output_hidden_states=True)                               # doctest: +SKIP

``model`` is anything ``AutoModelForImageTextToText.from_pretrained`` and ``AutoProcessor.from_pretrained``
accept: a hub name (downloaded once by transformers' cache) or a local ``save_pretrained`` directory; one that is
neither on disk nor downloadable fails at once naming the fix (:mod:`vla_gym.trainers.policies.pretrained`).
The prompt is OpenVLA's (:func:`vla_gym.trainers.policies.openvla_prompts.openvla_prompt`); processors with a chat template
(SmolVLM, Qwen2.5-VL, LLaVA) get it as one user turn with the camera images in front, processors without
one (PaliGemma) get one image token per camera in front of the prompt.

Training scope: ``lora`` (a :class:`~vla_gym.trainers.policies.lora.LoraSpec` mapping) adds adapters and
freezes the base model; without it the language model is trained in full. ``freeze_vision`` (default)
keeps the vision tower frozen either way. :class:`TrainableStateMixin` makes ``state_dict()`` return only
parameters that require grad, so the trainers' checkpoints hold adapters + heads, not the base model.
"""
from __future__ import annotations

import pathlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from vla_gym.trainers.policies.lora import (
    LoraSpec,
    apply_lora,
    load_trainable_state_dict,
    trainable_state_dict,
)
from vla_gym.trainers.policies.openvla_prompts import openvla_prompt
from vla_gym.trainers.policies.pretrained import require_pretrained

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: module-name fragments of vision towers and projectors across HF VLMs
VISION_PARTS = ("vision_tower", "vision_model", "visual", "multi_modal_projector", "connector")


def resolve_dtype(name: str) -> torch.dtype:
    """``"float32" | "bfloat16" | "float16" | "auto"`` ("auto": bfloat16 on CUDA, float32 on CPU)."""
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES) + ['auto']}, got {name!r}")
    return DTYPES[name]


def chunk_shape(action_space: spaces.Space) -> tuple[int, int]:
    """``(K, A)``: action chunk length and action dimension of a Box ``(A,)`` or ``(K, A)`` space."""
    if not isinstance(action_space, spaces.Box) or len(action_space.shape) not in (1, 2):
        raise TypeError(
            f"VLA policies need a Box action space of shape (A,) or (K, A) (ActionChunk), got {action_space}"
        )
    shape = action_space.shape
    return (1, shape[0]) if len(shape) == 1 else (shape[0], shape[1])


def camera_batch(obs: dict, cameras: Sequence[str]) -> list[list[np.ndarray]]:
    """``obs["images"]`` -> per sample, the listed cameras as uint8 HWC numpy arrays."""
    images = obs.get("images") if isinstance(obs, dict) else None
    if not images:
        raise ValueError("VLA policies need image observations: make the env with cameras (env.kwargs.cameras="
                         "[main, wrist]); ManiSkill's obs_mode='images' (its default) has them, obs_mode='state' only "
                         "the cameras named")
    missing = [role for role in cameras if role not in images]
    if missing:
        raise KeyError(f"cameras {missing} not in the observation (it has {sorted(images)}); set policy.kwargs.cameras")
    arrays = [images[role].detach().cpu().numpy() if torch.is_tensor(images[role]) else np.asarray(images[role])
              for role in cameras]
    return [[array[i] for array in arrays] for i in range(arrays[0].shape[0])]


class ValueHead(nn.Module):
    """``[B, F]`` features -> ``[B]`` values (float32 whatever the backbone's dtype)."""

    def __init__(self, in_dim: int, hidden: int = 256):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, 1))
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features.float()).squeeze(-1)


class VLMBackbone(nn.Module):
    """A Hugging Face image-text-to-text model + its processor (see the module docstring)."""

    def __init__(
        self, model: str, cameras: Sequence[str] = ("main",), dtype: str = "auto", lora: Any = None,
        freeze_vision: bool = True, gradient_checkpointing: bool = False, attn_implementation: str | None = None,
    ):
        super().__init__()
        self.name_or_path = require_pretrained(model)
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.cameras = list(cameras)
        self.processor = AutoProcessor.from_pretrained(self.name_or_path)
        self.tokenizer = self.processor.tokenizer
        self.tokenizer.padding_side = "left"
        extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
        net = AutoModelForImageTextToText.from_pretrained(self.name_or_path, dtype=resolve_dtype(dtype), **extra)
        if gradient_checkpointing:
            net.gradient_checkpointing_enable()
        self.config = net.config
        self.lora = LoraSpec.from_config(lora)
        if self.lora is not None:
            net = apply_lora(net, self.lora)  # freezes the base model
        if freeze_vision:
            for name, param in net.named_parameters():
                if any(part in name for part in VISION_PARTS) and "lora_" not in name:
                    param.requires_grad_(False)
        self.model = net
        self.hidden_size = self._text_config().hidden_size
        self.vocab_size = int(net.get_output_embeddings().weight.shape[0])

    def _text_config(self):
        config = self.config
        return getattr(config, "text_config", None) or config

    def prompts(self, instructions: Sequence[str]) -> list[str]:
        """One text per sample with the images' placeholders (module docstring)."""
        texts = [openvla_prompt(text) for text in instructions]
        if getattr(self.processor, "chat_template", None):
            images = [{"type": "image"}] * len(self.cameras)
            return [
                self.processor.apply_chat_template(
                    [{"role": "user", "content": images + [{"type": "text", "text": text}]}], add_generation_prompt=True,
                )
                for text in texts
            ]
        return [self.processor.image_token * len(self.cameras) + text for text in texts]

    def inputs(self, obs: dict) -> dict[str, torch.Tensor]:
        """Processor output for an observation batch, on the model's device, floats in the model's dtype."""
        batch = self.processor(
            text=self.prompts(obs["instruction"]), images=camera_batch(obs, self.cameras), return_tensors="pt",
            padding=True,
        )
        device, dtype = self.model.device, self.model.dtype
        out = {}
        for key, value in batch.items():
            if key == "labels":
                continue
            out[key] = value.to(device, dtype=dtype if value.is_floating_point() else None)
        return out


class TrainableStateMixin:
    """``state_dict``/``load_state_dict`` restricted to parameters that require grad (adapters + heads).

    Put it before :class:`~vla_gym.trainers.policies.base.Policy` in the bases. ``save_trained(dir)`` /
    ``load_trained(dir)`` write and read that state as ``trained.pt`` (plus peft's adapter directory when
    the policy has LoRA, loadable on its own with ``PeftModel.from_pretrained``).
    """

    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        full = nn.Module.state_dict(self, prefix=prefix, keep_vars=keep_vars)
        trainable = {prefix + name for name, p in self.named_parameters() if p.requires_grad}
        out = OrderedDict((key, value) for key, value in full.items() if key in trainable)
        if destination is not None:
            destination.update(out)
            return destination
        return out

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        load_trainable_state_dict(self, dict(state_dict))
        return nn.modules.module._IncompatibleKeys([], [])

    def save_trained(self, directory: str | pathlib.Path) -> pathlib.Path:
        directory = pathlib.Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        torch.save(trainable_state_dict(self), directory / "trained.pt")
        model = getattr(getattr(self, "vlm", None), "model", None)
        if model is not None and hasattr(model, "peft_config"):
            model.save_pretrained(directory / "adapter")
        return directory

    def load_trained(self, directory: str | pathlib.Path) -> None:
        state = torch.load(pathlib.Path(directory) / "trained.pt", map_location="cpu", weights_only=True)
        load_trainable_state_dict(self, state)


def num_parameters(module: nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    total = sum(p.numel() for p in module.parameters())
    return sum(p.numel() for p in module.parameters() if p.requires_grad), total

