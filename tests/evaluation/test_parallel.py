"""``--jobs 2`` runs two jobs at once (each in its own worker processes) and stores exactly the
numbers ``--jobs 1`` stores."""

from __future__ import annotations

from bench.cli import main
from bench.results.store import ResultStore
from tests.support.bench_root import evaluate_argv, make_root, tiny_task

#: three rounds: the one round a job draws to attack besides round 0 (bench.evaluation.rounds) can
#: only be round 1, so that the two sweeps attack the same rounds and must store the same numbers
TASK = tiny_task(nodes=6, rounds=3, eval_every=3)


def test_two_jobs_at_once_store_the_same_numbers(tmp_path):
    suites = {
        "quick": {
            "tasks": ["tiny"],
            "defenses": ["none", {"name": "gaussian_noise", "params": {"sigma": 0.5}}],
            "seeds": 3,
        }
    }
    root = make_root(tmp_path, [TASK], suites, defenses=("none", "gaussian_noise"))
    stored = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"out{jobs}"
        assert main([*evaluate_argv(root, out, out / "site"), "--no-progress", "--jobs", jobs]) == 0
        results = ResultStore(str(out / "results.sqlite")).results()
        stored[jobs] = {
            (r.defense, r.seed): (r.key, r.utility, r.privacy, r.metrics["val_loss"]) for r in results
        }
    assert len(stored["2"]) == 6 and stored["1"] == stored["2"]


def test_a_sweep_keeps_idle_workers_as_far_as_free_memory_allows(monkeypatch):
    """24 idle workers per parallel job (a simulation, an audit and an oracle worker per defense
    and an attack worker per threat of a suite), fewer when half the free memory holds fewer,
    never fewer than 8 per parallel job."""
    import os

    from bench.evaluation import grid

    def free(gib: float):
        pages = {"SC_AVPHYS_PAGES": int(gib * 2**30 / 4096), "SC_PAGE_SIZE": 4096}
        monkeypatch.setattr(os, "sysconf", lambda name: pages[name])

    free(64)
    assert grid.idle_workers(2) == 48
    free(10)  # 5 GiB for idle workers of 256 MiB
    assert grid.idle_workers(2) == 20
    free(1)
    assert grid.idle_workers(2) == 16 and grid.idle_workers(0) == 8
