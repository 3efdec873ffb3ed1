"""VLA policies through the real PPO / GRPO trainers on a real ManiSkill env (tiny models, 32 px images)."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("mani_skill")

from random_vlms import build_vlm

import vla_gym
from vla_gym.trainers.policies import make_policy
from vla_gym.trainers.runtime.config import config_from_dict

ENV = "VLA/ManiSkill-PushCube-v0"
ENV_KWARGS = {"cameras": ["main"], "image_size": 32, "max_episode_steps": 4}
TOKENS = "vla_gym.trainers.policies.vla_tokens:ActionTokenVLAPolicy"
CONTINUOUS = "vla_gym.trainers.policies.vla_continuous:ContinuousVLAPolicy"
PI0 = "vla_gym.trainers.policies.vla_pi0:PI0Policy"
SMALL = "vla_gym.trainers.policies.vla_small:SmallVLAPolicy"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def envs():
    # one vector env per test: an in-process ManiSkill env reset under torch.inference_mode (GRPO's episode
    # runner) keeps inference tensors that a later reset outside it (PPO's first reset) cannot update
    envs = vla_gym.make_vec(ENV, 2, vectorization="sync", **ENV_KWARGS)
    yield envs
    envs.close()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlms")
    return {family: str(build_vlm(root / family, family=family)) for family in ("paligemma", "pi0")}


def config(tmp_path, **extra):
    return config_from_dict({
        "env": {"id": ENV, "num_envs": 2, "vectorization": "sync", "kwargs": ENV_KWARGS},
        "eval": {"episodes": 0}, "checkpoint": {"resume": None}, "logging": {"progress_bar": False},
        "run_dir": str(tmp_path), "device": "cpu", **extra,
    })


def trainable_copy(policy):
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}


def changed(before, policy):
    return [k for k, v in policy.state_dict().items() if not torch.equal(before[k], v)]


def test_ppo_update_action_token_vla(envs, models, tmp_path):
    from vla_gym.trainers import PPO

    torch.manual_seed(0)
    policy = make_policy(TOKENS, envs.single_observation_space, envs.single_action_space,
                         model=models["paligemma"], lora={"rank": 4})
    before = trainable_copy(policy)
    algo = PPO(policy, envs, config=config(tmp_path), n_steps=4, batch_size=8, n_epochs=1, learning_rate=1e-3)
    algo.learn(8)
    assert algo.num_updates == 1 and algo.num_timesteps == 8
    # one epoch, one minibatch: the update's first ratio is exp(evaluate - act) == 1
    assert abs(algo.last_metrics["train/actor/approx_kl"]) < 1e-5
    assert any("lora_" in k for k in changed(before, policy)) and any("value_head" in k for k in changed(before, policy))


def test_grpo_update_pi0_flow_head(envs, models, tmp_path):
    from vla_gym.trainers import GRPO

    torch.manual_seed(0)
    policy = make_policy(PI0, envs.single_observation_space, envs.single_action_space, model=models["pi0"],
                         num_steps=2, critic=False, dtype="float32")
    before = trainable_copy(policy)
    algo = GRPO(policy, envs, config=config(tmp_path), group_size=2, groups_per_update=1, n_epochs=1, batch_size=64,
                learning_rate=1e-3, filter_uniform_groups=False)
    algo.learn(1)
    assert algo.num_updates == 1
    assert abs(algo.last_metrics["train/actor/approx_kl"]) < 1e-4
    moved = changed(before, policy)
    # advantages are zero when both rollouts score the same: then only the (absent) entropy term could move weights
    assert moved or algo.last_metrics.get("rollout/uniform_groups", 0) == 1


def test_ppo_small_policy_checkpoint_round_trip(envs, tmp_path):
    from vla_gym.trainers import PPO

    torch.manual_seed(0)
    algo = PPO(SMALL, envs, config=config(tmp_path, name="small"), policy_kwargs={"image_size": None},
               n_steps=4, batch_size=8, n_epochs=2)
    before = trainable_copy(algo.policy)
    algo.learn(8)
    assert changed(before, algo.policy)
    assert not any(k.startswith("vision.") for k in algo.policy.state_dict())  # frozen encoder not saved
    path = algo.save(tmp_path / "small.pt")
    trained_bytes = sum(v.numel() * v.element_size() for v in algo.policy.state_dict().values())
    assert path.stat().st_size < 3 * trained_bytes + 1e6  # weights + Adam's two moments, no frozen encoder
    loaded = PPO.load(path, env=envs, device="cpu")
    for key, value in algo.policy.state_dict().items():
        torch.testing.assert_close(loaded.policy.state_dict()[key], value)


def test_grpo_update_small_policy_with_action_tokens(envs, tmp_path):
    """The anchors' GRPO on the token head: rollouts sampled at temperature 1.6, one ratio per action token
    (ratio_level dim) clipped to [0.8, 1.28]; the first minibatch's ratios are 1 (act and evaluate agree)."""
    from vla_gym.trainers import GRPO

    torch.manual_seed(0)
    algo = GRPO(SMALL, envs, config=config(tmp_path, name="tokens"), group_size=2, groups_per_update=1, n_epochs=1,
                batch_size=64, learning_rate=1e-3, ratio_level="dim", clip_range_high=0.28, mask_unexecuted=True,
                filter_uniform_groups=False,
                policy_kwargs={"image_size": None, "head": "tokens", "temperature": 1.6, "critic": False})
    assert algo.policy.action_head.temperature == 1.6
    before = trainable_copy(algo.policy)
    algo.learn(1)
    assert algo.num_updates == 1
    assert abs(algo.last_metrics["train/actor/approx_kl"]) < 1e-5
    # advantages are zero when both rollouts score the same (a random policy rarely pushes the cube in 4 steps)
    moved = changed(before, algo.policy)
    assert all(k.startswith("action_head.") or "keypoints" in k or k.startswith(("pi_net.", "norm.")) for k in moved)
    assert moved or algo.last_metrics.get("rollout/uniform_groups", 0) == 1


