"""VLA policies on tiny random-weight models built in the test (no downloads, tokenizer trained in-process).

Covers the token/action round trip, rollout-vs-update log-prob consistency (left-padded mixed prompts),
greedy decoding, LoRA scope, adapter-only checkpoints and imitation for the action-token (PaliGemma,
SmolVLM), continuous-head and PI0 policies.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

pytest.importorskip("transformers")
pytest.importorskip("peft")

from random_vlms import build_vlm

from vla_gym.trainers.policies import make_policy

TOKENS = "vla_gym.trainers.policies.vla_tokens:ActionTokenVLAPolicy"
CONTINUOUS = "vla_gym.trainers.policies.vla_continuous:ContinuousVLAPolicy"
PI0 = "vla_gym.trainers.policies.vla_pi0:PI0Policy"
INSTRUCTIONS = ["push the cube", "pick up the red cube and move it to the goal position", "open the drawer"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlms")
    return {family: str(build_vlm(root / family, family=family)) for family in ("paligemma", "smolvlm", "pi0")}


def observation_space(size=32, roles=("main", "wrist")):
    return spaces.Dict({
        "images": spaces.Dict({r: spaces.Box(0, 255, (size, size, 3), np.uint8) for r in roles}),
        "state": spaces.Box(-np.inf, np.inf, (8,), np.float32),
        "instruction": spaces.Text(256),
    })


def batch(n=3, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "images": {r: torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=g) for r in ("main", "wrist")},
        "state": torch.randn(n, 8, generator=g),
        "instruction": [INSTRUCTIONS[i % len(INSTRUCTIONS)] for i in range(n)],
    }


CHUNK = spaces.Box(-1, 1, (2, 7), np.float32)


@pytest.mark.parametrize("family", ["paligemma", "smolvlm"])
def test_action_tokens_logprob_consistency_and_round_trip(models, family):
    torch.manual_seed(0)
    policy = make_policy(TOKENS, observation_space(), CHUNK, model=models[family], lora={"rank": 4}, temperature=1.3)
    obs = batch()
    tokens, log_probs, values = policy.act(obs)
    assert tokens.shape == (3, 14) and tokens.dtype == torch.long
    assert bool(((tokens >= policy.tokenizer.first_token_id) & (tokens < policy.tokenizer.vocab_size)).all())
    new_log_probs, entropy, new_values = policy.evaluate(obs, tokens)
    torch.testing.assert_close(new_log_probs, log_probs, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(new_values, values, atol=1e-5, rtol=1e-4)
    assert bool((entropy > 0).all()) and bool((entropy <= 14 * np.log(256) + 1e-3).all())
    actions = policy.env_actions(tokens)
    assert actions.shape == (3, 2, 7)
    np.testing.assert_array_equal(policy.encode_actions(actions).cpu().numpy(), tokens.cpu().numpy())
    greedy_a, greedy_lp, _ = policy.act(obs, deterministic=True)
    greedy_b, _, _ = policy.act(obs, deterministic=True)
    assert torch.equal(greedy_a, greedy_b)
    torch.testing.assert_close(policy.evaluate(obs, greedy_a)[0], greedy_lp, atol=1e-4, rtol=1e-4)


def test_lora_scope_and_adapter_only_checkpoint(models, tmp_path):
    torch.manual_seed(0)
    policy = make_policy(TOKENS, observation_space(), CHUNK, model=models["paligemma"], lora={"rank": 4, "alpha": 8})
    trainable = [name for name, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name or name.startswith("value_head") for name in trainable)
    assert any("language_model" in name for name in trainable)
    assert not any("vision" in name for name in trainable)
    state = policy.state_dict()
    assert set(state) == set(trainable)
    total = sum(p.numel() for p in policy.parameters())
    assert sum(v.numel() for v in state.values()) < total / 5

    obs = batch()
    tokens = policy.encode_actions(np.full((3, 2, 7), 0.5))
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(5):
        loss = policy.imitation_loss(obs, torch.full((3, 2, 7), 0.5))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]

    policy.save_trained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "adapter" / "adapter_config.json").exists()
    torch.manual_seed(1)
    fresh = make_policy(TOKENS, observation_space(), CHUNK, model=models["paligemma"], lora={"rank": 4, "alpha": 8})
    assert not torch.allclose(fresh.evaluate(obs, tokens)[0], policy.evaluate(obs, tokens)[0])
    fresh.load_trained(tmp_path / "ckpt")
    torch.testing.assert_close(fresh.evaluate(obs, tokens)[0], policy.evaluate(obs, tokens)[0])
    fresh.load_state_dict(policy.state_dict())  # what the trainers' checkpoints go through
    with pytest.raises(KeyError, match="missing"):
        fresh.load_state_dict({})


def test_lora_rejects_unknown_option(models):
    with pytest.raises(ValueError, match="unknown option"):
        make_policy(TOKENS, observation_space(), CHUNK, model=models["paligemma"], lora={"rnak": 4})


def test_continuous_head(models):
    torch.manual_seed(0)
    policy = make_policy(CONTINUOUS, observation_space(), CHUNK, model=models["smolvlm"], lora={"rank": 4})
    obs = batch()
    actions, log_probs, values = policy.act(obs)
    assert actions.shape == (3, 2, 7) and values.shape == (3,)
    new_log_probs, _entropy, _ = policy.evaluate(obs, actions)
    torch.testing.assert_close(new_log_probs, log_probs, atol=1e-4, rtol=1e-4)
    mean, _, _ = policy.act(obs, deterministic=True)
    assert policy.env_actions(mean).shape == (3, 2, 7)
    loss = policy.imitation_loss(obs, torch.zeros(3, 2, 7))
    loss.backward()
    assert policy.action_head.mean.weight.grad is not None


def test_pi0_masks_missing_camera_and_replays_chain(models):
    torch.manual_seed(0)
    space = observation_space(size=48)  # main + wrist: the third slot is masked
    policy = make_policy(PI0, space, CHUNK, model=models["pi0"], num_steps=3, dtype="float32")
    obs = batch(size=48)
    inputs = policy.inputs(obs)
    assert inputs["pixel_attention_mask"].tolist() == [[True, True, False]] * 3
    chains, log_probs, values = policy.act(obs)
    assert chains.shape[:2] == (3, 4)
    new_log_probs, _entropy, new_values = policy.evaluate(obs, chains)
    torch.testing.assert_close(new_log_probs, log_probs, atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(new_values, values)
    assert policy.env_actions(chains).shape == (3, 2, 7)
    assert all(".vlm." not in f".{n}" for n, p in policy.named_parameters() if p.requires_grad and "pi0" in n)
    policy.imitation_loss(obs, torch.zeros(3, 2, 7)).backward()


VLA_CONFIGS = sorted(
    p for p in __import__("pathlib").Path(__file__).resolve().parents[1].joinpath("examples", "configs").glob("*.yaml")
    if any(tag in p.name for tag in ("_vla_tokens_", "_vla_oft_", "_pi0_", "_small_"))
)


@pytest.mark.parametrize("path", VLA_CONFIGS, ids=lambda p: p.name)
def test_vla_configs_validate(path):
    from vla_gym.trainers.policies import check_policy_kwargs
    from vla_gym.trainers.runtime.config import load_config

    cfg = load_config(path)
    check_policy_kwargs(cfg.policy.name, cfg.policy.kwargs)
    assert cfg.env.id.startswith("VLA/")


def test_vla_configs_cover_every_family_and_benchmark():
    names = [p.stem for p in VLA_CONFIGS]
    for family in ("vla_tokens", "vla_oft", "pi0", "small"):
        # RL with both algorithms, and behaviour cloning (SFT) before it; residual RL on the small policy's SFT
        expected = {"ppo", "grpo", "sft", "residual"} if family == "small" else {"ppo", "grpo", "sft"}
        assert {n.rsplit("_", 1)[1] for n in names if f"_{family}_" in n} == expected, family
    for bench in ("libero", "maniskill", "behavior"):
        assert any(n.startswith(bench) for n in names)
