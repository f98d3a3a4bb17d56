"""The CUDA path: where a GPU exists, the engine on ``cuda`` computes what it computes on the CPU
(float64, same seed), and a whole evaluate job runs there. Skipped, with the reason, elsewhere:
this project's own machine has no GPU, so these run only on a contributor's or a cluster's."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import torch

from bench.simulation import Simulation

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device on this machine (the CUDA path needs a GPU)"
)


def _cfg(protocol: str, device: str, **params) -> dict:
    return {
        "dataset": "digits",
        "model": "mlp",
        "model_params": {"hidden": [16]},
        "nodes": 8,
        "topology": "ring",
        "protocol": protocol,
        "protocol_params": {"lr": 0.2, **params},
        "dtype": "float64",
        "device": device,
        "seed": 4,
    }


@pytest.mark.parametrize(("protocol", "params"), [("fedsgd", {}), ("dpsgd", {"batch_size": 8})])
def test_the_engine_on_cuda_computes_what_it_computes_on_the_cpu(protocol, params):
    cpu = Simulation(_cfg(protocol, "cpu", **params))
    gpu = Simulation(_cfg(protocol, "cuda", **params))
    assert gpu.theta.device.type == "cuda"
    cpu.run(5)
    gpu.run(5)
    torch.testing.assert_close(gpu.theta.cpu(), cpu.theta, rtol=1e-9, atol=1e-11)


def test_an_evaluate_job_with_every_trust_check_runs_on_cuda(tmp_path: Path):
    from bench.cli import main
    from bench.spec.catalog import bench_root
    from tests.support.bench_root import evaluate_argv

    argv = evaluate_argv(bench_root(), tmp_path / "out", tmp_path / "site")
    code = main([*argv, "--suite", "quick", "--task", "digits_mlp_fedsgd",
                 "--defense", "dp_sgd:noise_multiplier=1.0", "--seeds", "1", "--scale", "smoke",
                 "--no-progress"])  # fmt: skip
    assert code == 0
    store = sqlite3.connect(tmp_path / "out" / "results.sqlite")
    ((status, provenance),) = store.execute("select status, provenance from jobs").fetchall()
    assert status == "ok" and json.loads(provenance)["device"].startswith("cuda")
