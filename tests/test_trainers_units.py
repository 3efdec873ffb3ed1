"""Simulator-free pieces of the trainers: advantages, losses, distributions, policies, config, buffer, checkpoints."""
import math
import os
import pathlib

import numpy as np
import pytest
import torch
from gymnasium import spaces

from vla_gym.trainers.algorithms.advantages import gae, group_advantages
from vla_gym.trainers.algorithms.losses import explained_variance, kl_to_reference
from vla_gym.trainers.policies import (
    Policy,
    available_policies,
    make_policy,
    register_policy,
)
from vla_gym.trainers.policies.distributions import Categorical, DiagGaussian
from vla_gym.trainers.ppo import clipped_policy_loss, value_loss
from vla_gym.trainers.rollout.batch import ObsStorage, index, stack, to_torch
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.runtime.checkpoint import (
    Checkpointer,
    CheckpointError,
    export_policy,
    load_checkpoint,
    load_policy,
    rng_state,
    set_rng_state,
)
from vla_gym.trainers.runtime.config import (
    Config,
    ConfigError,
    config_from_checkpoint,
    config_from_dict,
    load_config,
    save_config,
)

DICT_SPACE = spaces.Dict({
    "images": spaces.Dict({"main": spaces.Box(0, 255, (64, 64, 3), np.uint8),
                           "wrist": spaces.Box(0, 255, (48, 48, 3), np.uint8)}),
    "state": spaces.Box(-np.inf, np.inf, (8,), np.float32),
    "instruction": spaces.Text(256),
})


def dict_obs(batch: int) -> dict:
    return {
        "images": {"main": torch.randint(0, 255, (batch, 64, 64, 3), dtype=torch.uint8),
                   "wrist": torch.randint(0, 255, (batch, 48, 48, 3), dtype=torch.uint8)},
        "state": torch.randn(batch, 8),
        "instruction": [f"push the cube {i}" for i in range(batch)],
    }


# -------------------------------------------------------------------------------------- advantages
def naive_gae(rewards, values, dones, last_values, gamma, lam):
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            total, discount = 0.0, 1.0
            for k in range(t, T):
                next_value = last_values[n] if k == T - 1 else values[k + 1, n]
                delta = rewards[k, n] + gamma * next_value * (1 - dones[k, n]) - values[k, n]
                total += discount * delta
                if dones[k, n]:
                    break
                discount *= gamma * lam
            adv[t, n] = total
    return adv


def test_gae_matches_the_definition():
    rng = np.random.default_rng(0)
    rewards, values = rng.normal(size=(7, 3)), rng.normal(size=(7, 3))
    dones = rng.random((7, 3)) < 0.3
    last = rng.normal(size=3)
    adv, returns = gae(torch.tensor(rewards), torch.tensor(values), torch.tensor(dones), torch.tensor(last), 0.9, 0.8)
    expected = naive_gae(rewards, values, dones.astype(float), last, 0.9, 0.8)
    assert np.allclose(adv.numpy(), expected, atol=1e-5)
    assert np.allclose(returns.numpy(), expected + values, atol=1e-5)


def test_gae_lambda_one_is_discounted_return_minus_value():
    rewards = torch.ones(4, 1)
    values = torch.zeros(4, 1)
    dones = torch.tensor([[False], [False], [False], [True]])
    adv, _ = gae(rewards, values, dones, torch.tensor([100.0]), gamma=0.5, lam=1.0)
    assert adv[:, 0].tolist() == pytest.approx([1.875, 1.75, 1.5, 1.0])  # the last value is never used


def test_group_advantages():
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 0.0])
    assert group_advantages(scores, 4).tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 1.0, -1.0])
    normalized = group_advantages(scores, 4, normalize_std=True)
    assert normalized[:4].tolist() == pytest.approx([1, -1, -1, 1], abs=1e-4)
    assert normalized[4:6].tolist() == [0.0, 0.0]  # uniform scores: no signal, no division by zero
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(scores, 3)


