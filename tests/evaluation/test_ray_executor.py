"""``evaluate --executor ray`` on a local Ray instance: the same numbers as the local executor, no
duplicate row when a job runs twice or a sweep is submitted again, Ray-level failures stored with
their reason, and a driver killed mid-sweep resumed by the same command."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.evaluation.grid import expand_grid, plan_jobs, run_grid
from bench.evaluation.ray_executor import RayOptions, run_ray
from bench.results.store import ResultStore
from bench.spec.catalog import Catalog, bench_root
from bench.spec.schema import DefenseSpec

ray = pytest.importorskip("ray", reason="the ray package is in the dev extra; .ci/run installs it")

pytestmark = pytest.mark.slow  # real sweeps on a local Ray cluster, or `python -m bench` subprocesses

TASKS = ["gaussians_logreg_fedsgd", "digits_mlp_fedsgd"]
SWEEP = [
    *(a for t in TASKS for a in ("--task", t)),
    *("--defense", "none", "--defense", "quantization:delta=0.01", "--seeds", "2", "--jobs", "2"),
]


def evaluate(out: Path, *extra: str) -> subprocess.CompletedProcess:
    args = ["evaluate", "--suite", "quick", *SWEEP, "--no-progress", "--out", str(out)]
    return subprocess.run(
        [sys.executable, "-m", "bench", *args, "--site", str(out / "site"), *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )


def rows(out: Path) -> list[tuple]:
    try:
        with sqlite3.connect(out / "results.sqlite") as db:
            return db.execute("select key, status from jobs order by key").fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []


def numbers(out: Path) -> dict[str, tuple]:
    with ResultStore(str(out / "results.sqlite")) as store:
        return {
            r.key: (
                r.status,
                r.utility,
                sorted(r.privacy.items()),
                sorted((a.attack, a.leakage) for a in r.attacks),
            )
            for r in store.results()
        }


def test_ray_gives_the_local_executors_numbers_and_never_duplicates(tmp_path: Path) -> None:
    local = evaluate(tmp_path / "local")
    assert local.returncode == 0, local.stderr
    first = evaluate(tmp_path / "ray", "--executor", "ray")
    assert first.returncode == 0, first.stderr
    assert "8 jobs run, 0 already in the store, 0 failed" in first.stdout
    assert numbers(tmp_path / "ray") == numbers(tmp_path / "local")  # same keys, bit-identical numbers
    again = evaluate(tmp_path / "ray", "--executor", "ray")  # the sweep submitted again
    assert again.returncode == 0 and "0 jobs run, 8 already in the store" in again.stdout
    assert len(rows(tmp_path / "ray")) == 8 == len({k for k, _ in rows(tmp_path / "ray")})


def test_a_killed_driver_resumes(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    args = [
        "evaluate",
        "--suite",
        "quick",
        *SWEEP,
        "--executor",
        "ray",
        "--out",
        str(out),
        "--site",
        str(out),
    ]
    log = (tmp_path / "log").open("w")
    driver = subprocess.Popen([sys.executable, "-m", "bench", *args], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and driver.poll() is None:
        if (out / "results.sqlite").is_file() and len(rows(out)) >= 2:
            break
        time.sleep(0.2)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    stored = len(rows(out))
    assert 2 <= stored < 8, "the driver was not killed mid-sweep"
    resumed = evaluate(out, "--executor", "ray")
    assert resumed.returncode == 0, resumed.stderr
    assert f"{8 - stored} jobs run, {stored} already in the store" in resumed.stdout
    assert len(rows(out)) == 8 == len({k for k, _ in rows(out)})


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def jobs_of(n_seeds: int = 1):
    root = bench_root(None)
    specs = expand_grid(Catalog(root), ["gaussians_logreg_fedsgd"], [DefenseSpec(name="none")], n_seeds)
    jobs, _ = plan_jobs(specs, root)
    return root, jobs


def test_a_job_run_twice_is_stored_once(local_ray, tmp_path: Path) -> None:
    root, jobs = jobs_of()
    with ResultStore(str(tmp_path / "r.sqlite")) as store:
        run_grid([jobs[0], jobs[0]], store, root, progress=False, ray=RayOptions())
        assert [r.key for r in store.results()] == [jobs[0].key]


def test_a_ray_level_failure_is_stored_with_its_reason(local_ray, tmp_path: Path) -> None:
    def crash(*args: object) -> None:  # (nested: Ray ships it by value)
        os._exit(3)  # the worker process dies: a Ray-level failure, retried once, then reported

    root, jobs = jobs_of(2)
    got = []
    run_ray(jobs, root, None, RayOptions(), lambda job: None, lambda r, n: got.append((r, n)), task_fn=crash)
    assert sorted(n for _, n in got) == [0, 1]
    for result, _ in got:
        assert result.status == "failed", result
        assert result.reason.startswith("ray: WorkerCrashedError: The worker died"), result.reason
    with ResultStore(str(tmp_path / "r.sqlite")) as store:
        for result, _ in got:
            store.add(result)
        assert {r.key for r in store.results()} == {j.key for j in jobs}


def test_bad_ray_options_are_input_errors(tmp_path: Path) -> None:
    for extra, field in (
        (("--address", "somewhere"), "--address"),
        (("--cpus-per-job", "0"), "--cpus-per-job"),
        (("--gpus-per-job", "-1"), "--gpus-per-job"),
        (("--memory-per-job", "inf"), "--memory-per-job"),
    ):
        out = evaluate(tmp_path / "bad", "--executor", "ray", *extra)
        assert out.returncode == 2 and field in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert not (tmp_path / "bad" / "results.sqlite").exists()
    # a Ray option without --executor ray would do nothing: refused (issue 39 item 8)
    out = evaluate(tmp_path / "bad", "--gpus-per-job", "1")
    assert out.returncode == 2 and "does nothing without --executor ray" in out.stderr, out.stderr


def test_resources_no_node_has_are_refused_before_any_job(tmp_path: Path) -> None:
    """Issue 39 item 8: a GPU on a cluster without one, or more memory than the cluster has,
    would keep every task pending forever; it is an input error naming the option instead."""
    for extra, field, what in (
        (("--gpus-per-job", "1"), "--gpus-per-job", "GPUs in all"),
        (("--memory-per-job", "100000"), "--memory-per-job", "GiB of memory in all"),
    ):
        out = evaluate(tmp_path / "big", "--executor", "ray", *extra)
        assert out.returncode == 2 and field in out.stderr and what in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
        assert "jobs run" not in out.stdout


def test_a_ray_client_address_without_the_client_says_what_to_install(monkeypatch, tmp_path, capsys) -> None:
    """``ray://`` needs Ray's client (grpcio, the ``ray[client]`` extra the project installs):
    where it is missing, an input error says what to install."""
    import importlib.util

    from bench.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "grpc" else real(name, *a)
    )
    argv = ["evaluate", "--suite", "quick", *SWEEP, "--no-progress", "--out", str(tmp_path / "o")]
    code = main([*argv, "--executor", "ray", "--address", "ray://head:10001"])
    assert code == 2 and "pip install 'ray[client]'" in capsys.readouterr().err
