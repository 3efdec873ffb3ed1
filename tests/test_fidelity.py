"""Fidelity: a ``VLA/...`` episode is the simulator's own episode, checked against each simulator's reference loop.

What is compared, and against what (docs/fidelity.md lists every convention):

- ManiSkill: the raw ``mani_skill`` env built as its own examples do (``robot_uids="panda_wristcam"``,
  ``control_mode="pd_ee_delta_pose"``, ``reward_mode="normalized_dense"``), per step: the state vector,
  the reward, success / termination and the truncation step, for PushCube, PickCube and StackCube and
  several seeds; ``reset(seed=s)`` on every path (the env, the CPU vector env's sub-env ``i`` with
  ``s + i``, the batched env) starts ManiSkill's episode for that seed. The raw env gets vla_gym's numpy
  arm controller too (bit for bit then); tests/test_maniskill_fast_controller.py shows that it matches
  ManiSkill's own controller to float rounding. Our speed paths run under the same
  check: action chunks with unrendered sub-steps, and a cached scene across task switches.
- LIBERO: the loop of LIBERO's own evaluation (as OpenVLA's and RLinf's: ``OffScreenRenderEnv``,
  ``seed``, ``reset``, ``set_init_state(init_states[i])``, 10 no-op steps with the gripper open) on one task of
  every suite, against ``VLA/Libero*`` with ``reset(seed=i)`` / ``options={"init_state_id": i}``, stepped
  through ``ActionChunk`` (unrendered sub-steps) after soft resets: the same MuJoCo state after the same
  actions, the same success flags, and the first camera frame within a few levels of 255 (two suites in the
  default run, every suite in the ``slow`` tier). A solved
  episode too: vla_gym's scripted expert's actions, replayed in LIBERO's loop, succeed on the same step. The two run in
  separate processes: LIBERO places its fixtures by RNG when it builds a model, and two robosuite envs in
  one process may share a GL context, so frames are compared across processes.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

import vla_gym
from vla_gym.tasks.maniskill import MULTI_TASK_ID, TABLETOP, env_id

MANISKILL_TASKS = ("PushCube", "PickCube", "StackCube")
SEEDS = (0, 1, 42)


def has(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


needs_maniskill = pytest.mark.skipif(not has("mani_skill"), reason='ManiSkill3 is not installed: pip install -e ".[maniskill]"')
needs_libero = pytest.mark.skipif(not has("libero"), reason='LIBERO is not installed: pip install -e ".[libero]"')


# ============================================================================================ ManiSkill
def raw_maniskill(name: str):
    """ManiSkill's own env, as its examples build it (gym.make adds its TimeLimit: the task's own limit).

    Tasks without a dense reward (PlugCharger, StackPyramid) get ManiSkill's "none", as in vla_gym. Its arm
    controller is vla_gym's numpy one (the same float rounding as ours; see the module docstring)."""
    import mani_skill.envs  # noqa: F401  (registers the tasks)
    from mani_skill.utils.registration import REGISTERED_ENVS

    from vla_gym.backends.maniskill.fast_controller import install_fast_ee_controller

    dense = "normalized_dense" in REGISTERED_ENVS[f"{name}-v1"].cls.SUPPORTED_REWARD_MODES
    env = gym.make(f"{name}-v1", robot_uids="panda_wristcam", control_mode="pd_ee_delta_pose",
                   reward_mode="normalized_dense" if dense else "none", obs_mode="state")
    assert install_fast_ee_controller(env)
    return env


def to_raw_action(action: np.ndarray):
    """vla_gym's action -> ManiSkill's: the gripper sign is the one difference (-1 open here, +1 open there)."""
    import torch

    raw = np.array(action, dtype=np.float32)
    raw[-1] = -raw[-1]
    return torch.from_numpy(raw)[None]


def scalar(value) -> float:
    return float(np.asarray(value).reshape(-1)[0])


