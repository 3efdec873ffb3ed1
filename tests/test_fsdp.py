"""``distributed.strategy: fsdp`` (FSDP2) against DDP, two gloo ranks under ``torchrun --nproc_per_node=2`` on the CPU.

The test launches this very file with torchrun; run as a script it is the worker. From the same start on the same
data, PPO and GRPO under FSDP reach the parameters (and Adam moments) that DDP reaches; FSDP really shards them; its
checkpoints hold the whole state; and a run resumed from an FSDP checkpoint continues identically under FSDP and DDP.
"""
import json
import pathlib
import sys

import pytest
import torch
from torch import nn

from vla_gym.trainers.policies.actor_critic import ActorCriticPolicy
from vla_gym.trainers.policies.encoders import StateEncoder

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_torchrun import check, torchrun


class ResidualStack(nn.Module):
    """Normalised state, then residual blocks in an ``nn.ModuleList``: a transformer's layout, sharded per block."""

    def __init__(self, observation_space, width: int, depth: int):
        super().__init__()
        self.state = StateEncoder(observation_space, normalize=True)  # running statistics: buffers in checkpoints
        self.proj = nn.Linear(self.state.out_dim, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth))
        self.out_dim = width

    def forward(self, obs) -> torch.Tensor:
        x = self.proj(self.state(obs))
        for block in self.blocks:
            x = x + block(x)
        return x

    def update_statistics(self, obs, reduce=None) -> None:
        self.state.update_statistics(obs, reduce)


class StackedPolicy(ActorCriticPolicy):
    """The actor-critic over :class:`ResidualStack` (``policy.name: test_fsdp:StackedPolicy``)."""

    def __init__(self, observation_space, action_space, width: int = 16, depth: int = 3):
        super().__init__(observation_space, action_space, ResidualStack(observation_space, width, depth),
                         pi_sizes=(width,), vf_sizes=(width,))

#: CartPole, 4 envs over 2 ranks, 2 epochs x 2 minibatches an update (PPO: 2 updates); a checkpoint after every
#: update. PPO trains :class:`StackedPolicy` (layers FSDP shards one by one), GRPO the mlp with the KL reference.
CONFIG = {
    "total_timesteps": 256, "device": "cpu", "seed": 5,
    "env": {"id": "CartPole-v1", "num_envs": 4},
    "policy": {"kwargs": {"hidden_sizes": [16, 16]}},
    "ppo": {"n_steps": 32, "batch_size": 64, "n_epochs": 2},
    "grpo": {"group_size": 2, "groups_per_update": 2, "score": "return", "batch_size": 128, "kl_coef": 0.1,
             "n_epochs": 2},
    "logging": {"progress_bar": False, "tensorboard": False},
    "eval": {"episodes": 4},
    "checkpoint": {"every": 1, "keep_last": 10, "resume": None},
}
TOLERANCE = {"rtol": 0, "atol": 1e-6}


# ------------------------------------------------------------------------------------------- worker
def worker(out: pathlib.Path) -> None:
    from torch.distributed.fsdp import FSDPModule

    from vla_gym.trainers.grpo import GRPO
    from vla_gym.trainers.ppo import PPO
    from vla_gym.trainers.runtime.config import config_from_dict
    from vla_gym.trainers.runtime.distributed import Distributed

    dist = Distributed.from_env("cpu")
    report = {}

    def train(algo_cls, name, strategy, **extra):
        data = dict(CONFIG, name=name, run_dir=str(out / "runs"), distributed={"strategy": strategy}, **extra)
        if algo_cls is PPO:  # PPO trains the stacked policy (FSDP units per block), GRPO the mlp
            data["policy"] = {"name": "test_fsdp:StackedPolicy"}
        algo = algo_cls.from_config(config_from_dict(data), dist=dist, write_run=True)
        local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in algo.policy.parameters())
        units = sum(isinstance(m, FSDPModule) for m in algo.policy.modules())
        algo.learn()
        report[name] = {"local_numel": local, "fsdp_units": units, "updates": algo.num_updates}
        algo.close()

    for algo_cls in (PPO, GRPO):
        kind = algo_cls.algo
        train(algo_cls, f"{kind}_ddp", "ddp")
        train(algo_cls, f"{kind}_fsdp", "fsdp")
    # resume the FSDP run's first checkpoint under each strategy (start_rollouts draws new episodes: the two
    # resumed runs are compared with each other)
    first = out / "runs" / "ppo_fsdp" / "checkpoints" / "ckpt_00000001.pt"
    for strategy in ("fsdp", "ddp"):
        train(PPO, f"ppo_resumed_{strategy}", strategy, checkpoint=dict(CONFIG["checkpoint"], resume=str(first)))
    if dist.is_main:
        (out / "report.json").write_text(json.dumps(report))
    else:
        (out / "report_rank1.json").write_text(json.dumps(report))
    dist.close()


