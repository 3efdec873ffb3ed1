"""Supervised fine-tuning (behaviour cloning) of any vla_gym policy on a demonstration dataset, under torchrun.

    vla-gym demos VLA/LiberoObject-v0 --episodes-per-task 20 --image-size 128 --out data/libero_object
    python trainers/sft.py --config examples/configs/libero_small_sft.yaml sft.dataset=data/libero_object
    torchrun --nproc_per_node=2 trainers/sft.py --config examples/configs/libero_small_sft.yaml
    python trainers/grpo.py --config examples/configs/libero_small_grpo.yaml grpo.init_checkpoint=runs/libero_small_sft/final.pt

    >>> from vla_gym.trainers.sft import SFT
    >>> sft = SFT.from_config(load_config("examples/configs/maniskill_small_sft.yaml"))    # doctest: +SKIP
    >>> sft.learn().last_metrics["train/loss"]                                            # doctest: +SKIP

The dataset is a LeRobot v3 directory (:class:`vla_gym.data.lerobot.DemoDataset`, ``sft.dataset``). The policy is
``policy.name`` / ``policy.kwargs`` built for ``env.*`` (the env whose spaces the policy acts in, and where it is
evaluated); each optimizer step minimises the policy's own ``imitation_loss`` on ``sft.batch_size`` frames
(split over the ranks, gradients all-reduced by DDP): token cross-entropy (action tokens), L1 of the chunk (OFT),
PI0's flow-matching loss, MSE of the Gaussian mean (the small CPU policy), the negative log-likelihood (mlp, cnn).
When ``env.wrappers`` holds an ``ActionChunk`` of K steps, the labels are K-step chunks of the same episode from
each frame on (padded with its last action; :meth:`DemoDataset.action_chunk`). LoRA, freezing and dtype are the
policy's options (``policy.kwargs.lora``).

The run directory and resume are :class:`~vla_gym.trainers.runtime.run.TrainingRun`'s; logging, checkpoints and
evaluation are the callbacks PPO and GRPO use (:mod:`vla_gym.trainers.runtime.callbacks`; ``checkpoint.every``,
``logging.log_interval`` and ``eval.every`` count optimizer steps); evaluation in the env is
:class:`~vla_gym.trainers.evaluation.periodic.TrainingEvaluator`'s
(``eval.episodes`` fixed seeds, greedy; a final one into ``eval/eval.md``). Checkpoints hold what PPO/GRPO
checkpoints hold (policy name, kwargs, spaces, trained parameters), so ``grpo.init_checkpoint``,
``trainers/eval.py --checkpoint`` and :func:`~vla_gym.trainers.runtime.checkpoint.load_policy` take them; the run's
last one is also copied to ``{run_dir}/{name}/final.pt``. A killed run continues from its newest checkpoint,
mid-epoch (the shuffle of every epoch is fixed by ``seed``).
"""
from __future__ import annotations

import math
import pathlib
import sys
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from vla_gym.core.registry import check_env_id
from vla_gym.data.lerobot import DemoDataset
from vla_gym.data.lerobot.concat import ConcatDemoDataset
from vla_gym.trainers.algorithms.schedules import schedule
from vla_gym.trainers.policies import Policy, make_policy
from vla_gym.trainers.rollout.batch import to_torch
from vla_gym.trainers.runtime.checkpoint import load_actor_weights
from vla_gym.trainers.runtime.config import Config
from vla_gym.trainers.runtime.contract import env_contract
from vla_gym.trainers.runtime.distributed import Distributed
from vla_gym.trainers.runtime.envs import make_envs
from vla_gym.trainers.runtime.launch import logs_and_evaluation_lines
from vla_gym.trainers.runtime.trainer import Trainer


class ImitationObjective(nn.Module):
    """``forward(obs, actions)`` is the policy's ``imitation_loss``, so DDP synchronises exactly that pass."""

    def __init__(self, policy: Policy):
        super().__init__()
        self.policy = policy

    def forward(self, obs: Any, actions: torch.Tensor) -> torch.Tensor:
        return self.policy.imitation_loss(obs, actions)


