"""torch.distributed plumbing: one process per rank, launched by ``torchrun`` (or alone).

    dist = Distributed.from_env(device="auto")     # reads RANK / WORLD_SIZE / LOCAL_RANK if torchrun set them
    model = dist.wrap(policy)                       # DistributedDataParallel when world_size > 1
    model = dist.wrap(policy, strategy="fsdp")      # or FSDP2: parameters sharded over the ranks (in place)
    state = dist.full_state_dict(policy)            # collective; the whole state on rank 0 (and {} elsewhere
    dist.load_full_state_dict(policy, state)        #   under fsdp); loads a whole state into either strategy
    means = dist.mean({"loss": 0.3})                # the same dict on every rank, averaged
    dist.close(synchronize=True)                    # at the clean end: every rank arrives, then teardown

The backend is NCCL when the device is CUDA, gloo otherwise. Without torchrun (no ``WORLD_SIZE``)
everything degrades to a single process and no process group is created.
Multi-node runs use torchrun's standard flags (see docs/trainers.md).

Strategies (``distributed.strategy``): ``ddp`` keeps a whole copy of the policy on every rank and averages
gradients; ``fsdp`` applies FSDP2 (``torch.distributed.fsdp.fully_shard``) to every layer of the policy's
``nn.ModuleList`` stacks (transformer blocks), then to the policy itself: each rank keeps 1/world_size of
every parameter, its gradient and its optimizer state, and all-gathers a layer just for its forward and
backward. The policy's other entry points (``act``, ``evaluate``, ``value``, ``imitation_loss``) are
registered as forward methods, so they gather the parameters too; rollouts and evaluations, whose number
of calls differs between ranks, run inside :meth:`Distributed.gathered` (whole parameters, no collective). Checkpoints hold the same whole
(unsharded) state under both strategies, so a run can resume under the other one.
"""
from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as tdist
from torch import nn

from vla_gym.trainers.policies.base import Policy

#: the values of ``distributed.strategy``
STRATEGIES = ("ddp", "fsdp")
#: Policy methods besides ``forward`` that run the network (FSDP gathers the parameters around them)
POLICY_ENTRY_POINTS = ("act", "evaluate", "value", "imitation_loss")