@pytest.fixture(scope="module")
def maniskill_pairs():
    """{task: (raw ManiSkill env, VLA env in state mode)}, built once."""
    pytest.importorskip("mani_skill")
    pairs = {name: (raw_maniskill(name), gym.make(env_id(name), obs_mode="state")) for name in MANISKILL_TASKS}
    yield pairs
    for raw, ours in pairs.values():
        raw.close()
        ours.close()


def compare_episode(raw, ours, seed: int, actions) -> dict:
    """Step both with the same actions from reset(seed); assert equal per step; return what happened."""
    raw_obs, _ = raw.reset(seed=seed)
    obs, info = ours.reset(seed=seed)
    np.testing.assert_array_equal(obs["state"], raw_obs[0].numpy(), err_msg=f"seed {seed}: initial state")
    for t, action in enumerate(actions):
        raw_obs, raw_reward, raw_term, raw_trunc, raw_info = raw.step(to_raw_action(action))
        obs, reward, terminated, truncated, info = ours.step(action)
        where = f"seed {seed}, step {t + 1}"
        np.testing.assert_array_equal(obs["state"], raw_obs[0].numpy(), err_msg=where)
        assert reward == pytest.approx(scalar(raw_reward), abs=1e-6), where
        assert info["success"] == bool(scalar(raw_info["success"])), where
        assert terminated == bool(scalar(raw_term)) and truncated == bool(scalar(raw_trunc)), where
        if terminated or truncated:
            return {"steps": t + 1, "success": info["success"], "truncated": truncated}
    return {"steps": len(actions), "success": info["success"], "truncated": False}


@needs_maniskill
@pytest.mark.parametrize("name", MANISKILL_TASKS)
def test_maniskill_seed_s_is_maniskills_episode_s(maniskill_pairs, name):
    """Random actions to the time limit: state, reward, success and the truncation step are ManiSkill's."""
    raw, ours = maniskill_pairs[name]
    limit = ours.unwrapped.tasks[0].max_episode_steps
    for seed in SEEDS:
        actions = np.random.default_rng(seed).uniform(-1, 1, (limit + 5, 7))
        outcome = compare_episode(raw, ours, seed, actions)
        assert outcome["truncated"] and outcome["steps"] == limit == 50  # ManiSkill's own limit


def push_cube_expert(env) -> np.ndarray:
    """A scripted pusher from privileged state: behind the cube, then through it to the goal (succeeds)."""
    sim = env.unwrapped.backend.maniskill_env
    tcp, cube, goal = (x[0].numpy() for x in (sim.agent.tcp.pose.p, sim.obj.pose.p, sim.goal_region.pose.p))
    behind = cube + np.array([-0.05, 0.0, 0.0])
    target = behind if (tcp[0] > behind[0] + 0.01 or np.abs(tcp[1:] - behind[1:]).max() > 0.01) else goal
    if tcp[0] > behind[0] + 0.01 and tcp[2] < 0.05:  # in front of the cube: lift over it first
        target = np.array([behind[0], tcp[1], 0.08])
    delta = np.clip((target - tcp) / 0.1, -1, 1)  # pd_ee_delta_pose: 0.1 m per unit
    return np.array([*delta, 0, 0, 0, 1.0])  # gripper closed


@needs_maniskill
def test_maniskill_success_and_termination_are_maniskills(maniskill_pairs):
    """The same success flag and termination step when the task is solved (PushCube, a scripted expert)."""
    raw, ours = maniskill_pairs["PushCube"]
    solved = 0
    for seed in SEEDS:
        raw.reset(seed=seed)
        ours.reset(seed=seed)
        for t in range(50):
            action = push_cube_expert(ours)  # from our env; the raw env is in the same state (checked below)
            raw_obs, raw_reward, raw_term, raw_trunc, raw_info = raw.step(to_raw_action(action))
            obs, reward, terminated, truncated, info = ours.step(action)
            np.testing.assert_array_equal(obs["state"], raw_obs[0].numpy(), err_msg=f"seed {seed}, step {t + 1}")
            assert (reward, info["success"], terminated, truncated) == pytest.approx(
                (scalar(raw_reward), bool(scalar(raw_info["success"])), bool(scalar(raw_term)), bool(scalar(raw_trunc))))
            if terminated or truncated:
                solved += terminated
                break
    assert solved == len(SEEDS)  # every episode ended by success, on the same step as ManiSkill's