def test_the_token_study_config_validates():
    """experiments/libero_miniature/configs/libero_object_miniature_grpo_tokens.yaml: the anchors' settings."""
    import pathlib

    from vla_gym.trainers.runtime.config import load_config

    root = pathlib.Path(__file__).resolve().parents[1]
    cfg = load_config(root / "experiments/libero_miniature/configs/libero_object_miniature_grpo_tokens.yaml")
    hp = cfg.grpo
    assert (cfg.policy.kwargs["head"], cfg.policy.kwargs["temperature"]) == ("tokens", 1.6)
    assert (hp.group_size, hp.ratio_level, hp.clip_bounds, hp.kl_coef, hp.train_init_states) == (
        8, "dim", (0.2, 0.28), 0.0, 40)
    assert hp.min_mixed_groups == hp.groups_per_update and hp.filter_uniform_groups


def test_ppo_with_a_warmed_up_critic_on_the_small_policys_action_tokens(envs, tmp_path):
    """The token PPO comparison (libero_object_miniature_ppo_tokens.yaml) in miniature: the first update takes the
    value loss alone (critic_warmup_updates): the critic's layers move, the actor's own (pi_net, the token head) do
    not; the features both read (keypoints, the layer norm) learn from the value loss, as they do after the warm-up.
    The next update moves the token head too, one ratio per action token."""
    from vla_gym.trainers import PPO

    torch.manual_seed(0)
    algo = PPO(SMALL, envs, config=config(tmp_path, name="ppo_tokens"), n_steps=4, batch_size=8, n_epochs=1,
               learning_rate=1e-3, ratio_level="dim", critic_warmup_updates=1,
               policy_kwargs={"image_size": None, "head": "tokens", "temperature": 1.6, "critic": True})
    before = trainable_copy(algo.policy)
    algo.learn(8)
    warmup = changed(before, algo.policy)
    assert any(k.startswith("value_head.") for k in warmup)
    assert not any(k.startswith(("pi_net.", "action_head.")) for k in warmup), warmup
    after_warmup = trainable_copy(algo.policy)
    algo.learn(16)
    assert algo.num_updates == 2
    assert any(k.startswith("action_head.") for k in changed(after_warmup, algo.policy))


def test_the_token_ppo_study_config_validates():
    """experiments/libero_miniature/configs/libero_object_miniature_ppo_tokens.yaml: token GRPO's policy and env,
    a critic warmed up before the actor moves."""
    import pathlib

    from vla_gym.trainers.runtime.config import load_config

    root = pathlib.Path(__file__).resolve().parents[1]
    ppo = load_config(root / "experiments/libero_miniature/configs/libero_object_miniature_ppo_tokens.yaml")
    grpo = load_config(root / "experiments/libero_miniature/configs/libero_object_miniature_grpo_tokens.yaml")
    assert (ppo.policy.kwargs["head"], ppo.policy.kwargs["temperature"], ppo.policy.kwargs["critic"]) == (
        "tokens", 1.6, True)
    assert ppo.env.id == grpo.env.id and ppo.env.kwargs["init_states"] == "0-39"
    assert ppo.ppo.ratio_level == "dim" and ppo.ppo.critic_warmup_updates > 0
