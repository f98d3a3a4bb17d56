"""``leaderboard gallery``: add the missing reconstruction galleries of committed entries.

``export`` takes an entry's galleries from the PNG grids of the run that filled the store
(:mod:`bench.leaderboard.gallery`); when those files are gone (a store copied without its
``--out`` folder), the entry is still right but shows no pictures. Re-running the whole suite is
no remedy: the ``+later``/``+window`` variants attack rounds drawn afresh, so the numbers would
move. This re-runs, for each image track an entry has no gallery for, only the job of its worst
case, as ``verify`` does (:func:`bench.leaderboard.verify.rerun_jobs`: the job's recorded drawn
rounds and thread count, the same job key), checks that the re-run reproduces every number the
entry states for that job, and only then adds the grid.

The worst case is :func:`bench.leaderboard.gallery.worst_grids`'s: over the entry's successful
jobs and the track's successful attacks, the largest leakage (ties: the lower seed, then the
attack name) among outcomes that have a grid. Which outcomes have a grid is known only once a job
has run, so candidates are tried in that order, one job per seed, until one has a grid (at most
:data:`MAX_TRIES` seeds per track). A track whose candidate job does not reproduce gets no
gallery at all (a picture of another case would not be its worst case). An image track is a
track of a task whose inputs are images (``C × H × W``, as the harness decides when it saves
grids).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from bench.leaderboard import DEFAULT_TOLERANCE
from bench.leaderboard.entry import Entry, JobSummary
from bench.leaderboard.gallery import place
from bench.leaderboard.verify import rerun_jobs

#: seeds tried per track before giving up on a grid
MAX_TRIES = 3


@dataclass
class GalleryReport:
    """What ``gallery`` did for one entry: tracks given a grid, and why others were not."""

    added: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)


def candidates(entry: Entry, track: str) -> list[tuple[float, int, str]]:
    """``(−leakage, seed, attack)`` of the track's successful outcomes, worst case first."""
    task, threat = track.rsplit("/", 1)
    out = []
    for job in entry.jobs:
        if job.task != task or job.status != "ok":
            continue
        for a in job.attacks:
            if a.threat == threat and a.status == "ok" and a.leakage is not None:
                out.append((-float(a.leakage), job.seed, a.attack))
    return sorted(out)


@cache
def is_image_task(root: Path, name: str) -> bool:
    """Whether task ``name``'s inputs are images (``C × H × W``); asked once per task."""
    from bench.data import load_dataset
    from bench.spec.catalog import Catalog

    sim = Catalog(root).task(name).simulation
    return len(load_dataset(sim.dataset, seed=0, **dict(sim.dataset_params)).train.input_shape) == 3


def fill(
    entry: Entry,
    entry_dir: Path,
    root: Path,
    *,
    tracks: list[str] | None = None,
    parallel: int = 1,
    tolerance: float = DEFAULT_TOLERANCE,
) -> tuple[Entry, GalleryReport]:
    """``entry`` with a gallery for each image track among ``tracks`` (default: the entry's
    image tracks without one), from reproduced re-runs (module docstring); the grids are copied
    under ``entry_dir/images/``."""
    report = GalleryReport()
    wanted = [t.track for t in entry.tracks if t.track not in entry.galleries]
    if tracks is not None:
        wanted = [t for t in wanted if t in set(tracks)]
    wanted = [t for t in wanted if is_image_task(root, t.rsplit("/", 1)[0])]
    galleries = dict(entry.galleries)
    jobs = {(j.task, j.seed): j for j in entry.jobs}
    tried: dict[str, list[tuple[float, int, str]]] = {t: candidates(entry, t) for t in wanted}
    done: set[tuple[str, int]] = set()
    bad: set[tuple[str, int]] = set()  # jobs whose re-run did not reproduce the entry
    given_up: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="bench-gallery-") as tmp:
        out_dir = Path(tmp)
        for _ in range(MAX_TRIES):
            todo: dict[tuple[str, int], JobSummary] = {}
            for track in wanted:
                if track in galleries or track in given_up:
                    continue
                task = track.rsplit("/", 1)[0]
                seed = next((s for _, s, _ in tried[track] if (task, s) not in done), None)
                if seed is not None:
                    todo[(task, seed)] = jobs[(task, seed)]
            if not todo:
                break
            rerun, _ = rerun_jobs(
                entry, list(todo.values()), root, tolerance=tolerance, parallel=parallel, out_dir=out_dir
            )
            report.mismatches += rerun.mismatches + rerun.stale
            bad |= rerun.unreproduced
            done |= set(todo)
            for track in wanted:
                task, threat = track.rsplit("/", 1)
                if track in galleries or track in given_up:
                    continue
                for _, seed, attack in tried[track]:
                    if (task, seed) in bad:  # the worst case did not reproduce: no other picture
                        given_up.add(track)
                        break
                    if (task, seed) not in done:
                        break  # the next candidate's job has not run yet
                    png = out_dir / "reconstructions" / jobs[(task, seed)].key / f"{threat}_{attack}.png"
                    if png.is_file():
                        galleries[track] = place(png, entry_dir, entry.defense.label, track, attack, seed)
                        report.added.append(track)
                        break
    report.missing = [t for t in wanted if t not in galleries]
    return entry.model_copy(update={"galleries": dict(sorted(galleries.items()))}), report
