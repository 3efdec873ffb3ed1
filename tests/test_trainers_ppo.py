"""PPO and GRPO end to end on CartPole: Python API, entry points, logging names, checkpoints, SIGKILL + resume."""
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from short_runs import scalar_tags

from vla_gym.trainers import GRPO, PPO
from vla_gym.trainers.runtime.checkpoint import load_checkpoint, load_policy
from vla_gym.trainers.runtime.config import config_from_dict

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = "examples/configs/cartpole_ppo.yaml"
ISSUE_SCALARS = {
    "train/actor/approx_kl", "train/actor/clip_fraction", "train/actor/clipped_ratio", "train/actor/grad_norm",
    "train/actor/lr", "train/actor/policy_loss", "train/critic/value_loss", "train/critic/value_clip_ratio",
    "train/critic/explained_variance", "train/entropy_loss", "train/loss", "rollout/advantages_max",
    "rollout/advantages_mean", "rollout/advantages_min", "rollout/rewards", "env/episode_len", "env/return",
    "env/reward",
}


def run_script(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    command = [sys.executable, script, *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,  # noqa: PLW1510
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def run_main(capsys, script: str, *args: str) -> tuple[int, str, str]:
    """``python trainers/<name>.py ARGS`` as its ``main(ARGS)`` in this process: (exit code, stdout, stderr). The
    entry points are what these tests check, not a process start (the SIGKILL test starts one)."""
    import importlib

    main = importlib.import_module(f"vla_gym.trainers.{pathlib.Path(script).stem}").main
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_ppo_learns_cartpole_and_round_trips_through_save_load(tmp_path):
    model = PPO("mlp", "CartPole-v1", num_envs=8, n_steps=32, batch_size=256, n_epochs=20, learning_rate=1e-3,
                gamma=0.98, gae_lambda=0.8, lr_schedule="linear", clip_schedule="linear", seed=1)
    returns = []
    model.learn(25_000, callback=lambda algo, metrics: returns.append(metrics.get("env/return", np.nan)))
    assert model.num_timesteps >= 25_000
    assert np.nanmax(returns[-10:]) > 150, returns  # random play scores about 20

    model.save(tmp_path / "model.pt")
    loaded = PPO.load(tmp_path / "model.pt", device="cpu")
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32) * 0.05
    assert np.array_equal(model.predict(obs)[0], loaded.predict(obs)[0])
    action, _ = loaded.predict(obs[0])
    assert np.ndim(action) == 0 and action in (0, 1)
    policy = load_policy(tmp_path / "model.pt")
    assert torch.equal(policy.act(torch.as_tensor(obs), deterministic=True)[0], torch.as_tensor(model.predict(obs)[0]))
    model.close()


def test_cli_writes_config_tensorboard_checkpoints_and_eval(tmp_path, capsys):
    code, out, err = run_main(capsys, "trainers/ppo.py", "--config", CONFIG, f"run_dir={tmp_path}", "name=cli",
                              "total_timesteps=3000", "checkpoint.every=5", "checkpoint.keep_last=2", "eval.episodes=3",
                              "logging.progress_bar=false")
    assert code == 0, err[-3000:]
    run = tmp_path / "cli"
    resolved = config_from_dict(__import__("yaml").safe_load((run / "config.yaml").read_text()))
    assert resolved.total_timesteps == 3000 and resolved.ppo.n_steps == 32
    assert ISSUE_SCALARS <= scalar_tags(run), ISSUE_SCALARS - scalar_tags(run)
    assert "env/success_once" not in scalar_tags(run)  # CartPole reports no success
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["ckpt_00000010.pt", "ckpt_00000012.pt"]  # keep_last=2; the final one after 12 updates
    assert "| **all** | 3 | n/a |" in (run / "eval" / "eval.md").read_text()
    assert f"checkpoint:  {run / 'checkpoints' / 'ckpt_00000012.pt'}" in out


def test_config_errors_name_the_key(capsys):
    code, _, err = run_main(capsys, "trainers/ppo.py", "--config", CONFIG, "ppo.n_stepz=3")
    assert code == 2 and "ppo.n_stepz" in err and "n_steps" in err
    code, _, err = run_main(capsys, "trainers/grpo.py", "--config", CONFIG, "grpo.group_size=four")
    assert code == 2 and "grpo.group_size: expected an integer" in err
    code, out, _ = run_main(capsys, "trainers/ppo.py", "--config", CONFIG, "--print-config", "env.num_envs=2")
    assert code == 0 and "num_envs: 2" in out


def test_sigkilled_run_resumes_from_its_last_checkpoint(tmp_path, capsys):
    args = ["trainers/ppo.py", "--config", CONFIG, f"run_dir={tmp_path}", "name=killed", "total_timesteps=400000",
            "checkpoint.every=3", "logging.progress_bar=false", "eval.episodes=0"]
    process = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    checkpoints = tmp_path / "killed" / "checkpoints"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(checkpoints.glob("ckpt_*.pt"))) < 2:
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    last = max(checkpoints.glob("ckpt_*.pt"))
    state = load_checkpoint(last)
    done_updates, done_steps = state["counters"]["num_updates"], state["counters"]["num_timesteps"]
    assert done_updates % 3 == 0 and done_steps == done_updates * 256

    target = done_steps + 256 * 4  # the same command (its main, in this process) with a larger budget
    code, out, err = run_main(capsys, *args[:5], f"total_timesteps={target}", *args[6:])
    assert code == 0, err[-3000:]
    assert f"resumed from {last} at update {done_updates}, {done_steps} env steps" in out
    receipts = sorted(p.name for p in (tmp_path / "killed").glob("receipt*.json"))
    assert receipts == ["receipt-1.json", "receipt.json"]  # the start's and the resume's
    final = load_checkpoint(max(checkpoints.glob("ckpt_*.pt")))
    assert final["counters"] == {"num_updates": done_updates + 4, "num_timesteps": target}
    assert final["optimizer"]["state"]  # Adam moments came back and went on
    assert not list(checkpoints.glob("*.tmp"))


