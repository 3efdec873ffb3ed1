"""GRPO's learning signal (issue "RL that lifts a LIBERO policy"): ratio levels, asymmetric clip, masked sub-actions,
log-probs of executed actions, episode weighting, dynamic sampling and the signal metrics.

A toy env with action chunks (K=4 x A=3, ``info["chunk_steps"]`` like ActionChunk) stands in for LIBERO: each
episode runs 5..10 sub-steps (so its last chunk usually ends early), and its seed decides whether it always
succeeds, always fails, or succeeds when the first action's first dimension is positive (a mixed group).
"""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from vla_gym.trainers import GRPO
from vla_gym.trainers.algorithms.group_sampling import (
    StartTracker,
    draw_unsolved,
    group_outcomes,
    sampling_done,
)
from vla_gym.trainers.algorithms.ratio_levels import (
    chunk_view,
    clipped_token_loss,
    executed_mask,
    level_log_probs,
    ratio_stats,
)
from vla_gym.trainers.grpo import GRPOSetupError
from vla_gym.trainers.policies import Policy, make_policy
from vla_gym.trainers.policies.base import log_prob_options, policy_space_bounds
from vla_gym.trainers.policies.distributions import GaussianHead
from vla_gym.trainers.ppo import clipped_policy_loss
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.rollout.episode_plan import EpisodeSpec
from vla_gym.trainers.rollout.recorded_play import play_recorded
from vla_gym.trainers.runtime.config import ConfigError, config_from_dict, load_config
from vla_gym.trainers.runtime.distributed import Distributed

K, A = 4, 3
CONFIG_V2 = "experiments/libero_miniature/configs/libero_object_miniature_grpo_v2.yaml"


class ToyChunkEnv(gym.Env):
    """Chunks of K actions; the seed fixes the episode: length 5 + seed % 6 sub-steps, outcome by seed % 3."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (K, A), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        seed = 0 if seed is None else int(seed)
        self.mode, self.remaining, self.success, self.first = seed % 3, 5 + seed % 6, False, True
        return self._obs(), {}

    def _obs(self):
        return np.array([self.mode / 2.0, self.remaining / 10.0], dtype=np.float32)

    def step(self, chunk):
        ran = min(K, self.remaining)
        self.remaining -= ran
        if self.first:
            self.success = {0: True, 1: False}.get(self.mode, bool(np.asarray(chunk)[0, 0] > 0))
            self.first = False
        info = {"chunk_steps": ran, "success": self.success}
        return self._obs(), 0.0, self.remaining == 0, False, info


def toy_envs(n: int = 2) -> SyncVectorEnv:
    return SyncVectorEnv([ToyChunkEnv] * n, autoreset_mode=AutoresetMode.SAME_STEP)


def toy_grpo(**hparams) -> GRPO:
    kwargs = dict(group_size=4, groups_per_update=2, n_epochs=2, batch_size=8, seed=0)
    kwargs.update(hparams)
    policy_kwargs = kwargs.pop("policy_kwargs", {"hidden_sizes": [8], "critic": False, "log_std_init": 0.0})
    return GRPO("mlp", toy_envs(), policy_kwargs=policy_kwargs, **kwargs)


def episode_length(seed: int) -> int:
    return 5 + seed % 6


# ----------------------------------------------------------------------------------- ratio levels
@pytest.mark.quick
def test_token_loss_with_one_token_per_row_is_the_old_clipped_policy_loss():
    gen = torch.Generator().manual_seed(0)
    new = torch.randn(32, generator=gen, requires_grad=True)
    old, adv = torch.randn(32, generator=gen) * 0.3, torch.randn(32, generator=gen)
    loss_old, stats_old = clipped_policy_loss(new, old, adv, 0.2)
    (grad_old,) = torch.autograd.grad(loss_old, new)
    loss_new, stats_new = clipped_token_loss(new[:, None], old[:, None], adv, 0.2, 0.2)
    (grad_new,) = torch.autograd.grad(loss_new, new)
    assert torch.equal(loss_old, loss_new) and torch.equal(grad_old, grad_new)
    assert stats_old == pytest.approx(stats_new)


@pytest.mark.quick
def test_level_log_probs_split_a_chunk_per_step_and_per_dimension():
    per_dim = torch.arange(2 * K * A, dtype=torch.float32).reshape(2, K, A)
    chunk, none = level_log_probs(per_dim, "chunk")
    assert none is None and torch.equal(chunk[:, 0], per_dim.flatten(1).sum(1))
    step, _ = level_log_probs(per_dim, "step")
    assert torch.equal(step, per_dim.sum(2))
    dim, _ = level_log_probs(per_dim, "dim")
    assert torch.equal(dim, per_dim.flatten(1))
    assert torch.equal(chunk_view(per_dim.flatten(1), K), per_dim)  # token policies: [B, K*A] time-major
    with pytest.raises(ValueError, match="ratio level 'token'"):
        level_log_probs(per_dim, "token")


@pytest.mark.quick
def test_a_chunk_ratio_over_56_dims_clips_a_mean_shift_that_per_dim_ratios_keep():
    """The issue's numbers: a shift of the mean by 0.05 std in each of 8 x 7 dims is a KL of 56 x 0.05^2 / 2 =
    0.07 per chunk (over target_kl 0.03 x 1.5) and clips a third of the chunk ratios at 0.2, while each
    dimension's ratio moves by 5 % at most a few times in a thousand."""
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(4096, 8, 7, generator=gen)  # sampled actions in std units around the old mean
    shift = 0.05
    log_ratio = shift * z - shift**2 / 2  # log N(z; shift, 1) - log N(z; 0, 1) per dimension
    kl_dim, clip_dim, _, _ = ratio_stats(level_log_probs(log_ratio, "dim")[0], None, 0.2, 0.2)
    kl_chunk, clip_chunk, _, _ = ratio_stats(level_log_probs(log_ratio, "chunk")[0], None, 0.2, 0.2)
    assert kl_dim == pytest.approx(shift**2 / 2, rel=0.1) and kl_chunk == pytest.approx(56 * shift**2 / 2, rel=0.1)
    assert kl_chunk > 1.5 * 0.03  # the libero miniature config's target_kl stops the update here
    assert clip_chunk > 0.25 and clip_dim < 0.01


