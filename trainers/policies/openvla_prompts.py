"""OpenVLA-style helpers: the prompt, 256-bin action tokens, and action (un)normalisation.

These are plain functions and one small class (no wrapper, no torch); a VLA policy uses them on
each observation and on the tokens its language model emits.

Prompt::

    >>> from vla_gym.trainers.policies.openvla_prompts import openvla_prompt
    >>> openvla_prompt("Put the bowl on the plate")
    'In: What action should the robot take to put the bowl on the plate?\\nOut:'

Action tokens: each action dimension in [-1, 1] falls into one of 256 uniform bins of width 2/256;
bin ``i`` covers ``[-1 + i*w, -1 + (i+1)*w)`` (the last bin also holds 1.0) and decodes to its center
``-1 + (i + 0.5) * w`` (so -0.99609375, ..., 0.99609375; 0.0 itself decodes to 0.00390625). Bin ``i`` is token id
``vocab_size - 1 - i``: the last 256 ids of the vocabulary, highest id for the lowest action, which is
OpenVLA's order. ``decode(encode(ids_as_actions))`` round-trips exactly: ``encode(decode(ids)) == ids``
for every action id, and ``decode(encode(a))`` is within half a bin (0.00390625) of ``a`` clipped to [-1, 1].

    >>> from vla_gym.trainers.policies.openvla_prompts import ActionTokenizer
    >>> tokenizer = ActionTokenizer(vocab_size=32000)
    >>> tokenizer.encode([-1.0, 0.0, 1.0]).tolist()
    [31999, 31871, 31744]
    >>> tokenizer.decode([31999, 31871, 31744]).tolist()
    [-0.99609375, 0.00390625, 0.99609375]

Note: OpenVLA's released code digitizes with 256 *edges* (255 bins of width 2/255); a released OpenVLA
checkpoint decoded with these 256 bins is off by at most one bin width. The 256-bin layout here is
the one vla_gym's VLA policies train with.

Normalisation: policies act in [-1, 1]; datasets' actions are un-normalised with their 1st/99th
percentiles (OpenVLA's ``dataset_statistics.json``: ``stats = {"q01": [...], "q99": [...], "mask": [...]}``;
``mask`` False leaves a dimension, usually the gripper, as is)::

    >>> from vla_gym.trainers.policies.openvla_prompts import unnormalize_actions
    >>> unnormalize_actions([0.0, 1.0], {"q01": [-0.5, 0.0], "q99": [0.5, 2.0]}).tolist()
    [0.0, 2.0]
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

PROMPT_TEMPLATE = "In: What action should the robot take to {instruction}?\nOut:"


def openvla_prompt(instruction: str, lowercase: bool = True) -> str:
    """OpenVLA's prompt for ``instruction`` (stripped; lowercased like OpenVLA's evaluation code)."""
    instruction = instruction.strip()
    return PROMPT_TEMPLATE.format(instruction=instruction.lower() if lowercase else instruction)


class ActionTokenizer:
    """Map actions in [low, high] to the last ``n_bins`` token ids of a vocabulary and back (module docstring)."""

    def __init__(self, vocab_size: int, n_bins: int = 256, low: float = -1.0, high: float = 1.0):
        if n_bins < 2 or vocab_size < n_bins:
            raise ValueError(f"need 2 <= n_bins <= vocab_size, got n_bins={n_bins}, vocab_size={vocab_size}")
        if not high > low:
            raise ValueError(f"need low < high, got low={low}, high={high}")
        self.vocab_size, self.n_bins, self.low, self.high = int(vocab_size), int(n_bins), float(low), float(high)
        self.bin_width = (self.high - self.low) / self.n_bins
        #: decoded value of bin i: low + (i + 0.5) * bin_width
        self.bin_centers = self.low + (np.arange(self.n_bins) + 0.5) * self.bin_width
        #: the action ids are [first_token_id, vocab_size)
        self.first_token_id = self.vocab_size - self.n_bins

    def bins(self, actions) -> np.ndarray:
        """Bin index (0 = lowest actions) of each entry of ``actions``, clipped to [low, high]."""
        actions = np.clip(np.asarray(actions, dtype=np.float64), self.low, self.high)
        return np.minimum(np.floor((actions - self.low) / self.bin_width), self.n_bins - 1).astype(np.int64)

    def encode(self, actions) -> np.ndarray:
        """Token ids (int64, same shape as ``actions``)."""
        return self.vocab_size - 1 - self.bins(actions)

    def is_action_token(self, token_ids) -> np.ndarray:
        token_ids = np.asarray(token_ids)
        return (token_ids >= self.first_token_id) & (token_ids < self.vocab_size)

    def decode(self, token_ids) -> np.ndarray:
        """Bin centers (float32, same shape) of action token ids; raises on ids outside the action range."""
        token_ids = np.asarray(token_ids, dtype=np.int64)
        if not np.all(self.is_action_token(token_ids)):
            bad = token_ids[~self.is_action_token(token_ids)]
            raise ValueError(f"token ids {bad.tolist()[:8]} are not action tokens: valid ids are "
                             f"{self.first_token_id}..{self.vocab_size - 1}")
        return self.bin_centers[self.vocab_size - 1 - token_ids].astype(np.float32)


def _stats(stats: Mapping, dim: int):
    q01 = np.asarray(stats["q01"], dtype=np.float64)
    q99 = np.asarray(stats["q99"], dtype=np.float64)
    mask = np.asarray(stats.get("mask", np.ones(dim, dtype=bool)), dtype=bool)
    if not q01.shape == q99.shape == mask.shape == (dim,):
        raise ValueError(f"stats q01/q99/mask must all have shape ({dim},) like the actions' last axis, got "
                         f"{q01.shape}, {q99.shape}, {mask.shape}")
    return q01, q99, mask


def unnormalize_actions(actions, stats: Mapping) -> np.ndarray:
    """[-1, 1] -> dataset units: ``q01 + (a + 1) / 2 * (q99 - q01)`` where ``stats['mask']`` (default all)."""
    actions = np.asarray(actions, dtype=np.float64)
    q01, q99, mask = _stats(stats, actions.shape[-1])
    return np.where(mask, q01 + (actions + 1.0) / 2.0 * (q99 - q01), actions)


def normalize_actions(actions, stats: Mapping) -> np.ndarray:
    """Dataset units -> [-1, 1] (clipped), the inverse of :func:`unnormalize_actions` inside [q01, q99]."""
    actions = np.asarray(actions, dtype=np.float64)
    q01, q99, mask = _stats(stats, actions.shape[-1])
    span = np.where(q99 > q01, q99 - q01, 1.0)
    return np.where(mask, np.clip(2.0 * (actions - q01) / span - 1.0, -1.0, 1.0), actions)
