"""Render the leaderboard page from per-track entry tables, and a page per entry.

The index is one self-contained HTML file: inline CSS, one small inline script for sorting and
filtering (the only script allowed by the page's Content-Security-Policy, by its SHA-256), the
privacy–utility plots and graph figures as inline SVG, and no network resource of any kind.
Entry pages (``entries/<suite>/<defense-id>.html``) hold an entry's provenance and every job and
allow no script at all. Every string that comes from results (task, threat, defense and attack
names, metadata, descriptions) goes through Jinja2's autoescaping; nothing from the results is
executed, and a link from an entry is kept only when it is an ``http(s)`` URL.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import pandas as pd
from markupsafe import Markup, escape

from bench.leaderboard.ranking import pareto_front, track_attacks
from bench.leaderboard.site.cells import fmt, rows
from bench.leaderboard.site.facets import track_facets
from bench.leaderboard.site.summary import summary_matrix
from bench.results.reference import RANKED

if TYPE_CHECKING:
    from bench.leaderboard.entry import Entry

__all__ = ["render_index", "write_site"]

TEMPLATE = "index.html.j2"
ENTRY_TEMPLATE = "entry.html.j2"
SCRIPT = "sort.js"
DEFAULT_TITLE = "bench leaderboard: privacy in federated and decentralized learning"
#: The threat model whose tracks the page groups under "Active adversaries".
ACTIVE_THREAT = "active"
#: Metadata shown first, in this order; other keys follow alphabetically.
META_ORDER = ("suite", "generated_at", "commit")
#: Displayed width (px) a small gallery image is enlarged towards, by an integer factor of at most 4.
GALLERY_WIDTH = 224
#: Where a long name may break: after these characters (never inside a word).
SEPARATORS = re.compile(r"([_(,=/:])")


def wrap_name(text: object) -> Markup:
    """``text`` escaped, with a line-break opportunity (``<wbr>``) after each separator, so a
    long label such as ``subspace_perturbation(variance=100.0)`` wraps at ``_ ( , =`` and not
    one character per line. Entities made by the escaping hold no separator."""
    return Markup(SEPARATORS.sub(r"\1<wbr>", str(escape(str(text)))))


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("bench.leaderboard.site", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["wrapname"] = wrap_name
    return env


def _script() -> tuple[str, str]:
    env = _environment()
    assert env.loader is not None
    source, _, _ = env.loader.get_source(env, SCRIPT)
    digest = base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii")
    return source, f"sha256-{digest}"


def _anchor(track: str, used: set[str]) -> str:
    return _unique("track-" + _slug(track), used)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def _unique(base: str, used: set[str]) -> str:
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


def _meta_items(meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    keys = [k for k in META_ORDER if k in meta] + sorted(
        k for k in meta if k not in META_ORDER and k != "title"
    )
    return [(str(k).replace("_", " "), str(meta[k])) for k in keys if meta[k] is not None]


def _filters(tracks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    defenses = sorted({r["defense"] for t in tracks for r in t["rows"]})
    suites = list(dict.fromkeys(t["suite"] for t in tracks if t["suite"]))
    by_suite = [{"key": "suite", "label": "Suite", "choices": suites}] if len(suites) > 1 else []
    return [
        *by_suite,
        {"key": "protocol", "label": "Protocol", "choices": sorted({t["protocol"] for t in tracks})},
        {"key": "threat", "label": "Threat model", "choices": sorted({t["threat"] for t in tracks})},
        {
            "key": "family",
            "label": "Attack family",
            "choices": sorted({f for t in tracks for f in t["families"]}),
        },
        {"key": "defense", "label": "Defense", "choices": defenses},
    ]


def suite_of(task: str, suites: Mapping[str, Mapping[str, Any]]) -> str:
    """The first of ``suites`` (in page order) whose ``tasks`` hold ``task``; ``""`` for none."""
    return next((name for name, s in suites.items() if task in s.get("tasks", ())), "")


def _track_order(
    track: str, df: pd.DataFrame, order: list[str], suites: Mapping[str, Mapping[str, Any]]
) -> tuple[int, bool, bool, int, str]:
    """Sort key of a track: its suite's place on the page (tracks of no listed suite last),
    then passive before active, ranked before unranked, then the headline order of its task,
    then its name."""
    task = _first(df, "task", track.split("/", 1)[0])
    active = _first(df, "threat", track.split("/", 1)[-1]) == ACTIVE_THREAT
    ranked = _first(df, "track_status", RANKED) == RANKED
    names = list(suites)
    suite = suite_of(task, suites)
    place = names.index(suite) if suite else len(names)
    return (place, active, not ranked, order.index(task) if task in order else len(order), track)


def _plot(df: pd.DataFrame, track: str, front: list[str], metric: str, plots: bool) -> Markup | None:
    if not plots:
        return None
    from bench.leaderboard.site.plots import privacy_utility_svg

    svg = privacy_utility_svg(df, track, front, metric)
    return None if svg is None else Markup(svg)  # generated here from numbers; matplotlib escapes text


def render_index(
    tables: Mapping[str, pd.DataFrame],
    meta: Mapping[str, Any],
    superseded: pd.DataFrame | None = None,
    figures: Mapping[str, Any] | None = None,
    tasks: Mapping[str, Any] | None = None,
    links: Mapping[tuple[str, str], str] | None = None,
    plots: bool = True,
    gallery: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
    membership: Mapping[str, Any] | None = None,
    claims: Mapping[str, Any] | None = None,
    order: Sequence[str] = (),
    suites: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """Render the leaderboard page.

    Parameters
    ----------
    tables:
        ``track -> rows`` as returned by :func:`bench.leaderboard.ranking.tables_by_track`.
    meta:
        Shown in the page header: e.g. ``generated_at``, ``suite``, ``commit`` (any other keys
        too); ``title`` replaces the page title. Values are shown as escaped text.
    superseded:
        Older versions of entries still in the store
        (:func:`bench.leaderboard.ranking.superseded_versions`), listed unranked below the tracks.
    figures:
        ``track -> inline SVG`` shown under the track's table (the graph figures of
        :mod:`bench.leaderboard.site.graph_figure`, built by this package from numbers, already escaped).
    tasks:
        ``task name -> spec``: the protocol of each track, for the filters.
    links:
        ``(task, defense label) -> entry page`` (relative URL) for the defense cells.
    plots:
        Draw each track's privacy–utility plot (:mod:`bench.leaderboard.site.plots`).
    gallery:
        ``(track, defense label) -> {src, attack, seed, width, height}``: each entry's worst-case
        reconstruction on the track, shown in rank order under the plot.
    membership:
        ``track -> inline SVG``: the membership-inference figures
        (:func:`bench.leaderboard.site.mia_figure.membership_figures`), shown under the plot.
    claims:
        A claims report (:func:`bench.claims.report.to_json`), shown as the page's last section.
    order:
        The headline order of the tasks (a suite's ``tasks``): ranked tracks come first in this
        order, then the unranked ones (attack-only, below the reference), then the active ones;
        tasks not listed follow alphabetically within each group.
    suites:
        ``suite name -> {"description", "tasks"}`` in page order: the tracks are shown in a
        section per suite (the first suite listing a track's task), in this order, each headed
        by the suite's name and description, with a suite filter when there are several.

    Returns
    -------
    str
        A self-contained HTML document: a filter bar, then per track a sortable table, its
        privacy–utility plot and its graph figure.
    """
    used: set[str] = set()
    tracks = []
    suites = suites or {}
    facets = track_facets({str(t): track_attacks(df, t) for t, df in tables.items()}, tasks)
    ordered = sorted(tables.items(), key=lambda kv: _track_order(str(kv[0]), kv[1], list(order), suites))
    for track, df in ordered:
        attacks = track_attacks(df, track)
        suite = suite_of(_first(df, "task", str(track).split("/", 1)[0]), suites)
        front = pareto_front(df) if len(df) else []
        metric = _first(df, "utility_metric", "utility") or "utility"
        tracks.append(
            {
                "track": str(track),
                "anchor": _anchor(str(track), used),
                "task": _first(df, "task", str(track).split("/", 1)[0]),
                "threat": _first(df, "threat", str(track).split("/", 1)[-1]),
                "protocol": facets[str(track)]["protocol"],
                "families": facets[str(track)]["families"],
                "utility_metric": metric,
                "floor": fmt(df["utility_floor"].iloc[0])
                if "utility_floor" in df.columns and len(df)
                else "—",
                "baseline": fmt(df["baseline_utility"].iloc[0])
                if "baseline_utility" in df.columns and len(df)
                else "—",
                "reference": fmt(df["utility_reference"].iloc[0])
                if "utility_reference" in df.columns and len(df)
                else "—",
                "status": _first(df, "track_status", RANKED),
                "note": _first(df, "track_note", ""),
                "lower_better": "higher_is_better" in df.columns
                and len(df) > 0
                and not bool(df["higher_is_better"].iloc[0]),
                "attacks": attacks,
                "has_lb": "epsilon_lb" in df.columns and bool(df["epsilon_lb"].notna().any()),
                "front": front,
                "rows": rows(df, attacks, set(front), links),
                "figure": (figures or {}).get(str(track)),
                "membership": (membership or {}).get(str(track)) if plots else None,
                "plot": _plot(df, str(track), front, metric, plots),
                "gallery": [
                    {"defense": str(d), **gallery[(str(track), str(d))]}
                    for d in df["defense"]
                    if (str(track), str(d)) in (gallery or {})
                ],
                "active": _first(df, "threat", str(track).split("/", 1)[-1]) == ACTIVE_THREAT,
                "suite": suite,
                "suite_description": str(suites.get(suite, {}).get("description", "")).strip(),
            }
        )
    _headings(tracks, used)
    script, script_hash = _script()
    template = _environment().get_template(TEMPLATE)
    ranked = [(t["track"], t["anchor"], tables[t["track"]]) for t in tracks if t["status"] == RANKED]
    return template.render(
        title=str(meta.get("title") or DEFAULT_TITLE),
        meta_items=_meta_items(meta),
        summary=summary_matrix(ranked),
        unranked=sum(t["status"] != RANKED for t in tracks),
        tracks=tracks,
        filters=_filters(tracks),
        superseded=[] if superseded is None else superseded.astype(str).to_dict("records"),
        script=script,
        script_hash=script_hash,
        claims=_claims(claims),
    )


def _headings(tracks: list[dict[str, Any]], used: set[str]) -> None:
    """Mark where a suite's section starts (``suite_anchor``) and where the active tracks of a
    section start (``active_anchor``: ``active-adversaries``, suffixed for a second suite)."""
    previous: dict[str, Any] | None = None
    for t in tracks:
        new_suite = bool(t["suite"]) and (previous is None or previous["suite"] != t["suite"])
        t["suite_anchor"] = _unique(f"suite-{_slug(t['suite'])}", used) if new_suite else None
        starts = t["active"] and (previous is None or not previous["active"] or new_suite)
        t["active_anchor"] = _unique("active-adversaries", used) if starts else None
        previous = t


def _claims(report: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The claims section: checked claims by paper, then the unchecked ones (all values escaped)."""
    if not report:
        return None
    results = [r for r in report.get("results", []) if isinstance(r, dict)]
    passed = sum(r.get("status") == "pass" for r in results)
    return {
        "scale": str(report.get("scale", "")),
        "commit": str(report.get("commit", "")),
        "summary": f"{passed} of {len(results)} checks pass",
        "results": results,
        "unchecked": [u for u in report.get("unchecked", []) if isinstance(u, dict)],
    }


def _atomic_write(target: Path, html: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=".html.tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(html)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_site(
    tables: Mapping[str, pd.DataFrame],
    out_dir: Path,
    meta: Mapping[str, Any],
    superseded: pd.DataFrame | None = None,
    figures: Mapping[str, Any] | None = None,
    entries: Sequence[Entry] = (),
    tasks: Mapping[str, Any] | None = None,
    images: Mapping[tuple[str, str], tuple[Path, str, int]] | None = None,
    membership: Mapping[str, Any] | None = None,
    claims: Mapping[str, Any] | None = None,
    order: Sequence[str] = (),
    suites: Mapping[str, Mapping[str, Any]] | None = None,
) -> Path:
    """Write the leaderboard page to ``out_dir/index.html`` and one page per entry.

    Parameters
    ----------
    tables, meta, superseded, figures, tasks:
        As for :func:`render_index`.
    out_dir:
        Output folder, created when missing. Each file is replaced atomically.
    entries:
        The entries behind the tables (:class:`bench.leaderboard.entry.Entry`); each gets
        ``entries/<suite>/<defense-id>.html``, linked from its rows.
    images:
        ``(track, defense label) -> (PNG, attack, seed)``: the worst-case reconstruction grids
        (:mod:`bench.leaderboard.gallery`), copied to ``images/<sha256[:16]>.png`` (one file per
        content) and shown under each track's plot.
    membership, claims, order, suites:
        As for :func:`render_index`.

    Returns
    -------
    pathlib.Path
        The path of the written ``index.html``.
    """
    from bench.leaderboard.site.entry_page import entry_context, entry_href
    from bench.leaderboard.site.pairs import labelled_pairs

    out_dir = Path(out_dir)
    links = {(j.task, e.defense.label): entry_href(e) for e in entries for j in e.jobs}
    template = _environment().get_template(ENTRY_TEMPLATE)
    for entry in entries:
        href = entry_href(entry)
        page = template.render(e=entry_context(entry), index="../" * href.count("/") + "index.html")
        _atomic_write(out_dir / href, page)
    gallery = {}
    for (track, label), (png, attack, seed) in sorted((images or {}).items()):
        data = Path(png).read_bytes()
        laid = labelled_pairs(data)  # one row per victim: truth | reconstruction, labelled
        pairs = None
        if laid is not None:
            data, pairs = laid
        name = f"images/{hashlib.sha256(data).hexdigest()[:16]}.png"
        (out_dir / "images").mkdir(parents=True, exist_ok=True)
        if not (out_dir / name).is_file():
            (out_dir / name).write_bytes(data)
        width, height = _png_size(data)
        scale = max(1, min(4, GALLERY_WIDTH // max(width, 1)))  # small images (8×8 digits) enlarged
        gallery[(track, label)] = {
            "src": name, "attack": attack, "seed": seed, "width": scale * width, "height": scale * height,
            "pairs": pairs,
        }  # fmt: skip
    target = out_dir / "index.html"
    _atomic_write(
        target,
        render_index(
            tables,
            meta,
            superseded,
            figures,
            tasks,
            links,
            gallery=gallery,
            membership=membership,
            claims=claims,
            order=order,
            suites=suites,
        ),
    )
    return target


def _png_size(data: bytes) -> tuple[int, int]:
    """A PNG's width and height, from its header (for the ``<img>`` box before it loads)."""
    from bench.leaderboard.gallery import png_header_size

    size = png_header_size(data)
    if size is None:
        raise ValueError("not a PNG image")
    return size
