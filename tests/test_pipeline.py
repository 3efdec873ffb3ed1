"""Pipelined rollouts (``rollout.pipeline_stages``): S=2 gives the same trajectories as S=1, for PPO's collector and
GRPO's episode runner, on CartPole in worker processes and on LIBERO with action chunks; clear errors otherwise. The
stepper uses the vector env's public ``step_rows_async`` / ``step_rows_wait`` only.

Real envs in real async vector envs; the only tolerance is for the policy's forward pass on batches of 2 rows
instead of 4 (float rounding of the matrix kernels, ~1e-7).
"""
from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from vla_gym.trainers.policies import make_policy
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.rollout.collector import RolloutCollector
from vla_gym.trainers.rollout.episode_plan import EpisodeSpec
from vla_gym.trainers.rollout.episode_runner import EpisodeRunner
from vla_gym.trainers.rollout.pipeline import PipelineError, StagedStepper
from vla_gym.trainers.runtime.config import config_from_dict
from vla_gym.vector.envs import VLAAsyncVectorEnv, concat_infos

CLOSE = {"atol": 1e-5, "rtol": 1e-5}
#: observations of the same episodes under 1 and 2 stages: images bit for bit; float states within the roundoff that
#: batched inference puts into the actions (a batch of 2 and a batch of 1 may differ in the last bits of a matmul,
#: and MuJoCo carries that ~1e-9 into the next state)
SAME_OBS = {"atol": 1e-6, "rtol": 0}


def cartpoles(n: int = 4, **kwargs) -> VLAAsyncVectorEnv:
    return VLAAsyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * n, autoreset_mode=AutoresetMode.SAME_STEP,
                             **kwargs)


class PublicOnly:
    """A vector env seen through its public methods only (no pipes, no gymnasium privates)."""

    PUBLIC = ("num_envs", "metadata", "single_observation_space", "single_action_space", "observation_space",
              "action_space", "steps_rows_in_background", "step_rows_async", "step_rows_wait", "reset", "step",
              "get_attr", "close")

    def __init__(self, envs):
        self._envs = envs

    def __getattr__(self, name):
        if name not in self.PUBLIC:
            raise AttributeError(f"{name} is not a public method of the vector env")
        return getattr(self._envs, name)


def ppo_rollouts(envs, stages: int, n_steps: int, rollouts: int = 2, **policy_kwargs) -> dict[str, torch.Tensor]:
    """The buffer's tensors after each of ``rollouts`` collections from the same seeds and the same torch seed."""
    torch.manual_seed(0)
    policy = make_policy("mlp", envs.single_observation_space, envs.single_action_space, hidden_sizes=[16],
                         **policy_kwargs)
    buffer = RolloutBuffer(n_steps, envs.num_envs)
    collector = RolloutCollector(envs, policy, buffer, gamma=0.99, gae_lambda=0.95, pipeline_stages=stages)
    collector.reset(list(range(envs.num_envs)))
    out = {}
    for k in range(rollouts):
        collector.collect()
        for name in ("actions", "log_probs", "values", "rewards", "dones", "valid", "advantages"):
            out[f"{name}{k}"] = getattr(buffer, name).clone()
        out[f"obs{k}"] = clone(buffer.obs.flat())
    return out


def clone(tree):
    if isinstance(tree, dict):
        return {key: clone(value) for key, value in tree.items()}
    return list(tree) if isinstance(tree, list) else tree.clone()


def assert_same(one, two, **tolerance):
    """Equal trees of tensors (within ``tolerance``) and lists of strings (exactly)."""
    if isinstance(one, dict):
        assert one.keys() == two.keys()
        for key in one:
            assert_same(one[key], two[key], **tolerance)
    elif isinstance(one, (list, str)):
        assert one == two
    else:
        torch.testing.assert_close(one, two, **(tolerance or {"rtol": 0, "atol": 0}))


def episodes(envs, stages: int, specs, **policy_kwargs):
    """Each episode's results and its recorded (obs, action, log-prob) steps, by spec index."""
    torch.manual_seed(0)
    policy = make_policy("mlp", envs.single_observation_space, envs.single_action_space, hidden_sizes=[16],
                         critic=False, **policy_kwargs)
    steps: dict[int, list] = {}

    def record(obs, actions, log_probs, jobs):
        for i, job in enumerate(jobs):
            if job >= 0:
                steps.setdefault(int(job), []).append((row(obs, i), actions[i], log_probs[i]))

    results = EpisodeRunner(envs, policy, stages).run(specs, deterministic=False, recorder=record)
    return results, steps


def row(obs, i):
    return {key: row(value, i) for key, value in obs.items()} if isinstance(obs, dict) else obs[i]