@pytest.mark.quick
def test_per_dim_ratios_keep_learning_where_the_chunk_ratio_is_clipped():
    """56 dims whose ratios each grew 5 % (well inside the clip) make a chunk ratio of 1.05^56 = 15: clipped, so
    the chunk-level loss (the old behaviour) has no gradient left for this good action; per dimension it has."""
    new = torch.full((1, 8, 7), math.log(1.05)).requires_grad_(True)
    old, adv = torch.zeros(1, 8, 7), torch.ones(1)
    grads = {}
    for level in ("chunk", "dim"):
        loss, stats = clipped_token_loss(level_log_probs(new, level)[0], level_log_probs(old, level)[0], adv, 0.2, 0.28)
        grads[level] = torch.autograd.grad(loss, new)[0]
        assert stats["train/actor/clip_fraction"] == (1.0 if level == "chunk" else 0.0)
    assert torch.count_nonzero(grads["chunk"]) == 0 and (grads["dim"] < 0).all()


@pytest.mark.quick
def test_asymmetric_clip_lets_a_good_action_grow_past_the_symmetric_bound():
    new = torch.log(torch.tensor([[1.25]])).requires_grad_(True)
    old, adv = torch.zeros(1, 1), torch.ones(1)
    symmetric, stats = clipped_token_loss(new, old, adv, 0.2, 0.2)
    assert torch.autograd.grad(symmetric, new)[0].item() == 0.0 and stats["train/actor/clip_fraction"] == 1.0
    higher, stats = clipped_token_loss(new, old, adv, 0.2, 0.28)
    assert torch.autograd.grad(higher, new)[0].item() < 0.0 and stats["train/actor/clip_fraction"] == 0.0
    low_side, stats = clipped_token_loss(torch.log(torch.tensor([[0.75]])), old, adv, 0.2, 0.28)
    assert stats["train/actor/clip_fraction"] == 1.0  # 0.75 < 1 - 0.2


@pytest.mark.quick
def test_executed_mask_drops_the_sub_actions_a_chunk_did_not_run():
    mask = executed_mask(torch.tensor([4, 1, -1]), K)
    assert mask.tolist() == [[True] * 4, [True, False, False, False], [True] * 4]
    per_dim = torch.ones(3, K, A)
    assert level_log_probs(per_dim, "chunk", mask)[0][:, 0].tolist() == [12.0, 3.0, 12.0]
    steps, step_mask = level_log_probs(per_dim, "step", mask)
    assert steps[1].tolist() == [3.0, 0.0, 0.0, 0.0] and torch.equal(step_mask, mask)
    _, dim_mask = level_log_probs(per_dim, "dim", mask)
    assert dim_mask[1].sum() == A


# ----------------------------------------------------------------------------------------- policy
@pytest.mark.quick
def test_gaussian_policy_gives_per_dim_and_executed_log_probs():
    space = spaces.Box(-1.0, 1.0, (K, A), np.float32)
    policy = make_policy("mlp", spaces.Box(-1.0, 1.0, (2,), np.float32), space, hidden_sizes=[8], critic=False,
                         log_std_init=0.5)
    assert log_prob_options(policy) == {"per_dim", "executed"}
    obs = torch.zeros(64, 2)
    torch.manual_seed(0)
    actions, summed, _ = policy.act(obs)
    assert (actions.abs() > 1).any()  # std 1.6: the sampled actions leave the Box, the env runs clipped ones
    torch.manual_seed(0)
    executed, per_dim, _ = policy.act(obs, per_dim=True, executed=True)
    assert torch.equal(executed, actions.clamp(-1, 1)) and per_dim.shape == (64, K, A)
    assert torch.allclose(per_dim.flatten(1).sum(1), policy.evaluate(obs, executed)[0])
    assert torch.equal(policy.evaluate(obs, executed, per_dim=True)[0], per_dim)
    assert not torch.allclose(per_dim.flatten(1).sum(1), summed)  # the old log-prob is of another action