def check_dataset_fits(data, observation_space, action_space) -> dict[str, Any]:
    """What the dataset must match for a policy of these spaces; returns ``{cameras, chunk}`` or raises naming
    the fix (record the demos with other settings, or change ``env.kwargs`` / ``env.wrappers``)."""
    if not hasattr(observation_space, "spaces") or "state" not in observation_space.spaces:
        raise ValueError(f"SFT trains policies of vla_gym envs (dict observations with a state); env.id gives "
                         f"{observation_space}")
    images = observation_space["images"].spaces if "images" in observation_space.spaces else {}
    missing = [role for role in images if role not in data.cameras]
    if missing:
        raise ValueError(f"the env observes cameras {sorted(images)} but the dataset {data.root} has {data.cameras}: "
                         "set env.kwargs.cameras to cameras the dataset has (or record demos with --cameras)")
    for role, space in images.items():
        shape = tuple(data.features[f"observation.images.{role}"]["shape"])
        if shape != tuple(space.shape):
            raise ValueError(f"camera {role!r}: the dataset's frames are {shape}, the env's {tuple(space.shape)}: "
                             f"set env.kwargs.image_size={shape[0]} (or record demos with --image-size)")
    if "state" in observation_space.spaces and data.state.shape[1] != observation_space["state"].shape[0]:
        raise ValueError(f"the dataset's state has {data.state.shape[1]} dims, the env's "
                         f"{observation_space['state'].shape[0]}: they come from different envs")
    shape = tuple(action_space.shape)
    chunk = shape[0] if len(shape) == 2 else None
    if shape[-1] != data.action_dim:
        raise ValueError(f"the dataset's actions have {data.action_dim} dims, the env's {shape[-1]}")
    return {"cameras": list(images), "chunk": chunk}


def open_dataset(path: str, env_id: str) -> DemoDataset | ConcatDemoDataset:
    """``sft.dataset``, read, or an error naming the setting and the fix: no such directory, not a finished dataset,
    or recorded on another simulator than ``env.id``'s (its receipt says where; the frames could fit the env's shapes
    and still teach nothing). Several directories, comma-separated (demos plus recorded rollouts:
    ``sft.dataset=runs/demos,runs/rollouts``), are read as one :class:`ConcatDemoDataset`."""
    parts = [open_one_dataset(p.strip(), env_id) for p in path.split(",") if p.strip()]
    if len(parts) == 1:
        return parts[0]
    try:
        return ConcatDemoDataset(parts)
    except ValueError as exc:
        raise ValueError(f"sft.dataset={path}: {exc}") from None


def open_one_dataset(path: str, env_id: str) -> DemoDataset:
    """One directory of ``sft.dataset`` (:func:`open_dataset`)."""
    root = pathlib.Path(path)
    record = f"record one with `vla-gym demos {env_id if env_id.startswith('VLA/') else 'ENV_ID'} --out DIR`"
    if not root.is_dir():
        raise FileNotFoundError(f"sft.dataset={path}: no such directory; {record} and pass sft.dataset=DIR")
    try:
        data = DemoDataset(root)
    except (FileNotFoundError, ValueError, NotImplementedError) as exc:
        raise type(exc)(f"sft.dataset={path}: {exc}") from None
    recorded = data.env_id
    if recorded and recorded.startswith("VLA/") and env_id.startswith("VLA/") and recorded != env_id:
        try:
            ours, theirs = check_env_id(env_id).backend, check_env_id(recorded).backend
        except KeyError:  # an id this version does not register: the shape checks decide
            ours = theirs = None
        if ours != theirs:
            raise ValueError(f"sft.dataset={path} was recorded on {recorded} ({theirs}), but env.id={env_id} is a "
                             f"{ours} env: {record}, or pass env.id={recorded}")
    return data


