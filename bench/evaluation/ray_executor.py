"""Run a sweep's jobs as Ray tasks, on this machine or on a Ray cluster (``evaluate --executor ray``).

Each job is one Ray task that declares its resources (``cpus`` intra-op threads, ``gpus``,
``memory``); Ray schedules as many at once as the cluster holds. A task runs
:func:`~bench.evaluation.job.run_job` in a Ray worker process exactly as the local executor does in a
thread — the simulation and the attacks in their own child processes (:mod:`bench.evaluation.isolation`)
— and returns the job's record. The driver alone writes to the store, one transaction per job as
soon as it arrives; job keys are idempotent (:meth:`~bench.results.store.ResultStore.add` never
writes a key twice), so a task that Ray retries or a sweep submitted again never duplicates a row.
A killed driver loses only the jobs then running: the same command resumes with the jobs missing
from the store. A task that fails at the Ray level (its worker died, it ran out of memory) is
stored as a failed job with Ray's reason, like any other failure.

On a cluster every node needs the same bench (``pip install -e .`` of the same commit), the
benchmark root at the same path (its ``tasks/`` and ``defenses/``; a defense's source travels with
its job) and the datasets in ``BENCH_DATA`` (a shared folder, or a copy per node); PNG grids are
written to ``--out`` on the node that ran the job.
"""

from __future__ import annotations

import atexit
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.evaluation.job import Job, run_job
from bench.results.record import JobResult

__all__ = ["RayOptions", "run_ray"]

#: Ray tasks retried after a system failure (a worker process that died) before the job fails
MAX_RETRIES = 1


@dataclass(frozen=True)
class RayOptions:
    """Where and how the jobs run.

    ``address``: ``None`` starts a Ray instance on this machine with ``local_cpus`` CPUs (all
    cores by default); ``"auto"`` joins the cluster this machine belongs to; ``ray://host:port``
    connects to a remote cluster's client server. ``cpus``, ``gpus``, ``memory_gb``: what each job
    declares (``cpus`` is also the job's intra-op thread count).
    """

    address: str | None = None
    cpus: int = 1
    gpus: float = 0.0
    memory_gb: float = 0.0
    local_cpus: int | None = None


_WORKER_STATE: dict[str, Any] = {}


def _run_remote(job: Job, root: str, out_dir: str | None, threads: int) -> JobResult:
    """The Ray task: one job, with a worker pool and data cache kept for the worker's next job."""
    from bench.evaluation import isolation, sandbox
    from bench.evaluation.truth import RunDataCache

    if "pool" not in _WORKER_STATE:
        sandbox.sweep_scratch()  # of this machine's earlier workers that Ray ended
        _WORKER_STATE["pool"] = isolation.WorkerPool(max_idle=8)
        _WORKER_STATE["cache"] = RunDataCache(size=4)
        atexit.register(_WORKER_STATE["pool"].close)
    return run_job(
        job,
        Path(root),
        out_dir=None if out_dir is None else Path(out_dir),
        threads=threads,
        data_cache=_WORKER_STATE["cache"],
        pool=_WORKER_STATE["pool"],
    )


def _failed(job: Job, exc: BaseException) -> JobResult:
    """A job whose Ray task failed (worker crash, out of memory, a cancelled task)."""
    spec, task = job.spec, job.spec.task
    cause = getattr(exc, "cause", None) or exc  # a RayTaskError wraps the task's own exception
    message = re.sub(r"\x1b\[[0-9;]*m", "", str(cause)).strip()
    text = f"{type(cause).__name__}: {message}".splitlines()
    return JobResult(
        key=job.key,
        task=task.name,
        defense=spec.defense.label,
        defense_name=spec.defense.name,
        defense_params=dict(spec.defense.params),
        seed=spec.seed,
        status="failed",
        reason=f"ray: {text[0] if text else type(exc).__name__}"[:300],
        utility_metric=task.utility.metric,
        utility_floor=task.utility.floor,
        runtime_s=0.0,
        provenance={"version": job.version, "code": job.code, "executor": "ray"},
    )


def _init(options: RayOptions) -> Any:
    import ray

    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if options.address is None:
            kwargs["num_cpus"] = options.local_cpus or os.cpu_count() or 1
        else:
            kwargs["address"] = options.address
        # workers import bench from the same place as the driver (a local instance; on a cluster
        # each node's own install)
        ray.init(
            **kwargs, runtime_env={"env_vars": {k: v for k, v in os.environ.items() if k == "BENCH_DATA"}}
        )
    return ray


def run_ray(
    pending: list[Job],
    root: Path,
    out_dir: Path | None,
    options: RayOptions,
    started: Callable[[Job], None],
    finish: Callable[[JobResult, int], None],
    task_fn: Callable[..., JobResult] = _run_remote,
) -> None:
    """Submit every pending job as a Ray task and hand each result to ``finish(result, running)``
    in the driver as it arrives (``running``: tasks not finished yet). ``task_fn`` is the remote
    function (tests substitute one that fails)."""
    if not pending:
        return
    ray = _init(options)
    remote = ray.remote(
        num_cpus=options.cpus,
        num_gpus=options.gpus,
        memory=int(options.memory_gb * 2**30) or None,
        max_retries=MAX_RETRIES,
    )(task_fn)
    refs = {}
    for job in pending:
        refs[remote.remote(job, str(root), None if out_dir is None else str(out_dir), options.cpus)] = job
        started(job)
    try:
        waiting = list(refs)
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=1)
            job = refs[done[0]]
            try:
                result = ray.get(done[0])
            except Exception as exc:  # a Ray-level failure of this task only
                result = _failed(job, exc)
            finish(result, len(waiting))
    except BaseException:
        for ref in refs:  # the driver stops: cancel what has not finished (nothing is stored)
            try:
                ray.cancel(ref, force=True)
            except Exception:  # already finished, or the cluster is gone
                pass
        raise