@pytest.mark.quick
def test_executed_bounds_follow_the_action_statistics():
    space = spaces.Box(-1.0, 1.0, (2, 3), np.float32)
    stats = {"q01": [-2.0, 0.0, 0.0], "q99": [2.0, 0.0, 1.0], "mask": [True, True, False]}
    low, high = policy_space_bounds(space, stats)
    # dim 0: q01 + (a + 1) / 2 * 4 in [-1, 1] <=> a in [-0.5, 0.5]; dim 1: constant (q01 = q99): unbounded;
    # dim 2: not normalised: the Box itself
    assert low[0].tolist() == [-0.5, -np.inf, -1.0] and high[0].tolist() == [0.5, np.inf, 1.0]


class SumOnlyPolicy(Policy):
    """A policy of the old API: act/evaluate without per_dim or executed."""

    has_critic = False

    def __init__(self, observation_space, action_space):
        super().__init__(observation_space, action_space)
        self.inner = make_policy("mlp", observation_space, action_space, hidden_sizes=[8], critic=False)

    def act(self, obs, deterministic=False):
        actions, log_probs, _ = self.inner.act(obs, deterministic)
        return actions, log_probs, None

    def evaluate(self, obs, actions):
        log_probs, entropy, _ = self.inner.evaluate(obs, actions)
        return log_probs, entropy, None


@pytest.mark.quick
def test_policies_without_per_dim_log_probs_are_refused_with_the_keys_to_change():
    space = ToyChunkEnv.observation_space, ToyChunkEnv.action_space
    assert log_prob_options(SumOnlyPolicy(*space)) == set()
    for hparams, match in (({"ratio_level": "dim"}, "grpo.ratio_level=chunk"),
                           ({"mask_unexecuted": True}, "grpo.mask_unexecuted=false"),
                           ({"logprob_of_executed": True}, "grpo.logprob_of_executed=false")):
        with pytest.raises(GRPOSetupError, match=match):
            GRPO(SumOnlyPolicy(*space), toy_envs(1), group_size=2, groups_per_update=1, **hparams)
    grpo = GRPO(SumOnlyPolicy(*space), toy_envs(1), group_size=2, groups_per_update=1, n_epochs=1,
                filter_uniform_groups=False)  # chunk: fine (and every group trained on, uniform or not)
    grpo.learn(1)
    assert "train/actor/policy_loss" in grpo.last_metrics and "train/actor/clip_fraction_dim" not in grpo.last_metrics
    grpo.close()


# ----------------------------------------------------------------------------------------- config
@pytest.mark.quick
def test_grpo_config_defaults_keep_the_old_behaviour_and_bad_values_are_named():
    hp = config_from_dict({}).grpo
    assert (hp.ratio_level, hp.clip_bounds, hp.mask_unexecuted, hp.logprob_of_executed, hp.loss_weighting,
            hp.min_mixed_groups, hp.skip_solved_after) == ("chunk", (0.2, 0.2), False, False, "transition", 0, 0)
    assert config_from_dict({"grpo": {"clip_range_high": 0.28}}).grpo.clip_bounds == (0.2, 0.28)
    bad = [({"ratio_level": "token"}, "grpo.ratio_level"), ({"clip_range_low": 1.2}, "clip_range_low"),
           ({"clip_range_high": 0}, "clip_range_high"), ({"loss_weighting": "step"}, "grpo.loss_weighting"),
           ({"min_mixed_groups": 2, "filter_uniform_groups": False}, "filter_uniform_groups=true"),
           ({"min_mixed_groups": 9, "filter_uniform_groups": True, "groups_per_update": 2}, "never be reached"),
           ({"max_sampling_rounds": 0}, "max_sampling_rounds"), ({"skip_solved_after": -1}, "skip_solved_after"),
           ({"skip_solved_after": 2, "score": "return"}, "score=success")]
    for grpo, match in bad:
        with pytest.raises(ConfigError, match=match):
            config_from_dict({"grpo": grpo})


@pytest.mark.quick
def test_the_v2_config_validates_with_the_recommended_settings(capsys):
    from vla_gym.trainers.grpo import main

    hp = load_config(CONFIG_V2).grpo
    assert (hp.ratio_level, hp.clip_bounds, hp.mask_unexecuted, hp.logprob_of_executed, hp.loss_weighting) == (
        "dim", (0.2, 0.28), True, True, "episode")
    assert main(["--config", CONFIG_V2, "--print-config"]) == 0
    assert "ratio_level: dim" in capsys.readouterr().out


