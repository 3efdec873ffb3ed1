"""The trainers on the real simulators: ManiSkill3 (state and images) and LIBERO, a few steps each."""
import gc
import json
import pathlib

import numpy as np
import pytest
import torch

from vla_gym.trainers import GRPO, PPO
from vla_gym.trainers.evaluation.report import write_report
from vla_gym.trainers.policies import make_policy
from vla_gym.trainers.rollout.episode_plan import EpisodeSpec, suite_specs
from vla_gym.trainers.rollout.episode_runner import EpisodeRunner
from vla_gym.trainers.runtime.config import EnvConfig
from vla_gym.trainers.runtime.envs import make_envs

pytest.importorskip("mani_skill")
PUSHCUBE = "VLA/ManiSkill-PushCube-v0"
STATE = {"obs_mode": "state"}


@pytest.fixture(scope="module", autouse=True)
def frozen_heap():
    """ManiSkill runs a full ``gc.collect()`` whenever it builds or closes a scene: 0.2-0.6 s each in a test process
    that holds every imported module's objects. ``gc.freeze()`` takes the objects alive now out of the collector's
    sight (they are module state, not garbage), so those collections walk only what this module's tests make."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def first_observations(envs, specs, policy):
    """Each episode's first observation (state), in spec order."""
    firsts = {}

    def record(obs, actions, log_probs, jobs):
        for i, job in enumerate(jobs):
            if job >= 0 and job not in firsts:
                firsts[int(job)] = obs["state"][i].clone()

    EpisodeRunner(envs, policy).run(specs, deterministic=False, recorder=record)
    return [firsts[k] for k in range(len(specs))]


def test_ppo_on_pushcube_state_logs_success_and_round_trips(tmp_path):
    model = PPO("mlp", PUSHCUBE, num_envs=2, n_steps=10, batch_size=10, n_epochs=1, gamma=0.8,
                env_kwargs=dict(STATE, max_episode_steps=20), policy_kwargs={"hidden_sizes": [32], "normalize_obs": True},
                bootstrap_terminated=True, run_dir=str(tmp_path), name="pc")
    metrics = []
    model.learn(40, callback=lambda algo, m: metrics.append(m))  # the 20-step episodes end in the second update
    assert model.num_updates == 2 and model.policy.encoder.norm.count.item() == 40
    assert {"env/success_once", "env/return", "env/episode_len", "rollout/rewards"} <= set(metrics[-1])
    assert metrics[-1]["env/episode_len"] == 20
    ckpt = max((tmp_path / "pc" / "checkpoints").glob("*.pt"))
    loaded = PPO.load(ckpt, env=None, device="cpu")
    obs = {"images": {}, "state": np.zeros(loaded.policy.observation_space["state"].shape, np.float32),
           "instruction": "push the cube"}
    assert loaded.predict(obs)[0].shape == (7,)
    assert np.allclose(loaded.predict(obs)[0], model.predict(obs)[0])
    model.close()


def test_a_grpo_group_starts_from_one_initial_state():
    envs = make_envs(EnvConfig(id=PUSHCUBE, num_envs=2, kwargs=dict(STATE, max_episode_steps=3)), 2)
    policy = make_policy("mlp", envs.single_observation_space, envs.single_action_space, critic=False)
    specs = [EpisodeSpec(seed=5)] * 3 + [EpisodeSpec(seed=6)] * 3
    firsts = first_observations(envs, specs, policy)
    for k in (1, 2, 4, 5):
        assert torch.equal(firsts[k], firsts[k - k % 3]), k  # same seed: the same cube and goal
    assert not torch.equal(firsts[0], firsts[3])
    envs.close()


def test_grpo_update_on_pushcube():
    grpo = GRPO("mlp", PUSHCUBE, num_envs=2, group_size=2, groups_per_update=2, batch_size=64, n_epochs=1,
                env_kwargs=dict(STATE, max_episode_steps=8), policy_kwargs={"hidden_sizes": [32]})
    metrics = []
    grpo.learn(32, callback=lambda algo, m: metrics.append(m))
    assert metrics[0]["env/episode_len"] == 8 and "rollout/uniform_groups" in metrics[0]
    assert grpo.num_timesteps == 32
    grpo.close()


def test_cnn_policy_with_images_action_chunks_and_video(tmp_path):
    kwargs = {"cameras": ["main", "wrist"], "image_size": 64, "max_episode_steps": 6}
    cfg = EnvConfig(id=PUSHCUBE, num_envs=2, kwargs=kwargs,
                    wrappers=[{"name": "ActionChunk", "kwargs": {"chunk_size": 2}}, "EpisodeMetrics"])
    envs = make_envs(cfg, 2)
    assert envs.single_action_space.shape == (2, 7)
    model = PPO("cnn", envs, n_steps=4, batch_size=8, n_epochs=1, policy_kwargs={"image_features": 16,
                                                                                 "hidden_sizes": [16]})
    metrics = []
    model.learn(8, callback=lambda algo, m: metrics.append(m))  # one update of 4 chunks per env: an episode ends
    assert model.num_updates == 1 and metrics[-1]["env/episode_len"] == 6  # EpisodeMetrics counts env steps: 3 x 2
    results = EpisodeRunner(envs, model.policy).run([EpisodeSpec(seed=1), EpisodeSpec(seed=2)],
                                                    video_dir=tmp_path, video_episodes=1)
    assert [r.length for r in results] == [6, 6] and results[0].task_name == "PushCube"
    video = pathlib.Path(results[0].video)
    assert video.exists() and video.stat().st_size > 1000 and results[1].video is None
    import imageio.v3 as iio

    frames = iio.imread(video)
    assert frames.shape[0] == 4 and frames.shape[1:] == (448, 672, 3)  # reset + 3 chunks, main + wrist layout
    model.close()