def test_resume_restores_model_optimizer_counters_and_rng(tmp_path):
    cfg = config_from_dict({"env": {"num_envs": 2}, "ppo": {"n_steps": 16, "batch_size": 16, "n_epochs": 1},
                            "run_dir": str(tmp_path), "name": "r", "logging": {"progress_bar": False},
                            "checkpoint": {"every": 1, "resume": "auto"}, "eval": {"episodes": 0, "every": 1}})
    first = PPO.from_config(cfg).learn(64)
    assert first.evaluator.envs is None and first.last_eval is None  # eval.episodes=0: no evaluation, no eval envs
    first_rng = (torch.rand(3), first.generator.get_state())
    first.close()
    resumed = PPO.from_config(cfg)
    resumed.total_steps = 64
    resumed.begin_run()
    assert (resumed.num_updates, resumed.num_timesteps) == (2, 64)
    for key, value in first.policy.state_dict().items():
        assert torch.equal(value, resumed.policy.state_dict()[key])
    assert torch.equal(torch.rand(3), first_rng[0]) and torch.equal(resumed.generator.get_state(), first_rng[1])
    resumed.close()


def test_a_checkpoint_without_optimizer_state_resumes_with_a_fresh_adam(tmp_path):
    """A finished campaign's committed checkpoint drops its Adam moments (optimizer None): more steps still resume."""
    from vla_gym.trainers.runtime.checkpoint import atomic_save

    cfg = config_from_dict({"env": {"num_envs": 2}, "ppo": {"n_steps": 16, "batch_size": 16, "n_epochs": 1},
                            "run_dir": str(tmp_path), "name": "s", "logging": {"progress_bar": False},
                            "checkpoint": {"every": 1, "resume": "auto", "keep_last": 1}, "eval": {"episodes": 0}})
    PPO.from_config(cfg).learn(32).close()
    (newest,) = (tmp_path / "s" / "checkpoints").glob("ckpt_*.pt")
    atomic_save({**load_checkpoint(newest), "optimizer": None}, newest)
    resumed = PPO.from_config(cfg).learn(64)
    assert (resumed.num_updates, resumed.num_timesteps) == (2, 64) and resumed.optimizer.state_dict()["state"]
    resumed.close()


