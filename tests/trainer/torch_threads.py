"""One torch thread per test (an autouse fixture): tiny matmuls gain nothing from intra-op threads, and on a shared
2-core box their spin-waits cost 10-100x. A conftest or test module opts in by importing it:
``from tests.trainer.torch_threads import one_torch_thread  # noqa: F401``."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
