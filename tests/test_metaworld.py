"""The Meta-World backend (``VLA/MetaWorld*``) on the real simulator, and its catalog without it.

Meta-World runs here on its own MuJoCo, 3.3.0, which LIBERO runs on too (docs/metaworld.md). Tests that need it skip when ``metaworld`` is not installed
(``pytest.importorskip`` in the fixtures); the catalog, the install hints and the missing-simulator error run
without it. Images are small (64 px) except where the default 224 is the point: rendering dominates here.
"""
from __future__ import annotations

import io
import pathlib
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import yaml

import vla_gym
from vla_gym.core import schema
from vla_gym.core.errors import MissingSimulatorError
from vla_gym.runtime.system import configure_mujoco_gl
from vla_gym.tasks import metaworld as catalog

configure_mujoco_gl()  # MuJoCo reads MUJOCO_GL when first imported: some tests import metaworld (and it) directly

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIZE = 64


def _metaworld():
    return pytest.importorskip("metaworld", reason=f"Meta-World is not installed: {catalog.INSTALL_COMMAND}")


@pytest.fixture(scope="module")
def mw():
    """metaworld, made to run on the installed MuJoCo (vla_gym's weld patch), or a skip."""
    _metaworld()
    from vla_gym.backends.metaworld.env import import_metaworld

    import_metaworld()
    import metaworld

    return metaworld


def raw_env(mw, name: str, **kwargs):
    """Meta-World's own env, set up with Meta-World's own calls: the goal in the observation (as its
    goal-observable envs) and each reset's object/goal positions drawn from the generator ``env.seed(s)`` seeds."""
    env = mw.env_dict.ALL_V3_ENVIRONMENTS[name](**kwargs)
    env._partially_observable = False
    del env.sawyer_observation_space
    env._set_task_called = True
    env._freeze_rand_vec = False
    env.seeded_rand_vec = True
    return env


# ---------------------------------------------------------------------------------------- catalog
@pytest.mark.quick
def test_ids_tasks_and_benchmark_sets_are_registered():
    ids = {i for i, e in vla_gym.ENTRIES.items() if e.backend == "metaworld"}
    singles = {f"VLA/MetaWorld-{name}-v0" for name in catalog.TASKS}
    sets = {"VLA/MetaWorldMT10-v0", "VLA/MetaWorldMT50-v0", "VLA/MetaWorldML10-train-v0", "VLA/MetaWorldML10-test-v0",
            "VLA/MetaWorldML45-train-v0", "VLA/MetaWorldML45-test-v0"}
    assert len(catalog.TASKS) == len(set(catalog.TASKS)) == 50 and ids == singles | sets
    sizes = {i: vla_gym.ENTRIES[i].num_tasks for i in sets}
    assert sizes == {"VLA/MetaWorldMT10-v0": 10, "VLA/MetaWorldMT50-v0": 50, "VLA/MetaWorldML10-train-v0": 10,
                     "VLA/MetaWorldML10-test-v0": 5, "VLA/MetaWorldML45-train-v0": 45, "VLA/MetaWorldML45-test-v0": 5}
    for env_id in ids:
        entry = vla_gym.ENTRIES[env_id]
        assert entry.extra == "metaworld" and entry.requires == "metaworld" and env_id in gym.registry
        assert entry.kwargs.get("goal_observable", True) == ("ML" not in env_id)  # ML hides the goal
    assert set(catalog.ML10_TRAIN).isdisjoint(catalog.ML10_TEST) and set(catalog.ML45_TRAIN).isdisjoint(catalog.ML45_TEST)
    assert set(catalog.ML45_TRAIN) | set(catalog.ML45_TEST) == set(catalog.TASKS)


