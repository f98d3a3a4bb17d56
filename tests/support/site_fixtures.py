"""A site built from the committed entries plus a hostile one, shared by the page and browser tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench.leaderboard import files
from bench.spec.catalog import Catalog

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = ROOT / "leaderboard" / "entries"

#: strings an entry controls, each trying to run code on the page
HOSTILE_LABEL = '<img src=x onerror="window.__pwned=1">noise'
HOSTILE_DESCRIPTION = "<script>window.__pwned = 2</script> a defense"
HOSTILE_PAPER = "javascript:window.__pwned=3"
HOSTILE_PARAM = '"><svg onload="window.__pwned=4">'
HOSTILE_CLAIM = '<img src=x onerror="window.__pwned=5">'
HOSTILE_MACHINE = '<img src=x onerror="window.__pwned=6">'


def claims_report() -> dict:
    """A claims report as ``python -m bench reproduce --json`` writes it, one string hostile."""
    row = {
        "id": "pasquini2023:C2",
        "paper": "pasquini2023",
        "statement": "Chain attenuation " + HOSTILE_CLAIM,
        "expectation": "1/54",
        "measured": "0.0185",
        "value": 1 / 54,
        "scale": "quick",
        "status": "pass",
        "refutes": False,
    }
    refuted = row | {"id": "bellet2024:symmetric", "paper": "bellet2024", "refutes": True}
    failing = row | {"id": "yu2025:C1", "paper": "yu2025", "status": "fail"}
    skipped = {
        "id": "yu2025:C4",
        "paper": "yu2025",
        "statement": "similar convergence",
        "reason": "figure only",
    }
    return {"scale": "quick", "commit": "abc", "results": [row, refuted, failing], "unchecked": [skipped]}


def hostile_entry_text() -> str:
    """A committed entry whose strings are hostile (its numbers untouched, so it validates)."""
    data = json.loads((ENTRIES / "quick" / "none.json").read_text(encoding="utf-8"))
    data["defense"]["name"] = "hostile"
    data["defense"]["label"] = HOSTILE_LABEL
    data["defense"]["description"] = HOSTILE_DESCRIPTION
    data["defense"].pop("paper", None)  # entries exported before sources were declared
    data["defense"]["source"] = {  # a paper record whose strings and link are hostile
        "title": HOSTILE_PAPER,
        "authors": HOSTILE_LABEL,
        "venue": HOSTILE_PARAM,
        "year": 2024,
        "url": HOSTILE_PAPER,
    }
    data["verification"] = {
        "status": "verified",
        "details": HOSTILE_CLAIM,
        "commit": HOSTILE_PARAM,
        "machine": HOSTILE_MACHINE,
        "check": HOSTILE_LABEL,
        "tolerance": 1e-6,
    }
    data["defense"]["params"] = {"x": HOSTILE_PARAM}
    for job in data["jobs"]:  # its own jobs: validate refuses a job that two entries hold
        job["key"] = "hostile-" + job["key"]
    return json.dumps(data)


def build_site(tmp: Path, hostile: bool = True) -> Path:
    """Build the page from the committed entries (and the hostile one) into ``tmp/site``."""
    entries = tmp / "entries"
    shutil.copytree(ENTRIES / "quick", entries / "quick")  # the entries and their gallery images
    if hostile:
        (entries / "quick" / "hostile.json").write_text(hostile_entry_text(), encoding="utf-8")
    catalog = Catalog(ROOT)
    tasks = {n: catalog.task(n) for n in catalog.task_names()}
    claims = tmp / "claims.json"
    claims.write_text(json.dumps(claims_report()), encoding="utf-8")
    files.build(files.entry_paths(entries), tmp / "site", tasks, claims)
    return tmp / "site"