def test_resume_falls_back_past_an_unreadable_checkpoint(tmp_path, capsys):
    from vla_gym.trainers.eval import main as eval_main

    cfg = config_from_dict({"env": {"num_envs": 2}, "ppo": {"n_steps": 16, "batch_size": 32, "n_epochs": 1},
                            "run_dir": str(tmp_path), "name": "t", "logging": {"progress_bar": False},
                            "checkpoint": {"every": 1, "resume": "auto"}, "eval": {"episodes": 0}})
    PPO.from_config(cfg).learn(96).close()
    checkpoints = tmp_path / "t" / "checkpoints"
    newest = checkpoints / "ckpt_00000003.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # cut short, as by a full disk
    capsys.readouterr()

    assert eval_main(["--checkpoint", str(newest)]) == 2  # the evaluation CLI names the file, no traceback
    assert f"--checkpoint: cannot read checkpoint {newest} (truncated or corrupted?)" in capsys.readouterr().err

    resumed = PPO.from_config(cfg).learn(128)
    out = capsys.readouterr().out
    assert f"cannot read checkpoint {newest}" in out and "failed finding central directory" in out
    assert f"resuming from {checkpoints / 'ckpt_00000002.pt'}, the newest checkpoint that reads" in out
    assert f"resumed from {checkpoints / 'ckpt_00000002.pt'} at update 2, 64 env steps" in out
    assert (resumed.num_updates, resumed.num_timesteps) == (4, 128)
    assert load_checkpoint(newest)["counters"]["num_updates"] == 3  # written again, whole this time
    resumed.close()


def test_grpo_from_a_ppo_checkpoint_with_reference_kl(tmp_path):
    ppo = PPO("mlp", "CartPole-v1", num_envs=2, n_steps=16, batch_size=32, n_epochs=1)
    ppo.learn(32).save(tmp_path / "ppo.pt")
    grpo = GRPO("mlp", "CartPole-v1", num_envs=2, group_size=3, groups_per_update=2, score="return", kl_coef=0.05,
                init_checkpoint=str(tmp_path / "ppo.pt"), batch_size=64, n_epochs=2)
    assert not grpo.policy.has_critic
    for key, value in grpo.policy.state_dict().items():
        assert torch.equal(value, ppo.policy.state_dict()[key])
    metrics = []
    grpo.learn(200, callback=lambda algo, m: metrics.append(m))
    assert {"train/actor/kl_ref", "rollout/advantages_mean", "env/return", "train/actor/clip_fraction"} <= set(metrics[0])
    assert metrics[0]["rollout/advantages_min"] < 0 < metrics[0]["rollout/advantages_max"]  # returns differ in a group
    with pytest.raises(ValueError, match="grpo.score=return"):
        GRPO("mlp", "CartPole-v1", num_envs=1, group_size=2, groups_per_update=1).learn(10)
    ppo.close()
    grpo.close()


def test_ppo_from_a_checkpoint_without_critic_keeps_a_fresh_critic(tmp_path):
    """SFT -> PPO: ppo.init_checkpoint loads the actor of a critic-less checkpoint (SFT, GRPO); the critic starts fresh."""
    grpo = GRPO("mlp", "CartPole-v1", num_envs=1, group_size=2, groups_per_update=1, score="return")
    grpo.save(tmp_path / "actor.pt")
    fresh = PPO("mlp", "CartPole-v1", num_envs=1, seed=1)
    ppo = PPO("mlp", "CartPole-v1", num_envs=1, seed=1, init_checkpoint=str(tmp_path / "actor.pt"), n_steps=16,
              batch_size=16, n_epochs=1)
    actor = grpo.policy.state_dict()
    for key, value in ppo.policy.state_dict().items():
        expected = actor[key] if key in actor else fresh.policy.state_dict()[key]
        assert torch.equal(value, expected), key
    assert any(key.startswith("value_head.") for key in ppo.policy.state_dict())
    ppo.learn(32)
    with pytest.raises(ValueError, match="ppo.init_checkpoint"):
        PPO("mlp", "CartPole-v1", num_envs=1, policy_kwargs={"hidden_sizes": [8]},
            init_checkpoint=str(tmp_path / "actor.pt"))
    for model in (grpo, fresh, ppo):
        model.close()