def assert_same_episodes(one, two):
    (results1, steps1), (results2, steps2) = one, two
    assert [(r.episode_return, r.length, r.success, r.spec) for r in results1] == \
           [(r.episode_return, r.length, r.success, r.spec) for r in results2]
    assert sorted(steps1) == sorted(steps2) == list(range(len(results1)))
    for job in steps1:
        assert len(steps1[job]) == len(steps2[job])
        for (obs1, action1, log_prob1), (obs2, action2, log_prob2) in zip(steps1[job], steps2[job]):
            assert_same(obs1, obs2, **SAME_OBS)  # the env saw the same actions: the same observations
            torch.testing.assert_close(action1, action2, **CLOSE)
            torch.testing.assert_close(log_prob1, log_prob2, **CLOSE)


# ------------------------------------------------------------------------------------------- CartPole
def test_ppo_rollouts_are_the_same_with_two_stages():
    envs = cartpoles()
    try:
        one, two = ppo_rollouts(envs, 1, n_steps=40), ppo_rollouts(envs, 2, n_steps=40)
    finally:
        envs.close()
    assert one["dones0"].any()  # episodes ended (auto-resets, final-obs bootstraps) inside the rollouts
    for key in one:
        assert_same(one[key], two[key], **(SAME_OBS if key.startswith("obs") else CLOSE))


def test_grpo_episodes_are_the_same_with_two_stages():
    envs = cartpoles()
    specs = [EpisodeSpec(seed=s) for s in (5, 5, 5, 7, 7, 7, 9)]  # more episodes than envs: envs are reused
    try:
        assert_same_episodes(episodes(envs, 1, specs), episodes(envs, 2, specs))
    finally:
        envs.close()


def test_trainer_key_gives_the_same_update():
    """``rollout.pipeline_stages=2`` through the config: PPO and GRPO end one update with the same parameters."""
    from vla_gym.trainers import GRPO, PPO

    for algo in (PPO, GRPO):
        params = []
        for stages in (1, 2):
            cfg = config_from_dict({
                "env": {"id": "CartPole-v1", "num_envs": 4, "vectorization": "async"}, "seed": 3,
                "total_timesteps": 1, "rollout": {"pipeline_stages": stages},
                "policy": {"kwargs": {"hidden_sizes": [16]}},
                "ppo": {"n_steps": 16, "batch_size": 64, "n_epochs": 1},
                "grpo": {"group_size": 2, "groups_per_update": 2, "n_epochs": 1, "batch_size": 4096, "score": "return"},
                "logging": {"tensorboard": False, "progress_bar": False}, "eval": {"episodes": 0},
            })
            model = algo.from_config(cfg, write_run=False)
            try:
                model.learn()
                params.append({k: v.clone() for k, v in model.policy.state_dict().items()})
            finally:
                model.close()
        for key in params[0]:
            torch.testing.assert_close(params[0][key], params[1][key], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shared_memory", [True, False])
def test_the_stepper_needs_only_the_public_row_methods(shared_memory):
    """Two stages through step_rows_async / step_rows_wait alone give the vector env's own steps, infos included
    (observations through shared memory or through the pipes)."""
    envs, twin = PublicOnly(cartpoles(shared_memory=shared_memory)), cartpoles()
    try:
        stepper = StagedStepper(envs, 2)
        assert stepper.can_pipeline
        first, _ = envs.reset(seed=0)
        np.testing.assert_array_equal(first, twin.reset(seed=0)[0])
        rng = np.random.default_rng(0)
        ends = 0
        for _ in range(40):
            actions = rng.integers(0, 2, 4)
            expected = twin.step(actions)
            stepper.send(0, actions[:2])
            stepper.send(1, actions[2:])
            np.testing.assert_array_equal(stepper.wait(0), expected[0][:2])
            np.testing.assert_array_equal(stepper.wait(1), expected[0][2:])
            got = stepper.results()
            for one, two in zip(got[:4], expected[:4]):
                np.testing.assert_array_equal(one, two)
            assert got[4].keys() == expected[4].keys()
            for key in ("_final_obs", "_final_info"):
                if key in expected[4]:
                    np.testing.assert_array_equal(got[4][key], expected[4][key])
            ends += int((expected[2] | expected[3]).sum())
        assert ends  # autoresets (final_obs / final_info) happened inside the stages
        # the stepper drives the public methods: rows still stepping refuse a whole-env call
        stepper.send(0, actions[:2])
        with pytest.raises(gym.error.AlreadyPendingCallError, match="step_rows_wait"):
            envs.step(actions)
        stepper.drain()
    finally:
        envs.close()
        twin.close()


def test_concat_infos_is_the_whole_step_of_row_blocks():
    left = {"success": np.array([True]), "_success": np.array([True]),
            "final_info": {"x": np.array([1.5]), "_x": np.array([True])}, "_final_info": np.array([True])}
    right = {"success": np.array([False, True]), "_success": np.array([True, True])}
    infos = concat_infos([left, right], [1, 2])
    assert infos["success"].tolist() == [True, False, True] and infos["_final_info"].tolist() == [True, False, False]
    assert infos["final_info"]["x"].tolist() == [1.5, 0.0, 0.0]
    assert infos["final_info"]["_x"].tolist() == [True, False, False]


# ------------------------------------------------------------------------------------------ errors
def test_stages_must_divide_the_envs_and_need_async_workers():
    envs = cartpoles(4)
    try:
        with pytest.raises(PipelineError, match=r"rollout.pipeline_stages=3 must divide the 4 envs"):
            StagedStepper(envs, 3)
        with pytest.raises(PipelineError, match="positive integer"):
            StagedStepper(envs, 0)
    finally:
        envs.close()
    sync = SyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    with pytest.raises(PipelineError, match="env.vectorization=async"):
        StagedStepper(sync, 2)
    StagedStepper(sync, 1)  # one stage: any vector env
    sync.close()
    next_step = VLAAsyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 2)
    try:
        with pytest.raises(PipelineError, match="SAME_STEP"):
            StagedStepper(next_step, 2)
    finally:
        next_step.close()
    gymnasiums = AsyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 2,
                                autoreset_mode=AutoresetMode.SAME_STEP)  # steps every sub-env at once
    try:
        with pytest.raises(PipelineError, match="step_rows_async.*vla_gym.make_vec"):
            StagedStepper(gymnasiums, 2)
    finally:
        gymnasiums.close()


