"""Runs that survive faults (vla_gym/vector/respawn.py): a hung, killed or raising sub-env worker is restarted and
its episode ends as truncated with ``info["env_failure"]`` while the other sub-envs go on; "raise" mode still
stops; too many failures in a row stop with a clear error; the evaluation plays a fault-cut episode again.

Real worker processes (forked: the toy env of tests/fault_envs.py starts no simulator) of
:class:`~vla_gym.vector.envs.VLAAsyncVectorEnv`, the class ``vla_gym.make_vec`` builds.
"""
import functools
import multiprocessing
import os
import signal
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from fault_envs import FaultyEnv, chunked_vla_env
from gymnasium.vector import AutoresetMode

import vla_gym
from vla_gym.trainers.evaluation.report import markdown_table, summarize
from vla_gym.trainers.policies.base import Policy
from vla_gym.trainers.rollout.buffer import RolloutBuffer
from vla_gym.trainers.rollout.collector import RolloutCollector
from vla_gym.trainers.rollout.episode_plan import EpisodeSpec
from vla_gym.trainers.rollout.episode_runner import EpisodeRunner
from vla_gym.trainers.runtime.config import ConfigError, EnvConfig
from vla_gym.trainers.runtime.envs import failure_options, worker_restarts
from vla_gym.vector.envs import VLAAsyncVectorEnv, WorkerCrashedError

STEP_TIMEOUT = 1.5
ZEROS = np.zeros(2, dtype=np.int64)


def faulty_envs(*env_fns, **kwargs) -> VLAAsyncVectorEnv:
    env_fns = env_fns or (FaultyEnv, FaultyEnv)
    kwargs = {"step_timeout": STEP_TIMEOUT, "on_worker_failure": "respawn", "context": "fork", **kwargs}
    return VLAAsyncVectorEnv(list(env_fns), env_id="faulty", autoreset_mode=AutoresetMode.SAME_STEP, **kwargs)


def fault_in_row_1(fault: str, at: int = 2) -> dict:
    return {"per_env": [None, {"fault": fault, "at": at, "init_state_id": 4}]}


def assert_respawned_row_1(out, before_pid: int, cause: str) -> None:
    obs, rewards, terminated, truncated, infos = out
    assert list(terminated) == [False, False] and list(truncated) == [False, True] and list(rewards) == [1.0, 0.0]
    assert obs[0].tolist() == [2, 0]                       # row 0 went on: its second step
    assert obs[1].tolist() == [0, -1]                      # row 1: the new worker's reset observation
    assert infos["final_obs"][1].tolist() == [1, 1]        # the last observation row 1 returned
    assert list(infos["_env_failure"]) == [False, True]
    text = infos["env_failure"][1]
    assert text.startswith("sub-env 1 (env 'faulty', task 'faulty', init state 4): ") and cause in text, text
    assert infos["final_info"]["env_failure"][1] == text and infos["final_info"]["task_name"][1] == "faulty"
    assert infos["pid"][1] != before_pid


@pytest.mark.quick
def test_a_hung_step_times_out_and_its_worker_is_respawned_while_the_other_row_goes_on():
    envs = faulty_envs()
    try:
        _, infos = envs.reset(seed=0, options=fault_in_row_1("hang"))
        pids = infos["pid"].tolist()
        envs.step(ZEROS)
        start = time.monotonic()
        out = envs.step(ZEROS)                              # row 1 sleeps 60 s in this step
        assert time.monotonic() - start < STEP_TIMEOUT + 10
        assert_respawned_row_1(out, pids[1], f"timeout after {STEP_TIMEOUT:g}s during step()")
        assert envs.worker_restarts == 1 and worker_restarts(envs) == 1
        obs, _, _, truncated, infos = envs.step(ZEROS)      # both rows step on, the new worker included
        assert obs.tolist() == [[3, 0], [1, -1]] and not truncated.any() and "env_failure" not in infos
        assert infos["pid"].tolist() == [pids[0], out[-1]["pid"][1]]
    finally:
        envs.close()
    assert not any(process.is_alive() for process in envs.processes)


