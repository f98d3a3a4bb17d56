"""Expand a sweep into jobs and run the ones not finished yet.

A job is ``(task, defense configuration, seed)``; its key hashes its full spec and the code
that produces its numbers (:class:`~bench.evaluation.job.Job`), so a re-run skips every job
already in the store (ok or failed), reruns the jobs whose defense or attack code changed, and
a sweep killed mid-way resumes without losing or duplicating a result: each result is written
in one transaction by the parent as soon as its job ends.

Jobs run ``jobs`` at a time on threads of the parent; each job's simulation and attacks run in
child processes (:mod:`bench.evaluation.isolation`) with ``cores // jobs`` threads each.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from bench.core.errors import BenchInputError
from bench.core.wire import blob
from bench.defense.loading import defense_path, source_digest
from bench.evaluation import isolation, sandbox
from bench.evaluation.job import Job, run_job
from bench.evaluation.planning import protocol_key
from bench.evaluation.probe import DefensePlan, describe_defense
from bench.evaluation.ray_executor import RayOptions, run_ray
from bench.evaluation.truth import RunDataCache
from bench.evaluation.validate import Collector
from bench.results.record import JobResult
from bench.results.spool import ResultKeeper
from bench.spec.catalog import Catalog
from bench.spec.schema import DefenseSpec, RunSpec, TaskSpec


def expand_grid(catalog: Catalog, tasks: list[str], defenses: list[DefenseSpec], seeds: int) -> list[RunSpec]:
    """Every ``(task, defense, seed)`` with seeds ``0 .. seeds-1``, by task, then defense, then
    seed (consecutive jobs of one defense reuse its simulation worker)."""
    return [
        RunSpec(task=catalog.task(t), defense=d, seed=s)
        for t in tasks
        for d in defenses
        for s in range(seeds)
    ]


def plan_defense(defense: DefenseSpec, tasks: list[TaskSpec], root: Path) -> DefensePlan:
    """Probe one defense configuration in a child process (the parent never imports defense
    code): its parameters are validated, and for each task's protocol configuration it says
    whether it applies and which protocol parameters it sets."""
    source = defense_path(defense.name, root).read_bytes()
    protocols = {
        protocol_key(t.simulation): [t.simulation.protocol, dict(t.simulation.protocol_params)] for t in tasks
    }
    try:
        out = isolation.call(
            describe_defense,
            {
                "name": defense.name,
                "params": dict(defense.params),
                "source": blob(source),
                "root": str(root),
                "protocols": protocols,
            },
            label="defense probe",
        )
    except isolation.ChildFailed as exc:
        raise BenchInputError(
            "defense", defense.label, reason=f"the plugin failed to load: {exc.reason}"
        ) from None
    per = out["per_protocol"]
    return DefensePlan(
        name=defense.name,
        params=dict(defense.params),
        source=source,
        digest=source_digest(source),
        reasons={k: v["reason"] for k, v in per.items()},
        overrides={k: dict(v["overrides"]) for k, v in per.items()},
        adaptive_knowledge=dict(out["adaptive_knowledge"]),
        threats=tuple(str(t) for t in out.get("threats", ())),
        hooks=tuple(str(h) for h in out.get("hooks", ())),
    )


def plan_jobs(
    specs: list[RunSpec], root: Path, defenses: list[DefenseSpec] | None = None
) -> tuple[list[Job], list[tuple[str, str, str]]]:
    """Probe each defense configuration once, build the jobs, and drop those whose defense does
    not apply to the task's protocol. Returns the jobs and the skipped ``(task, defense,
    reason)`` triples; the problems of every configuration (of ``defenses``, default: those of
    ``specs``) are raised together (:class:`~bench.evaluation.validate.InputErrors`)."""
    tasks = list({s.task.name: s.task for s in specs}.values())
    plans: dict[str, DefensePlan] = {}
    found = Collector()
    for defense in {d.label: d for d in (defenses or [s.defense for s in specs])}.values():

        def probe(defense: DefenseSpec = defense) -> None:
            plans[defense.label] = plan_defense(defense, tasks, root)

        found.check(probe)
    found.raise_if_any()
    jobs, skipped = [], []
    for spec in specs:
        plan = plans[spec.defense.label]
        reason = plan.reasons.get(protocol_key(spec.task.simulation))
        if reason is None:
            jobs.append(Job(spec, plan))
        elif (spec.task.name, spec.defense.label, reason) not in skipped:
            skipped.append((spec.task.name, spec.defense.label, reason))
    return jobs, skipped


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: ``saved`` of ``total`` pending jobs finished and were stored
    (``before`` were already in the store)."""

    def __init__(self, saved: int, total: int, before: int) -> None:
        super().__init__(f"{saved} of {total} jobs saved")
        self.saved, self.total, self.before = saved, total, before


