"""``python -m bench evaluate``: validate the whole sweep, run the missing jobs, score, rank and
write the page (see ``docs/usage.md``, "Bad input")."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.commands import COMMANDS, EXIT_INTERRUPTED
from bench.commands.values import parse_defense
from bench.core.errors import BenchInputError

#: bounds on the sweep's size: more is a typo, not a benchmark
MAX_SEEDS = 1000
MAX_JOBS_PER_CORE = 4


def _unique(items: Sequence[Any]) -> list[Any]:
    """``items`` without repeats, in first-seen order (a repeated ``--task`` runs once)."""
    return list(dict.fromkeys(items))


#: the options that only ``--executor ray`` reads, with their defaults
RAY_ONLY = (("--address", "address", None), ("--cpus-per-job", "cpus_per_job", 1),
            ("--gpus-per-job", "gpus_per_job", 0.0), ("--memory-per-job", "memory_per_job", 0.0))  # fmt: skip


def _no_ray_options(args: argparse.Namespace) -> None:
    """Refuse a Ray option given without ``--executor ray`` (it would do nothing)."""
    for flag, name, default in RAY_ONLY:
        if getattr(args, name) != default:
            raise BenchInputError(
                flag, getattr(args, name), reason="a Ray option: it does nothing without --executor ray"
            )


def _check_sandbox(unsandboxed: bool) -> None:
    """Defense code runs in the OS sandbox (:mod:`bench.evaluation.sandbox`): on a kernel without
    Landlock, ``evaluate`` refuses to run unless told ``--unsandboxed`` (a local look; the
    results' provenance says ``sandbox: none`` and ``leaderboard export`` refuses them); where
    the kernel has Landlock the flag would change nothing, and is refused."""
    from bench.evaluation.sandbox import landlock_abi

    if landlock_abi() >= 1:
        if unsandboxed:
            why = "this kernel has Landlock: defense code always runs sandboxed here"
            raise BenchInputError("--unsandboxed", True, reason=why)
        return
    if not unsandboxed:
        raise BenchInputError(
            "sandbox",
            "none",
            reason="this kernel offers no Landlock (Linux 5.13 or later, with landlock among its "
            "security modules), so defense code cannot be sandboxed; --unsandboxed runs it anyway "
            "for a local look (its results never become leaderboard entries)",
        )


def _check_cluster(options: Any) -> None:
    """Join (or start) the Ray cluster and refuse what one job asks that the whole cluster does
    not have — Ray would keep such a task pending forever: CPUs, GPUs, memory."""
    from bench.evaluation.ray_executor import _init

    cluster = _init(options).cluster_resources()
    asked = (
        ("--cpus-per-job", float(options.cpus), float(cluster.get("CPU", 0.0)), "CPUs"),
        ("--gpus-per-job", float(options.gpus), float(cluster.get("GPU", 0.0)), "GPUs"),
        ("--memory-per-job", options.memory_gb, float(cluster.get("memory", 0.0)) / 2**30, "GiB of memory"),
    )
    for flag, want, have, what in asked:
        if want > have:
            raise BenchInputError(
                flag, want, reason=f"the Ray cluster has {have:g} {what} in all: no job could ever start"
            )


def _ray_options(args: argparse.Namespace) -> Any:
    """``--executor ray``'s options, checked (the ray package, the resources asked for)."""
    import importlib.util

    from bench.evaluation.ray_executor import RayOptions

    if importlib.util.find_spec("ray") is None:
        raise BenchInputError("--executor", "ray", reason="the ray package is not installed: pip install ray")
    if args.cpus_per_job < 1:
        raise BenchInputError("--cpus-per-job", args.cpus_per_job, reason="must be an integer ≥ 1")
    for name, value in (("--gpus-per-job", args.gpus_per_job), ("--memory-per-job", args.memory_per_job)):
        if not 0 <= value < math.inf:
            raise BenchInputError(name, value, reason="must be a finite number ≥ 0")
    address = args.address
    if address is not None and address != "auto" and not address.startswith("ray://"):
        raise BenchInputError("--address", address, reason="expected 'auto' or ray://host:port")
    if address is not None and address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        raise BenchInputError(
            "--address", address, reason="a ray:// address needs Ray's client: pip install 'ray[client]'"
        )
    return RayOptions(
        address=address,
        cpus=args.cpus_per_job,
        gpus=args.gpus_per_job,
        memory_gb=args.memory_per_job,
        local_cpus=args.jobs * args.cpus_per_job,
    )


#: what the markers of the terminal tables mean (:func:`bench.leaderboard.site.text.format_table`)
TABLE_LEGEND = (
    "rank — : not ranked (utility below the floor, a threat model the defense does not claim, a job "
    "refused (the defense broke the per-node contract), an ε the attacks refute, no successful seed, "
    "or a track that is not ranked: see its line)\n"
    "defense * : on the track's Pareto front of privacy and utility\n"
    "ε — : no DP guarantee claimed against this threat model; ε lb ! : the attacks' empirical lower "
    "bound exceeds the claimed ε\n"
    "privacy = 1 − worst leakage; worst: the attack that sets it; per-attack columns: mean leakage "
    "(0 = nothing recovered, 1 = all); a1, a2 …: attack labels too long for a column, named under "
    "the table; wide tables continue in blocks below, each repeating rank and defense"
)


def _print_skipped(pairs: list[tuple[str, str, str]], verbose: bool) -> None:
    """The (task, defense) pairs whose defense does not apply: one line per reason with its
    count (each pair with ``--verbose``)."""
    by_reason: dict[str, list[tuple[str, str]]] = {}
    for task, defense, why in pairs:
        by_reason.setdefault(str(why), []).append((task, defense))
    print(f"skipping {len(pairs)} (task, defense) pairs whose defense does not apply:")
    for why, which in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        defenses = sorted({d.split("(")[0] for _, d in which})
        print(f"  {len(which):3d} × {why} ({', '.join(defenses)})")
        if verbose:
            for task, defense in which:
                print(f"        {task} x {defense}")
    if not verbose:
        print("  (each pair: --verbose)")


def _print_no_data(catalog: object, no_data: dict[str, BenchInputError], verbose: bool) -> None:
    """The suite's tasks skipped because their dataset is not on this machine: one line per
    dataset with its tasks and how to get it (the whole offline message with ``--verbose``)."""
    by_dataset: dict[str, list[str]] = {}
    for task in no_data:
        by_dataset.setdefault(catalog.task(task).simulation.dataset, []).append(task)  # type: ignore[attr-defined]
    n = len(no_data)
    print(f"skipping {n} task{'s' * (n != 1)} whose dataset is not on this machine:")
    for dataset, tasks in sorted(by_dataset.items()):
        print(f"  {dataset}: {', '.join(tasks)} (`python -m bench data get {dataset}`, or `data import`)")
        if verbose:
            print(f"        {no_data[tasks[0]].reason}")


@COMMANDS.register("evaluate", "run tasks under defenses, attack them, store, score and rank; write the page")
def cmd_evaluate(args: argparse.Namespace) -> int:
    from bench.evaluation import isolation

    isolation.warm_up()  # the fork server imports the engine while this process does the same

    import os

    from bench.evaluation.grid import SweepInterrupted, expand_grid, plan_jobs, run_grid
    from bench.evaluation.validate import Collector, validate_tasks, writable_folder
    from bench.leaderboard.ranking import entry_table, superseded_versions, tables_by_track
    from bench.leaderboard.site import write_site
    from bench.leaderboard.site.graph_figure import track_figures
    from bench.leaderboard.site.text import format_table
    from bench.results.reference import RANKED
    from bench.results.store import ResultStore
    from bench.results.store_url import refuse_in_memory
    from bench.simulation.lightning import quiet_lightning
    from bench.spec.catalog import Catalog, bench_root

    root = bench_root(args.root)
    catalog = Catalog(root)
    suite = catalog.suite(args.suite)
    found = Collector()  # every problem of the sweep, reported together before anything runs
    tasks = _unique(args.task or suite.tasks)
    tasks = [t for t in tasks if found.check(lambda t=t: catalog.task(t))]
    no_data: dict[str, BenchInputError] = {}
    if not args.task:  # a suite runs the tasks whose data this machine has; named tasks must have it
        from bench.evaluation.validate import missing_data

        no_data = {t: e for t in tasks if (e := missing_data(catalog.task(t))) is not None}
        tasks = [t for t in tasks if t not in no_data]
        if no_data and not tasks:
            found.errors.extend(no_data.values())
    defenses = []
    for text in _unique(args.defense or []):

        def choose(text: str = text) -> None:
            spec = parse_defense(text)
            same = [d for d in suite.defenses if d.name == spec.name]
            defenses.extend(same if (":" not in text and same) else [spec])

        found.check(choose)
    defenses = list({d.label: d for d in defenses}.values()) if args.defense else suite.defenses
    cores = os.cpu_count() or 1
    if args.seeds is not None and not 0 < args.seeds <= MAX_SEEDS:
        found.errors.append(
            BenchInputError("--seeds", args.seeds, reason=f"must be an integer in 1 .. {MAX_SEEDS}")
        )
    if not 0 < args.jobs <= MAX_JOBS_PER_CORE * cores:
        found.errors.append(
            BenchInputError(
                "--jobs",
                args.jobs,
                reason=f"must be an integer in 1 .. {MAX_JOBS_PER_CORE * cores} "
                f"({MAX_JOBS_PER_CORE} per core; this machine has {cores})",
            )
        )
    elif args.jobs > cores:
        print(f"warning: --jobs {args.jobs} is more than this machine's {cores} cores; jobs will share them")
    ray_options = []
    if args.executor == "ray":
        found.check(lambda: ray_options.append(_ray_options(args)))
    else:
        found.check(lambda: _no_ray_options(args))
    seeds = args.seeds if args.seeds is not None and 0 < args.seeds <= MAX_SEEDS else suite.seeds
    out = Path(args.out) if args.out else root / "runs"
    site_dir = Path(args.site) if args.site else root / "leaderboard" / "site"
    found.check(lambda: writable_folder(out, "--out"))
    found.check(lambda: writable_folder(site_dir, "--site"))
    found.check(lambda: refuse_in_memory(args.store))
    found.check(lambda: _check_sandbox(bool(args.unsandboxed)))
    store_url = args.store or str(out / "results.sqlite")
    specs = expand_grid(catalog, tasks, defenses, seeds)
    if args.scale != "full":  # every task of the sweep at that scale, named <task>_<scale>
        from bench.commands.scale import SCALES

        scaled = {t: SCALES.get(args.scale)(catalog.task(t)) for t in tasks}
        specs = [s.model_copy(update={"task": scaled[s.task.name]}) for s in specs]
        tasks = [scaled[t].name for t in tasks]
    valid = validate_tasks({s.task.name: s.task for s in specs}.values(), found)
    specs = [s for s in specs if s.task.name in valid]
    jobs, skipped_pairs = [], []

    def plan() -> None:
        nonlocal jobs, skipped_pairs
        jobs, skipped_pairs = plan_jobs(specs, root, defenses)

    found.check(plan)
    store = None

    def open_store() -> None:
        nonlocal store
        out.mkdir(parents=True, exist_ok=True)
        store = ResultStore(store_url)

    if not found.errors:
        found.check(open_store)
    found.raise_if_any()
    assert store is not None
    if no_data:
        _print_no_data(catalog, no_data, args.verbose)
    if skipped_pairs:
        _print_skipped(skipped_pairs, args.verbose)
    if args.retry_failed:  # results an earlier run kept are stored first, so that a kept failure reruns too
        from bench.results.spool import import_spooled

        import_spooled(store, out)
        print(f"--retry-failed: {store.delete_failed(keys=[j.key for j in jobs])} failed jobs will run again")
    if ray_options and {j.key for j in jobs} - store.finished_keys():
        _check_cluster(ray_options[0])  # before any job is submitted
    quiet_lightning()
    start = time.perf_counter()
    try:
        ran, skipped = run_grid(
            jobs,
            store,
            root,
            parallel=args.jobs,
            progress=not args.no_progress,
            out_dir=out,
            verbose=args.verbose,
            ray=ray_options[0] if ray_options else None,
        )
    except SweepInterrupted as stop:
        print(
            f"interrupted: {stop.saved} of the {stop.total} jobs to run finished and are saved in {store.url}"
            f"{f' (with {stop.before} from before)' if stop.before else ''}; run the same command again to "
            "resume from there.",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    wall = time.perf_counter() - start
    results = [r for r in store.results() if r.task in set(tasks)]
    df = entry_table(results)
    tables = tables_by_track(df)
    for track, table in tables.items():
        baseline = table["baseline_utility"].iloc[0] if len(table) else float("nan")
        metric = table["utility_metric"].iloc[0] if len(table) else "utility"
        note = f" (undefended {metric}: {baseline:.3f})" if baseline == baseline else ""
        print(f"\n== {track}{note} ==")
        status = table["track_status"].iloc[0] if len(table) else RANKED
        if status != RANKED:
            print(f"not ranked ({status}): {table['track_note'].iloc[0]}")
        print(format_table(table))
    if tables:
        print(f"\n{TABLE_LEGEND}")
    superseded = df.attrs.get("superseded", 0)
    if superseded:
        print(f"\n{superseded} stored jobs of older code or task versions are not shown (see the page)")
    from bench.leaderboard.declared import declared_for_page
    from bench.leaderboard.files import build_entries
    from bench.leaderboard.gallery import worst_grids
    from bench.leaderboard.site.mia_figure import membership_figures

    by_name = {s.task.name: s.task for s in specs}
    page = write_site(
        tables,
        site_dir,
        {  # no local path on the page: the store's URL is printed below, not published
            "suite": suite.name,
            "jobs": len(results),
            "generated_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        },
        superseded_versions(results),
        track_figures(results, by_name),
        entries=build_entries(results, suite.name, tasks, declared_for_page(root)),  # read in a child
        tasks=by_name,
        images=worst_grids(results, out),
        membership=membership_figures(results),
        order=list(suite.tasks) if args.scale == "full" else tasks,
    )
    failed = sum(r.status == "failed" for r in results)
    print(f"\n{ran} jobs run, {skipped} already in the store, {failed} failed; {wall:.1f} s")
    print(f"store: {store.url}\npage:  {page}")
    return 0


def add_parser(sub: Any) -> None:
    p_eval = sub.add_parser(
        "evaluate", help="evaluate defenses on a suite: run, attack, score, rank, write the page"
    )
    p_eval.add_argument("--suite", default="quick", help="suite from tasks/suites.yaml (default: quick)")
    p_eval.add_argument("--task", action="append", help="only these tasks (repeatable)")
    p_eval.add_argument(
        "--defense",
        action="append",
        metavar="NAME[:k=v,...]",
        help="only these defenses, e.g. none, gaussian_noise, gaussian_noise:sigma=0.5",
    )
    p_eval.add_argument("--seeds", type=int, help="number of seeds (default: the suite's)")
    p_eval.add_argument(
        "--scale",
        choices=("full", "smoke"),
        default="full",
        help="full: the tasks as written; smoke: every task cut to minutes on a CPU (4 rounds, "
        "256 samples, 5 attack iterations; same models and nodes), named <task>_smoke, never an entry",
    )
    p_eval.add_argument("--store", help="results store: an SQLAlchemy URL or a SQLite file path")
    p_eval.add_argument(
        "--out", help="output folder (default: ROOT/runs); the store defaults to OUT/results.sqlite"
    )
    p_eval.add_argument("--site", help="folder for the leaderboard page (default: ROOT/leaderboard/site)")
    p_eval.add_argument("--jobs", type=int, default=1, help="jobs run at once (each in its own processes)")
    p_eval.add_argument("--root", help="benchmark root with tasks/ and defenses/")
    p_eval.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: --jobs threads of this process; ray: each job a Ray task (local instance or --address)",
    )
    p_eval.add_argument(
        "--address",
        help="ray: the cluster to join — 'auto' (this machine's cluster) or ray://host:port "
        "(default: start a Ray instance on this machine with --jobs CPUs)",
    )
    p_eval.add_argument(
        "--cpus-per-job", type=int, default=1, help="ray: CPUs each job declares (its intra-op threads)"
    )
    p_eval.add_argument("--gpus-per-job", type=float, default=0.0, help="ray: GPUs each job declares")
    p_eval.add_argument(
        "--memory-per-job", type=float, default=0.0, help="ray: memory (GiB) each job declares"
    )
    p_eval.add_argument(
        "--retry-failed",
        action="store_true",
        help="run the failed jobs of the selected tasks and defenses again",
    )
    p_eval.add_argument(
        "--unsandboxed",
        action="store_true",
        help="on a kernel without Landlock only: run defense code without the OS sandbox "
        "(the results say so and never become leaderboard entries)",
    )
    p_eval.add_argument(
        "--no-progress", action="store_true", help="no progress output (default: a bar, or a line per job)"
    )
    p_eval.add_argument(
        "--verbose",
        action="store_true",
        help="show each simulation's Lightning progress bar and every skipped (task, defense) pair",
    )