# ----------------------------------------------------------------------------------- rollouts
@pytest.mark.quick
def test_each_recorded_chunk_knows_how_many_of_its_sub_actions_ran():
    grpo = toy_grpo()
    grpo.start_rollouts([0])
    specs = [EpisodeSpec(seed=s) for s in (3, 4, 5, 8, 10)]  # 8, 9, 10, 7, 9 sub-steps
    results, records = play_recorded(grpo.runner, specs, grpo._act_kwargs, offset=100)
    ran = {}
    for step in records:
        assert step.actions.shape[1:] == (K, A) and step.log_probs.shape[1:] == (K, A)  # per-dim log-probs recorded
        for job, steps in zip(step.jobs, step.sub_steps):
            if job >= 0:
                ran.setdefault(int(job) - 100, []).append(int(steps))
    for j, spec in enumerate(specs):
        length = episode_length(spec.seed)
        assert results[j].length == length and sum(ran[j]) == length
        assert ran[j] == [K] * (len(ran[j]) - 1) + [length - K * (len(ran[j]) - 1)]
    grpo.close()


@pytest.mark.quick
def test_buffer_keeps_per_dim_log_probs_and_extras_by_name():
    buffer = RolloutBuffer(2, 3)
    for t in range(2):
        buffer.add(torch.zeros(3, 2), torch.zeros(3, K, A), torch.full((3, K, A), float(t)),
                   extras={"sub_steps": torch.tensor([4, 2, -1]), "row_weights": torch.ones(3)})
    assert buffer.log_probs.shape == (2, 3, K, A) and buffer.extras["sub_steps"].shape == (2, 3)
    batch = next(buffer.minibatches(1))
    assert batch["log_probs"].shape == (6, K, A) and batch["sub_steps"].tolist() == [4, 2, -1, 4, 2, -1]
    uneven = RolloutBuffer(2, 1)
    uneven.add(torch.zeros(1, 2), torch.zeros(1, 1), torch.zeros(1), extras={"a": torch.zeros(1)})
    with pytest.raises(ValueError, match="extras"):
        uneven.add(torch.zeros(1, 2), torch.zeros(1, 1), torch.zeros(1))


def _last_chunk_batch(grpo: GRPO):
    """Collect a rollout and return (buffer, a batch of the rows whose chunk ran fewer than K sub-steps)."""
    buffer, _, _ = grpo.collect_rollouts()
    sub_steps = buffer.extras["sub_steps"].flatten()
    rows = torch.nonzero(buffer.valid.flatten() & (sub_steps >= 0) & (sub_steps < K)).squeeze(-1)
    assert rows.numel() > 0
    return buffer, buffer.batch(rows)


@pytest.mark.quick
def test_masked_loss_ignores_the_sub_actions_the_env_never_ran():
    for mask_unexecuted in (True, False):
        grpo = toy_grpo(mask_unexecuted=mask_unexecuted, ratio_level="dim", filter_uniform_groups=False)
        grpo.start_rollouts([0])
        if not mask_unexecuted:  # keep the sub-steps to find the rows, without masking them
            grpo.hp.mask_unexecuted = True
            _, batch = _last_chunk_batch(grpo)
            grpo.hp.mask_unexecuted = False
            batch["sub_steps_kept"] = batch.pop("sub_steps")
        else:
            _, batch = _last_chunk_batch(grpo)
        sub_steps = batch.get("sub_steps", batch.get("sub_steps_kept"))
        batch["advantages"] = torch.ones_like(batch["advantages"])  # every row counts
        loss_before, _ = grpo.loss(batch)
        changed = dict(batch, actions=batch["actions"].clone())
        for row, steps in enumerate(sub_steps.tolist()):
            changed["actions"][row, steps:] += 0.5  # sub-actions after the episode's end
        loss_after, _ = grpo.loss(changed)
        if mask_unexecuted:
            assert torch.equal(loss_before, loss_after)
        else:  # the old behaviour: actions that never ran move the ratio and the loss
            assert not torch.allclose(loss_before, loss_after)
        grpo.close()


@pytest.mark.quick
def test_executed_log_probs_store_what_the_env_ran_and_score_it_consistently():
    for executed in (False, True):
        grpo = toy_grpo(logprob_of_executed=executed, filter_uniform_groups=False,
                        policy_kwargs={"hidden_sizes": [8], "critic": False, "log_std_init": 0.5})
        grpo.start_rollouts([0])
        buffer, _, _ = grpo.collect_rollouts()
        rows = torch.nonzero(buffer.valid.flatten()).squeeze(-1)
        batch = buffer.batch(rows)
        outside = (batch["actions"].abs() > 1).any()
        if executed:
            assert not outside  # the stored action is the one the env ran
            recomputed = grpo.policy.evaluate(batch["obs"], batch["actions"], per_dim=True)[0]
            torch.testing.assert_close(recomputed, batch["log_probs"])  # ratio exactly 1 before any step
        else:
            assert outside  # the old behaviour: the log-prob is of an action the env clipped away
        grpo.close()


