"""Two processes under ``torchrun --nproc_per_node=2`` on the CPU (gloo).

The tests launch this very file with torchrun, once per module: run as a script it is the worker. It trains a few
PPO updates, then a few GRPO updates, in one process group, saving what the checks compare (parameters, each
rank's first observations, its GRPO group specs), then closes the group with rank 1 a second late.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
CARTPOLE = {
    "name": "tr", "total_timesteps": 1024, "device": "cpu", "seed": 3,
    "env": {"id": "CartPole-v1", "num_envs": 4},
    # normalize_obs: its running statistics are buffers that DDP does not re-broadcast (each rank all-reduces them)
    "policy": {"kwargs": {"hidden_sizes": [16, 16], "normalize_obs": True}},
    "ppo": {"n_steps": 64, "batch_size": 64, "n_epochs": 2},
    "grpo": {"group_size": 2, "groups_per_update": 4, "score": "return", "batch_size": 128, "kl_coef": 0.1},
    "logging": {"progress_bar": False},
    "checkpoint": {"every": 2, "resume": None},
}


def torchrun(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(  # noqa: PLW1510 (the caller checks returncode)
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )


def check(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]


# ------------------------------------------------------------------------------------------- worker
def train(algo_name: str, out: pathlib.Path, dist) -> None:
    """A few updates of ``algo_name`` on ``dist``'s ranks; each rank saves its parameters and what it drew."""
    from vla_gym.trainers.grpo import GRPO
    from vla_gym.trainers.ppo import PPO
    from vla_gym.trainers.runtime.config import config_from_dict

    cfg = config_from_dict(dict(CARTPOLE, run_dir=str(out / algo_name / "runs")))
    algo = (PPO if algo_name == "ppo" else GRPO).from_config(cfg, dist=dist, write_run=True)
    initial = {k: v.clone() for k, v in algo.policy.state_dict().items()}
    first_obs = []
    specs = []
    if algo_name == "ppo":
        original = algo.start_rollouts

        def start(seeds):
            original(seeds)
            first_obs.append(algo.collector.obs.tolist())
        algo.start_rollouts = start
    else:
        original_specs = algo.group_specs

        def group_specs():
            mine = original_specs()
            specs.extend((s.seed, s.task_id, s.init_state_id) for s in mine)
            return mine
        algo.group_specs = group_specs
    algo.learn()
    torch.save({"initial": initial, "final": algo.policy.state_dict(), "updates": algo.num_updates,
                "steps": algo.num_timesteps}, out / f"{algo_name}_rank{dist.rank}.pt")
    (out / f"{algo_name}_rank{dist.rank}.json").write_text(json.dumps({"first_obs": first_obs, "specs": specs}))
    algo.close()


def worker(out: pathlib.Path) -> None:
    """PPO, then GRPO, in one process group; then ``close(synchronize=True)`` with rank 1 arriving a second late
    (each rank writes when it arrived and when ``close`` returned)."""
    import time

    from vla_gym.trainers.runtime.distributed import Distributed

    dist = Distributed.from_env("cpu")
    for algo_name in ("ppo", "grpo"):
        train(algo_name, out, dist)
    if dist.rank == 1:
        time.sleep(1.0)
    arrived = time.time()
    dist.close(synchronize=True)
    returned = time.time()
    (out / f"close_rank{dist.rank}.json").write_text(json.dumps({"arrived": arrived, "returned": returned}))


# -------------------------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> pathlib.Path:
    """One ``torchrun --nproc_per_node=2`` of this file's worker, shared by the checks below."""
    out = tmp_path_factory.mktemp("torchrun")
    check(torchrun(__file__, str(out)))
    return out


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_both_ranks_hold_identical_parameters(launched, algo):
    ranks = [torch.load(launched / f"{algo}_rank{r}.pt") for r in (0, 1)]
    for key, value in ranks[0]["final"].items():
        assert torch.equal(value, ranks[1]["final"][key]), key
        assert torch.equal(ranks[0]["initial"][key], ranks[1]["initial"][key]), key
    assert any(not torch.equal(ranks[0]["initial"][k], v) for k, v in ranks[0]["final"].items()), "nothing learnt"
    counts = [value for key, value in ranks[0]["final"].items() if key.endswith("count")]
    assert counts and all(count >= 1024 for count in counts)  # the observation statistics saw both ranks' rollouts
    assert ranks[0]["updates"] == ranks[1]["updates"] >= 2 and ranks[0]["steps"] == ranks[1]["steps"] >= 1024
    info = [json.loads((launched / f"{algo}_rank{r}.json").read_text()) for r in (0, 1)]
    if algo == "ppo":  # each rank owns its env shard, seeded apart
        assert info[0]["first_obs"] != info[1]["first_obs"]
    else:  # groups never span ranks: each rank draws its own initial states
        assert not set(map(tuple, info[0]["specs"])) & set(map(tuple, info[1]["specs"]))
    run = launched / algo / "runs" / "tr"
    assert (run / "config.yaml").exists() and list((run / "tensorboard").iterdir())
    assert len(list((run / "checkpoints").glob("ckpt_*.pt"))) >= 1
    assert len(list((run / "tensorboard").iterdir())) == 1  # only rank 0 logs


def test_entry_points_under_torchrun(tmp_path):
    # 4 updates of 8 envs x 32 steps, a checkpoint after the 4th, then an evaluation
    overrides = [f"run_dir={tmp_path}", "name=cli", "total_timesteps=1024", "ppo.n_epochs=2", "checkpoint.every=4",
                 "eval.episodes=4", "logging.progress_bar=false"]
    result = torchrun("trainers/ppo.py", "--config", "examples/configs/cartpole_ppo.yaml", *overrides)
    check(result)
    assert "run directory:" in result.stdout and result.stdout.count("run directory:") == 1  # rank 0 prints
    assert (tmp_path / "cli" / "eval" / "eval.md").exists()
    ckpt = max((tmp_path / "cli" / "checkpoints").glob("*.pt"))
    result = torchrun("trainers/eval.py", "--checkpoint", str(ckpt), "--episodes-per-task", "6", "--num-envs", "2",
                      "--out", str(tmp_path / "ev"))
    check(result)
    report = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert report["summary"]["overall"]["episodes"] == 6
    assert sorted(e["spec"]["seed"] for e in report["episodes"]) == list(range(6))


def test_a_synchronized_close_waits_for_the_late_rank(launched):
    """The clean end of every command (``Distributed.close(synchronize=True)``): no rank tears the group down
    while another has not arrived yet (the plain close, kept for error paths, returns on rank 0 about a second
    before rank 1 arrives: this check fails without the barrier)."""
    first, late = (json.loads((launched / f"close_rank{r}.json").read_text()) for r in (0, 1))
    assert first["returned"] >= late["arrived"]


if __name__ == "__main__":
    worker(pathlib.Path(sys.argv[1]))
