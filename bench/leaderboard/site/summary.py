"""The page's summary: every entry's rank on every ranked track in one matrix, and its worst case.

"Which defense is best" should not take scrolling through every track. The matrix has one row per
defense label and one column per ranked track (in the page's order: headline tracks first). A
cell holds the entry's rank ``k`` on the track and is coloured against the undefended run
(``none``) of the same track: *better* where ``k`` is smaller than the undefended run's rank (it
hides more, or as much at higher utility), *worse* where larger. ``—`` marks an entry on the
track but unranked (below the floor, a refused job, a partial entry), ``n/c`` one whose defense does not claim
the track's threat model (not counted in the worst case), a blank cell a defense that does not
apply. The last column is the entry's worst case across the ranked tracks it runs on: the
tracks where it is unranked, else the one where its rank is the largest fraction ``k / n`` of
that track's ranked entries. Rows are sorted by that worst case, best first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from bench.results.reference import BASELINE_DEFENSE


@dataclass
class _Row:
    defense: str
    cells: list[dict[str, str]] = field(default_factory=list)
    #: (unranked tracks, worst k/n, track) — smaller is better
    worst: tuple[int, float, str] = (0, 0.0, "")


def summary_matrix(ranked: Sequence[tuple[str, str, pd.DataFrame]]) -> dict[str, Any] | None:
    """The matrix of the ranked tracks ``(track, anchor, rows)`` (the page's order), or ``None``
    without a ranked track. Returns ``{"columns": [{"track", "anchor"}], "rows": [{"defense",
    "cells": [{"text", "cls", "title"}], "worst"}]}``."""
    if not ranked:
        return None
    labels = sorted({str(d) for _, _, df in ranked for d in df["defense"]})
    rows = {d: _Row(d) for d in labels}
    for track, _, df in ranked:
        pairs = zip(df["defense"], df["rank"], strict=True)
        ranks = {str(d): (None if pd.isna(r) else int(r)) for d, r in pairs}
        claims = df["claimed"] if "claimed" in df.columns else pd.Series(True, df.index)
        claimed = dict(zip(df["defense"].astype(str), claims, strict=True))
        n = sum(r is not None for r in ranks.values())
        base = ranks.get(BASELINE_DEFENSE)
        for d, row in rows.items():
            if d not in ranks:
                row.cells.append({"text": "", "cls": "absent", "title": f"{track}: does not apply"})
                continue
            k = ranks[d]
            if k is None and not bool(claimed.get(d, True)):
                why = f"{track}: the defense does not claim this threat model"
                row.cells.append({"text": "n/c", "cls": "unclaimed", "title": why})
                continue
            if k is None:
                row.cells.append({"text": "—", "cls": "unranked", "title": f"{track}: not ranked"})
                row.worst = (row.worst[0] + 1, row.worst[1], row.worst[2] if row.worst[0] else track)
                continue
            cls = "base" if d == BASELINE_DEFENSE else _against(k, base)
            row.cells.append({"text": str(k), "cls": cls, "title": f"{track}: rank {k} of {n}"})
            if not row.worst[0] and k / n > row.worst[1]:
                row.worst = (0, k / n, track)
    ordered = sorted(rows.values(), key=lambda r: (r.worst[0], r.worst[1], r.defense))
    return {
        "columns": [{"track": t, "anchor": a} for t, a, _ in ranked],
        "rows": [{"defense": r.defense, "cells": r.cells, "worst": _worst_text(r, ranked)} for r in ordered],
    }


def _against(rank: int, base: int | None) -> str:
    """The colour class of a rank against the undefended run's rank on the same track."""
    if base is None:
        return "plain"
    return "better" if rank < base else "worse" if rank > base else "plain"


def _worst_text(row: _Row, ranked: Sequence[tuple[str, str, pd.DataFrame]]) -> str:
    unranked, fraction, track = row.worst
    if unranked:
        runs = sum(c["cls"] not in ("absent", "unclaimed") for c in row.cells)
        return f"unranked on {unranked} of {runs}"
    if not track:
        return ""
    n = next(int(df["rank"].notna().sum()) for t, _, df in ranked if t == track)
    return f"{round(fraction * n)} of {n} ({track})"
