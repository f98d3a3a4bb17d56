"""The detail page of one leaderboard entry: its provenance, its per-track numbers and every job.

Everything shown comes from the entry (:class:`bench.leaderboard.entry.Entry`) as text, escaped by
the template; the paper's URL becomes a link only when it is an ``http(s)`` URL with a host
(:func:`safe_url`), so an entry cannot smuggle a ``javascript:`` or ``data:`` URL onto the page.
The page states the defense's source ("Source: authors, “title”, venue, year", "original" or "not
declared", :func:`source_line`) and who verified the entry (:func:`verification_line`).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from bench.leaderboard.entry import defense_id

if TYPE_CHECKING:
    from bench.leaderboard.entry import Entry

__all__ = ["entry_context", "entry_href", "safe_url", "source_line", "verification_line"]


def safe_url(url: str) -> str:
    """``url`` when it is an absolute ``http``/``https`` URL with a host, else ``""``."""
    text = url.strip()
    if any(ord(c) < 33 for c in text):
        return ""
    try:
        parts = urlsplit(text)
    except ValueError:
        return ""
    return text if parts.scheme in ("http", "https") and parts.netloc else ""


def entry_href(entry: Entry) -> str:
    """The entry page's path relative to the index: ``entries/<suite>/<defense-id>.html``."""
    return f"entries/{defense_id(entry.suite.name)}/{defense_id(entry.defense.label)}.html"


def source_line(entry: Entry) -> dict[str, str]:
    """The defense's source as the page states it: ``text`` (after "Source: ") and ``url`` (the
    paper's link when it is a safe ``http(s)`` URL, else ``""``)."""
    source = entry.defense.source
    if source == "original":
        return {"text": "original (new in this entry)", "url": ""}
    if isinstance(source, str):
        return {"text": "not declared", "url": ""}
    text = f"{source.authors}, “{source.title}”, {source.venue}, {source.year}"
    return {"text": text, "url": safe_url(source.url)}


def verification_line(entry: Entry) -> dict[str, str]:
    """Who verified the entry: ``status`` (``"Verified"``, ``"Verification failed"`` or ``"Not
    verified"``) and, once checked, the ``check`` that set it, the ``commit`` (12 characters, and
    ``+uncommitted`` when the checkout had uncommitted changes) and the ``machine``."""
    v = entry.verification
    if v.status == "unverified":
        return {"status": "Not verified", "check": "", "commit": "", "machine": ""}
    sha, plus, rest = v.commit.partition("+")
    return {
        "status": "Verified" if v.status == "verified" else "Verification failed",
        "check": v.check,
        "commit": sha[:12] + plus + rest,
        "machine": v.machine,
    }


def _num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.{digits}f}"


def _pm(mean: float | None, std: float | None) -> str:
    return "—" if mean is None else (_num(mean) if std is None else f"{_num(mean)} ± {_num(std)}")


def entry_context(entry: Entry) -> dict[str, Any]:
    """The template's context for :data:`ENTRY_TEMPLATE` (plain strings and lists)."""
    d = entry.defense
    provenance = [
        ("defense", d.name),
        ("parameters", json.dumps(d.params, sort_keys=True) if d.params else "none"),
        ("description", d.description or "—"),
        ("source hash", d.source_hash or "—"),
        ("suite", entry.suite.name),
        ("bench version", entry.bench.version or "—"),
        (
            "commit",
            (entry.bench.commit or "—") + (" (with uncommitted changes)" if entry.bench.dirty else ""),
        ),
        ("hardware", ", ".join(f"{k}: {v}" for k, v in sorted(entry.hardware.items()) if v) or "—"),
        ("runtime", f"{entry.runtime_s:.1f} s over {len(entry.jobs)} jobs"),
        ("date", entry.date),
        (
            "verification",
            entry.verification.status
            + (f": {entry.verification.details}" if entry.verification.details else ""),
        ),
    ]
    tracks = [
        {
            "track": t.track,
            "privacy": _pm(t.privacy_mean, t.privacy_std),
            "utility": _pm(t.utility_mean, t.utility_std),
            "metric": t.utility_metric,
            "worst": t.worst_attack or "—",
            "leakage": ", ".join(f"{k} {_num(v)}" for k, v in sorted(t.leakage.items())) or "—",
            "epsilon": "—" if t.epsilon_mean is None else f"{t.epsilon_mean:.3g}",
            "epsilon_basis": t.epsilon_basis or "—",
            "seeds": t.seeds,
            "failed": t.failed,
            "claimed": "yes" if t.claimed else "no",
        }
        for t in entry.tracks
    ]
    jobs = [
        {
            "task": j.task,
            "seed": j.seed,
            "status": j.status,
            "utility": _num(j.utility),
            "privacy": ", ".join(f"{k} {_num(v)}" for k, v in sorted(j.privacy.items())) or "—",
            "attacks": [
                f"{a.threat}/{a.attack}: "
                + (_num(a.leakage) if a.status == "ok" else f"failed ({a.reason or ''})")
                for a in j.attacks
            ],
            "runtime": f"{j.runtime_s:.2f}",
            "reason": j.reason or "",
        }
        for j in entry.jobs
    ]
    return {
        "label": d.label,
        "source": source_line(entry),
        "verified": verification_line(entry),
        "provenance": provenance,
        "spec_hashes": sorted(entry.suite.spec_hashes.items()),
        "tracks": tracks,
        "jobs": jobs,
    }
