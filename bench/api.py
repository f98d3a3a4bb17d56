"""The notebook API: evaluate a defense and read the leaderboard as pandas DataFrames.

    >>> import bench
    >>> from defenses.gaussian_noise import GaussianNoise   # or your own module
    >>> df = bench.evaluate_defense(GaussianNoise(sigma=0.1), suite="quick", seeds=1)
    >>> board = bench.load_leaderboard()

:func:`evaluate_defense` runs exactly what ``python -m bench evaluate --defense …`` runs (the same
command, in this process), so the numbers are the leaderboard's: the defense's code is executed
from its source file in the isolated simulation processes, never in this one's scoring. A defense
given as an object therefore needs a source file — a plugin under ``defenses/`` or any ``.py``
module that registers it with ``@DEFENSES.register(...)``; a class defined in a notebook cell has
none, and is refused with a message saying so. A module outside ``defenses/`` is evaluated in a
temporary benchmark root that holds the repository's tasks and plugins plus that module as
``defenses/<name>.py``.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from bench.core.errors import BenchInputError

__all__ = ["evaluate_defense", "load_leaderboard"]


def _registered_name(cls: type) -> str:
    from bench.defense.plugin import DEFENSES

    names = [n for n, obj in DEFENSES.items() if obj is cls]
    if not names:
        raise BenchInputError(
            "defense", cls.__name__, reason="the class is not registered: decorate it with @DEFENSES.register"
        )
    return names[0]


def _source_file(cls: type) -> Path:
    try:
        path = inspect.getsourcefile(cls)
    except (TypeError, OSError):  # a built-in, or a class of a notebook cell (no file to read)
        path = None
    if not path or not Path(path).is_file():
        raise BenchInputError(
            "defense",
            cls.__name__,
            reason="its source file is unknown (a class defined in a notebook cell?): the benchmark runs "
            "defense code from its file in an isolated process; put the class in a .py module",
        )
    return Path(path)


def _resolve(defense: Any, params: dict[str, Any] | None) -> tuple[str, dict[str, Any], Path | None]:
    """``(name, params, source file or None for a plugin of the root)`` of what was passed."""
    from bench.defense.plugin import Defense

    if isinstance(defense, str):
        return defense, dict(params or {}), None
    cls = defense if isinstance(defense, type) else type(defense)
    if not (isinstance(cls, type) and issubclass(cls, Defense)):
        raise BenchInputError(
            "defense",
            repr(defense),
            reason="expected a plugin name, a Defense subclass or an instance of one",
        )
    if not isinstance(defense, type):
        given = getattr(defense, "init_params", None)
        if given is None:
            raise BenchInputError(
                "defense", cls.__name__, reason="its constructor arguments were not recorded"
            )
        params = {**given, **(params or {})}
    return _registered_name(cls), dict(params or {}), _source_file(cls)


@contextlib.contextmanager
def _root_with(root: Path, name: str, source: Path | None) -> Iterator[Path]:
    """``root``, or a temporary root with its tasks and plugins and ``source`` as ``defenses/<name>.py``."""
    from bench.defense.loading import defense_path, defenses_dir

    if source is None:
        yield root
        return
    with contextlib.suppress(BenchInputError):
        if defense_path(name, root).resolve() == source.resolve():
            yield root
            return
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        overlay = Path(tmp)
        (overlay / "tasks").symlink_to((root / "tasks").resolve(), target_is_directory=True)
        plugins = overlay / "defenses"
        plugins.mkdir()
        for path in sorted(defenses_dir(root).glob("*.py")):
            if path.stem != name:
                (plugins / path.name).symlink_to(path.resolve())
        (plugins / f"{name}.py").write_bytes(source.read_bytes())
        yield overlay


def _defense_arg(name: str, params: dict[str, Any]) -> str:
    import json

    if not params:
        return name
    return name + ":" + ",".join(f"{k}={json.dumps(v)}" for k, v in params.items())


def evaluate_defense(
    defense: Any,
    suite: str = "quick",
    *,
    params: dict[str, Any] | None = None,
    tasks: Sequence[str] | None = None,
    seeds: int | None = None,
    jobs: int = 1,
    out: str | Path | None = None,
    root: str | Path | None = None,
    verbose: bool = False,
    against: str | Path | None = "committed",
) -> pd.DataFrame:
    """Evaluate one defense configuration on a suite and return its rows of the results table.

    Parameters
    ----------
    defense:
        A plugin name (``"gaussian_noise"``, parameters in ``params``), a registered
        :class:`~bench.defense.plugin.Defense` subclass (parameters in ``params``) or an instance
        of one (its constructor arguments, updated by ``params``).
    suite, tasks, seeds, jobs:
        As ``evaluate``'s ``--suite``, ``--task``, ``--seeds`` and ``--jobs``.
    out:
        The folder of the results store, PNG grids and page (default: a temporary folder, deleted
        afterwards). Jobs already in its store are not run again.
    root:
        The benchmark root (default: ``BENCH_ROOT`` or the repository).
    verbose:
        Print the command's output (its ranked tables) instead of discarding it.
    against:
        What the defense is ranked against. ``"committed"`` (default): the committed entries of
        the suite (``leaderboard/entries/<suite>`` of the root, the undefended run among them),
        as on the page; a folder of entry files; or ``None``: only the rows of this run's store
        (then, without an undefended run, a track's status says there is no reference run).
        An entry with this run's label is left out of the comparison (this run replaces it).

    Returns
    -------
    pandas.DataFrame
        One row per track for this defense configuration, the columns of
        :func:`bench.leaderboard.ranking.entry_table` (privacy and utility mean ± std, per-attack leakage,
        worst attack, ε, seeds, failed jobs, the rank among the compared entries and the
        track's status).

    Raises
    ------
    bench.core.errors.BenchInputError
        Bad input (unknown defense or parameter, unknown task, a class without a source file),
        with the message ``python -m bench evaluate`` prints.
    """
    from bench.cli import build_parser
    from bench.commands import COMMANDS
    from bench.commands.values import parse_defense
    from bench.leaderboard.ranking import entry_table
    from bench.results.store import ResultStore
    from bench.spec.catalog import bench_root

    base = bench_root(root)
    name, params, source = _resolve(defense, params)
    text = _defense_arg(name, params)
    label = parse_defense(text).label
    with contextlib.ExitStack() as stack:
        folder = Path(out) if out is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        run_root = stack.enter_context(_root_with(base, name, source))
        argv = ["evaluate", "--suite", suite, "--defense", text, "--jobs", str(jobs), "--no-progress"]
        argv += ["--out", str(folder), "--site", str(folder / "site"), "--root", str(run_root)]
        argv += [a for t in tasks or [] for a in ("--task", t)]
        argv += ["--seeds", str(seeds)] if seeds is not None else []
        args = build_parser().parse_args(argv)
        sink = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
        with sink:
            code = COMMANDS.get("evaluate")(args)
        if code != 0:
            raise RuntimeError(f"python -m bench {' '.join(argv)} exited with {code}")
        with ResultStore(str(folder / "results.sqlite")) as store:
            results = store.results()
    own = [r for r in results if not tasks or r.task in set(tasks)]
    tracks = {r.task for r in own}
    others = [r for r in _compared_with(against, base, suite, label) if r.task in tracks]
    df = entry_table(own + others)
    return df[df["defense"] == label].reset_index(drop=True)


def _compared_with(against: str | Path | None, base: Path, suite: str, label: str) -> list[Any]:
    """The job results of the entries ``evaluate_defense`` ranks against (``against``), without
    the entry of ``label``; checked as ``leaderboard validate`` checks them."""
    from bench.leaderboard import files

    if against is None:
        return []
    folder = base / "leaderboard" / "entries" / suite if against == "committed" else Path(against)
    if not folder.is_dir():
        raise BenchInputError(
            "against",
            str(against),
            reason=f"no folder of entries at {folder}: pass 'committed', a folder of entry files, or None",
        )
    loaded = files.validate(files.entry_paths(folder))
    return [r for e in loaded if e.defense.label != label for r in files.jobs_of(e)]


def load_leaderboard(entries: str | Path | None = None, suite: str | None = None) -> pd.DataFrame:
    """The committed leaderboard as one table: every track's rows, ranked as on the page.

    Parameters
    ----------
    entries:
        The entries folder (default: ``leaderboard/entries`` of the benchmark root).
    suite:
        Only this suite's entries (default: all).

    Returns
    -------
    pandas.DataFrame
        The rows of :func:`bench.leaderboard.ranking.entry_table` computed from the entries' job summaries
        (after ``leaderboard validate``'s checks), plus ``suite`` and ``verification``.
    """
    from bench.leaderboard import files
    from bench.leaderboard.ranking import entry_table
    from bench.spec.catalog import bench_root

    folder = Path(entries) if entries is not None else bench_root(None) / "leaderboard" / "entries"
    paths = files.entry_paths(folder if suite is None else folder / suite)
    loaded = files.validate(paths)
    results = [r for e in loaded for r in files.jobs_of(e)]
    df = entry_table(results)
    of = {(j.task, e.defense.label): e for e in loaded for j in e.jobs}
    df.insert(0, "suite", [of[(t, d)].suite.name for t, d in zip(df["task"], df["defense"], strict=True)])
    df["verification"] = [
        of[(t, d)].verification.status for t, d in zip(df["task"], df["defense"], strict=True)
    ]
    return df
