"""Fixtures and the test tiers shared by every test file.

Tiers: the default run (``python3 -m pytest``: everything but ``slow`` and ``gpu``) and the inner-loop tier
``python3 -m pytest -m quick`` (under 3 minutes on 2 cores: no simulator scene builds, no process start-ups).
A whole file joins the quick tier by being listed in ``QUICK_FILES``; a single test by ``@pytest.mark.quick``.
"""
import pytest

from vla_gym.runtime.system import configure_mujoco_gl

# MuJoCo picks its GL platform when it is first imported, and collection imports every test file (some import
# mujoco, robosuite or metaworld directly) before any env is made: headless EGL from the start, as vla_gym sets it
configure_mujoco_gl()

#: files whose every test is quick (units, doctests, the layout, the fake OmniGibson)
QUICK_FILES = {
    "test_behavior.py", "test_doctests.py", "test_episodes.py", "test_eval_stats.py", "test_layout.py",
    "test_libero_miniature.py", "test_libero_pro.py", "test_trainers_rollout.py", "test_trainers_units.py",
    "test_vla_policies.py", "test_vla_small.py", "test_wrapper_spec.py", "test_wrappers_units.py",
}


#: the files that take longest in the default run, longest first (per-file sums of ``--durations=0`` on 2 cores).
#: pytest-xdist's ``--dist loadfile`` hands whole files to its workers in collection order, so these go first and the
#: many short files fill in behind them: both workers end at about the same time (longest-processing-time-first)
#: instead of one finishing a long file alone at the end
LONGEST_FILES = (
    "test_examples.py", "test_readme.py", "test_sft.py", "test_interop.py", "test_libero.py", "test_demos_dataset.py",
    "test_fidelity.py", "test_maniskill.py", "test_record_episodes.py", "test_fault_soak.py", "test_libero_plus.py",
    "test_canary.py", "test_pipeline.py", "test_vla_demos.py", "test_libero_rl_campaign.py", "test_grpo_libero.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in QUICK_FILES:
            item.add_marker(pytest.mark.quick)
    rank = {name: position for position, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FILES)))  # stable: file order kept otherwise


@pytest.fixture(scope="module")
def one_torch_thread():
    """Run a module's tiny models on one torch thread (faster than fighting over 2 shared cores)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