@pytest.mark.quick
def test_episode_weighting_gives_every_episode_the_same_weight():
    for weighting in ("transition", "episode"):
        grpo = toy_grpo(loss_weighting=weighting, filter_uniform_groups=False, groups_per_update=4)
        grpo.start_rollouts([0])
        steps = []
        run = grpo.runner.run

        def watch(specs, recorder=None, **kwargs):
            def record(obs, actions, log_probs, jobs):
                steps.append(jobs.copy())
                recorder(obs, actions, log_probs, jobs)
            return run(specs, recorder=record, **kwargs)

        grpo.runner.run = watch
        buffer, _, _ = grpo.collect_rollouts()
        jobs = torch.as_tensor(np.stack(steps)).flatten()
        valid = buffer.valid.flatten()
        weights = buffer.extras["row_weights"].flatten() if weighting == "episode" else torch.ones(valid.numel())
        per_episode = torch.zeros(int(jobs.max()) + 1).index_add_(0, jobs[valid], weights[valid])
        lengths = torch.bincount(jobs[valid])
        assert len(set(lengths.tolist())) > 1  # episodes of 2 and 3 chunks
        if weighting == "episode":
            torch.testing.assert_close(per_episode, torch.full_like(per_episode, per_episode.mean().item()))
            assert weights[valid].mean().item() == pytest.approx(1.0)
        else:  # the old behaviour: an episode weighs its number of transitions
            assert torch.equal(per_episode, lengths.float())
        grpo.close()


# ---------------------------------------------------------------------------------- updates, metrics
@pytest.mark.quick
def test_signal_metrics_are_off_by_default_and_cost_no_extra_pass():
    grpo = toy_grpo(filter_uniform_groups=True, groups_per_update=4)
    assert grpo.hp.signal_metrics is False
    grpo.learn(1)
    assert not {"train/actor/grad_cosine_halves", "train/actor/mean_shift_std"} & set(grpo.last_metrics)
    grpo.close()


@pytest.mark.quick
@pytest.mark.parametrize("level", ["chunk", "step", "dim"])
def test_a_grpo_update_at_each_ratio_level_logs_the_signal_metrics(level):
    grpo = toy_grpo(ratio_level=level, clip_range_high=0.28, mask_unexecuted=True, logprob_of_executed=True,
                    loss_weighting="episode", filter_uniform_groups=True, groups_per_update=4, signal_metrics=True)
    before = {k: v.clone() for k, v in grpo.policy.state_dict().items()}
    grpo.learn(1)
    m = grpo.last_metrics
    assert m["rollout/mixed_groups"] + m["rollout/uniform_groups"] == pytest.approx(1.0)
    assert m["rollout/all_success_groups"] + m["rollout/all_fail_groups"] == pytest.approx(m["rollout/uniform_groups"])
    assert m["rollout/groups"] == 4 and m["rollout/useful_episodes"] == 4 * m["rollout/useful_groups"]
    assert m["rollout/sampling_rounds"] == 1
    if m["rollout/useful_groups"]:
        assert m["rollout/episodes_per_useful_group"] == 16 / m["rollout/useful_groups"]
        assert -1.0 <= m["train/actor/grad_cosine_halves"] <= 1.0
        assert m["train/actor/mean_shift_std"] > 0 and m["train/actor/std_mean"] > 0
        assert m["train/actor/kl_ref"] >= 0  # kl_coef=0: measured on the probe batch
        for key in ("clip_fraction_dim", "clip_fraction_chunk", "approx_kl_dim", "ratio_std_chunk"):
            assert f"train/actor/{key}" in m
        if level in ("dim", "chunk"):  # the loss's own statistic is the level's
            assert m["train/actor/approx_kl"] == pytest.approx(m[f"train/actor/approx_kl_{level}"])
        assert any(not torch.equal(before[k], v) for k, v in grpo.policy.state_dict().items())
    grpo.close()


@pytest.mark.quick
def test_kl_term_follows_the_ratio_level():
    grpo = toy_grpo(ratio_level="dim", kl_coef=0.1, mask_unexecuted=True, filter_uniform_groups=False)
    grpo.start_rollouts([0])
    buffer, _, _ = grpo.collect_rollouts()
    with torch.no_grad():
        for p in grpo.policy.parameters():
            p.add_(0.05)
    batch = buffer.batch(torch.nonzero(buffer.valid.flatten()).squeeze(-1))
    _, stats = grpo.loss(batch)
    new = grpo.policy.evaluate(batch["obs"], batch["actions"], per_dim=True)[0]
    ref = grpo.reference.evaluate(batch["obs"], batch["actions"], per_dim=True)[0]
    mask = executed_mask(batch["sub_steps"], K).unsqueeze(-1).expand(-1, K, A)
    log_ratio = ref - new
    k3 = torch.where(mask, log_ratio.exp() - log_ratio - 1, torch.zeros(()))
    assert stats["train/actor/kl_ref"] == pytest.approx((k3.flatten(1).sum(1) / (K * A)).mean().item(), rel=1e-5)
    grpo.close()