# ------------------------------------------------------------------------------------------ losses
def test_clipped_policy_loss():
    old = torch.zeros(4)
    new = torch.log(torch.tensor([1.0, 1.5, 0.5, 1.1]))
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    loss, stats = clipped_policy_loss(new, old, adv, clip_range=0.2)
    # min(r*A, clip(r)*A): 1.0, 1.2 (clipped), -0.8 (clipped, pessimistic), -1.1
    assert loss.item() == pytest.approx(-(1.0 + 1.2 - 0.8 - 1.1) / 4)
    assert stats["train/actor/clip_fraction"] == pytest.approx(0.5)
    assert stats["train/actor/clipped_ratio"] == pytest.approx((1.0 + 1.2 + 0.8 + 1.1) / 4)
    assert stats["train/actor/approx_kl"] > 0


def test_value_loss_clipping():
    values, old, returns = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), torch.tensor([1.0, 0.5])
    loss, stats = value_loss(values, old, returns, clip_range_vf=None)
    assert loss.item() == pytest.approx((0 + 0.25) / 2) and stats["train/critic/value_clip_ratio"] == 0
    loss, stats = value_loss(values, old, returns, clip_range_vf=0.2)
    assert loss.item() == pytest.approx((0.8**2 + 0.25) / 2)  # the clipped prediction 0.2 is further from 1.0
    assert stats["train/critic/value_clip_ratio"] == 0.5


def test_kl_to_reference_and_explained_variance():
    assert kl_to_reference(torch.zeros(3), torch.zeros(3)).tolist() == [0, 0, 0]
    assert (kl_to_reference(torch.randn(100), torch.randn(100)) >= 0).all()
    targets = torch.randn(50)
    assert explained_variance(targets, targets) == pytest.approx(1.0)
    assert math.isnan(explained_variance(torch.zeros(3), torch.ones(3)))


# ----------------------------------------------------------------------------------- distributions
def test_gaussian_matches_torch():
    mean, log_std = torch.randn(5, 3, 2), torch.randn(3, 2)
    ours = DiagGaussian(mean, log_std)
    ref = torch.distributions.Normal(mean, log_std.exp())
    actions = ours.sample()
    assert actions.shape == (5, 3, 2)
    assert torch.allclose(ours.log_prob(actions), ref.log_prob(actions).sum((1, 2)), atol=1e-5)
    assert torch.allclose(ours.entropy(), ref.entropy().sum((1, 2)), atol=1e-5)


def test_categorical_matches_torch():
    logits = torch.randn(6, 4)
    ours, ref = Categorical(logits), torch.distributions.Categorical(logits=logits)
    actions = ours.sample()
    assert torch.allclose(ours.log_prob(actions), ref.log_prob(actions), atol=1e-6)
    assert torch.allclose(ours.entropy(), ref.entropy(), atol=1e-6)
    assert torch.equal(ours.mode(), logits.argmax(-1))
    torch.manual_seed(0)
    many = Categorical(torch.tensor([[0.0, 1.0, 2.0]]).expand(100_000, 3)).sample()  # Gumbel-max sampling
    assert torch.allclose(torch.bincount(many) / 100_000, torch.tensor([0.0, 1.0, 2.0]).softmax(-1), atol=0.01)


# ---------------------------------------------------------------------------------------- policies
@pytest.mark.parametrize("action_space, shape", [
    (spaces.Discrete(3), (5,)), (spaces.Box(-1, 1, (7,)), (5, 7)), (spaces.Box(-1, 1, (4, 7)), (5, 4, 7)),
])
def test_mlp_policy_interface(action_space, shape):
    policy = make_policy("mlp", spaces.Box(-1, 1, (6,)), action_space)
    obs = torch.randn(5, 6)
    actions, log_probs, values = policy.act(obs)
    assert actions.shape == shape and log_probs.shape == (5,) and values.shape == (5,)
    new_log_probs, entropy, new_values = policy.evaluate(obs, actions)
    assert torch.allclose(new_log_probs, log_probs) and torch.allclose(new_values, values)
    assert entropy.shape == (5,)
    assert torch.equal(policy.act(obs, deterministic=True)[0], policy.act(obs, deterministic=True)[0])
    assert policy.value(obs).shape == (5,)
    env_actions = policy.env_actions(actions * 100 if actions.is_floating_point() else actions)
    assert isinstance(env_actions, np.ndarray)
    if isinstance(action_space, spaces.Box):
        assert env_actions.max() <= 1 and env_actions.min() >= -1


