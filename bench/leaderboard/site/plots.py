"""The privacy–utility plot of a track, rendered at build time as inline SVG by matplotlib.

Why matplotlib: it is the well-kept standard for static scientific plots, it writes SVG (vector,
sharp at any zoom, a few KB here) without a browser, a JavaScript runtime or a CDN, so the page
stays self-contained and its Content-Security-Policy keeps forbidding every network load and
every script but the page's own. Interactive libraries (Plotly, Vega) would need a bundled
runtime of megabytes and script permissions the page does not grant.

The SVG is deterministic — ``svg.hashsalt`` is the track's name (ids unique on the page, stable
across builds), no date in its metadata — so two builds of the same entries give the same bytes.
Text is written as ``<text>`` elements (``svg.fonttype: none``), which matplotlib escapes; math
parsing is off, so a ``$`` in a defense label is just a character.

What is drawn, for the rows of one track (:func:`bench.leaderboard.ranking.tables_by_track`): each defense
configuration at (utility mean, privacy score mean), the Pareto front in (privacy, utility) as a
staircase through its members (:func:`bench.leaderboard.ranking.pareto_front`), the undefended baseline
(``none``) as a hollow square with its privacy as a dotted horizontal line, and the task's utility
floor as a dashed vertical line. Only the front and the baseline are labelled (the other points
crowd each other; the table lists them). Entries without both numbers are not drawn.
"""

from __future__ import annotations

import io
import math
import re

import pandas as pd

__all__ = ["inline_svg", "privacy_utility_svg", "svg_settings"]

#: The undefended configuration drawn as the baseline.
BASELINE = "none"
#: Characters of a defense label written next to its point (the table has the whole label).
LABEL_CHARS = 28


def _short(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"


def privacy_utility_svg(df: pd.DataFrame, track: str, front: list[str], metric: str) -> str | None:
    """An inline ``<svg>`` of the track's privacy–utility plane, or ``None`` without two points."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    data = df[["defense", "privacy_mean", "utility_mean"]].copy()
    data = data[data["privacy_mean"].map(math.isfinite) & data["utility_mean"].map(math.isfinite)]
    if len(data) < 2:
        return None
    with rc_context(svg_settings(track)):
        fig = Figure(figsize=(6.0, 3.6), layout="constrained")
        ax = fig.add_subplot()
        # a loss: lower is better; the front's staircase then steps "pre" instead of "post"
        lower = "higher_is_better" in df.columns and len(df) > 0 and not bool(df["higher_is_better"].iloc[0])
        on_front = data[data["defense"].isin(front)].sort_values("utility_mean")
        others = data[~data["defense"].isin(front) & (data["defense"] != BASELINE)]
        ax.scatter(others["utility_mean"], others["privacy_mean"], s=22, color="#7a8591", label="entry")
        ax.scatter(
            on_front["utility_mean"], on_front["privacy_mean"], s=30, color="#0a6b3d", label="Pareto front"
        )
        if len(on_front) > 1:
            where = "pre" if lower else "post"
            ax.step(on_front["utility_mean"], on_front["privacy_mean"], where=where, color="#0a6b3d", lw=1)
        base = data[data["defense"] == BASELINE]
        if len(base):
            ax.scatter(
                base["utility_mean"], base["privacy_mean"], s=46, facecolors="none",
                edgecolors="#b3261e", marker="s", label="undefended",
            )  # fmt: skip
            ax.axhline(float(base["privacy_mean"].iloc[0]), color="#b3261e", lw=0.8, ls=":")
        if "utility_floor" in df.columns and len(df) and math.isfinite(float(df["utility_floor"].iloc[0])):
            ax.axvline(float(df["utility_floor"].iloc[0]), color="#8a5a00", lw=0.8, ls="--", label="floor")
        named = data[data["defense"].isin([*front, BASELINE])]  # the others: the table has them
        for rec in named.to_dict("records"):
            ax.annotate(
                _short(str(rec["defense"])), (rec["utility_mean"], rec["privacy_mean"]),
                xytext=(4, 3), textcoords="offset points", fontsize=6.5, color="#33404d",
            )  # fmt: skip
        ax.set_xlabel(f"utility ({metric}, {'lower' if lower else 'higher'} is better)")
        ax.set_ylabel("privacy score (higher is better)")
        ax.set_ylim(-0.05, 1.08)
        ax.grid(True, lw=0.3, color="#d9dee3")
        ax.legend(loc="best", fontsize=6.5, frameon=False)
        return inline_svg(fig)


def svg_settings(salt: str) -> dict[str, object]:
    """The matplotlib settings of every page figure: deterministic ids salted by ``salt``, text
    as ``<text>`` elements, no math parsing."""
    return {
        "svg.hashsalt": salt,
        "svg.fonttype": "none",
        "text.parse_math": False,
        "font.size": 8,
        "font.family": "sans-serif",
    }


def inline_svg(fig: object) -> str:
    """``fig`` as an ``<svg>`` element to inline in HTML (call inside ``rc_context(svg_settings)``)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})  # type: ignore[attr-defined]
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    # inline in HTML the namespaces are implied: drop their URLs and the RDF metadata block, so
    # the page names no address at all
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    return re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)