@needs_maniskill
def test_maniskill_action_chunks_and_skipped_renders_keep_the_episode(maniskill_pairs):
    """Images mode through ActionChunk (sub-steps not rendered): ManiSkill's full sim state after every chunk."""
    from vla_gym.wrappers import ActionChunk

    raw, _ = maniskill_pairs["PickCube"]
    env = ActionChunk(gym.make(env_id("PickCube"), cameras=("main",), image_size=32), chunk_size=5)
    sim = env.unwrapped.backend.maniskill_env
    actions = np.random.default_rng(3).uniform(-1, 1, (50, 7))
    for seed in (0, 9):
        raw.reset(seed=seed)
        env.reset(seed=seed)
        for k in range(10):
            chunk = actions[5 * k: 5 * k + 5]
            raw_rewards = [scalar(raw.step(to_raw_action(a))[1]) for a in chunk]
            _obs, _reward, _terminated, truncated, info = env.step(chunk)
            np.testing.assert_array_equal(sim.get_state().numpy(), raw.unwrapped.get_state().numpy())
            np.testing.assert_allclose(info["chunk_rewards"], raw_rewards, atol=1e-6)
            assert truncated is (k == 9)
    env.close()


@needs_maniskill
def test_vector_envs_give_sub_env_i_seed_s_plus_i(maniskill_pairs):
    """make_vec's sub-env i and the batched env (ManiSkill's CPU simulation here) start ManiSkill's episode s + i."""
    from vla_gym.backends.maniskill.gpu import make_gpu_vector_env

    raw, _ = maniskill_pairs["PickCube"]
    expected = {s: raw.reset(seed=s)[0][0].numpy() for s in (10, 11, 12, 20)}
    envs = vla_gym.make_vec(env_id("PickCube"), 3, vectorization="sync", obs_mode="state")
    obs, _ = envs.reset(seed=10)
    for i in range(3):
        np.testing.assert_array_equal(obs["state"][i], expected[10 + i])
    obs, _ = envs.reset(seed=[20, 12, 11])
    np.testing.assert_array_equal(obs["state"], np.stack([expected[20], expected[12], expected[11]]))
    envs.close()
    batched = make_gpu_vector_env(env_id("PickCube"), 1, device="cpu", obs_mode="state")
    for seed in ((12,), 20):  # a list of seeds, or s (+ i)
        obs, _ = batched.reset(seed=list(seed) if isinstance(seed, tuple) else seed)
        np.testing.assert_array_equal(obs["state"][0].numpy(), expected[seed[0] if isinstance(seed, tuple) else seed])
    batched.close()


@needs_maniskill
def test_unseeded_resets_are_fresh_and_repeatable(maniskill_pairs):
    _, ours = maniskill_pairs["PushCube"]

    def sequence():
        first = ours.reset(seed=5)[0]["state"]
        return [first] + [ours.reset()[0]["state"] for _ in range(3)]

    one, two = sequence(), sequence()
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    assert len({a.tobytes() for a in one}) == 4  # each reset a new episode