def test_mlp_policy_reads_state_of_dict_observations_and_can_drop_the_critic():
    policy = make_policy("mlp", DICT_SPACE, spaces.Box(-1, 1, (7,)), critic=False, hidden_sizes=[32])
    actions, _, values = policy.act(dict_obs(3))
    assert actions.shape == (3, 7) and values is None and policy.value(dict_obs(3)) is None
    assert not policy.has_critic


def test_cnn_policy_with_images_state_and_instruction():
    policy = make_policy("cnn", DICT_SPACE, spaces.Box(-1, 1, (2, 7)), image_features=32, hidden_sizes=[32])
    obs = dict_obs(4)
    actions, log_probs, values = policy.act(obs)
    assert actions.shape == (4, 2, 7) and values.shape == (4,)
    log_probs.sum()  # evaluate is differentiable end to end, instruction embedding included
    new_log_probs, _, new_values = policy.evaluate(obs, actions)
    (new_log_probs.sum() + new_values.sum()).backward()
    assert policy.encoder.text.embedding.weight.grad is not None
    assert policy.encoder.cameras["wrist"].conv[0].weight.grad is not None


def test_hashed_instruction_embedding_is_stable_across_processes():
    from vla_gym.trainers.policies.encoders import HashedTextEncoder

    encoder = HashedTextEncoder(num_buckets=4096)
    assert encoder.token_ids("Push the cube!") == [1636, 3558, 440]  # crc32, not Python's salted hash()


def test_policy_registry_errors_and_custom_classes():
    with pytest.raises(ValueError, match="policy.kwargs.hiden_sizes.*hidden_sizes"):
        make_policy("mlp", spaces.Box(-1, 1, (3,)), spaces.Discrete(2), hiden_sizes=[3])
    with pytest.raises(KeyError, match="unknown policy 'nope'.*mlp"):
        make_policy("nope", spaces.Box(-1, 1, (3,)), spaces.Discrete(2))
    with pytest.raises(TypeError, match="'cnn' policy needs a dict observation"):
        make_policy("cnn", spaces.Box(-1, 1, (3,)), spaces.Discrete(2))
    with pytest.raises(TypeError, match="Box observation or a Dict with a 'state'"):
        make_policy("mlp", spaces.Dict({"images": DICT_SPACE["images"]}), spaces.Discrete(2))
    policy = make_policy("vla_gym.trainers.policies.mlp:MLPPolicy", spaces.Box(-1, 1, (3,)), spaces.Discrete(2))
    assert isinstance(policy, Policy)

    class Constant(Policy):
        has_critic = False

    register_policy("constant_test", Constant)
    assert "constant_test" in available_policies() and {"mlp", "cnn"} <= set(available_policies())


# -------------------------------------------------------------------------------------------- batch
def test_obs_tree_helpers():
    numpy_obs = {"images": {"main": np.zeros((2, 4, 4, 3), np.uint8)}, "state": np.ones((2, 3)),
                 "instruction": ("a", "b")}
    obs = to_torch(numpy_obs)
    assert obs["state"].dtype == torch.float32 and obs["images"]["main"].dtype == torch.uint8
    assert obs["instruction"] == ["a", "b"]
    picked = index(obs, torch.tensor([1]))
    assert picked["instruction"] == ["b"] and picked["state"].shape == (1, 3)
    stacked = stack([{"state": np.zeros(3), "instruction": "x"}, {"state": np.ones(3), "instruction": "y"}])
    assert stacked["state"].shape == (2, 3) and stacked["instruction"] == ["x", "y"]
    store = ObsStorage(3, 2, "cpu")
    for t in range(3):
        store.write(t, obs)
    flat = store.flat()
    assert flat["images"]["main"].shape == (6, 4, 4, 3) and len(flat["instruction"]) == 6