def test_suite_evaluation_on_libero_init_states(tmp_path):
    pytest.importorskip("libero")
    envs = make_envs(EnvConfig(id="VLA/LiberoSpatial-v0", num_envs=1, kwargs={"image_size": 64, "max_episode_steps": 2,
                                                                               "cameras": ["main"], "settle_steps": 1}), 1)
    specs = suite_specs(envs, episodes_per_task=2, task_ids=[0, 3])
    assert [(s.task_id, s.init_state_id) for s in specs] == [(0, 0), (0, 1), (3, 0), (3, 1)]
    held_out = suite_specs(envs, episodes_per_task=2, task_ids=[0, 3], first_init_state=48)  # eval.py --first-init-state
    assert [(s.task_id, s.init_state_id) for s in held_out] == [(0, 48), (0, 49), (3, 48), (3, 49)]
    assert [s.init_state_id for s in suite_specs(envs, task_ids=[1], first_init_state=45)] == [45, 46, 47, 48, 49]
    with pytest.raises(ValueError, match="first_init_state=50"):
        suite_specs(envs, task_ids=[1], first_init_state=50)
    repeated = suite_specs(envs, episodes_per_task=2, task_ids=[3], repeats=2)  # eval.py --repeats: the same spec again
    assert [(s.task_id, s.init_state_id) for s in repeated] == [(3, 0), (3, 0), (3, 1), (3, 1)]
    assert repeated[0] == repeated[1] != repeated[2]
    policy = make_policy("cnn", envs.single_observation_space, envs.single_action_space, image_features=8,
                         hidden_sizes=[8])
    results = EpisodeRunner(envs, policy).run(specs)
    assert [(r.task_id, r.spec.init_state_id, r.length) for r in results] == [(0, 0, 2), (0, 1, 2), (3, 0, 2),
                                                                               (3, 1, 2)]
    summary = write_report(results, tmp_path)
    assert len(summary["tasks"]) == 2 and summary["overall"]["episodes"] == 4
    table = (tmp_path / "eval.md").read_text()
    assert results[0].task_name in table and results[2].task_name in table
    assert json.loads((tmp_path / "eval.json").read_text())["episodes"][3]["spec"]["init_state_id"] == 1
    envs.close()


QUICK_BENCHMARKS = [
    ("bench_ppo_maniskill", ["--quick", "--skip-sb3"]),
    ("bench_grpo_maniskill", ["--quick"]),
]
#: the scripts' own short runs: 2 torchrun processes, the config's sizes, SB3 beside PPO (minutes each)
TORCHRUN_BENCHMARKS = [
    ("bench_ppo_maniskill", ["--minutes", "0.1"]),
    ("bench_grpo_maniskill", ["--ppo-minutes", "0.1", "--grpo-minutes", "0.1", "--episodes", "2"]),
]
ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("script, args", QUICK_BENCHMARKS)
def test_maniskill_benchmarks_quick_form(tmp_path, script, args, one_torch_thread):
    """The learning proofs' scripts end to end in their quick form (CI), in this process: the same entry points and
    configs as the full runs, shrunk to a couple of tiny updates; they run and report, nothing is claimed."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(script, ROOT / "benchmarks" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.main([*args, "--workdir", str(tmp_path), "--json", str(tmp_path / "r.json")])
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(results))
    if script == "bench_ppo_maniskill":
        ours = results["vla_gym"]
        assert ours["steps"] == 100 and len(ours["evals"]) == 2 and ours["final_eval_episodes"] == 2
    else:
        assert results["before"]["episodes"] == results["after"]["episodes"] == 2
        assert len(results["grpo_eval_curve"]) == 1  # its one update, evaluated


@pytest.mark.slow
@pytest.mark.parametrize("script, args", TORCHRUN_BENCHMARKS)
def test_maniskill_benchmarks_short_form_under_torchrun(tmp_path, script, args):
    """The same scripts as a user runs them, with torchrun (and SB3's side), a few seconds of training each."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, f"benchmarks/{script}.py", *args, "--workdir", str(tmp_path), "--json",
                             str(tmp_path / "r.json")], cwd=ROOT, capture_output=True, text=True, timeout=1800,
                            check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert json.loads((tmp_path / "r.json").read_text())