@needs_maniskill
def test_multi_task_draw_is_seeded_and_the_episode_is_maniskills():
    """ManiSkillTabletop: reset(seed=s) draws the task from the env's generator seeded with s, then starts
    ManiSkill's episode s of that task (the scene of a task, once built, is kept across task switches)."""
    env = gym.make(MULTI_TASK_ID, cameras=("main",), image_size=32)
    raws = {}
    for seed in (11, 1, 11):  # PushCube, PlaceSphere, PushCube again (its scene kept)
        expected_task = int(gym.utils.seeding.np_random(seed)[0].integers(len(TABLETOP)))
        _, info = env.reset(seed=seed)
        assert info["task_id"] == expected_task, seed
        name = TABLETOP[expected_task]
        if name not in raws:
            raws[name] = raw_maniskill(name)
        raw = raws[name]
        raw.reset(seed=seed)
        np.testing.assert_array_equal(env.unwrapped.backend.maniskill_env.get_state().numpy(),
                                      raw.unwrapped.get_state().numpy(), err_msg=f"{name}, seed {seed}")
        action = np.random.default_rng(seed).uniform(-1, 1, 7)
        env.step(action)
        raw.step(to_raw_action(action))
        np.testing.assert_array_equal(env.unwrapped.backend.maniskill_env.get_state().numpy(),
                                      raw.unwrapped.get_state().numpy(), err_msg=f"{name}, seed {seed}, step 1")
    env.close()
    for raw in raws.values():
        raw.close()


@needs_maniskill
def test_batched_env_equals_the_cpu_env_across_autoresets():
    """The batched env (ManiSkill's CPU simulation, num_envs=1) and make_vec's env give the same episodes,
    autoresets included: one seed rule, one episode draw (vla_gym.core.env.draw_episode), SAME_STEP final_obs."""
    from vla_gym.backends.maniskill.gpu import make_gpu_vector_env

    kwargs = {"obs_mode": "state", "max_episode_steps": 4, "paraphrase_instructions": True}
    cpu = vla_gym.make_vec(env_id("PushCube"), 1, vectorization="sync", **kwargs)
    batched = make_gpu_vector_env(env_id("PushCube"), 1, device="cpu", **kwargs)
    a, _ = cpu.reset(seed=3)
    b, _ = batched.reset(seed=3)
    actions = np.random.default_rng(0).uniform(-1, 1, (10, 1, 7)).astype(np.float32)
    for t, action in enumerate(actions):
        np.testing.assert_array_equal(a["state"], b["state"].numpy(), err_msg=f"step {t}")
        assert list(a["instruction"]) == list(b["instruction"])
        a, ra, ta, tra, ia = cpu.step(action)
        b, rb, tb, trb, ib = batched.step(action)
        np.testing.assert_allclose(ra, rb, atol=1e-6)
        assert (ta.tolist(), tra.tolist()) == (tb.tolist(), trb.tolist())
        if tra[0] or ta[0]:
            np.testing.assert_array_equal(ia["final_obs"][0]["state"], ib["final_obs"][0]["state"].numpy())
            assert ia["final_info"]["elapsed_steps"][0] == ib["final_info"]["elapsed_steps"][0] == 4
    cpu.close()
    batched.close()


# =============================================================================================== LIBERO
#: (suite, task index in the suite, initial state); one task of every suite
LIBERO_SAMPLE = [("libero_spatial", 0, 0), ("libero_object", 5, 7), ("libero_goal", 3, 13),
                 ("libero_10", 6, 20), ("libero_90", 40, 49)]
#: the default run's sample: a scene with fixtures (Spatial's cabinet) reset by its seed, one without (Object) reset
#: with options pinning the initial state; every suite runs in the ``slow`` tier
LIBERO_SHORT_SAMPLE = LIBERO_SAMPLE[:2]
LIBERO_SIZE = 128
#: a solved episode: LIBERO-Object task 5 from initial state 7 with vla_gym's scripted expert (97 steps)
EXPERT_EPISODE = ("libero_object", 5, 7)
LIBERO_STEPS = 24  # random actions after the settle steps, 6 chunks of 4
NO_OP = [0, 0, 0, 0, 0, 0, -1]  # the settle action of OpenVLA's / RLinf's LIBERO evaluation


def libero_actions(task_index: int) -> np.ndarray:
    return np.random.default_rng(task_index).uniform(-1, 1, (LIBERO_STEPS, 7)) * np.array([0.5] * 6 + [1])