@pytest.mark.quick
def test_every_task_has_one_short_printable_instruction():
    table = yaml.safe_load((ROOT / "assets" / "metaworld_instructions.yaml").read_text())
    assert set(table) == {catalog.metaworld_name(name) for name in catalog.TASKS}
    specs = catalog.task_specs(list(catalog.TASKS))
    texts = [spec.instruction for spec in specs]
    assert len(set(texts)) == 50
    for spec in specs:
        assert spec.max_episode_steps == 500 and spec.num_init_states is None and spec.suite == "metaworld"
        assert set(spec.instruction) <= set(schema.INSTRUCTION_CHARSET) and 2 <= len(spec.instruction.split()) <= 16
    with pytest.raises(ValueError, match=r"without the -v3 suffix: \['push'\]"):
        catalog.task_specs(["push-v3"])


@pytest.mark.quick
def test_task_lists_are_metaworlds_own():
    _metaworld()
    from metaworld import env_dict

    strip = [name.removesuffix("-v3") for name in env_dict.ALL_V3_ENVIRONMENTS]
    assert tuple(strip) == catalog.TASKS
    assert catalog.MT10 == tuple(n.removesuffix("-v3") for n in env_dict.MT10_V3)
    for bench, split in (("ML10", env_dict.ML10_V3), ("ML45", env_dict.ML45_V3)):
        for part in ("train", "test"):
            assert catalog.BENCHMARKS[f"{bench}-{part}"] == tuple(n.removesuffix("-v3") for n in split[part])


