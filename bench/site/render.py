"""Render the leaderboard page from per-track entry tables.

The page is one self-contained HTML file: inline CSS, a small inline script for sorting (the
only script allowed by the page's Content-Security-Policy, by its SHA-256), and no network
resource of any kind. Every string that comes from results (task, threat, defense and attack
names, metadata) goes through Jinja2's autoescaping; nothing from the results is executed.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import re
import tempfile
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from bench.scoring import LEAKAGE_PREFIX, pareto_front, track_attacks
from bench.site.text import format_epsilon

__all__ = ["render_index", "write_site"]

TEMPLATE = "index.html.j2"
SCRIPT = "sort.js"
DEFAULT_TITLE = "bench leaderboard: privacy in federated and decentralized learning"
#: Characters of a failure reason shown under the failed count (the whole reason is its tooltip).
REASON_SHOWN = 80
#: The threat model whose tracks the page groups under "Active adversaries".
ACTIVE_THREAT = "active"
#: Metadata shown first, in this order; other keys follow alphabetically.
META_ORDER = ("suite", "generated_at", "commit", "store")


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("bench.site", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _script() -> tuple[str, str]:
    env = _environment()
    assert env.loader is not None
    source, _, _ = env.loader.get_source(env, SCRIPT)
    digest = base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii")
    return source, f"sha256-{digest}"


def _float(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def _fmt(x: Any) -> str:
    v = _float(x)
    return "—" if math.isnan(v) else f"{v:.3f}"


def _data(x: Any) -> str:
    """The ``data-v`` sort value: full precision, empty for missing (sorted last)."""
    v = _float(x)
    if math.isinf(v):  # what the page's script parses as ±Infinity
        return "Infinity" if v > 0 else "-Infinity"
    return "" if math.isnan(v) else repr(v)


def _delta(x: Any) -> str:
    v = _float(x)
    return "" if math.isnan(v) else f"at δ = {v:g}"


def _pm(mean: Any, std: Any) -> str:
    m, s = _float(mean), _float(std)
    if math.isnan(m):
        return "—"
    return f"{m:.3f}" if math.isnan(s) else f"{m:.3f} ± {s:.3f}"


def _anchor(track: str, used: set[str]) -> str:
    base = "track-" + (re.sub(r"[^a-z0-9]+", "-", track.lower()).strip("-") or "x")
    anchor, n = base, 1
    while anchor in used:
        n += 1
        anchor = f"{base}-{n}"
    used.add(anchor)
    return anchor


def _first(df: pd.DataFrame, column: str, default: str) -> str:
    if column in df.columns and len(df):
        value = df[column].iloc[0]
        if not (isinstance(value, float) and math.isnan(value)):
            return str(value)
    return default


def _rows(df: pd.DataFrame, attacks: list[str], front: set[str]) -> list[dict[str, Any]]:
    rows = []
    for rec in df.to_dict("records"):
        ranked = not pd.isna(rec.get("rank"))
        note = ""
        if not ranked:
            if int(rec.get("seeds", 0)) < 1:
                note = "no successful seed"
            elif not bool(rec.get("claimed", True)):
                note = "threat not claimed by the defense"
            elif not bool(rec.get("above_floor", True)):
                note = "below utility floor"
            elif math.isnan(_float(rec.get("privacy_mean"))):
                note = "no successful attack"
        defense = str(rec["defense"])
        classes = [c for c, on in (("front", defense in front), ("unranked", not ranked)) if on]
        reason = " ".join(str(rec.get("last_failure") or "").split()) if int(rec.get("failed", 0)) else ""
        leakage = []
        for attack in attacks:
            value = rec.get(LEAKAGE_PREFIX + attack)
            text = _fmt(value)
            if text == "—" and int(rec.get("seeds", 0)) >= 1:
                text = "failed"
            leakage.append({"v": _data(value), "text": text})
        rows.append(
            {
                "rank": str(int(rec["rank"])) if ranked else "—",
                "rank_v": str(int(rec["rank"])) if ranked else "",
                "note": note,
                "defense": defense,
                "front": defense in front,
                "classes": " ".join(classes),
                "privacy": _pm(rec.get("privacy_mean"), rec.get("privacy_std")),
                "privacy_v": _data(rec.get("privacy_mean")),
                "worst_attack": str(rec.get("worst_attack") or "—"),
                "utility": _pm(rec.get("utility_mean"), rec.get("utility_std")),
                "utility_v": _data(rec.get("utility_mean")),
                "epsilon": format_epsilon(_float(rec.get("epsilon_mean"))),
                "epsilon_v": _data(rec.get("epsilon_mean")),
                "epsilon_delta": _delta(rec.get("epsilon_delta")),
                "epsilon_lb": _fmt(rec.get("epsilon_lb")),
                "epsilon_lb_v": _data(rec.get("epsilon_lb")),
                "epsilon_exceeded": bool(rec.get("epsilon_exceeded", False)),
                "leakage": leakage,
                "seeds": int(rec.get("seeds", 0)),
                "failed": int(rec.get("failed", 0)),
                "failure": reason,
                "failure_short": reason
                if len(reason) <= REASON_SHOWN
                else reason[: REASON_SHOWN - 1].rstrip() + "…",
                "runtime": _fmt(rec.get("runtime_mean")),
                "runtime_v": _data(rec.get("runtime_mean")),
            }
        )
    return rows


def _meta_items(meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    keys = [k for k in META_ORDER if k in meta] + sorted(
        k for k in meta if k not in META_ORDER and k != "title"
    )
    return [(str(k).replace("_", " "), str(meta[k])) for k in keys if meta[k] is not None]


def render_index(
    tables: Mapping[str, pd.DataFrame],
    meta: Mapping[str, Any],
    superseded: pd.DataFrame | None = None,
    figures: Mapping[str, Any] | None = None,
) -> str:
    """Render the leaderboard page.

    Parameters
    ----------
    tables:
        ``track -> rows`` as returned by :func:`bench.scoring.tables_by_track`.
    meta:
        Shown in the page header: e.g. ``generated_at``, ``suite``, ``commit``, ``store``
        (any other keys too); ``title`` replaces the page title. Values are shown as
        escaped text.
    superseded:
        Older versions of entries still in the store
        (:func:`bench.scoring.superseded_versions`), listed unranked below the tracks.
    figures:
        ``track -> inline SVG`` shown under the track's table (the graph figures of
        :mod:`bench.site.graph_figure`, built by this package from numbers, already escaped).

    Returns
    -------
    str
        A self-contained HTML document: one section and one sortable table per track.
    """
    used: set[str] = set()
    tracks = []
    # the passive tracks first, then the active ones under their own heading
    ordered = sorted(tables.items(), key=lambda kv: _first(kv[1], "threat", "") == ACTIVE_THREAT)
    for track, df in ordered:
        attacks = track_attacks(df, track)
        front = pareto_front(df) if len(df) else []
        tracks.append(
            {
                "track": str(track),
                "anchor": _anchor(str(track), used),
                "task": _first(df, "task", str(track).split("/", 1)[0]),
                "threat": _first(df, "threat", str(track).split("/", 1)[-1]),
                "utility_metric": _first(df, "utility_metric", "utility") or "utility",
                "floor": _fmt(df["utility_floor"].iloc[0])
                if "utility_floor" in df.columns and len(df)
                else "—",
                "baseline": _fmt(df["baseline_utility"].iloc[0])
                if "baseline_utility" in df.columns and len(df)
                else "—",
                "attacks": attacks,
                "has_lb": "epsilon_lb" in df.columns and bool(df["epsilon_lb"].notna().any()),
                "front": front,
                "rows": _rows(df, attacks, set(front)),
                "figure": (figures or {}).get(str(track)),
                "active": _first(df, "threat", str(track).split("/", 1)[-1]) == ACTIVE_THREAT,
            }
        )
    script, script_hash = _script()
    template = _environment().get_template(TEMPLATE)
    return template.render(
        title=str(meta.get("title") or DEFAULT_TITLE),
        meta_items=_meta_items(meta),
        tracks=tracks,
        superseded=[] if superseded is None else superseded.astype(str).to_dict("records"),
        script=script,
        script_hash=script_hash,
    )


def write_site(
    tables: Mapping[str, pd.DataFrame],
    out_dir: Path,
    meta: Mapping[str, Any],
    superseded: pd.DataFrame | None = None,
    figures: Mapping[str, Any] | None = None,
) -> Path:
    """Write the leaderboard page to ``out_dir/index.html``.

    Parameters
    ----------
    tables, meta, superseded, figures:
        As for :func:`render_index`.
    out_dir:
        Output folder, created when missing. The file is replaced atomically.

    Returns
    -------
    pathlib.Path
        The path of the written ``index.html``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    html = render_index(tables, meta, superseded, figures)
    target = out_dir / "index.html"
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".index.", suffix=".html.tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(html)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
