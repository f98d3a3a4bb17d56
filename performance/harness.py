"""The cost of the trust boundary: jobs run isolated against the same jobs run in-process.

What is compared
----------------
* **Isolated** — :func:`bench.evaluation.job.run_job` exactly as ``python -m bench evaluate`` runs
  it: the simulation in a worker of the job's defense plugin, the attacks in a worker of their
  threat model (both forked from the warm fork server, :mod:`bench.evaluation.isolation`), the View
  and the final models serialized across, ground truth, utility and scores in the parent.
* **In-process reference** — the straightforward harness this replaced: the same
  ``run_job`` with the simulation and attack functions called directly in the parent (no
  process, no serialization of the request; the View still goes through its bytes, as every
  attack gets its own copy either way), on the same parent's data cache.

Each job of the sweep is run both ways, one after the other (alternating which goes first), so
that drift of this VM's speed hits both alike; the script prints per-task totals, the overhead
``isolated / in-process − 1`` and checks that both produced the same numbers (utility,
leakages) — the isolation changes where code runs, not what it computes. The generic
defense-aware variants (``+oracle``) are off in this comparison: their queries to the defense
oracle need the process boundary they are relayed across.

With ``--audit`` the two ways are instead the isolated jobs *with* the generic defense-aware
attack variants that query the defense oracle (:mod:`bench.evaluation.oracle`) and the same
isolated jobs without them: the overhead is what the oracle costs (the per-node execution of
defenses is how every job runs, not a check to switch off). The numbers are then compared on the
attacks both ways ran.

With ``--budget`` the measure is the one the trust checks are budgeted against: the whole quick
suite run as ``python -m bench evaluate --jobs 2`` runs it (:func:`bench.evaluation.grid.run_grid`,
two jobs at a time, each with half the cores), with the checks and without, each into its own
fresh store, in two halves run ABBA against drift; the overhead is the ratio of the two wall
times. ``--seeds`` sets how many of the suite's seeds (default: all of them, as ``evaluate``
runs it).

Usage::

    PYTHONPATH=. python performance/harness.py            # the quick suite, one seed (167 jobs × 2)
    PYTHONPATH=. python performance/harness.py --quick    # one defense per task (13 jobs × 2)
    PYTHONPATH=. python performance/harness.py --audit    # the quick suite with / without the checks
    PYTHONPATH=. python performance/harness.py --budget   # the same, as `evaluate --jobs 2` runs it
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from bench.evaluation import isolation, job
from bench.evaluation.grid import expand_grid, plan_jobs, run_grid
from bench.evaluation.truth import RunDataCache
from bench.evaluation.validate import validate_task
from bench.results.provenance import cpu_model
from bench.results.store import ResultStore
from bench.simulation.lightning import quiet_lightning
from bench.spec.catalog import Catalog, bench_root

#: the switches of the trust checks in :mod:`bench.evaluation.job`, and their values when off
CHECKS_OFF: dict[str, Any] = {
    "GENERIC_VARIANTS": False,
}


@contextmanager
def _switched(values: dict[str, Any]) -> Iterator[None]:
    """The given switches of :mod:`bench.evaluation.job` set for the block, restored after it."""
    saved = {name: getattr(job, name) for name in values}
    for name, value in values.items():
        setattr(job, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(job, name, value)


def checks_off(off: bool = True) -> Any:
    """The trust checks that cost time (the generic defense-aware variants; per-node execution
    is not switchable) off for the block when ``off``; restored after it either way."""
    return _switched(CHECKS_OFF if off else {})


def _generic_off() -> Any:
    return _switched({"GENERIC_VARIANTS": False})


def _inline(
    pool: Any, key: Any, target: Any, request: Any, threads: int, label: str, relay: Any = None
) -> Any:
    return target(request)


def run_both(
    jobs: list[job.Job], root: Any, audit: bool = False
) -> list[tuple[job.Job, Any, float, Any, float]]:
    """Each job the two ways, alternating which goes first: isolated and in-process, or (``audit``)
    isolated with the trust checks and without them."""
    pool = isolation.WorkerPool(max_idle=8)
    cache = RunDataCache(size=4)
    threads = torch.get_num_threads()
    out = []
    isolated_fn = job._isolated
    try:
        for i, j in enumerate(jobs):
            order = ("iso", "ref") if i % 2 == 0 else ("ref", "iso")
            res: dict[str, tuple[Any, float]] = {}
            for mode in order:
                if not audit:  # the in-process way calls the workers' functions directly
                    job._isolated = isolated_fn if mode == "iso" else _inline
                # with --audit, "ref" is the same isolated job without the generic variants;
                # without it, they are off both ways (their oracle queries need a process to relay
                # them)
                with checks_off(mode == "ref") if audit else _generic_off():
                    start = time.perf_counter()
                    r = job.run_job(j, root, threads=threads, data_cache=cache, pool=pool)
                    res[mode] = (r, time.perf_counter() - start)
            job._isolated = isolated_fn
            out.append((j, *res["iso"], *res["ref"]))
    finally:
        job._isolated = isolated_fn
        pool.close()
    return out


def suite_wall_time(
    jobs: list[job.Job], root: Any, checked: bool, parallel: int = 2
) -> tuple[float, list[Any]]:
    """Wall time of ``jobs`` run as ``evaluate --jobs parallel`` runs them, into a fresh store,
    with the trust checks (``checked``) or without them; and the results, in ``jobs``' order."""
    with checks_off(not checked), tempfile.TemporaryDirectory(prefix="bench-budget-") as tmp:
        store = ResultStore(str(Path(tmp) / "results.sqlite"))
        start = time.perf_counter()
        run_grid(jobs, store, root, parallel=parallel, progress=False, out_dir=Path(tmp))
        wall = time.perf_counter() - start
        by_key = {r.key: r for r in store.results()}
        return wall, [by_key.get(j.key) for j in jobs]