def test_buffer_minibatches_cover_valid_rows_once():
    buffer = RolloutBuffer(4, 3)
    for t in range(4):
        valid = torch.tensor([True, t != 2, True])
        buffer.add(torch.full((3, 1), float(t)), torch.arange(3) + 10 * t, torch.zeros(3), torch.zeros(3),
                   torch.ones(3), torch.zeros(3, dtype=torch.bool), valid)
    seen = []
    batches = list(buffer.minibatches(3, torch.Generator().manual_seed(0)))
    assert len(batches) == 3
    for batch in batches:
        seen += batch["actions"].tolist()
        assert batch["obs"].shape[0] == batch["actions"].shape[0]
    assert sorted(seen) == sorted([a + 10 * t for t in range(4) for a in range(3) if not (t == 2 and a == 1)])
    # fewer valid rows than minibatches: the spare minibatch carries weight 0 (ranks stay in step)
    weights = [b["weight"] for b in buffer.minibatches(20)]
    assert len(weights) == 20 and weights.count(0.0) == 9


def test_buffer_writes_its_own_advantages():
    """The buffer is the only writer of its tensors: GAE, bootstraps and GRPO's advantages go through it."""
    rng = torch.Generator().manual_seed(0)
    buffer = RolloutBuffer(5, 2)
    rewards, values = torch.rand(5, 2, generator=rng), torch.rand(5, 2, generator=rng)
    dones = torch.tensor([[False, False], [True, False], [False, False], [False, True], [False, False]])
    for t in range(5):
        buffer.add(torch.zeros(2, 1), torch.zeros(2), torch.zeros(2), values[t], rewards[t], dones[t], None)
    buffer.bootstrap(1, torch.tensor([False, True]), torch.tensor([0.5]))  # a truncation reported a step late
    rewards[1, 1] += 0.5
    last = torch.rand(2, generator=rng)
    buffer.compute_gae(last, gamma=0.9, gae_lambda=0.8)
    advantages, returns = gae(rewards, values, dones, last, 0.9, 0.8)
    assert torch.equal(buffer.advantages, advantages) and torch.equal(buffer.returns, returns)

    buffer.reset()  # GRPO: advantages given per step; left-out fields are zero, rows valid unless said
    for t in range(5):
        buffer.add(torch.zeros(2, 1), torch.zeros(2), torch.zeros(2), valid=torch.tensor([True, t < 2]),
                   advantages=torch.tensor([1.0, -1.0]))
    assert buffer.advantages[:, 0].tolist() == [1.0] * 5 and not buffer.rewards.any() and not buffer.dones.any()
    assert buffer.valid[:, 1].tolist() == [True, True, False, False, False] and not buffer.values.any()


