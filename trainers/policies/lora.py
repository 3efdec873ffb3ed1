"""LoRA through peft: which modules get adapters, and the state that a checkpoint has to keep.

    >>> from vla_gym.trainers.policies.lora import LoraSpec, apply_lora
    >>> spec = LoraSpec(rank=16, alpha=32)                  # language model attention + MLP, the default
    >>> model = apply_lora(model, spec)                     # peft model, base weights frozen   # doctest: +SKIP

``targets`` is ``"language_model"`` (default: every attention and MLP projection of the language
model, not of the vision tower), ``"all-linear"`` (peft's shortcut: every linear layer but the
output head), a list of module-name suffixes (``["q_proj", "v_proj"]``, anywhere in the model) or
a regular expression that peft matches against full module names. In a policy config::

    policy:
      kwargs:
        lora: {rank: 32, alpha: 32, dropout: 0.0, targets: language_model}

Checkpoints keep only what was trained: :func:`trainable_state_dict` returns the parameters with
``requires_grad`` (LoRA adapters, heads, unfrozen layers), so a 3B model's checkpoint is a few MB.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

#: language-model projections of the Hugging Face VLMs vla_gym knows (PaliGemma/Gemma, Idefics3/Llama,
#: Qwen2.5-VL, LLaVA); the vision towers name their layers differently (vision_tower, vision_model, visual)
LANGUAGE_MODEL_TARGETS = (
    r".*(language_model|text_model)\.(?:.*\.)?(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
)


@dataclass
class LoraSpec:
    """LoRA options (the ``lora`` mapping of a VLA policy's kwargs)."""

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    #: "language_model", "all-linear", a list of module-name suffixes, or a regex over full module names
    targets: Any = "language_model"
    #: modules trained in full next to the adapters (peft's modules_to_save)
    modules_to_save: list[str] = field(default_factory=list)

    @classmethod
    def from_config(cls, cfg: LoraSpec | dict | None) -> LoraSpec | None:
        """``None``/``False`` -> no LoRA; ``True`` -> defaults; a mapping -> checked options."""
        if cfg is None or cfg is False:
            return None
        if cfg is True:
            return cls()
        if isinstance(cfg, cls):
            return cfg
        unknown = set(cfg) - set(asdict(cls()))
        if unknown:
            raise ValueError(f"lora: unknown option(s) {sorted(unknown)}; accepted: {sorted(asdict(cls()))}")
        return cls(**cfg)


def target_modules(spec: LoraSpec) -> Any:
    """What peft's ``LoraConfig(target_modules=...)`` receives for ``spec.targets``."""
    if spec.targets == "language_model":
        return LANGUAGE_MODEL_TARGETS
    return spec.targets


def apply_lora(model: nn.Module, spec: LoraSpec) -> nn.Module:
    """Wrap ``model`` with peft LoRA adapters (base weights frozen); raises if no module matches."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout, target_modules=target_modules(spec),
        modules_to_save=list(spec.modules_to_save) or None, bias="none",
    )
    try:
        return get_peft_model(model, config)
    except ValueError as error:
        raise ValueError(
            f"LoRA targets {spec.targets!r} matched no module of {type(model).__name__} ({error}); "
            "set policy.kwargs.lora.targets to module-name suffixes such as [q_proj, v_proj] or to 'all-linear'"
        ) from error


def trainable_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that require grad (detached), by their ``named_parameters`` names."""
    return {name: p.detach() for name, p in module.named_parameters() if p.requires_grad}


def load_trainable_state_dict(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` (from :func:`trainable_state_dict`) into ``module``; every trainable parameter must be there."""
    params = dict(module.named_parameters())
    trainable = {name for name, p in params.items() if p.requires_grad}
    missing, unexpected = sorted(trainable - set(state)), sorted(set(state) - set(params))
    if missing or unexpected:
        raise KeyError(
            f"checkpoint does not match the policy's trainable parameters: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}; build the policy with the same model, lora and freeze options as the run"
        )
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value.to(params[name].dtype))