# -------------------------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    check(torchrun(__file__, str(out)))
    return out, json.loads((out / "report.json").read_text()), json.loads((out / "report_rank1.json").read_text())


def checkpoint(out: pathlib.Path, name: str, update: int) -> dict:
    return torch.load(out / "runs" / name / "checkpoints" / f"ckpt_{update:08d}.pt", weights_only=False)


def assert_close_tree(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_close_tree(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close_tree(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert type(b) is torch.Tensor and a.shape == b.shape, f"{where}: {type(b)} {getattr(b, 'shape', '')}"
        torch.testing.assert_close(a, b, **TOLERANCE, msg=lambda m: f"{where}: {m}")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_fsdp_reaches_the_parameters_ddp_reaches(runs, algo):
    out, report, _ = runs
    assert report[f"{algo}_ddp"]["updates"] == report[f"{algo}_fsdp"]["updates"] >= 2
    for update in (1, 2):
        ddp, fsdp = checkpoint(out, f"{algo}_ddp", update), checkpoint(out, f"{algo}_fsdp", update)
        assert_close_tree(ddp["policy"], fsdp["policy"], f"{algo} update {update} policy")
        assert_close_tree(ddp["optimizer"], fsdp["optimizer"], f"{algo} update {update} optimizer")
        assert_close_tree(ddp["extra"], fsdp["extra"], f"{algo} update {update} extra")
    start = checkpoint(out, f"{algo}_ddp", 1)["policy"]
    assert any(not torch.equal(start[k], v) for k, v in checkpoint(out, f"{algo}_ddp", 2)["policy"].items())


def test_fsdp_shards_the_parameters_over_the_ranks(runs):
    _, rank0, rank1 = runs
    whole = rank0["ppo_ddp"]["local_numel"]
    assert rank1["ppo_ddp"]["local_numel"] == whole
    # FSDP2 splits every parameter along dim 0 (rank 0 gets the larger half of an odd size)
    assert rank0["ppo_fsdp"]["local_numel"] + rank1["ppo_fsdp"]["local_numel"] == whole
    assert rank0["ppo_fsdp"]["local_numel"] < 0.6 * whole and rank1["ppo_fsdp"]["local_numel"] < 0.6 * whole
    assert rank0["ppo_fsdp"]["fsdp_units"] == 3 + 1  # one per block of the stack, and the policy
    assert rank0["grpo_fsdp"]["fsdp_units"] == 1 and rank0["ppo_ddp"]["fsdp_units"] == 0


def test_fsdp_checkpoint_resumes_identically_under_either_strategy(runs):
    out, report, _ = runs
    assert report["ppo_resumed_fsdp"]["updates"] == report["ppo_resumed_ddp"]["updates"] == 2
    resumed = checkpoint(out, "ppo_resumed_fsdp", 2)
    assert resumed["counters"] == checkpoint(out, "ppo_fsdp", 2)["counters"]
    assert_close_tree(resumed["policy"], checkpoint(out, "ppo_resumed_ddp", 2)["policy"], "resumed policy")
    assert_close_tree(resumed["optimizer"], checkpoint(out, "ppo_resumed_ddp", 2)["optimizer"], "resumed optimizer")
    # new episodes after a resume: the resumed run moved on from the checkpoint, elsewhere than the uninterrupted one
    first = checkpoint(out, "ppo_fsdp", 1)["policy"]
    assert any(not torch.equal(first[k], v) for k, v in resumed["policy"].items())


def test_unknown_strategy_is_a_config_error():
    from vla_gym.trainers.runtime.config import ConfigError, config_from_dict
    from vla_gym.trainers.runtime.distributed import Distributed

    with pytest.raises(ConfigError, match=r"distributed\.strategy: 'zero' is not one of 'ddp', 'fsdp'"):
        config_from_dict({}, ["distributed.strategy=zero"])
    with pytest.raises(ValueError, match="distributed.strategy='zero': use one of ddp, fsdp"):
        Distributed().wrap(torch.nn.Linear(2, 2), strategy="zero")


if __name__ == "__main__":
    worker(pathlib.Path(sys.argv[1]))