# ------------------------------------------------------------------------------------------- config
def test_config_overrides_and_validation(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\nppo:\n  learning_rate: 3e-4\n  n_steps: 16\nenv:\n  kwargs: {obs_mode: state}\n")
    cfg = load_config(path, ["ppo.n_epochs=3", "policy.kwargs.hidden_sizes=[8, 8]", "ppo.target_kl=null",
                             "env.kwargs.task_id=2", "checkpoint.resume=null"])
    assert cfg.ppo.learning_rate == 3e-4 and cfg.ppo.n_steps == 16 and cfg.ppo.n_epochs == 3
    assert cfg.policy.kwargs == {"hidden_sizes": [8, 8]} and cfg.env.kwargs == {"obs_mode": "state", "task_id": 2}
    assert cfg.checkpoint.resume is None
    with pytest.raises(ConfigError, match="unknown config key 'ppo.learnign_rate'.*learning_rate"):
        config_from_dict({"ppo": {"learnign_rate": 1.0}})
    with pytest.raises(ConfigError, match="ppo.n_steps: expected an integer"):
        config_from_dict({}, ["ppo.n_steps=1.5"])
    with pytest.raises(ConfigError, match="ppo.lr_schedule: 'exp' is not one of"):
        config_from_dict({}, ["ppo.lr_schedule=exp"])
    with pytest.raises(ConfigError, match="logging.tensorboard: expected true or false"):
        config_from_dict({}, ["logging.tensorboard=yes please"])
    with pytest.raises(ConfigError, match="unknown config key 'bogus'"):
        config_from_dict({"bogus": 1})
    with pytest.raises(ConfigError, match="must look like key.sub=value"):
        config_from_dict({}, ["ppo.n_steps"])
    save_config(cfg, tmp_path / "resolved.yaml")
    assert load_config(tmp_path / "resolved.yaml") == cfg


def test_a_checkpoint_config_from_an_older_version_loads_without_its_removed_keys():
    """Checkpoints of an older version saved ``residual.init_checkpoint``, a key removed since: a committed model's
    config with that key added (as those checkpoints hold it) still loads for evaluation, minus the key."""
    root = pathlib.Path(__file__).resolve().parent.parent
    state = load_checkpoint(root / "experiments/libero_miniature/models/libero_spatial_seed0_sft_protocol_wrist.pt")
    state["config"]["residual"] = {**state["config"]["residual"], "init_checkpoint": None}
    with pytest.raises(ConfigError, match="unknown config key 'residual.init_checkpoint'"):
        config_from_dict(state["config"])
    cfg = config_from_checkpoint(state["config"], ["eval.episodes=3"])
    assert cfg.env.id == "VLA/LiberoSpatial-v0" and cfg.policy == config_from_dict(
        {"policy": state["config"]["policy"]}).policy and cfg.eval.episodes == 3
    with pytest.raises(ConfigError, match="unknown config key 'residual.init_checkpoint'"):  # a user's key stays strict
        config_from_checkpoint(state["config"], ["residual.init_checkpoint=x"])


def test_example_configs_are_valid():
    import glob

    paths = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "examples", "configs", "*.yaml")))
    assert paths
    for path in paths:
        cfg = load_config(path)
        assert isinstance(cfg, Config)


# -------------------------------------------------------------------------------------- checkpoints
def test_checkpointer_keeps_last_n_and_ignores_partial_files(tmp_path):
    ckpt = Checkpointer(tmp_path, keep_last=2)
    (tmp_path / "ckpt_00000009.pt.tmp").write_bytes(b"half a file from a killed save")
    for update in (1, 2, 3):
        ckpt.save({"update": update}, update)
    assert [p.name for p in ckpt.paths()] == ["ckpt_00000002.pt", "ckpt_00000003.pt"]
    assert load_checkpoint(ckpt.latest())["update"] == 3
    assert not list(tmp_path.glob("*.tmp"))


