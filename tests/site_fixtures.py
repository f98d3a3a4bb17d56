"""A site built from the committed entries plus a hostile one, shared by the page and browser tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench.catalog import Catalog
from bench.leaderboard import files

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = ROOT / "leaderboard" / "entries"

#: strings an entry controls, each trying to run code on the page
HOSTILE_LABEL = '<img src=x onerror="window.__pwned=1">noise'
HOSTILE_DESCRIPTION = "<script>window.__pwned = 2</script> a defense"
HOSTILE_PAPER = "javascript:window.__pwned=3"
HOSTILE_PARAM = '"><svg onload="window.__pwned=4">'


def hostile_entry_text() -> str:
    """A committed entry whose strings are hostile (its numbers untouched, so it validates)."""
    data = json.loads((ENTRIES / "quick" / "none.json").read_text(encoding="utf-8"))
    data["defense"]["name"] = "hostile"
    data["defense"]["label"] = HOSTILE_LABEL
    data["defense"]["description"] = HOSTILE_DESCRIPTION
    data["defense"]["paper"] = HOSTILE_PAPER
    data["defense"]["params"] = {"x": HOSTILE_PARAM}
    return json.dumps(data)


def build_site(tmp: Path, hostile: bool = True) -> Path:
    """Build the page from the committed entries (and the hostile one) into ``tmp/site``."""
    entries = tmp / "entries"
    shutil.copytree(ENTRIES / "quick", entries / "quick")  # the entries and their gallery images
    if hostile:
        (entries / "quick" / "hostile.json").write_text(hostile_entry_text(), encoding="utf-8")
    catalog = Catalog(ROOT)
    tasks = {n: catalog.task(n) for n in catalog.task_names()}
    files.build(files.entry_paths(entries), tmp / "site", tasks)
    return tmp / "site"