@pytest.mark.quick
@pytest.mark.parametrize("fault, cause", [("kill", "signal 9 (SIGKILL) during step()"),
                                          ("raise", "RuntimeError: simulated simulator error at step 2")])
def test_a_dying_or_raising_worker_is_respawned(fault, cause):
    envs = faulty_envs()
    try:
        _, infos = envs.reset(seed=0, options=fault_in_row_1(fault))
        envs.step(ZEROS)
        assert_respawned_row_1(envs.step(ZEROS), infos["pid"][1], cause)
    finally:
        envs.close()


@pytest.mark.quick
def test_a_worker_killed_from_outside_is_respawned_at_the_next_step():
    envs = faulty_envs()
    try:
        _, infos = envs.reset(seed=0, options={"per_env": [None, {"init_state_id": 4}]})
        envs.step(ZEROS)
        os.kill(envs.processes[1].pid, signal.SIGKILL)      # kill -9 between steps
        assert_respawned_row_1(envs.step(ZEROS), infos["pid"][1], "signal 9 (SIGKILL)")
    finally:
        envs.close()


@pytest.mark.quick
def test_a_worker_that_dies_while_left_out_of_a_reset_ends_its_episode_at_its_next_step():
    envs = faulty_envs()
    try:
        envs.reset(seed=0)
        envs.step(ZEROS)
        os.kill(envs.processes[1].pid, signal.SIGKILL)
        obs, infos = envs.reset(seed=[7, None], options={"reset_mask": np.array([True, False])})
        assert obs[0].tolist() == [0, 7] and "env_failure" not in infos       # row 1 was not asked to reset
        obs, _, _, truncated, infos = envs.step(ZEROS)
        assert list(truncated) == [False, True] and obs.tolist() == [[1, 7], [0, -1]]
        assert "signal 9 (SIGKILL) during reset()" in infos["env_failure"][1]
    finally:
        envs.close()


@pytest.mark.quick
def test_a_failed_reset_is_tried_again_with_the_same_seed_and_options(tmp_path):
    envs = faulty_envs(FaultyEnv, functools.partial(FaultyEnv, once_dir=str(tmp_path)))
    try:
        obs, infos = envs.reset(seed=[3, 5], options={"per_env": [None, {"fault": "raise_reset", "init_state_id": 2}]})
        assert obs.tolist() == [[0, 3], [0, 5]]              # row 1's episode is the one asked for
        assert "RuntimeError: simulated simulator error" in infos["env_failure"][1]
        assert infos["init_state_id"][1] == 2 and not infos["_env_failure"][0]
        assert envs.worker_restarts == 1
    finally:
        envs.close()


@pytest.mark.quick
def test_row_wise_stepping_respawns_a_hung_row_while_the_other_rows_step():
    envs = faulty_envs()
    try:
        _, infos = envs.reset(seed=0, options=fault_in_row_1("hang", at=1))
        envs.step_rows_async([1], ZEROS[:1])                # row 1 hangs
        envs.step_rows_async([0], ZEROS[:1])
        start = time.monotonic()
        obs, _, _, truncated, _ = envs.step_rows_wait([0])
        assert time.monotonic() - start < STEP_TIMEOUT and obs.tolist() == [[1, 0]] and not truncated.any()
        envs.step_rows_async([0], ZEROS[:1])                # row 0 steps again while row 1 still hangs
        obs, rewards, _, truncated, infos = envs.step_rows_wait([1])
        assert obs.tolist() == [[0, -1]] and list(truncated) == [True] and list(rewards) == [0.0]
        assert infos["final_obs"][0].tolist() == [0, 1] and "timeout after" in infos["env_failure"][0]
        assert envs.step_rows_wait([0])[0].tolist() == [[2, 0]]
    finally:
        envs.close()


@pytest.mark.quick
@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_raise_mode_still_stops_the_run(fault):
    envs = faulty_envs(on_worker_failure="raise")
    envs.reset(seed=0, options=fault_in_row_1(fault, at=1))
    cause = "SIGKILL.*during step" if fault == "kill" else f"timeout after {STEP_TIMEOUT:g}s during step"
    with pytest.raises(WorkerCrashedError, match=rf"sub-env 1 .*task 'faulty'.*{cause}"):
        envs.step(ZEROS)
    assert envs.closed and not any(process.is_alive() for process in envs.processes)


