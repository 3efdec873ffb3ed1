"""Fixtures shared by several test files."""
import pytest


@pytest.fixture(scope="module")
def one_torch_thread():
    """Run a module's tiny models on one torch thread (faster than fighting over 2 shared cores)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
