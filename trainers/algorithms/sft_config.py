"""SFT's settings: the ``sft:`` section of a run config (trainers/sft.py).

    >>> SFTConfig(max_steps=2).epochs
    10
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vla_gym.trainers.runtime.schema import at_least_one


@dataclass
class SFTConfig:
    """Behaviour cloning (trainers/sft.py). An SFT update is one optimizer step: checkpoint.every, eval.every and
    logging.log_interval count them."""

    #: LeRobot v3 dataset directory (``vla-gym demos ENV_ID --out DIR``), or several comma-separated (demos plus
    #: ``trainers/eval.py --record-dataset`` rollouts), read as one
    dataset: str | None = None
    #: a PPO, GRPO or SFT checkpoint whose actor weights the policy starts from (null: the policy's fresh
    #: initialisation); its observation/action contract is checked against the env first
    init_checkpoint: str | None = None
    #: passes over the dataset
    epochs: int = 10
    #: stop after this many optimizer steps (null: epochs decide); short runs
    max_steps: int | None = None
    #: frames per optimizer step over all ranks (a multiple of the number of processes)
    batch_size: int = 64
    learning_rate: float = 1e-3
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    adam_eps: float = 1e-8
    #: which frames of recorded rollouts (``trainers/eval.py --record-dataset``) are trained on: ``all``, or
    #: ``decisions``, only those where the recording policy chose an action chunk (its own output is the label
    #: there; the frames between replay the chunk open loop). Demos always train on every frame
    rollout_frames: Literal["all", "decisions"] = "all"

    def __post_init__(self):
        at_least_one("sft", {"epochs": self.epochs, "batch_size": self.batch_size, "max_steps": self.max_steps})