@pytest.mark.quick
def test_an_env_exception_in_raise_mode_is_raised_as_before():
    envs = faulty_envs(on_worker_failure="raise", step_timeout=None)
    envs.reset(seed=0, options=fault_in_row_1("raise", at=1))
    with pytest.raises(RuntimeError, match="simulated simulator error"):
        envs.step(ZEROS)
    envs.close(terminate=True)


@pytest.mark.quick
def test_too_many_failures_in_a_row_stop_with_a_clear_error():
    envs = faulty_envs(FaultyEnv, functools.partial(FaultyEnv, fault="kill", at=1), max_worker_restarts=2)
    envs.reset(seed=0)
    for _ in range(2):                                      # every episode of row 1 dies at its first step
        assert envs.step(ZEROS)[3].tolist() == [False, True]
    with pytest.raises(WorkerCrashedError, match=r"sub-env 1 .*signal 9 \(SIGKILL\) during step\(\); it failed 3 "
                                                 r"times in a row, more than max_worker_restarts=2"):
        envs.step(ZEROS)
    assert envs.closed and envs.worker_restarts == 2
    assert not any(process.is_alive() for process in envs.processes)


@pytest.mark.quick
def test_failure_options_are_checked():
    with pytest.raises(ValueError, match="on_worker_failure must be one of"):
        vla_gym.make_vec("VLA/Libero10-v0", 2, on_worker_failure="retry")
    with pytest.raises(ValueError, match="step_timeout must be a positive"):
        vla_gym.make_vec("VLA/Libero10-v0", 2, step_timeout=0)
    with pytest.raises(ValueError, match="need worker processes"):
        vla_gym.make_vec("VLA/Libero10-v0", 2, vectorization="sync", on_worker_failure="respawn")
    with pytest.raises(ValueError, match="SAME_STEP"):
        VLAAsyncVectorEnv([FaultyEnv], context="fork", on_worker_failure="respawn")
    assert failure_options(EnvConfig()) == {"step_timeout": 120.0, "on_worker_failure": "respawn",
                                            "max_worker_restarts": 3}
    with pytest.raises(ConfigError, match="env.step_timeout"):
        EnvConfig(step_timeout=-1.0)


def broken_env():
    raise ValueError("no simulator here")


@pytest.mark.quick
@pytest.mark.parametrize("mode", ["raise", "respawn"])
def test_an_env_that_cannot_be_made_in_its_worker_stops_the_start_naming_it(mode):
    with pytest.raises(WorkerCrashedError, match=r"sub-env 1 \(env 'faulty'\) could not be made: ValueError: no "
                                                 r"simulator here.*the vector env is closed") as caught:
        faulty_envs(FaultyEnv, broken_env, on_worker_failure=mode)
    if sys.version_info >= (3, 11):  # the worker's traceback rides along as a note of the env's exception
        assert "Traceback in the worker process" in caught.value.__cause__.__notes__[0]
    assert not any(process.name.startswith("Worker<VLAAsyncVectorEnv>") for process in multiprocessing.active_children())


@pytest.mark.quick
@pytest.mark.parametrize("mode", ["raise", "respawn"])
def test_a_missing_attribute_raises_here_and_the_workers_go_on(mode):
    envs = faulty_envs(on_worker_failure=mode)
    try:
        envs.reset(seed=0)
        pids = [process.pid for process in envs.processes]
        with pytest.raises(AttributeError, match="no_such_attribute"):
            envs.get_attr("no_such_attribute")
        assert envs.get_attr("length") == (50, 50) and envs.step(ZEROS)[0].tolist() == [[1, 0], [1, 1]]
        envs.set_attr("length", [2, 3])
        assert envs.step(ZEROS)[3].tolist() == [True, False] and envs.worker_restarts == 0
        assert [process.pid for process in envs.processes] == pids
    finally:
        envs.close()


