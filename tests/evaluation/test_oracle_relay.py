"""The parent's relay to the defense oracle (bench/evaluation/oracle_relay.py): an oracle process
is kept in the sweep's pool under its defense plugin's key, and each job sets it up anew."""

from __future__ import annotations

import torch

from bench.core.wire import blob, dumps, loads
from bench.evaluation import isolation
from bench.evaluation.oracle_relay import OracleRelay
from bench.spec.schema import parse_task
from tests.support.bench_root import REPO
from tests.support.one_task import tiny_task

SOURCE = (REPO / "defenses" / "gaussian_noise.py").read_bytes()


def _setup(sigma: float, seed: int = 7) -> dict:
    task = parse_task(tiny_task([{"name": "dlg", "params": {"rounds": [0]}}]), "tiny")
    params = {"sigma": sigma}
    defense = {"name": "gaussian_noise", "params": params, "source": blob(SOURCE), "root": str(REPO)}
    return {"task": task.model_dump_json(), "seed": seed, "defense": defense}


def _values(relay: OracleRelay) -> torch.Tensor:
    """The oracle's answer to one fixed evaluate query (the tiny task: logistic regression, 3 inputs)."""
    gen = torch.Generator().manual_seed(0)
    q = {
        "op": "evaluate",
        "grads": torch.randn(2, 1, 4, generator=gen),
        "theta": torch.randn(2, 4, generator=gen),
        "target": torch.randn(2, 4, generator=gen),
        "objective": "l2",
        "nodes": torch.tensor([0, 1]),
        "rounds": torch.tensor([0, 0]),
        "receiver": -1,
    }
    return loads(relay(dumps(q)))["ok"]["values"]


def test_an_oracle_process_serves_the_next_job_of_its_defense_set_up_anew():
    """The second job of a defense gets the first job's oracle process back, answering for its
    own setup (the same values as a fresh process); another defense key gets another process."""
    pool = isolation.WorkerPool(max_idle=4)
    try:
        first = OracleRelay(_setup(1.0), pool=pool, key=("gaussian_noise", "abc"))
        v1 = _values(first)
        pid = first.worker.proc.pid
        first.close()
        second = OracleRelay(_setup(3.0), pool=pool, key=("gaussian_noise", "abc"))
        v2 = _values(second)
        assert second.worker.proc.pid == pid and second.queries == 1
        second.close()
        fresh = OracleRelay(_setup(3.0))
        torch.testing.assert_close(_values(fresh), v2, rtol=0, atol=0)
        assert fresh.worker.proc.pid != pid and not torch.equal(v1, v2)
        fresh.close()
        other = OracleRelay(_setup(3.0), pool=pool, key=("gaussian_noise", "other digest"))
        _values(other)
        assert other.worker.proc.pid != pid
        other.close()
    finally:
        pool.close()
