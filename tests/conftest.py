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


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in QUICK_FILES:
            item.add_marker(pytest.mark.quick)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Run a module's tiny models on one torch thread (faster than fighting over 2 shared cores)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
