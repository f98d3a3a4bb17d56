"""Reconstruction galleries: the worst-case reconstruction of each entry on each image track.

The harness saves, for every successful image attack of a job run with ``--out``, a PNG grid of
the ground truth above the reconstructions (``<out>/reconstructions/<job key>/<threat>_<attack>.png``,
:func:`bench.metrics.image.save_grid`). For one defense configuration and one track (task ×
threat model), the *worst case* is the grid of the attack outcome with the largest leakage over
the configuration's successful jobs and the track's attacks (ties: the lower seed, then the
attack name) among those whose grid exists.

``leaderboard export`` copies that grid next to the entry (``<suite>/images/<defense-id>/<track>.png``)
and records its path, SHA-256, attack and seed in the entry (:class:`GalleryImage`);
``validate`` checks every recorded image exists with that digest; ``build`` and ``evaluate``
copy the images next to the page under content-addressed names and show them per track.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from bench.leaderboard.entry import Entry, GalleryImage, defense_id
from bench.results.record import JobResult

__all__ = [
    "MAX_IMAGE_SIDE",
    "check_images",
    "collect",
    "entry_images",
    "place",
    "png_header_size",
    "png_size",
    "worst_grids",
]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _slug(track: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", track)


def worst_grids(
    results: list[JobResult], out_dir: Path | None
) -> dict[tuple[str, str], tuple[Path, str, int]]:
    """``(track, defense label) -> (grid PNG, attack, seed)`` of the worst case (module docstring)."""
    if out_dir is None:
        return {}
    best: dict[tuple[str, str], tuple[float, int, str, Path]] = {}
    for r in results:
        if r.status != "ok":
            continue
        for a in r.attacks:
            if a.status != "ok" or a.leakage is None:
                continue
            png = Path(out_dir) / "reconstructions" / r.key / f"{a.threat}_{a.attack}.png"
            key = (f"{r.task}/{a.threat}", r.defense)
            rank = (-float(a.leakage), r.seed, a.attack)
            if key in best and rank >= best[key][:3]:
                continue
            if png.is_file():
                best[key] = (*rank, png)
    return {k: (v[3], v[2], v[1]) for k, v in best.items()}


def place(png: Path, entry_dir: Path, label: str, track: str, attack: str, seed: int) -> GalleryImage:
    """Copy the grid ``png`` of ``label`` on ``track`` under ``entry_dir/images/`` and describe it."""
    rel = Path("images") / defense_id(label) / f"{_slug(track)}.png"
    (entry_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(png, entry_dir / rel)
    return GalleryImage(path=rel.as_posix(), sha256=_sha256(png), attack=attack, seed=seed)


def collect(entry: Entry, results: list[JobResult], out_dir: Path | None, entry_dir: Path) -> Entry:
    """``entry`` with its galleries: each worst-case grid copied under ``entry_dir/images/``."""
    galleries = {}
    for (track, label), (png, attack, seed) in sorted(worst_grids(results, out_dir).items()):
        if label == entry.defense.label:
            galleries[track] = place(png, entry_dir, label, track, attack, seed)
    return entry.model_copy(update={"galleries": galleries})


#: the largest gallery image accepted, in pixels per side (a worst-case grid of the paper-scale
#: tasks is a few hundred pixels wide)
MAX_IMAGE_SIDE = 4096
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_header_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from the first 24 bytes of a PNG (its IHDR chunk: nothing is
    decoded, so a decompression bomb costs nothing), or ``None`` when they are not a PNG's."""
    head = data[:24]
    if len(head) < 24 or head[:8] != _PNG_SIGNATURE or head[12:16] != b"IHDR":
        return None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def png_size(path: Path) -> tuple[int, int] | None:
    """:func:`png_header_size` of the file at ``path``."""
    with path.open("rb") as f:
        return png_header_size(f.read(24))


def _linked(path: Path, top: Path) -> bool:
    """Whether ``path`` or a folder between ``top`` and it is a symbolic link."""
    current = path
    while current != top and current != current.parent:
        if current.is_symlink():
            return True
        current = current.parent
    return False


def check_images(entry: Entry, entry_path: Path) -> list[str]:
    """Every gallery image of the entry is a regular PNG file beside it (no symbolic link, which
    ``build`` would follow out of the entries folder), at most :data:`MAX_IMAGE_SIDE` pixels a
    side, with its recorded SHA-256."""
    problems = []
    for track, image in sorted(entry.galleries.items()):
        path = entry_path.parent / image.path
        where = f"galleries[{track}]: image {image.path}"
        if ".." in Path(image.path).parts or Path(image.path).is_absolute():
            problems.append(f"galleries[{track}].path {image.path!r} leaves the entries folder")
        elif _linked(path, entry_path.parent):
            problems.append(f"{where} is a symbolic link (refused: only files of the entries folder)")
        elif not path.is_file():
            problems.append(f"{where} is missing")
        elif (size := png_size(path)) is None:
            problems.append(f"{where} is not a PNG file")
        elif max(size) > MAX_IMAGE_SIDE or min(size) < 1:
            problems.append(f"{where} is {size[0]} × {size[1]} pixels (at most {MAX_IMAGE_SIDE} a side)")
        elif _sha256(path) != image.sha256:
            problems.append(f"{where} does not have the recorded sha256")
    return problems


def entry_images(entries: list[tuple[Entry, Path]]) -> dict[tuple[str, str], tuple[Path, str, int]]:
    """``(track, defense label) -> (image, attack, seed)`` of validated entries and their files."""
    return {
        (track, e.defense.label): (path.parent / image.path, image.attack, image.seed)
        for e, path in entries
        for track, image in e.galleries.items()
    }
