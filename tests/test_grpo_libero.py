"""GRPO on real LIBERO: one update with a full group, and the episode runner's task-affinity scheduling.

Tiny episodes (``max_episode_steps``), one 32 px camera, one settling step after an initial state is set and sync
vector envs (two LIBERO envs in this process) keep these short; ``benchmarks/bench_grpo_libero.py`` measures the same
paths at full size.
"""
from __future__ import annotations

import json
import pathlib
import sys

import pytest
import torch

pytest.importorskip("libero.libero")

import vla_gym  # noqa: E402
from vla_gym.trainers import GRPO  # noqa: E402
from vla_gym.trainers.policies import make_policy  # noqa: E402
from vla_gym.trainers.rollout.episode_plan import EpisodeSpec  # noqa: E402
from vla_gym.trainers.rollout.episode_runner import EpisodeRunner  # noqa: E402

#: one 32 px camera; one no-op step after an initial state is set (LIBERO's 10 are physics that nothing here reads)
SMALL = {"cameras": ["main"], "image_size": 32, "settle_steps": 1}


def scene_loads(envs) -> int:
    return sum(env.unwrapped.backend.scene_loads for env in envs.envs)


class FirstStatesGRPO(GRPO):
    """GRPO that also keeps each rollout episode's first observed state (from the runner's recorder)."""

    def start_rollouts(self, seeds):
        super().start_rollouts(seeds)
        self.first_states, self.played_specs = {}, []
        run = self.runner.run

        def run_and_watch(specs, recorder=None, **kwargs):
            self.played_specs = list(specs)

            def watch(obs, actions, log_probs, jobs):
                for i, job in enumerate(jobs):
                    if job >= 0 and job not in self.first_states:
                        self.first_states[int(job)] = obs["state"][i].clone()
                recorder(obs, actions, log_probs, jobs)

            return run(specs, recorder=watch, **kwargs)

        self.runner.run = run_and_watch


def test_one_grpo_update_on_libero_object_with_a_full_group():
    envs = vla_gym.make_vec("VLA/LiberoObject-v0", 2, vectorization="sync", max_episode_steps=8,
                            wrappers=[{"name": "ActionChunk", "kwargs": {"chunk_size": 4}}], **SMALL)
    grpo = FirstStatesGRPO("mlp", envs, group_size=3, groups_per_update=1, n_epochs=1, batch_size=64,
                           filter_uniform_groups=False, policy_kwargs={"hidden_sizes": [16], "critic": False})
    before = {k: v.clone() for k, v in grpo.policy.state_dict().items()}
    grpo.learn(1)
    assert grpo.num_updates == 1 and grpo.num_timesteps == 3 * 8  # three episodes of 8 env steps
    assert "train/actor/policy_loss" in grpo.last_metrics
    specs = grpo.played_specs
    assert len(specs) == 3 and len(set(specs)) == 1 and specs[0].init_state_id is not None  # one (task, init state)
    firsts = [grpo.first_states[k] for k in range(3)]
    for state in firsts[1:]:  # the third episode ran in an env after its first: still the same start
        torch.testing.assert_close(state, firsts[0], atol=1e-4, rtol=0)
    # every step of every episode went into the update (kept, advantage zero for a uniform group)
    assert not any(torch.isnan(v).any() for v in grpo.policy.state_dict().values())
    assert set(before) == set(grpo.policy.state_dict())
    assert scene_loads(envs) == 2  # one scene per env: the group's task, kept across its episodes
    grpo.close()


def test_train_init_states_keeps_later_states_held_out():
    """grpo.train_init_states=N draws each group's init state among 0..N-1 (N.. stay for evaluation)."""
    envs = vla_gym.make_vec("VLA/LiberoObject-v0", 1, vectorization="sync", max_episode_steps=2, **SMALL)
    grpo = GRPO("mlp", envs, group_size=2, groups_per_update=40, train_init_states=3,
                policy_kwargs={"hidden_sizes": [8], "critic": False})
    grpo.start_rollouts([0])
    specs = grpo.group_specs()
    assert len(specs) == 80 and {s.init_state_id for s in specs} == {0, 1, 2}
    with pytest.raises(ValueError, match="train_init_states"):
        GRPO("mlp", envs, train_init_states=0, policy_kwargs={"critic": False}).start_rollouts([0])
    grpo.close()


def test_task_affinity_keeps_scenes_and_spec_order():
    envs = vla_gym.make_vec("VLA/Libero130-v0", 2, vectorization="sync", max_episode_steps=3, **SMALL)
    policy = make_policy("mlp", envs.single_observation_space, envs.single_action_space, critic=False)
    runner = EpisodeRunner(envs, policy)
    # two GRPO-style groups back to back: first in, first out would put both envs on task 5, then both on 40
    # (4 builds, and a Libero130 autoreset at each episode end would draw and build a random task)
    specs = [EpisodeSpec(seed=1, task_id=5, init_state_id=2)] * 3 + [EpisodeSpec(seed=2, task_id=40, init_state_id=7)] * 3
    results = runner.run(specs, deterministic=False)
    assert scene_loads(envs) == 2  # one build per task
    assert [r.index for r in results] == list(range(6)) and [r.spec for r in results] == specs
    assert [r.task_id for r in results] == [5, 5, 5, 40, 40, 40] and all(r.length == 3 for r in results)
    assert runner.loaded_tasks in ([5, 40], [40, 5])
    assert envs.get_attr("task_id") == (None, None)  # pinned through reset options: no attribute written
    # the next run on the same tasks builds nothing
    results = runner.run(specs[3:] + specs[:3], deterministic=False)
    assert scene_loads(envs) == 2 and [r.task_id for r in results] == [40, 40, 40, 5, 5, 5]
    envs.close()


def test_benchmark_short_form(tmp_path):
    """benchmarks/bench_grpo_libero.py --quick runs both measurements (they measure nothing at this size); its ``main``
    is called in this process (its envs and raw LIBERO run in spawned processes either way)."""
    benchmarks = str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)  # spawned workers unpickle its functions and wrapper by module name
    import bench_grpo_libero

    out = tmp_path / "bench.json"
    assert bench_grpo_libero.main(["--quick", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert len(figures["rebuild"]["updates"]) == 2 and figures["rebuild"]["updates"][0]["scene_loads"] >= 1
    assert figures["throughput"]["raw"][0] > 0 and figures["throughput"]["grpo"][0] > 0