# ----------------------------------------------------------------------------- exploration noise
@pytest.mark.quick
def test_chunk_noise_is_one_draw_per_chunk_scored_by_that_draws_density():
    torch.manual_seed(0)
    head = GaussianHead(5, (K, A), log_std_init=math.log(0.1), noise="chunk")
    dist = head(torch.randn(6, 5))
    noise = dist.sample() - dist.mode()
    assert torch.allclose(noise, noise[:, :1].expand_as(noise))  # the same draw at every step of a chunk
    actions = dist.mode() + noise
    expected = torch.distributions.Normal(0.0, 0.1).log_prob(noise[:, 0]).sum(1)
    assert torch.allclose(dist.log_prob(actions), expected, atol=1e-5)
    per_dim = dist.log_prob(actions, per_dim=True)
    assert per_dim.shape == (6, K, A) and torch.equal(per_dim[:, 1:], torch.zeros(6, K - 1, A))
    assert torch.allclose(per_dim.sum((1, 2)), expected, atol=1e-5)
    assert torch.allclose(dist.entropy(), torch.distributions.Normal(0.0, 0.1).entropy() * A * torch.ones(6))
    step = GaussianHead(5, (K, A), log_std_init=math.log(0.1))(torch.randn(6, 5))
    step_noise = step.sample() - step.mode()
    assert not torch.allclose(step_noise, step_noise[:, :1].expand_as(step_noise))  # per-step: K independent draws


@pytest.mark.quick
def test_exploration_is_set_after_loading_and_bad_values_are_named():
    head = GaussianHead(5, (K, A), log_std_init=-1.0)
    head.set_exploration(std=0.05, noise="chunk")
    assert torch.allclose(head.log_std, torch.full((K, A), math.log(0.05))) and head.noise == "chunk"
    with pytest.raises(ValueError, match="std must be > 0"):
        head.set_exploration(std=0.0)
    with pytest.raises(ValueError, match="use one of step, chunk"):
        head.set_exploration(noise="pink")
    with pytest.raises(ValueError, match=r"needs an action chunk \[K, A\]"):
        GaussianHead(5, (A,), noise="chunk")
    grpo = toy_grpo(exploration_std=0.05)
    assert torch.allclose(grpo.policy.action_head.log_std, torch.full((K, A), math.log(0.05)))
    grpo.close()
    with pytest.raises(ConfigError, match="exploration_std"):
        config_from_dict({"grpo": {"exploration_std": -1.0}})


@pytest.mark.quick
def test_with_chunk_noise_the_ratio_counts_the_first_step_of_each_chunk_only():
    policy_kwargs = {"hidden_sizes": [8], "critic": False, "log_std_init": math.log(0.3), "noise": "chunk"}
    grpo = toy_grpo(ratio_level="dim", mask_unexecuted=True, filter_uniform_groups=False, policy_kwargs=policy_kwargs)
    grpo.start_rollouts([0])
    buffer, _, _ = grpo.collect_rollouts()
    batch = buffer.batch(torch.nonzero(buffer.valid.flatten()).squeeze(-1))
    mask = grpo._noise_mask(batch["sub_steps"], batch["actions"])
    assert mask[:, 0].all() and not mask[:, 1:].any()
    batch["advantages"] = torch.ones_like(batch["advantages"])
    _, stats = grpo.loss(batch)
    assert stats["train/actor/approx_kl"] == pytest.approx(0.0, abs=1e-6)  # the rollout's own policy: ratio 1
    grpo.close()
    grpo = toy_grpo(ratio_level="dim", mask_unexecuted=True, filter_uniform_groups=True, groups_per_update=4,
                    policy_kwargs=policy_kwargs)
    before = {k: v.clone() for k, v in grpo.policy.state_dict().items()}
    grpo.learn(1)
    assert grpo.last_metrics["rollout/useful_groups"] > 0
    assert any(not torch.equal(before[k], v) for k, v in grpo.policy.state_dict().items())
    grpo.close()


# ------------------------------------------------------------------------------- dynamic sampling
@pytest.mark.quick
def test_group_outcomes_and_the_stop_rule():
    outcome = group_outcomes(torch.tensor([1., 1., 0., 0., 1., 0.]), 2, success=True)
    assert outcome.mixed.tolist() == [False, False, True]
    assert outcome.all_success.tolist() == [True, False, False] and outcome.all_fail.tolist() == [False, True, False]
    returns = group_outcomes(torch.tensor([3., 3., 1., 2.]), 2, success=False)
    assert returns.mixed.tolist() == [False, True] and not returns.all_success.any()
    assert sampling_done(0, 1, 0, 4)  # off: one round
    assert not sampling_done(3, 1, 4, 4) and sampling_done(4, 1, 4, 4) and sampling_done(0, 4, 4, 4)


