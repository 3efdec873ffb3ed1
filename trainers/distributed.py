"""torch.distributed plumbing: one process per rank, launched by ``torchrun`` (or alone).

    dist = Distributed.from_env(device="auto")     # reads RANK / WORLD_SIZE / LOCAL_RANK if torchrun set them
    model = dist.wrap(policy)                       # DistributedDataParallel when world_size > 1
    means = dist.mean({"loss": 0.3})                # the same dict on every rank, averaged
    dist.close()

The backend is NCCL when the device is CUDA, gloo otherwise. Without torchrun (no ``WORLD_SIZE``)
everything degrades to a single process and no process group is created.
Multi-node runs use torchrun's standard flags (see docs/trainers.md).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as tdist
from torch import nn


@dataclass
class Distributed:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def from_env(cls, device: str = "auto", timeout_s: float = 1800.0) -> Distributed:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("device=cuda but torch sees no CUDA device; set device=cpu (or auto)")
            torch.cuda.set_device(local_rank)
            resolved = torch.device("cuda", local_rank)
        else:
            resolved = torch.device("cpu")
        if world_size > 1 and not tdist.is_initialized():
            backend = "nccl" if resolved.type == "cuda" else "gloo"
            tdist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s),
                                     **({"device_id": resolved} if resolved.type == "cuda" else {}))
        return cls(rank, world_size, local_rank, resolved)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def wrap(self, module: nn.Module, find_unused_parameters: bool = False) -> nn.Module:
        """DDP around ``module`` when distributed (its forward must be the training pass)."""
        if not self.enabled:
            return module
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(
            module, device_ids=device_ids, find_unused_parameters=find_unused_parameters
        )

    def shard(self, total: int, what: str = "env.num_envs") -> int:
        """This rank's share of ``total`` items (must divide evenly)."""
        if total % self.world_size:
            raise ValueError(
                f"{what}={total} does not split evenly over {self.world_size} processes; "
                f"use a multiple of {self.world_size}"
            )
        return total // self.world_size

    def sum_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            tensor = tensor.to(self.device)
            tdist.all_reduce(tensor, op=tdist.ReduceOp.SUM)
        return tensor.cpu()

    def mean(self, values: dict[str, float]) -> dict[str, float]:
        """Average a dict of floats over the ranks (every rank must pass the same keys)."""
        if not self.enabled or not values:
            return dict(values)
        keys = sorted(values)
        total = self.sum_tensor(torch.tensor([float(values[k]) for k in keys], dtype=torch.float64))
        return {k: v / self.world_size for k, v in zip(keys, total.tolist())}

    def weighted_mean(self, sums: dict[str, float], counts: dict[str, float]) -> dict[str, float]:
        """Pooled mean per key: sum over ranks of ``sums[k]`` / sum of ``counts[k]`` (keys with no count dropped)."""
        keys = sorted(counts)
        packed = torch.tensor([[sums.get(k, 0.0), counts[k]] for k in keys], dtype=torch.float64).reshape(-1, 2)
        packed = self.sum_tensor(packed)
        return {k: s / c for k, (s, c) in zip(keys, packed.tolist()) if c > 0}

    def max(self, value: float) -> float:
        return self._reduce_scalar(value, tdist.ReduceOp.MAX)

    def min(self, value: float) -> float:
        return self._reduce_scalar(value, tdist.ReduceOp.MIN)

    def _reduce_scalar(self, value: float, op) -> float:
        if not self.enabled:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        tdist.all_reduce(tensor, op=op)
        return tensor.item()

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        out = [None] * self.world_size
        tdist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        tdist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.enabled:
            tdist.barrier()

    def close(self) -> None:
        if self.enabled and tdist.is_initialized():
            tdist.destroy_process_group()