def test_critic_warmup_moves_only_the_critic_for_its_updates():
    """ppo.critic_warmup_updates=2: two updates fit the value head while the actor (and its log std) stays put."""
    ppo = PPO("mlp", "CartPole-v1", num_envs=2, n_steps=16, batch_size=16, n_epochs=2, critic_warmup_updates=2)
    start = {k: v.clone() for k, v in ppo.policy.state_dict().items()}

    def moved(prefix: str) -> bool:
        return any(not torch.equal(start[k], v) for k, v in ppo.policy.state_dict().items() if k.startswith(prefix))

    ppo.learn(64)
    assert ppo.num_updates == 2 and moved("vf_net.") and moved("value_head.")
    assert not moved("pi_net.") and not moved("action_head.")
    ppo.learn(96)
    assert moved("pi_net.") and moved("action_head.")
    ppo.close()


@pytest.mark.slow
def test_cartpole_benchmark_short_form(tmp_path):
    result = run_script("benchmarks/bench_ppo_cartpole.py", "--seeds", "1", "--steps", "40000",
                        "--json", str(tmp_path / "bench.json"), timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    data = __import__("json").loads((tmp_path / "bench.json").read_text())
    assert data["vla_gym"]["summary"]["eval_return"] > 150 and data["speedup"] > 0


def test_a_video_that_cannot_be_rendered_is_reported_not_fatal(tmp_path, capsys):
    if __import__("importlib.util").util.find_spec("pygame") is not None:
        pytest.skip("CartPole renders here (pygame is installed)")
    code, out, err = run_main(capsys, "trainers/ppo.py", "--config", CONFIG, f"run_dir={tmp_path}", "name=v",
                              "total_timesteps=256", "eval.episodes=1", "eval.video=true",
                              "eval.video_env_kwargs.render_mode=rgb_array", "logging.progress_bar=false")
    assert code == 0, err[-3000:]
    assert "no evaluation video (CartPole-v1 with {'render_mode': 'rgb_array'})" in out
    assert (tmp_path / "v" / "eval" / "eval.md").exists()


def test_a_model_built_on_an_env_instance_does_not_evaluate_the_default_env(tmp_path):
    """Evaluation envs come from config.env; an env instance has none, so (as in SB3) the run does not evaluate,
    instead of evaluating the default CartPole with a policy made for another env."""
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    model = PPO("mlp", env, n_steps=16, batch_size=16, n_epochs=1, run_dir=str(tmp_path), name="pendulum")
    model.learn(32)
    assert model.cfg.eval.episodes == 0 and model.last_eval is None
    model.close()


def test_an_update_stopped_by_target_kl_logs_its_steps_and_the_kl_that_stopped_it():
    # a large step overshoots a tiny target_kl: the update stops after one optimizer step, and the logged approx_kl
    # is the one that stopped it (before, only the first minibatch's ratio of 1 was averaged: approx_kl read 0)
    model = PPO("mlp", "CartPole-v1", num_envs=2, n_steps=32, batch_size=16, n_epochs=4, learning_rate=0.05,
                target_kl=1e-6, seed=0)
    model.learn(64)
    metrics = model.last_metrics
    assert metrics["train/optimizer_steps"] == 1 and metrics["train/epochs"] == 1
    assert metrics["train/actor/approx_kl"] > 1.5e-6 / 2  # mean of the first minibatch's 0 and the stopping KL
    unstopped = PPO("mlp", "CartPole-v1", num_envs=2, n_steps=32, batch_size=16, n_epochs=4, seed=0)
    unstopped.learn(64)
    assert unstopped.last_metrics["train/optimizer_steps"] == 16  # 4 epochs x 64 / 16 minibatches
    model.close()
    unstopped.close()


def test_grpo_update_with_only_uniform_groups_leaves_the_weights_alone():
    # one-step CartPole: every rollout returns 1, so every group is uniform and skipped; Adam must not step on the
    # zero gradients (its momentum from earlier updates would still move the weights)
    import gymnasium as gym

    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync", max_episode_steps=1)
    grpo = GRPO("mlp", envs, group_size=2, groups_per_update=2, score="return", filter_uniform_groups=True, n_epochs=3,
                policy_kwargs={"hidden_sizes": [8], "critic": False})
    for parameter in grpo.policy.parameters():  # fake momentum, as earlier updates with samples would leave it
        grpo.optimizer.state[parameter] = {"step": torch.tensor(5.0), "exp_avg": torch.ones_like(parameter),
                                           "exp_avg_sq": torch.ones_like(parameter)}
    before = {k: v.clone() for k, v in grpo.policy.state_dict().items()}
    grpo.learn(2)
    metrics = grpo.last_metrics
    assert metrics["rollout/uniform_groups"] == 1 and metrics["train/optimizer_steps"] == 0
    assert all(torch.equal(before[k], v) for k, v in grpo.policy.state_dict().items())
    grpo.close()


def test_callbacks_see_start_every_update_and_end_and_can_stop_training():
    """Logging, checkpoints and evaluation are callbacks; a user's Callback gets the same three hooks."""
    from vla_gym.trainers.runtime.callbacks import Callback

    class Record(Callback):
        def __init__(self):
            self.events = []

        def on_training_start(self, trainer):
            self.events.append(("start", trainer.num_updates))

        def on_update_end(self, trainer, metrics):
            self.events.append(("update", trainer.num_updates))
            return trainer.num_updates < 3  # False after the third update stops the run

        def on_training_end(self, trainer):
            self.events.append(("end", trainer.num_updates))

    record, plain = Record(), []
    model = PPO("mlp", "CartPole-v1", num_envs=2, n_steps=8, batch_size=16, n_epochs=1, seed=0)
    model.learn(10_000, callback=[record, lambda algo, metrics: plain.append(algo.num_updates)])
    model.close()
    assert record.events == [("start", 0), ("update", 1), ("update", 2), ("update", 3), ("end", 3)]
    assert plain == [1, 2, 3] and model.num_timesteps == 3 * 16


def test_ppo_ratio_level_dim_puts_the_ratio_and_its_kl_per_action_dimension():
    """ppo.ratio_level=dim: one ratio per action dimension, as GRPO's: the approx_kl that target_kl reads is the
    per-dimension one, a fraction of the joint KL that the one ratio per action (chunk) would have read."""
    kwargs = dict(num_envs=2, n_steps=32, batch_size=32, n_epochs=4, learning_rate=3e-3, seed=0)
    per_dim = PPO("mlp", "Reacher-v5", ratio_level="dim", **kwargs)
    per_dim.learn(128)  # two updates: the second rollout fills the buffer the first update's log-probs were kept in
    metrics = per_dim.last_metrics
    assert metrics["train/actor/approx_kl"] == pytest.approx(metrics["train/actor/approx_kl_dim"], rel=1e-5)
    assert metrics["train/actor/approx_kl_dim"] < metrics["train/actor/approx_kl_chunk"]
    per_chunk = PPO("mlp", "Reacher-v5", **kwargs)
    per_chunk.learn(128)
    assert "train/actor/approx_kl_dim" not in per_chunk.last_metrics
    per_dim.close()
    per_chunk.close()


def test_ppo_exploration_std_replaces_the_policys_std():
    ppo = PPO("mlp", "Reacher-v5", num_envs=1, n_steps=8, batch_size=8, exploration_std=0.05)
    assert torch.allclose(ppo.policy.action_head.log_std.exp(), torch.tensor(0.05))
    ppo.close()
    with pytest.raises(ValueError, match="ppo.exploration_std=-1"):
        config_from_dict({"ppo": {"exploration_std": -1}})


def test_every_update_gives_its_freed_rollout_memory_back(monkeypatch):
    """After each update the trainer trims the C heap (glibc keeps freed rollout arrays otherwise; docs/reliability.md,
    "Memory of a training run"): once per update, after the update's buffer is released."""
    from vla_gym.trainers.algorithms import on_policy

    trims = []
    monkeypatch.setattr(on_policy, "release_freed_memory", lambda: trims.append(True) or True)
    model = PPO("mlp", "CartPole-v1", num_envs=2, n_steps=8, batch_size=16, n_epochs=1, seed=0)
    model.learn(3 * 16)
    model.close()
    assert model.num_updates == 3 and len(trims) == 3