@pytest.mark.quick
def test_a_wait_with_a_timeout_raises_and_the_call_stays_pending():
    envs = faulty_envs(functools.partial(FaultyEnv, fault="hang", at=1, hang_s=1.0), FaultyEnv, step_timeout=None,
                       on_worker_failure="raise")
    try:
        envs.reset(seed=0)
        envs.step_async(ZEROS)
        with pytest.raises(multiprocessing.TimeoutError):
            envs.step_wait(timeout=0.05)
        with pytest.raises(gym.error.AlreadyPendingCallError):
            envs.reset()
        assert envs.step_wait()[0].tolist() == [[1, 0], [1, 1]]  # the hung step ends after 1 s
    finally:
        envs.close()
    with pytest.raises(gym.error.ClosedEnvironmentError):
        envs.step(ZEROS)


# ------------------------------------------------------------------------------------------- evaluation
class ZeroPolicy(Policy):
    def __init__(self):
        super().__init__(FaultyEnv.observation_space, FaultyEnv.action_space)
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def act(self, obs, deterministic=False):
        n = obs.shape[0]
        return torch.zeros(n, dtype=torch.long), torch.zeros(n), self.value(obs)

    def value(self, obs):
        return torch.zeros(obs.shape[0])


@pytest.mark.quick
@pytest.mark.parametrize("stages", [1, 2])
def test_the_evaluation_plays_an_episode_cut_by_a_fault_again(tmp_path, stages):
    # seed 1's first play dies at its second step, seed 2's hangs at its first: both once (a marker file)
    env_fn = functools.partial(FaultyEnv, length=3, fault_seeds={1: "kill", 2: "hang"}, at=2, once_dir=str(tmp_path))
    envs = faulty_envs(env_fn, env_fn)
    try:
        specs = [EpisodeSpec(seed=s) for s in range(4)]
        results = EpisodeRunner(envs, ZeroPolicy(), stages).run(specs)
    finally:
        envs.close()
    assert [r.spec for r in results] == specs
    assert [(r.length, r.success, r.env_failure) for r in results] == [(3, True, None)] * 4
    assert [r.replays for r in results] == [0, 1, 1, 0]
    summary = summarize(results)
    assert summary["overall"]["replayed_after_fault"] == 2 and summary["overall"]["cut_by_fault"] == 0
    assert summary["overall"]["success_rate"] == 1.0 and summary["overall"]["episodes"] == 4
    assert "2 plays cut by a failed env worker were played again" in markdown_table(summary)


@pytest.mark.quick
def test_without_replays_a_fault_cut_episode_is_marked_and_not_counted_as_a_failure(tmp_path):
    env_fn = functools.partial(FaultyEnv, length=3, fault_seeds={1: "kill"}, at=2, once_dir=str(tmp_path))
    envs = faulty_envs(env_fn, env_fn)
    try:
        results = EpisodeRunner(envs, ZeroPolicy()).run([EpisodeSpec(seed=s) for s in range(3)], replay_faults=False)
    finally:
        envs.close()
    assert [r.env_failure is None for r in results] == [True, False, True]
    assert "signal 9 (SIGKILL) during step()" in results[1].env_failure and results[1].length == 2  # the cut step too
    overall = summarize(results)["overall"]
    assert overall["cut_by_fault"] == 1 and overall["success_episodes"] == 2 and overall["success_rate"] == 1.0


@pytest.mark.quick
def test_ppo_rollouts_do_not_learn_from_a_cut_step_nor_count_its_episode(tmp_path):
    env_fn = functools.partial(FaultyEnv, fault_seeds={1: "kill"}, at=2, once_dir=str(tmp_path))
    envs = faulty_envs(env_fn, env_fn)
    try:
        buffer = RolloutBuffer(4, 2)
        collector = RolloutCollector(envs, ZeroPolicy(), buffer, gamma=0.9, gae_lambda=0.9)
        collector.reset([0, 1])
        collector.collect()
    finally:
        envs.close()
    assert buffer.valid[:, 0].tolist() == [True] * 4 and buffer.valid[:, 1].tolist() == [True, False, True, True]
    assert buffer.dones[:, 1].tolist() == [False, True, False, False]
    [cut] = collector.tracker.finished
    assert cut.env_index == 1 and "signal 9 (SIGKILL)" in cut.env_failure
    sums, counts = collector.tracker.pop()
    assert counts["env/return"] == 0  # not a policy failure: left out of the env/... metrics