def test_the_trainer_names_the_key_for_sync_envs():
    from vla_gym.trainers import PPO

    cfg = config_from_dict({"env": {"id": "CartPole-v1", "num_envs": 2, "vectorization": "sync"},
                            "rollout": {"pipeline_stages": 2}, "ppo": {"n_steps": 4, "batch_size": 8},
                            "logging": {"tensorboard": False, "progress_bar": False}})
    with pytest.raises(PipelineError, match="rollout.pipeline_stages=2 .*env.vectorization=async"):
        PPO.from_config(cfg, write_run=False)  # at set-up, before any rollout


def test_the_command_line_prints_the_fix_without_a_traceback():
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "trainers/ppo.py", "--config", "examples/configs/cartpole_ppo.yaml",
                             "rollout.pipeline_stages=2", "env.vectorization=sync", "total_timesteps=1",
                             "logging.tensorboard=false", "logging.progress_bar=false"],
                            cwd=root, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "set env.vectorization=async" in result.stderr and "Traceback" not in result.stderr


# --------------------------------------------------------------------------------- LIBERO, action chunks
@pytest.fixture(scope="module")
def libero_envs():
    pytest.importorskip("libero.libero")
    import vla_gym

    envs = vla_gym.make_vec("VLA/LiberoObject-v0", 2, vectorization="async", max_episode_steps=8,
                            cameras=["main"], image_size=32,
                            wrappers=[{"name": "ActionChunk", "kwargs": {"chunk_size": 4}}])
    yield envs
    envs.close()


def test_libero_chunked_episodes_are_the_same_with_two_stages(libero_envs):
    specs = [EpisodeSpec(seed=0, task_id=0, init_state_id=i) for i in (3, 3, 8)]
    one = episodes(libero_envs, 1, specs, log_std_init=-1.0)
    two = episodes(libero_envs, 2, specs, log_std_init=-1.0)
    assert all(len(steps) == 2 for steps in one[1].values())  # 8 env steps = 2 chunks of 4
    assert_same_episodes(one, two)


@pytest.mark.slow  # PPO's two-stage rollouts: test_ppo_rollouts_are_the_same_with_two_stages; LIBERO's chunks in
# stages: test_libero_chunked_episodes_are_the_same_with_two_stages
def test_libero_chunked_ppo_rollouts_are_the_same_with_two_stages(libero_envs):
    one = ppo_rollouts(libero_envs, 1, n_steps=4, rollouts=1, log_std_init=-1.0)
    two = ppo_rollouts(libero_envs, 2, n_steps=4, rollouts=1, log_std_init=-1.0)
    assert one["actions0"].shape == (4, 2, 4, 7)  # [T, N, chunk, action]
    assert one["dones0"][1].all()  # both envs' 8-step episodes ended at the second chunk and were reset
    for key in one:
        assert_same(one[key], two[key], **(SAME_OBS if key.startswith("obs") else CLOSE))


def test_envs_that_cannot_pipeline_sample_in_one_batched_draw(monkeypatch):
    """Per-env generators cost one small draw per env per step: only envs that can run in stages pay it (the
    GPU-batched env has thousands of rows)."""
    from vla_gym.trainers.policies import distributions

    seen, noise = [], distributions._noise

    def spy(like, fill):
        seen.append(distributions._ROW_GENERATORS.get())
        return noise(like, fill)

    monkeypatch.setattr(distributions, "_noise", spy)
    envs = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    try:
        assert not StagedStepper(envs, 1).can_pipeline
        policy = make_policy("mlp", envs.single_observation_space, envs.single_action_space)
        collector = RolloutCollector(envs, policy, RolloutBuffer(4, 2, "cpu"), gamma=0.99, gae_lambda=0.95)
        collector.reset([0, 1])
        collector.collect()
    finally:
        envs.close()
    assert seen and all(generators is None for generators in seen)  # the global generator, one draw per step