def reference_episode(suite_name: str, index: int, init: int, hard_reset: bool = True):
    """LIBERO's evaluation loop up to the policy, as OpenVLA's ``run_libero_eval.py`` writes it (no vla_gym
    code): the env, ``seed(0)``, ``reset()``, ``set_init_state``, 10 no-op settle steps. Returns (env, obs).
    ``hard_reset=False``: LIBERO's own soft reset, as vla_gym resets."""
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    suite = benchmark.get_benchmark_dict()[suite_name]()
    task = suite.get_task(index)
    env = OffScreenRenderEnv(bddl_file_name=os.path.join(get_libero_path("bddl_files"), task.problem_folder,
                                                         task.bddl_file),
                             camera_heights=LIBERO_SIZE, camera_widths=LIBERO_SIZE, camera_names=["agentview"],
                             hard_reset=hard_reset)
    env.seed(0)
    env.reset()
    obs = env.set_init_state(suite.get_task_init_states(index)[init])
    for _ in range(10):
        obs, _reward, _done, _info = env.step(NO_OP)
    return env, obs


def libero_reference(out: str, sample: list) -> None:
    """The reference process: LIBERO's loop on ``sample``, then the expert's actions replayed."""
    results = {}
    for suite_name, index, init in sample:
        env, obs = reference_episode(suite_name, index, init)
        frame, states, dones = obs["agentview_image"], [], []
        for k, action in enumerate(libero_actions(index)):
            obs, _reward, done, _info = env.step(action.tolist())
            if k % 4 == 3:
                states.append(env.get_sim_state().tolist())
                dones.append(bool(done))
        results[suite_name] = {"frame": frame.tolist(), "states": states, "success": dones}
        env.close()
    results["expert"] = replay_expert(out, suite_name_index_init=EXPERT_EPISODE)
    pathlib.Path(out).write_text(json.dumps(results))


def replay_expert(out: str, suite_name_index_init: tuple[str, int, int]) -> dict:
    """LIBERO's loop replaying the actions vla_gym's scripted expert took (written by the other process), with
    LIBERO's soft reset: on MuJoCo 3.3.0 its hard reset recompiles the scene from its own XML into a model whose
    97-step contact episode ends 2.8e-6 away from the first compile's (LIBERO against itself; bit-identical on
    3.17), while the soft reset, as vla_gym's, ends on the same state to the last bit."""
    actions_file = pathlib.Path(out).with_name("expert_actions.json")
    for _ in range(1200):  # the other process writes it first thing; wait for it up to 10 minutes
        if actions_file.exists():
            break
        time.sleep(0.5)
    actions = json.loads(actions_file.read_text())
    env, _ = reference_episode(*suite_name_index_init, hard_reset=False)
    dones = [bool(env.step(action)[2]) for action in actions]
    state = env.get_sim_state().tolist()
    env.close()
    return {"success": dones, "state": state}


def run_expert(out: str, env_id: str, suite_name_index_init: tuple[str, int, int]) -> dict:
    """vla_gym's scripted expert solves one episode (physics only); its actions go to the other process."""
    from vla_gym.data.experts.libero import libero_expert

    _, index, init = suite_name_index_init
    env = gym.make(env_id, task_id=index, cameras=("main",), image_size=LIBERO_SIZE)
    env.reset(seed=0, options={"init_state_id": init})  # seed 0: what the reference's env.seed(0) draws with
    expert = libero_expert(env)
    actions, dones = [], []
    for _ in range(env.unwrapped.tasks[index].max_episode_steps):
        action = np.clip(expert(), -1, 1)  # what VLAEnv hands LIBERO
        _obs, _reward, terminated, truncated, info = env.unwrapped.step(action, observe=False)
        actions.append(action.tolist())
        dones.append(bool(info["success"]))
        if terminated or truncated:
            break
    state = env.unwrapped.backend._env.get_sim_state().tolist()
    env.close()
    actions_file = pathlib.Path(out).with_name("expert_actions.json")
    tmp = actions_file.with_suffix(".partial")
    tmp.write_text(json.dumps(actions))
    os.replace(tmp, actions_file)
    return {"success": dones, "state": state}


