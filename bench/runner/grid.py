"""Expand a sweep into jobs and run the ones not finished yet.

A job is ``(task, defense configuration, seed)``; its key is the hash of its full spec, so a
re-run skips every job already in the store (ok or failed) and a sweep killed mid-way resumes
without losing or duplicating a result: each result is written in one transaction by the
parent process as soon as its job ends.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from bench.catalog import Catalog
from bench.results.record import JobResult
from bench.specs import DefenseSpec, RunSpec


def expand_grid(catalog: Catalog, tasks: list[str], defenses: list[DefenseSpec], seeds: int) -> list[RunSpec]:
    """Every ``(task, defense, seed)`` with seeds ``0 .. seeds-1``, task-major order."""
    return [
        RunSpec(task=catalog.task(t), defense=d, seed=s)
        for t in tasks
        for d in defenses
        for s in range(seeds)
    ]


def applicable(specs: list[RunSpec], root: Path) -> tuple[list[RunSpec], list[tuple[str, str]]]:
    """Drop the jobs whose defense declares protocols that exclude the task's protocol.

    Returns the kept jobs and the skipped ``(task, defense)`` pairs."""
    from bench.defenses_api import build_defense

    kept, skipped = [], []
    for spec in specs:
        defense = build_defense(spec.defense.name, spec.defense.params, root)
        if defense.protocols and spec.task.simulation.protocol not in defense.protocols:
            pair = (spec.task.name, spec.defense.label)
            if pair not in skipped:
                skipped.append(pair)
        else:
            kept.append(spec)
    return kept, skipped


def _worker_init(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    from bench.simulation.lightning import quiet_lightning

    quiet_lightning()


def _run_in_worker(spec_json: str, root: str, out_dir: str | None) -> dict[str, Any]:
    from bench.runner.job import run_job

    out = Path(out_dir) if out_dir else None
    return run_job(RunSpec.model_validate_json(spec_json), Path(root), out_dir=out).to_dict()


def run_grid(
    specs: list[RunSpec],
    store: Any,
    root: Path,
    jobs: int = 1,
    progress: bool = True,
    on_result: Callable[[JobResult], None] | None = None,
    out_dir: Path | None = None,
) -> tuple[int, int]:
    """Run the jobs of ``specs`` missing from ``store``; returns ``(run now, skipped)``."""
    from tqdm import tqdm

    from bench.runner.job import run_job

    done = store.finished_keys()
    pending = [s for s in specs if s.key() not in done]
    skipped = len(specs) - len(pending)
    bar = tqdm(total=len(pending), desc="jobs", unit="job", disable=not progress or not pending, position=0)

    def finish(result: JobResult) -> None:
        store.add(result)
        bar.set_postfix_str(f"{result.task} | {result.defense} | seed {result.seed}: {result.status}")
        bar.update(1)
        if on_result is not None:
            on_result(result)

    try:
        if jobs <= 1:
            for spec in pending:
                finish(run_job(spec, root, progress=progress, out_dir=out_dir))
        else:
            threads = max(1, (os.cpu_count() or 1) // jobs)
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(
                max_workers=jobs, mp_context=ctx, initializer=_worker_init, initargs=(threads,)
            ) as pool:
                futures = [
                    pool.submit(
                        _run_in_worker, s.model_dump_json(), str(root), str(out_dir) if out_dir else None
                    )
                    for s in pending
                ]
                for fut in as_completed(futures):
                    finish(JobResult.from_dict(fut.result()))
    finally:
        bar.close()
    return len(pending), skipped
