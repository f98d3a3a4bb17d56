"""The cells of a track's table on the page: formatted numbers, their sort values and the row
notes (why an entry is unranked, its last failure)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from bench.leaderboard.ranking import LEAKAGE_PREFIX
from bench.leaderboard.site.text import format_epsilon

__all__ = ["fmt", "rows"]

#: Characters of a failure reason shown under the failed count (the whole reason is its tooltip).
REASON_SHOWN = 80


def _float(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def fmt(x: Any) -> str:
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


def rows(
    df: pd.DataFrame, attacks: list[str], front: set[str], links: Mapping[tuple[str, str], str] | None = None
) -> list[dict[str, Any]]:
    """The template's rows of one track; ``links``: ``(task, defense label) -> entry page``."""
    out = []
    for rec in df.to_dict("records"):
        ranked = not pd.isna(rec.get("rank"))
        note = ""
        if not ranked:
            if bool(rec.get("refused", False)):
                note = "refused: its defense broke the per-node contract"
            elif str(rec.get("partial") or ""):
                note = f"partial entry: {rec['partial']}"
            elif int(rec.get("seeds", 0)) < 1:
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
            text = fmt(value)
            if text == "—" and int(rec.get("seeds", 0)) >= 1:
                text = "failed"
            leakage.append({"v": _data(value), "text": text})
        out.append(
            {
                "link": (links or {}).get((str(rec.get("task", "")), defense), ""),
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
                "epsilon": "not verified"
                if rec.get("epsilon_unverified") and math.isnan(_float(rec.get("epsilon_mean")))
                else format_epsilon(_float(rec.get("epsilon_mean"))),
                "epsilon_v": _data(rec.get("epsilon_mean")),
                "epsilon_sampling": str(rec.get("epsilon_sampling") or "")
                if math.isfinite(_float(rec.get("epsilon_mean")))
                else "",
                "epsilon_delta": "; ".join(
                    t for t in (_delta(rec.get("epsilon_delta")), str(rec.get("epsilon_basis") or "")) if t
                ),
                "epsilon_lb": fmt(rec.get("epsilon_lb")),
                "epsilon_lb_v": _data(rec.get("epsilon_lb")),
                "epsilon_exceeded": bool(rec.get("epsilon_exceeded", False)),
                "leakage": leakage,
                "seeds": int(rec.get("seeds", 0)),
                "failed": int(rec.get("failed", 0)),
                "failure": reason,
                "failure_short": reason
                if len(reason) <= REASON_SHOWN
                else reason[: REASON_SHOWN - 1].rstrip() + "…",
                "runtime": fmt(rec.get("runtime_mean")),
                "runtime_v": _data(rec.get("runtime_mean")),
            }
        )
    return out