@pytest.mark.quick
def test_an_episode_cut_by_a_worker_fault_is_no_failure_of_its_group():
    """A cut episode (env_failure) scores 0 but was not judged: it must not make a group mixed, nor pull the
    group's mean down (before, [1, 1, cut, 1] was a mixed group whose successes got advantage +0.25)."""
    from vla_gym.trainers.algorithms.advantages import group_advantages

    scores = torch.tensor([1., 1., 0., 1., 1., 0., 0., 1.])
    judged = torch.tensor([True, True, False, True, True, True, True, True])
    outcome = group_outcomes(scores, 4, success=True, judged=judged)
    assert outcome.mixed.tolist() == [False, True] and outcome.all_success.tolist() == [True, False]
    advantages = group_advantages(scores, 4, judged=judged)
    assert advantages[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert advantages[4:].tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5])
    normalized = group_advantages(scores, 4, normalize_std=True, judged=judged)
    assert normalized[:4].abs().max() == 0 and normalized[4:].tolist() == pytest.approx([1, -1, -1, 1], abs=1e-4)
    nothing_judged = group_outcomes(torch.zeros(2), 2, success=True, judged=torch.tensor([False, False]))
    assert not nothing_judged.mixed.any() and not nothing_judged.all_fail.any()


@pytest.mark.quick
def test_solved_tracker_skips_pairs_after_k_all_success_groups_and_round_trips():
    solved = StartTracker(after=2)
    solved.record((0, 1), True)
    assert not solved.solved((0, 1))
    solved.record((0, 1), True)
    solved.record((0, 2), True)
    solved.record((0, 2), False)
    assert solved.solved((0, 1)) and not solved.solved((0, 2)) and not solved.solved(None)
    solved.record((0, 1), False)  # a failure brings it back
    assert not solved.solved((0, 1))
    solved.record((0, 1), True)
    solved.record((0, 1), True)
    copy = StartTracker(after=2)
    copy.load_state_dict(solved.state_dict())
    assert copy.history == solved.history and copy.num_solved() == 1
    old_format = StartTracker(after=2)  # a checkpoint from before skip_failed_after: one bool per group
    old_format.load_state_dict({"after": 2, "history": [[[0, 1], [True, True]], [[0, 2], [True, False]]]})
    assert old_format.solved((0, 1)) and not old_format.skip((0, 2))
    draws = iter([((0, 1), "solved"), ((0, 2), "fresh")])
    assert draw_unsolved(lambda attempt: next(draws), solved) == ("fresh", 1)
    assert draw_unsolved(lambda attempt: ((0, 1), attempt), solved, max_attempts=3) == (2, 3)  # all solved: the last


@pytest.mark.quick
def test_hopeless_starts_are_skipped_after_k_all_fail_groups():
    starts = StartTracker(failed_after=2)
    starts.record((0, 1), all_success=False, all_fail=True)
    assert not starts.skip((0, 1))
    starts.record((0, 1), all_success=False, all_fail=True)
    assert starts.hopeless((0, 1)) and starts.skip((0, 1)) and not starts.solved((0, 1))
    starts.record((0, 2), all_success=False, all_fail=True)
    starts.record((0, 2), all_success=False)  # a mixed group: still learnable
    starts.record((0, 3), all_success=True)
    starts.record((0, 3), all_success=True)  # all-success is not skipped without skip_solved_after
    assert not starts.skip((0, 2)) and not starts.skip((0, 3)) and starts.num_hopeless() == 1
    draws = iter([((0, 1), "hopeless"), ((0, 2), "fresh")])
    assert draw_unsolved(lambda attempt: next(draws), starts) == ("fresh", 1)
    grpo = toy_grpo(skip_failed_after=1, groups_per_update=4)
    grpo.learn(1)
    assert "rollout/hopeless_pairs" in grpo.last_metrics and "rollout/skipped_starts" in grpo.last_metrics
    grpo.close()
    with pytest.raises(ConfigError, match="skip_failed_after counts"):
        config_from_dict({"grpo": {"skip_failed_after": 2, "score": "return"}})


class _Task:
    def __init__(self, index):
        self.index, self.name, self.num_init_states = index, f"task{index}", 3


@pytest.mark.quick
def test_group_specs_skip_solved_pairs_and_keep_the_old_draws_when_off():
    grpo = toy_grpo(groups_per_update=6, skip_solved_after=1)
    grpo.start_rollouts([0])
    grpo.tasks, grpo.fixed_task = [_Task(0), _Task(1)], None
    plain = grpo.group_specs()[::4]
    grpo.starts.record((plain[0].task_id, plain[0].init_state_id), True)
    skipping = grpo.group_specs()[::4]
    assert grpo.last_skipped >= 1
    assert all(not grpo.starts.solved((s.task_id, s.init_state_id)) for s in skipping)
    assert [s for s in skipping if (s.task_id, s.init_state_id) != (plain[0].task_id, plain[0].init_state_id)]
    # groups of pairs not solved are drawn as before
    for old, new in zip(plain, skipping):
        if (old.task_id, old.init_state_id) != (plain[0].task_id, plain[0].init_state_id):
            assert old == new
    grpo.close()