@pytest.mark.quick
def test_trainers_use_respawn_and_log_worker_restarts_and_memory():
    from vla_gym.trainers import PPO
    from vla_gym.trainers.runtime.config import config_from_dict

    cfg = config_from_dict({
        "env": {"id": "CartPole-v1", "num_envs": 2, "vectorization": "async"}, "total_timesteps": 1,
        "policy": {"kwargs": {"hidden_sizes": [8]}}, "ppo": {"n_steps": 4, "batch_size": 8, "n_epochs": 1},
        "logging": {"tensorboard": False, "progress_bar": False}, "eval": {"episodes": 0},
    })
    model = PPO.from_config(cfg, write_run=False)
    try:
        assert (model.envs.on_worker_failure, model.envs.step_timeout) == ("respawn", 120.0)
        model.learn()
        assert model.last_metrics["env/worker_restarts"] == 0
        # the memory curve of a long run (docs/reliability.md): the largest worker's and trainer process's RSS
        assert 10 < model.last_metrics["env/worker_rss_mb"] < 4000 and model.last_metrics["proc/rss_mb"] > 50
    finally:
        model.close()


# ------------------------------------------------------------------------------ a vla_gym env, ActionChunk
@pytest.mark.quick
@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_a_fault_inside_an_action_chunk_respawns_the_vla_env_and_names_its_task_and_init_state(tmp_path, fault):
    """The wrappers run in the worker: a sub-step of a chunk that dies or hangs cuts the chunked step. Spawned
    workers (make_vec's start method); the instruction comes back through shared memory."""
    env_fn = functools.partial(chunked_vla_env, chunk_size=4, fault=fault, once_dir=str(tmp_path))
    envs = faulty_envs(env_fn, env_fn, context="spawn")
    try:
        envs.reset(seed=[0, 1], options={"per_env": [{"task_id": 0, "init_state_id": 0},
                                                     {"task_id": 1, "init_state_id": 3}]})
        actions = np.zeros((2, 4, 7))
        envs.step(actions)                                  # sub-steps 1-4
        obs, _, terminated, truncated, infos = envs.step(actions)   # row 1 fails at sub-step 6
        assert list(terminated) == [False, False] and list(truncated) == [False, True]
        assert obs["state"][0].tolist() == [0, 8] and obs["state"][1][1] == 0          # row 1: a new episode
        assert infos["final_obs"][1]["state"].tolist() == [1, 4]                      # after its first chunk
        assert infos["final_obs"][1]["instruction"] == "do task 1"
        cause = "signal 9 (SIGKILL)" if fault == "kill" else f"timeout after {STEP_TIMEOUT:g}s"
        assert infos["env_failure"][1] == f"sub-env 1 (env 'faulty', task 'task1', init state 3): {cause} during step()"
        assert infos["final_info"]["task_id"][1] == 1 and infos["final_info"]["init_state_id"][1] == 3
        envs.step(actions)                                  # the new worker steps on
    finally:
        envs.close()


# ------------------------------------------------------------------------------------- a real simulator
@pytest.mark.timeout(300)
def test_make_vec_respawns_a_killed_maniskill_worker():
    pytest.importorskip("mani_skill", reason='ManiSkill is not installed: pip install -e ".[maniskill]"')
    envs = vla_gym.make_vec("VLA/ManiSkill-PickCube-v0", 2, obs_mode="state", step_timeout=120,
                            on_worker_failure="respawn")
    try:
        obs, _ = envs.reset(seed=0)
        envs.step(np.zeros((2, 7)))
        os.kill(envs.processes[0].pid, signal.SIGKILL)
        obs, _, _, truncated, infos = envs.step(np.zeros((2, 7)))
        assert list(truncated) == [True, False] and envs.worker_restarts == 1
        assert infos["env_failure"][0] == ("sub-env 0 (env 'VLA/ManiSkill-PickCube-v0', task 'PickCube'): "
                                           "signal 9 (SIGKILL) during step()")
        assert infos["elapsed_steps"][0] == 0 and infos["final_obs"][0]["state"].shape == obs["state"][0].shape
        envs.step(np.zeros((2, 7)))
    finally:
        envs.close()