# DDP re-broadcasts a module's buffers from rank 0 before every forward by default. The only buffers that change
# here (observation normalisation) are updated on every rank with an all-reduce of their own
# (Policy.update_statistics), so that broadcast was a third collective per minibatch (1.4 ms of each on 2 CPU
# processes). torch >= 2.13 names the switch forward_sync_buffers (init sync kept); older ones broadcast_buffers.
_NO_FORWARD_BUFFER_SYNC = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(nn.parallel.DistributedDataParallel.__init__).parameters
    else {"broadcast_buffers": False}
)


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

    def wrap(self, module: nn.Module, find_unused_parameters: bool = False, strategy: str = "ddp") -> nn.Module:
        """The module to train with: ``module`` in DDP (``strategy="ddp"``) or ``module`` itself, sharded in place
        with FSDP2 (``"fsdp"``); ``module`` unchanged on one process. Build the optimizer afterwards, from
        ``module.parameters()`` (under fsdp they become the sharded ``DTensor`` parameters).

        Its forward must be the training pass. Under fsdp every :class:`~vla_gym.trainers.policies.Policy`
        inside ``module`` (``module`` itself, or the one an objective wraps) is sharded, with its entry points.
        """
        if strategy not in STRATEGIES:
            raise ValueError(f"distributed.strategy={strategy!r}: use one of {', '.join(STRATEGIES)}")
        if not self.enabled:
            return module
        if strategy == "fsdp":
            for policy in _policies_in(module):
                shard_fully(policy, POLICY_ENTRY_POINTS)
            return module
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(
            module, device_ids=device_ids, find_unused_parameters=find_unused_parameters, **_NO_FORWARD_BUFFER_SYNC
        )

    @contextlib.contextmanager
    def gathered(self, module: nn.Module) -> Iterator[nn.Module]:
        """Collective under fsdp: inside, every rank holds the whole parameters of ``module`` and its calls run
        no collective, so rollouts and evaluations may call the policy a different number of times on each
        rank. Afterwards the parameters are shards again. A no-op for plain modules (and when nested).

            with dist.gathered(policy):
                buffer = collector.collect(n_steps)
        """
        from torch.distributed.fsdp import FSDPModule

        units = [m for m in module.modules() if isinstance(m, FSDPModule)]
        if not units or getattr(module, "_whole_parameters", False):
            yield module
            return
        for unit in units:  # the same order on every rank
            unit.unshard()
            unit.set_reshard_after_forward(False, recurse=False)
        module._whole_parameters = True
        try:
            yield module
        finally:
            module._whole_parameters = False
            for unit in units:
                unit.reshard()
                unit.set_reshard_after_forward(True, recurse=False)

    # ----------------------------------------------------------------------- whole state dicts
    def full_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """``module.state_dict()`` with whole tensors. Collective under fsdp: the parameters are gathered,
        onto the CPU of rank 0 (other ranks get ``{}``)."""
        if not is_sharded(module):
            return module.state_dict()
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(module, options=_gather_options())

    def load_full_state_dict(self, module: nn.Module, state: dict[str, Any]) -> None:
        """Load a whole state (as :meth:`full_state_dict` gives it) into a plain or sharded ``module``; under
        fsdp every rank passes the whole state and keeps its shard."""
        if not is_sharded(module):
            module.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        set_model_state_dict(module, state, options=StateDictOptions(full_state_dict=True))

    def full_optimizer_state_dict(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """``optimizer.state_dict()`` (parameters numbered, as torch saves it) with whole tensors; collective
        under fsdp (rank 0 gets it, other ranks ``{}``). ``module`` holds the optimizer's parameters."""
        if not is_sharded(module):
            return optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        by_name = get_optimizer_state_dict(module, optimizer, options=_gather_options())
        if not by_name:
            return {}
        number = {}
        for group in by_name["param_groups"]:
            for name in group["params"]:
                number[name] = len(number)
        return {
            "state": {number[name]: value for name, value in by_name["state"].items()},
            "param_groups": [dict(group, params=[number[n] for n in group["params"]])
                             for group in by_name["param_groups"]],
        }

    def load_full_optimizer_state_dict(self, module: nn.Module, optimizer: torch.optim.Optimizer,
                                       state: dict[str, Any]) -> None:
        """Load :meth:`full_optimizer_state_dict`'s state (from either strategy) into ``optimizer``."""
        if not is_sharded(module):
            optimizer.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        names = {id(p): name for name, p in module.named_parameters()}
        params = [p for group in optimizer.param_groups for p in group["params"]]
        saved = [i for group in state["param_groups"] for i in group["params"]]
        if len(saved) != len(params) or any(id(p) not in names for p in params):
            raise ValueError(f"the checkpoint's optimizer holds {len(saved)} parameters, this one {len(params)} "
                             "(of the sharded module): they come from different policies or policy options")
        name_of = {i: names[id(p)] for i, p in zip(saved, params)}
        by_name = {
            "state": {name_of[i]: value for i, value in state["state"].items()},
            "param_groups": [dict(group, params=[name_of[i] for i in group["params"]])
                             for group in state["param_groups"]],
        }
        set_optimizer_state_dict(module, optimizer, by_name, options=StateDictOptions(full_state_dict=True))

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

    def close(self, synchronize: bool = False) -> None:
        """Destroy the process group. ``synchronize=True`` (the clean end of a command) first waits for every
        rank, so no rank tears its group down and exits while another still has collectives in flight with it
        (seen once as a ``terminate called without an active exception`` abort at a two-rank SFT's exit).
        Leave it False on error paths: a rank that failed elsewhere would never arrive."""
        if self.enabled and tdist.is_initialized():
            if synchronize:
                tdist.barrier()
            tdist.destroy_process_group()


# --------------------------------------------------------------------------------------------- FSDP2
def shard_fully(module: nn.Module, entry_points: tuple[str, ...] = ()) -> nn.Module:
    """FSDP2 on ``module`` in place: each layer of its ``nn.ModuleList`` stacks (the outermost ones) becomes
    its own unit, then ``module`` the root unit over the rest; ``entry_points`` (method names) gather the
    parameters like ``forward`` does. Every unit reshards after its forward (the root too: between calls
    every parameter is a shard, so optimizers and state-dict helpers always see the same tensors)."""
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    for layer in _stacked_layers(module):
        fully_shard(layer, reshard_after_forward=True)
    fully_shard(module, reshard_after_forward=True)
    for name in entry_points:
        if callable(getattr(module, name, None)):
            register_fsdp_forward_method(module, name)
    return module


def is_sharded(module: nn.Module) -> bool:
    """Whether FSDP2 shards ``module`` or a module inside it."""
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in module.modules())


def _stacked_layers(module: nn.Module) -> list[nn.Module]:
    """The layers (with parameters) of the outermost ``nn.ModuleList`` containers inside ``module``."""
    layers: list[nn.Module] = []

    def visit(node: nn.Module) -> None:
        for child in node.children():
            if isinstance(child, nn.ModuleList):
                layers.extend(layer for layer in child if any(True for _ in layer.parameters()))
            else:
                visit(child)
    visit(module)
    return layers


def _policies_in(module: nn.Module) -> list[nn.Module]:
    """The outermost policies in ``module`` (``module`` itself when it is one, or has none inside)."""
    if isinstance(module, Policy):
        return [module]
    found = [m for m in module.modules() if isinstance(m, Policy)]
    outer = [m for m in found if not any(m is not o and any(m is x for x in o.modules()) for o in found)]
    return outer or [module]


def _gather_options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True)