@pytest.mark.quick
def test_dynamic_sampling_plays_rounds_until_enough_mixed_groups():
    grpo = toy_grpo(groups_per_update=1, filter_uniform_groups=True, min_mixed_groups=3, max_sampling_rounds=6)
    grpo.start_rollouts([0])
    buffer, num_minibatches, m = grpo.collect_rollouts()
    rounds, useful = m["rollout/sampling_rounds"], m["rollout/useful_groups"]
    assert useful >= 3 or rounds == 6
    assert rounds >= 3 and m["rollout/groups"] == rounds
    assert m["rollout/episodes_per_useful_group"] == 4 * rounds / useful
    assert buffer.valid.sum() > 0 and num_minibatches == math.ceil(int(buffer.valid.sum()) / 8)
    # only the mixed groups' steps are kept: their advantages are nonzero with the success score
    assert (buffer.advantages[buffer.valid] != 0).all()
    early = toy_grpo(groups_per_update=1, filter_uniform_groups=True, min_mixed_groups=1, max_sampling_rounds=6)
    early.start_rollouts([0])
    m = early.collect_rollouts()[2]
    assert m["rollout/useful_groups"] == 1 and m["rollout/sampling_rounds"] < 6  # stops at the first mixed group
    early.close()
    off = toy_grpo(groups_per_update=1, filter_uniform_groups=True)
    off.start_rollouts([0])
    assert off.collect_rollouts()[2]["rollout/sampling_rounds"] == 1
    # rounds draw new groups: the second round's group is not the first one's, nor the next update's
    first, second = grpo.group_specs(0), grpo.group_specs(1)
    grpo.num_updates += 1
    assert first != second and second != grpo.group_specs(0)
    grpo.close()
    off.close()


class TwoIdenticalRanks(Distributed):
    """One process that reduces as if a second rank had found the same: sums doubled."""

    def sum_tensor(self, tensor):
        return tensor * 2


@pytest.mark.quick
def test_dynamic_sampling_stops_on_the_sum_over_ranks():
    """Every rank stops after the same round: the stop rule reads the all-ranks sum of mixed groups, so here
    (the other rank found as many) one mixed group on this rank is enough for min_mixed_groups=2."""
    alone = toy_grpo(groups_per_update=1, filter_uniform_groups=True, min_mixed_groups=1, max_sampling_rounds=6)
    alone.start_rollouts([0])
    rounds_to_first_mixed = alone.collect_rollouts()[2]["rollout/sampling_rounds"]
    paired = toy_grpo(groups_per_update=1, filter_uniform_groups=True, min_mixed_groups=2, max_sampling_rounds=6)
    paired.dist = TwoIdenticalRanks()
    paired.start_rollouts([0])
    m = paired.collect_rollouts()[2]
    assert m["rollout/sampling_rounds"] == rounds_to_first_mixed and m["rollout/useful_groups"] == 2
    alone.close()
    paired.close()


def test_v2_settings_on_libero_mask_the_sub_steps_after_a_truncation():
    """The real ActionChunk: 6-step episodes in chunks of 4 run 4 + 2 sub-steps; the second chunk's last 2 are
    masked, the stored actions are the executed ones, and an update at the v2 settings runs."""
    pytest.importorskip("libero.libero")
    import vla_gym

    envs = vla_gym.make_vec("VLA/LiberoObject-v0", 2, vectorization="sync", max_episode_steps=6,
                            wrappers=[{"name": "ActionChunk", "kwargs": {"chunk_size": 4}}], cameras=["main"],
                            image_size=32)
    grpo = GRPO("mlp", envs, group_size=2, groups_per_update=1, n_epochs=1, batch_size=64, ratio_level="dim",
                clip_range_high=0.28, mask_unexecuted=True, logprob_of_executed=True, loss_weighting="episode",
                filter_uniform_groups=False, policy_kwargs={"hidden_sizes": [16], "critic": False, "log_std_init": 0.0})
    grpo.start_rollouts([0])
    buffer, _, _ = grpo.collect_rollouts()
    valid = buffer.valid.flatten()
    assert sorted(buffer.extras["sub_steps"].flatten()[valid].tolist()) == [2, 2, 4, 4]
    assert (buffer.actions.flatten(0, 1)[valid].abs() <= 1).all()
    grpo.learn(grpo.num_timesteps + 1)  # the rollout above counted its steps
    assert grpo.num_updates == 1 and "train/actor/clip_fraction_dim" in grpo.last_metrics
    grpo.close()