class SFT(Trainer):
    """Behaviour cloning from a demonstration dataset (module docstring)."""

    algo = "sft"
    log_unit = "optimizer steps"
    final_copy = "final.pt"
    resume_hint = "to start SFT from its weights, set sft.init_checkpoint (and checkpoint.resume=null)"
    cli_description = "Behaviour cloning (SFT) on a LeRobot v3 demonstration dataset (see docs/sft.md)"
    #: from_config errors whose message says what to do (no dataset, a dataset that does not fit the env)
    setup_errors = (ValueError, FileNotFoundError)

    def __init__(self, cfg: Config, dist: Distributed | None = None, write_run: bool = True):
        self.start_trainer(cfg, dist, write_run)
        if not self.hp.dataset:
            raise ValueError("sft.dataset is not set: record one with `vla-gym demos ENV_ID --out DIR` and pass "
                             "sft.dataset=DIR")
        if cfg.distributed.strategy != "ddp":
            raise ValueError(f"distributed.strategy={cfg.distributed.strategy!r}: SFT trains with ddp only so far "
                             "(PPO and GRPO take fsdp); set distributed.strategy=ddp")
        self.per_rank_batch = self.dist.shard(self.hp.batch_size, "sft.batch_size")
        self.data = open_dataset(self.hp.dataset, cfg.env.id)
        probe = make_envs(cfg.env, 1)
        observation_space, action_space = probe.single_observation_space, probe.single_action_space
        self.contract = env_contract(probe)
        probe.close()
        try:
            self.layout = check_dataset_fits(self.data, observation_space, action_space)
        except ValueError as exc:
            recorded = f" (recorded on {self.data.env_id})" if self.data.env_id else ""
            raise ValueError(f"sft.dataset={self.hp.dataset}{recorded} does not fit env.id={cfg.env.id}: {exc}") \
                from None
        torch.manual_seed(cfg.seed)  # the same initial parameters on every rank
        self.policy = make_policy(cfg.policy.name, observation_space, action_space, **cfg.policy.kwargs).to(self.device)
        if self.hp.init_checkpoint:  # continue from a trained policy (e.g. RFT's previous round) instead of scratch
            load_actor_weights(self.policy, self.hp.init_checkpoint, "sft.init_checkpoint", self.device, self.contract)
        self.model = self.dist.wrap(ImitationObjective(self.policy), find_unused_parameters=True)
        self._params = [p for p in self.policy.parameters() if p.requires_grad]
        if not self._params:
            raise ValueError(f"policy {cfg.policy.name} has no trainable parameters (check policy.kwargs)")
        self.optimizer = torch.optim.AdamW(self._params, lr=self.hp.learning_rate, eps=self.hp.adam_eps,
                                           weight_decay=self.hp.weight_decay)
        #: the frames trained on (sft.rollout_frames); an epoch is one pass over them
        self.rows = self.data.decision_rows() if self.hp.rollout_frames == "decisions" else np.arange(len(self.data))
        self.steps_per_epoch = max(1, len(self.rows) // self.hp.batch_size)
        total = self.steps_per_epoch * self.hp.epochs
        self.total_steps = min(total, self.hp.max_steps) if self.hp.max_steps is not None else total
        self.frames_seen = 0

    # -------------------------------------------------------------------------------------- data
    def epoch_order(self, epoch: int) -> np.ndarray:
        """The frame order of ``epoch`` (the same on every rank, fixed by ``seed``: resume finds its place)."""
        return self.rows[np.random.default_rng([self.cfg.seed, epoch]).permutation(len(self.rows))]

    def batch_rows(self, update: int) -> list[int]:
        """This rank's frames for optimizer step ``update`` (0-based)."""
        epoch, step = divmod(update, self.steps_per_epoch)
        rows = self.epoch_order(epoch)[step * self.hp.batch_size:(step + 1) * self.hp.batch_size]
        return rows[self.dist.rank::self.dist.world_size].tolist()

    def load_batch(self, rows: list[int]) -> tuple[Any, torch.Tensor]:
        obs, actions, _ = self.data.batch(rows, chunk=self.layout["chunk"], cameras=self.layout["cameras"])
        if not self.layout["cameras"]:
            obs.pop("images")
        return to_torch(obs, self.device), torch.from_numpy(actions).to(self.device)

    # -------------------------------------------------------------------------------------- loop
    @property
    def log_step(self) -> int:
        """The x axis of SFT's logs and what ``total_steps`` counts: optimizer steps."""
        return self.num_updates

    @property
    def throughput_count(self) -> int:
        return self.frames_seen

    def begin_run(self) -> None:
        super().begin_run()
        self.policy.train()

    def update(self) -> dict[str, float]:
        """One optimizer step on ``sft.batch_size`` frames (split over the ranks)."""
        hp = self.hp
        t0 = time.perf_counter()
        lr = hp.learning_rate * schedule(hp.lr_schedule, self.progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        rows = self.batch_rows(self.num_updates)
        obs, actions = self.load_batch(rows)
        t1 = time.perf_counter()
        loss = self.model(obs, actions)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = hp.max_grad_norm if hp.max_grad_norm is not None else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self._params, max_norm)
        self.optimizer.step()
        self.num_updates += 1
        self.frames_seen += len(rows) * self.dist.world_size
        metrics = self.dist.mean({"train/loss": loss.item(), "train/grad_norm": grad_norm.item()})
        metrics.update({"train/lr": lr, "train/epoch": self.num_updates / self.steps_per_epoch,
                        "time/load_s": t1 - t0, "time/step_s": time.perf_counter() - t1})
        return metrics

    # ------------------------------------------------------------------------------- checkpoints
    def counters(self) -> dict[str, int]:
        return {"num_timesteps": 0, "num_updates": self.num_updates, "frames_seen": self.frames_seen}

    def load_counters(self, counters: dict[str, int]) -> None:
        self.num_updates = counters["num_updates"]
        self.frames_seen = counters.get("frames_seen", 0)

    def extra_state(self) -> dict[str, Any]:
        return {"dataset": str(self.data.root), "last_loss": self.last_metrics.get("train/loss")}

    def summary_lines(self) -> list[str]:
        """What the command line prints at the end: loss, the checkpoint RL starts from, TensorBoard, evaluation."""
        lines = [f"run directory: {self.run_path}",
                 f"  loss:        {self.last_metrics.get('train/loss', float('nan')):.4f} after "
                 f"{self.num_updates} steps ({self.num_updates / self.steps_per_epoch:.1f} epochs)"]
        if self.run_path is not None:
            lines.append(f"  checkpoint:  {self.run_path / 'final.pt'}   (grpo.init_checkpoint=...)")
        return lines + logs_and_evaluation_lines(self)


def main(argv: list[str] | None = None) -> int:
    from vla_gym.trainers.runtime.launch import train_main

    return train_main(SFT, argv)


if __name__ == "__main__":
    sys.exit(main())