@pytest.mark.quick
def test_install_instructions_agree_and_vla_gym_list_shows_the_ids():
    from vla_gym import cli

    assert f'"metaworld": ["{catalog.REQUIREMENT}", "mujoco==3.3.0"]' in (ROOT / "setup.py").read_text()
    out = io.StringIO()
    assert cli.list_envs("metaworld", out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("56 ids")
    row = next(line for line in lines if line.startswith("VLA/MetaWorldMT10-v0 "))
    installed = vla_gym.ENTRIES["VLA/MetaWorldMT10-v0"].available()
    assert row.split()[1:3] == ["metaworld", "10"]
    assert row.endswith("yes") if installed else 'pip install "vla-gym[metaworld]"' in row


@pytest.mark.quick
def test_missing_metaworld_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "metaworld" or m.startswith("metaworld.")] + ["metaworld"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed: every import of it fails
    with pytest.raises(MissingSimulatorError) as caught:
        gym.make("VLA/MetaWorld-push-v0")
    text = str(caught.value)
    assert "Meta-World is not installed" in text and 'pip install "vla-gym[metaworld]"' in text
    assert "--no-deps" not in text


@pytest.mark.quick
def test_bad_options_and_actions_say_what_is_expected():
    from vla_gym.backends.metaworld.env import check_options

    with pytest.raises(ValueError, match=r"\[dx, dy, dz, gripper\]"):
        schema.check_action(np.zeros(7), 4)
    with pytest.raises(ValueError, match="camera roles"):
        check_options(["left_wrist"], "images", "corner4")
    with pytest.raises(ValueError, match="main_camera"):
        check_options(None, "images", "behindGripper")
    assert check_options(None, "state", "corner4") == () and check_options(None, "images", "corner") == ("main",)


# ------------------------------------------------------------------------------------ simulator: MuJoCo
# Render-free Meta-World tests build scenes in 30-160 ms: they join the quick tier; those that render do not.
@pytest.mark.quick
def test_weld_patch_only_where_needed_and_it_keeps_the_physics(mw):
    import mujoco

    from vla_gym.backends.metaworld import env as backend

    assert backend.patch_mocap_welds(type("Base", (), {"reset_mocap_welds": None}), 11) is False  # MuJoCo 3.3
    env = raw_env(mw, "reach-v3")
    weld = [i for i in range(env.model.neq) if env.model.eq_type[i] == mujoco.mjtEq.mjEQ_WELD][0]
    assert env.model.eq_data[weld, :11].tolist() == list(backend.MOCAP_WELD)
    # the extra number MuJoCo >= 3.4 keeps per row is not read by the simulation: the same hand motion either way
    ends = []
    for flag in (0.0, 1.0):
        env.model.eq_data[weld, 11:] = flag
        env.seed(0)
        env.reset()
        for _ in range(20):
            env.step(np.array([1.0, -0.5, 0.3, 1.0], np.float32))
        ends.append(env.data.qpos.copy())
    assert np.array_equal(*ends)
    assert backend.CONTROL_HZ == 1 / (env.frame_skip * env.model.opt.timestep)
    env.close()


# ------------------------------------------------------------------------------------ simulator: envs
@pytest.mark.parametrize("env_id, kwargs", [
    ("VLA/MetaWorld-reach-v0", {"image_size": SIZE, "cameras": ["main", "wrist"]}),
    pytest.param("VLA/MetaWorldMT10-v0", {"obs_mode": "state"}, marks=pytest.mark.quick),
    # images (reach's), a task set (MT10's) and the hidden goal (test_ml_ids_hide_the_goal_from_the_state) are
    # each checked in the default run: their combination in the slow tier
    pytest.param("VLA/MetaWorldML10-test-v0", {"image_size": SIZE}, marks=pytest.mark.slow),
])
def test_check_env_passes(mw, env_id, kwargs):
    from gymnasium.utils.env_checker import check_env

    env = gym.make(env_id, render_mode="rgb_array" if kwargs.get("obs_mode") != "state" else None, **kwargs)
    try:
        check_env(env.unwrapped, skip_render_check=kwargs.get("obs_mode") == "state")
    finally:
        env.close()


@pytest.mark.quick
@pytest.mark.filterwarnings("ignore:Constant")  # Meta-World's policies warn that they ask for more than [-1, 1]
@pytest.mark.parametrize("name", ["push", "pick-place", "door-open"])
def test_steps_match_raw_metaworld(mw, name):
    """Same seed, same actions: vla_gym's state, reward and success equal Meta-World's own loop, step for step."""
    from metaworld.policies import ENV_POLICY_MAP

    seed, steps = 7, 300
    raw = raw_env(mw, f"{name}-v3")
    raw.seed(seed)
    raw_obs, _ = raw.reset()
    env = gym.make(catalog.env_id(name), obs_mode="state")
    obs, _ = env.reset(seed=seed)
    assert np.array_equal(obs["state"], raw_obs.astype(np.float32))
    policy, rng = ENV_POLICY_MAP[f"{name}-v3"](), np.random.default_rng(0)
    solved = False
    for t in range(steps):
        with np.errstate(all="ignore"):
            action = np.clip(policy.get_action(raw_obs) + 0.1 * rng.standard_normal(4), -1, 1).astype(np.float32)
        raw_obs, raw_reward, _, _, raw_info = raw.step(action)
        obs, reward, terminated, truncated, info = env.step(action)
        assert np.array_equal(obs["state"], raw_obs.astype(np.float32)), f"step {t}"
        assert reward == float(raw_reward) and info["success"] == bool(raw_info["success"]) == terminated, f"step {t}"
        solved |= info["success"]
        if terminated:
            break
    assert solved, f"the noisy expert should solve {name} with seed {seed}"
    env.close()
    raw.close()


def test_images_are_metaworlds_own_render_turned_right_side_up(mw):
    env = gym.make(catalog.env_id("push"), image_size=SIZE, cameras=["main", "wrist"])
    obs, _ = env.reset(seed=3)
    action = np.array([0.5, 0.5, -0.2, 1.0], np.float32)
    obs = env.step(action)[0]
    for camera, role, turn in (("corner4", "main", True), ("gripperPOV", "wrist", False)):
        raw = raw_env(mw, "push-v3", render_mode="rgb_array", camera_name=camera, width=SIZE, height=SIZE)
        raw.seed(3)
        raw.reset()
        raw.step(action)
        frame = raw.render()
        assert np.array_equal(obs["images"][role], frame[::-1, ::-1] if turn else frame), role
        raw.close()
    env.close()


def _project(model, data, camera: str, point, size: int) -> tuple[float, float]:
    """(row, column) of world ``point`` in MuJoCo's raw frame of ``camera`` (image y up, pinhole, square pixels)."""
    cam = model.camera(camera).id
    local = data.cam_xmat[cam].reshape(3, 3).T @ (np.asarray(point) - data.cam_xpos[cam])
    focal = size / 2 / np.tan(np.deg2rad(model.cam_fovy[cam]) / 2)
    return size / 2 - focal * local[1] / -local[2], size / 2 + focal * local[0] / -local[2]


def test_main_camera_224_right_side_up_not_mirrored_and_instruction(mw):
    """The green goal sphere of push is where the camera's geometry puts it in the delivered (turned) image, and a
    point above it in the world is above it in the image: right side up, and not a mirror image."""
    env = gym.make(catalog.env_id("push"))
    obs, _ = env.reset(seed=0)
    image = obs["images"]["main"]
    assert image.shape == (224, 224, 3) and image.dtype == np.uint8 and set(obs["images"]) == {"main"}
    assert obs["instruction"] == "push the puck to the green goal" and obs["state"].shape == (4,)
    backend = env.unwrapped.backend
    model, data, goal = backend.metaworld_env.model, backend.metaworld_env.data, backend.raw_observation[-3:]
    green = (image[..., 1] > 120) & (image[..., 0] < 60) & (image[..., 2] < 60)
    assert green.sum() >= 4
    rows, cols = np.nonzero(green)
    raw_row, raw_col = _project(model, data, "corner4", goal, 224)
    assert abs(rows.mean() - (224 - raw_row)) < 3 and abs(cols.mean() - (224 - raw_col)) < 3  # turned by 180
    above_row, _ = _project(model, data, "corner4", goal + np.array([0, 0, 0.1]), 224)
    assert 224 - above_row < rows.mean() - 10  # higher in the world: higher in the image
    env.close()


@pytest.mark.quick
def test_same_seed_same_goal_and_objects_across_envs_and_task_switches(mw):
    single = gym.make(catalog.env_id("pick-place"), obs_mode="state")
    multi = gym.make("VLA/MetaWorldMT10-v0", obs_mode="state")
    first = single.reset(seed=11)[0]["state"]
    other = single.reset(seed=12)[0]["state"]
    again = single.reset(seed=11)[0]["state"]
    pick = catalog.MT10.index("pick-place")
    multi.reset(seed=11, options={"task_id": 0})  # another task first: the switch must not change the episode
    obs, info = multi.reset(seed=11, options={"task_id": pick})
    assert np.array_equal(first, again) and np.array_equal(first, obs["state"]) and not np.array_equal(first, other)
    assert info["task_name"] == "pick-place" and obs["instruction"] == catalog.task_specs(["pick-place"])[0].instruction
    drawn = {multi.reset(seed=s)[1]["task_name"] for s in range(12)}
    assert len(drawn) > 3 and drawn <= set(catalog.MT10)
    single.close()
    multi.close()


@pytest.mark.quick
def test_ml_ids_hide_the_goal_from_the_state(mw):
    env = gym.make("VLA/MetaWorldML10-test-v0", obs_mode="state")
    obs, info = env.reset(seed=0, options={"task_id": 2})
    assert info["task_name"] == "shelf-place" and np.all(obs["state"][-3:] == 0)
    assert np.any(env.unwrapped.backend.raw_observation[-3:] != 0)  # the expert still sees it
    env.close()


@pytest.mark.quick
@pytest.mark.parametrize("name", ["reach", "drawer-open", "button-press-topdown", "pick-place"])
def test_scripted_experts_solve_tasks_through_the_unified_env(mw, name):
    from vla_gym.data.experts.dispatch import expert_for, has_expert

    env = gym.make(catalog.env_id(name), obs_mode="state")
    assert has_expert(env.unwrapped.tasks[0])
    for seed in (0, 1):
        env.reset(seed=seed)
        expert = expert_for(env)
        for _ in range(500):
            _, _, terminated, truncated, info = env.step(expert())
            if terminated or truncated:
                break
        assert info["success"], f"{name} seed {seed}"
    env.close()


def test_demos_round_trip(mw, tmp_path):
    pytest.importorskip("pyarrow")
    from vla_gym.data.lerobot import DemoDataset
    from vla_gym.data.record import record_demos

    # one task of the set (reach, the shortest episode): datasets of several tasks are tests/test_demos_dataset.py's
    summary = record_demos("VLA/MetaWorldMT10-v0", tmp_path, episodes_per_task=1, task_ids=[0], progress=False,
                           image_size=32)
    data = DemoDataset(tmp_path)
    assert summary["solved"] == data.num_episodes == 1 and data.action_dim == 4
    assert data.cameras == ["main"] and data.state.shape[1] == 4 and data.env_id == "VLA/MetaWorldMT10-v0"
    frame = data[0]
    assert frame["images"]["main"].shape == (32, 32, 3) and frame["instruction"] == "move the gripper to the red goal"
    assert [e["task_name"] for e in data.episodes] == ["reach"] and all(e["success"] for e in data.episodes)


def test_speed_benchmark_short_form(mw, tmp_path):
    """benchmarks/metaworld_speed.py in its short form (it measures nothing at this size: it must run)."""
    out = tmp_path / "speed.json"
    done = subprocess.run([sys.executable, "benchmarks/metaworld_speed.py", "--size", "32", "--episodes", "1",
                           "--steps", "5", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "VLA/MetaWorld-push-v0" in done.stdout and done.stdout.count("steps/s") == 4
    import json

    rows = json.loads(out.read_text())["rows"]
    assert [(r["mode"], r["steps"]) for r in rows] == [("state", 5), ("images", 5)] and rows[1]["size"] == 32


def test_expert_measurement_short_form_writes_its_json(mw, tmp_path):
    """experiments/scripted_experts/measure_metaworld_experts.py --quick: 2 tasks x 2 seeds, the same JSON shape as
    the committed one."""
    out = tmp_path / "experts.json"
    done = subprocess.run([sys.executable, "experiments/scripted_experts/measure_metaworld_experts.py", "--quick", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    data = json.loads(out.read_text())
    assert (data["episodes"], data["successes"], data["seeds"]) == (4, 4, [0, 1])
    assert [row["task"] for row in data["tasks"]] == list(catalog.TASKS[:2])


@pytest.mark.quick
def test_scripted_experts_readme_table_is_the_json():
    """experiments/scripted_experts/README.md's Meta-World table = the JSON files beside it (``readme --check``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "measure_metaworld_experts", ROOT / "experiments" / "scripted_experts" / "measure_metaworld_experts.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["readme", "--check"]) == 0, (
        "run: python experiments/scripted_experts/measure_metaworld_experts.py readme")


@pytest.mark.quick
def test_docs_expert_table_shows_the_measured_numbers():
    """docs/metaworld.md's per-task table = experiments/scripted_experts/metaworld_experts*.json (what the script
    wrote)."""
    import json

    results = ROOT / "experiments" / "scripted_experts"
    current = {r["task"]: r["successes"] for r in json.loads((results / "metaworld_experts_mujoco3.17.0.json").read_text())["tasks"]}
    older = {r["task"]: r["successes"] for r in
             json.loads((results / "metaworld_experts_mujoco3.3.0.json").read_text())["tasks"]}
    rows = {}
    for line in (ROOT / "docs" / "metaworld.md").read_text().splitlines():
        if line.startswith("| `VLA/MetaWorld-") and line.count("|") == 6:
            cells = [cell.strip().strip("*") for cell in line.strip("|").split("|")]
            rows[cells[0].strip("`").removeprefix("VLA/MetaWorld-").removesuffix("-v0")] = (int(cells[3]), int(cells[4]))
    assert rows == {task: (older[task], current[task]) for task in catalog.TASKS}