def budget(jobs: list[job.Job], root: Any) -> None:
    """``--budget``: the suite with and without the checks, in two halves run ABBA (first half
    checked then unchecked, second half unchecked then checked), so that a drift of the VM's speed
    over the run hits both ways alike; prints the wall times, the overhead and, per task, the
    jobs' own run times both ways."""
    half = len(jobs) // 2
    walls = {True: 0.0, False: 0.0}
    results: dict[bool, list[Any]] = {True: [], False: []}
    for part, order in ((jobs[:half], (True, False)), (jobs[half:], (False, True))):
        for checked in order:
            wall, rows = suite_wall_time(part, root, checked=checked)
            walls[checked] += wall
            results[checked] += rows
            print(f"{len(part)} jobs {'with' if checked else 'without'} the checks: {wall:.1f} s", flush=True)
    on, off = results[True], results[False]
    pairs = [(a, b) for a, b in zip(on, off, strict=True) if a is not None and b is not None]
    per_task: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for a, b in pairs:
        per_task[a.task][0] += a.runtime_s
        per_task[a.task][1] += b.runtime_s
    print(f"\n{'task (job time)':32s} {'checked s':>10s} {'unchecked s':>12s} {'overhead':>9s}")
    for task, (t_a, t_b) in per_task.items():
        print(f"{task:32s} {t_a:10.1f} {t_b:12.1f} {t_a / t_b - 1:+9.1%}")
    print_split(pairs)
    t_on, t_off = walls[True], walls[False]
    print(f"\nwall time with the checks {t_on:.1f} s, without {t_off:.1f} s")
    print(f"overhead of the generic variants: {t_on / t_off - 1:+.1%}")
    same = sum(same_numbers(a, b) for a, b in pairs)
    generic = sum(1 for r in on if r is not None for a in r.attacks if a.attack.endswith("+oracle"))
    print(f"same utility and leakages both ways: {same}/{len(pairs)} jobs; generic variants run: {generic}")


def job_time_split(result: Any) -> dict[str, float]:
    """Where one job's time went: the simulation, and the generic defense-aware variants' attack
    time by family (gradient inversion against membership inference: reference worlds trained
    under the defense)."""
    m = result.metrics or {}
    out = {"simulation": float(m.get("simulation_s", 0.0))}
    for a in result.attacks:
        if a.attack.endswith("+oracle"):
            family = "membership +oracle" if a.attack.startswith("membership") else "inversion +oracle"
            out[family] = out.get(family, 0.0) + float(a.runtime_s)
    return out


