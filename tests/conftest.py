import pytest
import torch

from bench.simulation.lightning import quiet_lightning


@pytest.fixture(autouse=True)
def _quiet():
    quiet_lightning()
    torch.set_num_threads(2)