def libero_vla_gym(out: str, sample: list) -> None:
    """The same episodes through vla_gym: VLA/Libero* ids, soft resets, ActionChunk (unrendered sub-steps)."""
    from vla_gym.tasks.libero import ENV_IDS
    from vla_gym.wrappers import ActionChunk

    ids = {suite: env_id for env_id, suite in ENV_IDS.items()}
    results = {"expert": run_expert(out, ids[EXPERT_EPISODE[0]], EXPERT_EPISODE)}
    for n, (suite_name, index, init) in enumerate(sample):
        env = ActionChunk(gym.make(ids[suite_name], task_id=index, cameras=("main",), image_size=LIBERO_SIZE),
                          chunk_size=4)
        env.reset(seed=1)  # another episode first: the one compared comes from a soft reset of a used scene
        env.step(np.zeros((4, 7)))
        # even rows: the seed picks the initial state (s % 50); odd rows: options pin it whatever the seed
        obs, info = env.reset(seed=init + 50) if n % 2 == 0 else env.reset(seed=123, options={"init_state_id": init})
        assert info["init_state_id"] == init
        frame, states, dones = obs["images"]["main"], [], []
        for chunk in libero_actions(index).reshape(-1, 4, 7):
            _obs, _reward, _terminated, _truncated, info = env.step(chunk)
            states.append(env.unwrapped.backend._env.get_sim_state().tolist())
            dones.append(bool(info["success"]))
        results[suite_name] = {"frame": frame.tolist(), "states": states, "success": dones}
        env.close()
    pathlib.Path(out).write_text(json.dumps(results))


@needs_libero
@pytest.mark.parametrize("sample", [LIBERO_SHORT_SAMPLE, pytest.param(LIBERO_SAMPLE, marks=pytest.mark.slow)],
                         ids=["spatial-object", "every-suite"])
def test_libero_episode_i_is_libero_evaluation_episode_i(tmp_path, sample):
    here = pathlib.Path(__file__).parent
    procs = {}
    for name in ("libero_reference", "libero_vla_gym"):
        code = (f"import sys; sys.path.insert(0, {str(here)!r}); import test_fidelity as f; "
                f"f.{name}({str(tmp_path / name)!r}, {[list(row) for row in sample]!r})")
        procs[name] = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")})
    try:
        for name, proc in procs.items():
            output, _ = proc.communicate(timeout=800)
            assert proc.returncode == 0, f"{name} failed:\n{output[-3000:]}"
    finally:  # a failed or timed-out run leaves no LIBERO process behind
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    reference = json.loads((tmp_path / "libero_reference").read_text())
    ours = json.loads((tmp_path / "libero_vla_gym").read_text())
    assert set(reference) == set(ours) == {"expert", *(suite_name for suite_name, _, _ in sample)}
    for suite_name, _, _ in sample:
        ref, got = reference[suite_name], ours[suite_name]
        np.testing.assert_allclose(np.array(got["states"]), np.array(ref["states"]), atol=1e-9,
                                   err_msg=f"{suite_name}: MuJoCo state after each chunk")
        assert got["success"] == ref["success"], suite_name
        raw = np.array(ref["frame"], dtype=np.float32)
        frame = np.array(got["frame"], dtype=np.float32)
        error = np.abs(frame - raw[::-1]).max(axis=-1)  # LIBERO's frames are upside down: flipped, the same view
        # LIBERO places some fixtures by RNG when it builds a model: their edges move by a pixel or so
        # between processes (measured: median 0, mean 1-5 levels of 255); everything else is equal
        assert np.median(error) <= 1 and error.mean() < 8, f"{suite_name}: first frame differs by {error.mean():.2f}"
        assert np.abs(frame - raw).mean() > 3 * error.mean(), f"{suite_name}: the unflipped frame matches as well"
    # a solved episode: success on the same step, after the same MuJoCo states
    assert ours["expert"]["success"][-1] and ours["expert"]["success"] == reference["expert"]["success"]
    np.testing.assert_allclose(ours["expert"]["state"], reference["expert"]["state"], atol=1e-9)