def print_split(pairs: list[tuple[Any, Any]]) -> None:
    """The checks' job-time cost by component, summed over the jobs both ways ran (job time: with
    ``--jobs 2`` the wall time is about half of it)."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for a, b in pairs:
        for i, r in enumerate((a, b)):
            for part, t in job_time_split(r).items():
                totals[part][i] += t
    print(f"\n{'component (job time)':32s} {'checked s':>10s} {'unchecked s':>12s} {'added s':>8s}")
    for part, (t_a, t_b) in totals.items():
        print(f"{part:32s} {t_a:10.1f} {t_b:12.1f} {t_a - t_b:+8.1f}")


def same_numbers(a: Any, b: Any) -> bool:
    """Same status, utility and leakage of every attack both ran (an attack only one ran — a
    generic variant — is not compared)."""
    if a.status != b.status or a.utility != b.utility:
        return False
    la = {(x.threat, x.attack): x.leakage for x in a.attacks}
    lb = {(x.threat, x.attack): x.leakage for x in b.attacks}
    return all(
        (x is None and y is None) or (x is not None and y is not None and math.isclose(x, y, abs_tol=1e-9))
        for x, y in ((la[k], lb[k]) for k in la.keys() & lb.keys())
    )


def _positive(text: str) -> int:
    """``--seeds``: a positive integer (argparse reports anything else and exits with code 2)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one defense per task")
    parser.add_argument("--audit", action="store_true", help="with / without the trust checks instead")
    parser.add_argument(
        "--budget",
        action="store_true",
        help="the suite as `evaluate --jobs 2` runs it, with / without the checks",
    )
    parser.add_argument(
        "--seeds",
        type=_positive,
        default=None,
        help="seeds per job (default: 1, or the suite's with --budget)",
    )
    args = parser.parse_args()
    quiet_lightning()
    isolation.warm_up()
    root = bench_root()
    catalog = Catalog(root)
    suite = catalog.suite("quick")
    defenses = suite.defenses[:1] if args.quick else suite.defenses
    seeds = args.seeds or (suite.seeds if args.budget else 1)
    specs = expand_grid(catalog, suite.tasks, defenses, seeds)
    for task in {s.task.name: s.task for s in specs}.values():
        validate_task(task)
    jobs, _ = plan_jobs(specs, root)
    if args.budget:
        print(
            f"{len(jobs)} jobs, run as `evaluate --jobs 2` with and without the checks; "
            f"{cpu_model()}, torch {torch.__version__}"
        )
        start = time.perf_counter()
        budget(jobs, root)
        print(f"wall time of this benchmark: {time.perf_counter() - start:.1f} s")
        return
    ways = ("checked", "unchecked") if args.audit else ("isolated", "in-process")
    print(
        f"{len(jobs)} jobs, each run {ways[0]} and {ways[1]}; {cpu_model()}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    start = time.perf_counter()
    rows = run_both(jobs, root, audit=args.audit)
    per_task: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    mismatches = 0
    for j, iso, t_iso, ref, t_ref in rows:
        acc = per_task[j.spec.task.name]
        acc[0] += t_iso
        acc[1] += t_ref
        acc[2] += 1
        mismatches += not same_numbers(iso, ref)
    print(f"\n{'task':32s} {'jobs':>4s} {ways[0] + ' s':>11s} {ways[1] + ' s':>13s} {'overhead':>9s}")
    for task, (a, b, n) in per_task.items():
        print(f"{task:32s} {n:4d} {a:11.2f} {b:13.2f} {a / b - 1:+9.1%}")
    tot_iso = sum(v[0] for v in per_task.values())
    tot_ref = sum(v[1] for v in per_task.values())
    print(f"{'all':32s} {len(rows):4d} {tot_iso:11.2f} {tot_ref:13.2f} {tot_iso / tot_ref - 1:+9.1%}")
    print(f"\nsame utility and leakages both ways: {len(rows) - mismatches}/{len(rows)} jobs")
    if args.audit:
        generic = sum(1 for _, iso, *_ in rows for a in iso.attacks if a.attack.endswith("+oracle"))
        print(f"generic defense-aware variants run (checked way): {generic}")
    print(f"wall time of this benchmark: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
