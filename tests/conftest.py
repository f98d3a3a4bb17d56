import os

import pytest
import torch

from bench.simulation.lightning import quiet_lightning


@pytest.fixture(autouse=True)
def _quiet():
    quiet_lightning()
    # the cores shared among pytest-xdist's workers (2 threads when tests run in one process)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // workers)))