class Progress:
    """One progress bar for the sweep (current job, ETA) on a terminal; one line per finished
    job otherwise (a redirected log stays readable)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.failed = total, 0, 0
        self.tty = enabled and sys.stderr.isatty()
        self.lines = enabled and not self.tty
        self.bar = None
        if self.tty and total:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc="jobs", unit="job", dynamic_ncols=True)

    def started(self, job: Job) -> None:
        """Name the job now running in the bar (the latest started, with ``--jobs K``)."""
        if self.bar is not None:
            spec = job.spec
            self.bar.set_postfix_str(f"{spec.task.name} | {spec.defense.label} | seed {spec.seed}")

    def finished(self, result: JobResult, running: int | None = None) -> None:
        """Count a finished job; ``running``: jobs submitted and not finished (the Ray executor)."""
        self.done += 1
        self.failed += result.status == "failed"
        label = f"{result.task} | {result.defense} | seed {result.seed}: {result.status}"
        counts = "" if running is None else f" — {running} queued or running, {self.failed} failed"
        if self.bar is not None:
            self.bar.update(1)
            if running is not None:
                self.bar.set_postfix_str(f"{running} queued or running, {self.failed} failed")
        elif self.lines:
            extra = f" ({result.reason})" if result.reason else ""
            print(
                f"[{self.done}/{self.total}] {label}{extra} in {result.runtime_s:.1f} s{counts}", flush=True
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


#: private memory an idle worker holds, about (measured on the quick suite: 200 MB)
WORKER_MEMORY = 256 * 2**20


def idle_workers(parallel: int) -> int:
    """Idle workers a sweep keeps: enough for a simulation and an oracle worker per defense
    plugin and an attack worker per threat model of a suite (24 per parallel job), as
    far as half the memory free now allows (at least 8 per parallel job). A worker that is not
    kept is started again for the next job of its key."""
    parallel = max(1, parallel)
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # no such figure on this system
        return 8 * parallel
    return max(8 * parallel, min(24 * parallel, free // (2 * WORKER_MEMORY)))


def run_grid(
    jobs: list[Job],
    store: Any,
    root: Path,
    parallel: int = 1,
    progress: bool = True,
    on_result: Callable[[JobResult], None] | None = None,
    out_dir: Path | None = None,
    verbose: bool = False,
    threads: int | None = None,
    ray: RayOptions | None = None,
) -> tuple[int, int]:
    """Run the jobs missing from ``store``; returns ``(run now, skipped)``.

    ``verbose`` shows each simulation's own Lightning progress bar. ``threads`` (intra-op threads
    per job) defaults to the machine's cores shared among the ``parallel`` jobs. With ``ray``,
    the jobs run as Ray tasks (:mod:`bench.evaluation.ray_executor`; ``parallel`` and ``threads`` are
    then the cluster's and ``ray.cpus``) and this process only stores their results."""
    keeper = ResultKeeper(store, out_dir)  # stores results an earlier run kept; keeps them if the store fails
    done = store.finished_keys()
    pending = [j for j in jobs if j.key not in done]
    skipped = len(jobs) - len(pending)
    threads = threads or max(1, (os.cpu_count() or 1) // max(1, parallel))
    seeds = len({j.spec.seed for j in jobs}) or 1
    cache = RunDataCache(size=min(seeds, 4) * max(1, parallel))
    pool = isolation.WorkerPool(max_idle=idle_workers(parallel))
    bar = Progress(len(pending), progress)

    def one(job: Job) -> JobResult:
        keeper.check()
        bar.started(job)
        result = run_job(
            job, root, progress=verbose, out_dir=out_dir, threads=threads, data_cache=cache, pool=pool
        )
        return keeper.hold(result)

    if pending and ray is None:
        sandbox.sweep_scratch()  # left by earlier sweeps' processes that ended unseen
        isolation.warm_up()
    stored = 0

    def finish(result: JobResult, running: int | None = None) -> None:
        nonlocal stored
        keeper.add(result)
        stored += 1
        bar.finished(result, running)
        if on_result is not None:
            on_result(result)

    if ray is not None:
        pool.close()
        try:
            run_ray(pending, root, out_dir, ray, bar.started, finish)
        except KeyboardInterrupt:
            raise SweepInterrupted(stored, len(pending), skipped) from None
        finally:
            bar.close()
        return len(pending), skipped
    executor = ThreadPoolExecutor(max_workers=parallel) if parallel > 1 else None
    try:
        if executor is None:
            for job in pending:
                finish(one(job))
        else:
            futures = [executor.submit(one, job) for job in pending]
            for fut in as_completed(futures):
                finish(fut.result())
    except BaseException as exc:
        # stop now: jobs not started are dropped, running ones end with their workers (what
        # they would have produced is not stored); every finished job is already in the store
        pool.close(kill=True)
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        if isinstance(exc, KeyboardInterrupt):
            raise SweepInterrupted(stored, len(pending), skipped) from None
        raise
    finally:
        bar.close()
        pool.close()
    if executor is not None:
        executor.shutdown()
    return len(pending), skipped
