"""The Ray executor's scaling: a CPU-bound slice of the quick suite on 2 Ray workers against 1.

What is compared
----------------
The same jobs (quick-suite tasks whose simulation and attacks keep one core busy, undefended,
several seeds), run by :func:`bench.evaluation.grid.run_grid` with ``ray=RayOptions(local_cpus=k)``:
a local Ray instance of ``k`` CPUs, each job one Ray task declaring one CPU (one intra-op thread),
into a fresh results store. Both runs start their Ray instance before the clock starts (its
start-up, ~3 s, is printed apart), and each run's first job warms a worker, as a real sweep does.
The script prints both wall times, the speed-up (target ≥ 1.7× on 2 free cores) and checks the
two stores hold the same numbers.

What two processes can give on this machine
-------------------------------------------
Beside the speed-up it prints the machine's own ceiling for it, measured in the same run: the
same unit of single-threaded torch work (forward and backward of an MLP 784-100-10 on batches of
64, the quick suite's staple) done twice in one process, against once in each of two processes
at the same time (:func:`two_process_ceiling`). On a machine with two idle cores that ratio is
2.0; on this project's VM (2 vCPUs that share memory bandwidth and, at times, a host) it was
1.81× for this work, 1.56× for pure-Python arithmetic and 1.54× for streaming 256 MiB — the
memory-bound quick-suite jobs sit near the last.

Usage::

    python performance/executors.py            # 3 tasks × 6 seeds (18 jobs per run)
    python performance/executors.py --quick    # 2 tasks × 2 seeds
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import ray

from bench.evaluation.grid import expand_grid, plan_jobs, run_grid
from bench.evaluation.ray_executor import RayOptions
from bench.results.store import ResultStore
from bench.spec.catalog import Catalog, bench_root
from bench.spec.schema import DefenseSpec

TASKS = ["digits_mlp_dpsgd_mia", "digits_mlp_pdmm", "digits_mlp_fedsgd_mia"]  # the quick suite's longest


def timed_run(jobs: list, root: Path, cpus: int) -> tuple[float, float, dict]:
    """``(Ray start-up s, sweep s, key → numbers)`` on a local Ray instance of ``cpus`` CPUs."""
    t0 = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    startup = time.perf_counter() - t0
    try:
        with tempfile.TemporaryDirectory() as tmp, ResultStore(str(Path(tmp) / "r.sqlite")) as store:
            t1 = time.perf_counter()
            run_grid(jobs, store, root, progress=False, ray=RayOptions(local_cpus=cpus))
            wall = time.perf_counter() - t1
            numbers = {r.key: (r.status, r.utility, sorted(r.privacy.items())) for r in store.results()}
    finally:
        ray.shutdown()
    return startup, wall, numbers


def _mlp_work(steps: int) -> float:
    """``steps`` single-threaded forward/backward passes of an MLP 784-100-10 on a batch of 64;
    the seconds they took."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 100), torch.nn.ReLU(), torch.nn.Linear(100, 10))
    x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))
    start = time.perf_counter()
    for _ in range(steps):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
    return time.perf_counter() - start


def two_process_ceiling(seconds: float = 3.0) -> float:
    """Throughput of two processes over one on the same machine, now: a unit of
    :func:`_mlp_work` calibrated to about ``seconds``, done twice in one process against once in
    each of two processes started together (both processes spawned and warmed before the clock)."""
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_mlp_work, [20, 20]))  # start and warm both workers
        per_step = pool.submit(_mlp_work, 200).result() / 200
        steps = max(50, int(seconds / per_step))
        alone = pool.submit(_mlp_work, steps).result() + pool.submit(_mlp_work, steps).result()
        t0 = time.perf_counter()
        list(pool.map(_mlp_work, [steps, steps]))
        together = time.perf_counter() - t0
    return alone / together


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 tasks × 2 seeds")
    args = parser.parse_args()
    tasks, seeds = (TASKS[:2], 2) if args.quick else (TASKS, 6)
    root = bench_root(None)
    specs = expand_grid(Catalog(root), tasks, [DefenseSpec(name="none")], seeds)
    jobs, _ = plan_jobs(specs, root)
    print(f"{len(jobs)} jobs ({', '.join(tasks)}; {seeds} seeds), {os.cpu_count()} cores")
    s1, one, n1 = timed_run(jobs, root, 1)
    s2, two, n2 = timed_run(jobs, root, 2)
    print(f"1 Ray worker : {one:7.1f} s   (Ray start-up {s1:.1f} s, not counted)")
    print(f"2 Ray workers: {two:7.1f} s   (Ray start-up {s2:.1f} s, not counted)")
    print(f"speed-up 2 vs 1 workers: {one / two:.2f}×  (target ≥ 1.7× on 2 idle cores)")
    ceiling = two_process_ceiling()
    print(
        f"this machine, now: 2 processes vs 1 on single-threaded torch work: {ceiling:.2f}×; "
        f"the Ray sweep reached {one / two / ceiling:.0%} of it"
    )
    same = n1 == n2 and all(v[0] == "ok" for v in n1.values())
    print(f"same numbers in both stores, every job ok: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