def test_an_unreadable_checkpoint_is_named_and_skipped(tmp_path):
    ckpt = Checkpointer(tmp_path, keep_last=5)
    for update in (1, 2, 3):
        ckpt.save({"update": update}, update)
    newest = ckpt.latest()
    newest.write_bytes(newest.read_bytes()[:200])  # cut short, as by a full disk
    (tmp_path / "ckpt_00000002.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="cannot read checkpoint .*ckpt_00000003.pt .*central directory"):
        load_checkpoint(newest)
    path, state, skipped = ckpt.load_newest_readable()
    assert path.name == "ckpt_00000001.pt" and state == {"update": 1}
    assert [str(e).split()[3] for e in skipped] == [str(newest), str(tmp_path / "ckpt_00000002.pt")]
    (tmp_path / "ckpt_00000001.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="none of the 3 checkpoints .* checkpoint.resume=null"):
        ckpt.load_newest_readable()
    with pytest.raises(FileNotFoundError, match="no checkpoint file"):
        load_checkpoint(tmp_path / "missing.pt")
    assert Checkpointer(tmp_path / "empty").load_newest_readable() is None


def test_a_model_exported_twice_is_stored_once(tmp_path):
    """Re-exporting a model (another result row of the same SFT) returns the file that holds it, untouched."""
    def run_checkpoint(name: str, weight: float, noise: str = "step") -> pathlib.Path:
        path = tmp_path / "run" / name
        torch.save({"policy": {"w": torch.full((3,), weight)}, "policy_name": "mlp", "policy_kwargs": {"noise": noise},
                    "optimizer": {"m": 1}}, path)
        return path

    (tmp_path / "run").mkdir()
    models = tmp_path / "models"
    sft = export_policy(run_checkpoint("sft.pt", 1.0), models, "suite_sft.pt")
    assert sft.name == "suite_sft.pt" and "optimizer" not in load_checkpoint(sft)
    written = sft.stat().st_mtime_ns
    (models / "damaged.pt").write_bytes(b"cut short")
    assert export_policy(run_checkpoint("sft.pt", 1.0), models, "suite_sft_protocol.pt") == sft  # same parameters
    assert export_policy(sft, models, "suite_sft.pt") == sft and sft.stat().st_mtime_ns == written
    rl = export_policy(run_checkpoint("rl.pt", 2.0), models, "suite_rl.pt")  # other parameters: a file of its own
    assert rl.name == "suite_rl.pt" and torch.equal(load_checkpoint(rl)["policy"]["w"], torch.full((3,), 2.0))
    assert sorted(p.name for p in models.iterdir()) == ["damaged.pt", "suite_rl.pt", "suite_sft.pt"]
    chunked = export_policy(run_checkpoint("chunk.pt", 1.0, noise="chunk"), models, "suite_sft_chunk.pt")
    assert chunked.name == "suite_sft_chunk.pt"  # the same weights built another way are another model
    chunked.unlink()
    assert export_policy(run_checkpoint("rl.pt", 3.0), models, "suite_rl.pt") == rl  # a newer model replaces it
    assert torch.equal(load_checkpoint(rl)["policy"]["w"], torch.full((3,), 3.0))
    with pytest.raises(FileExistsError, match="holds another model"):  # ... unless rows may name the one there
        export_policy(run_checkpoint("rl.pt", 4.0), models, "suite_rl.pt", replace=False)
    assert export_policy(run_checkpoint("rl.pt", 3.0), models, "suite_rl.pt", replace=False) == rl  # the same: kept


def test_a_model_exported_in_float16_is_half_the_size_and_loads_as_float32(tmp_path):
    """``export_policy(..., dtype=torch.float16)`` (the LIBERO study's token models): the parameters are stored in
    half precision, :func:`load_policy` rebuilds a float32 policy whose actions match the original's to rounding,
    and exporting it again finds the same file."""
    torch.manual_seed(0)
    policy = make_policy("mlp", spaces.Box(-1, 1, (6,)), spaces.Box(-1, 1, (3,)), hidden_sizes=[256, 256])
    run = tmp_path / "ckpt.pt"
    torch.save({"policy": policy.state_dict(), "policy_name": "mlp", "policy_kwargs": {"hidden_sizes": [256, 256]},
                "observation_space": spaces.Box(-1, 1, (6,)), "action_space": spaces.Box(-1, 1, (3,)),
                "optimizer": {"m": 1}}, run)
    full = export_policy(run, tmp_path / "models", "full.pt")
    half = export_policy(run, tmp_path / "models", "half.pt", dtype=torch.float16)
    assert half.name == "half.pt" and half.stat().st_size < 0.6 * full.stat().st_size
    assert {value.dtype for value in load_checkpoint(half)["policy"].values()} == {torch.float16}
    loaded = load_policy(half)
    assert {parameter.dtype for parameter in loaded.parameters()} == {torch.float32}
    obs = torch.rand(64, 6) * 2 - 1
    with torch.no_grad():
        original, _, _ = policy.act(obs, deterministic=True)
        rounded, _, _ = loaded.act(obs, deterministic=True)
    assert torch.allclose(original, rounded, atol=1e-2) and not torch.equal(original, rounded)
    assert export_policy(run, tmp_path / "models", "again.pt", dtype=torch.float16) == half


def test_rng_state_round_trip():
    generator = torch.Generator().manual_seed(1)
    state = rng_state({"g": generator})
    first = (torch.rand(2), np.random.rand(), torch.rand(1, generator=generator))
    set_rng_state(state, {"g": generator})
    second = (torch.rand(2), np.random.rand(), torch.rand(1, generator=generator))
    assert torch.equal(first[0], second[0]) and first[1] == second[1] and torch.equal(first[2], second[2])


def test_running_observation_normalisation():
    policy = make_policy("mlp", spaces.Box(-np.inf, np.inf, (3,)), spaces.Discrete(2), normalize_obs=True)
    norm = policy.encoder.norm
    data = torch.randn(1000, 3) * torch.tensor([1.0, 10.0, 0.1]) + torch.tensor([5.0, -2.0, 0.0])
    for chunk in data.split(300):  # merged in pieces == computed at once
        policy.update_statistics(chunk)
    assert torch.allclose(norm.mean, data.double().mean(0), atol=1e-6)
    assert torch.allclose(norm.var, data.double().var(0, unbiased=False), rtol=1e-6)
    normalized = norm(data)
    assert torch.allclose(normalized.mean(0), torch.zeros(3), atol=1e-4)
    assert torch.allclose(normalized.std(0), torch.ones(3), atol=1e-2)
    assert "encoder.norm.mean" in policy.state_dict()  # checkpointed with the weights


def test_state_statistics_accept_an_empty_batch():
    """A GRPO rank whose groups were all uniform (filtered out) still joins the statistics update with 0 rows."""
    from vla_gym.trainers.policies.encoders import StateEncoder

    encoder = StateEncoder(spaces.Box(-1, 1, (5,), np.float32), normalize=True)
    encoder.update_statistics(torch.zeros(0, 5))
    assert float(encoder.norm.count) == 0
    encoder.update_statistics({"state": torch.ones(4, 5)})
    assert float(encoder.norm.count) == 4 and torch.allclose(encoder.norm.mean, torch.ones(5, dtype=torch.float64))


def test_git_commit_outside_a_checkout_reads_the_environment(tmp_path, monkeypatch):
    """A copy of the tree without .git (sent to a GPU machine) stamps results with $VLA_GYM_COMMIT, else "unknown"."""
    from vla_gym.trainers.runtime.results import git_commit

    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.delenv("VLA_GYM_COMMIT", raising=False)
    assert git_commit(tmp_path) == "unknown"
    monkeypatch.setenv("VLA_GYM_COMMIT", "abc1234")
    assert git_commit(tmp_path) == "abc1234"
    assert git_commit() not in ("unknown", "abc1234")  # inside the checkout git answers


def test_make_envs_freezes_the_live_objects_before_building_envs():
    """ManiSkill runs gc.collect() on every env build and close: make_envs first collects once and freezes what is
    alive, so those passes skip torch's and the simulators' objects (trainers/runtime/envs.py)."""
    import gc

    from vla_gym.trainers.runtime.config import EnvConfig
    from vla_gym.trainers.runtime.envs import make_envs

    gc.unfreeze()
    long_lived = [object() for _ in range(10)]  # noqa: F841 (alive across the call)
    try:
        envs = make_envs(EnvConfig(id="CartPole-v1", num_envs=1), 1)
        assert gc.get_freeze_count() > 0
        envs.close()
    finally:
        gc.unfreeze()
