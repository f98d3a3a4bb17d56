"""An entry covers its suite or is partial and not ranked (issue 38 item 3): ``leaderboard export``
records what the suite plans for the entry's defense, ``validate`` derives it again, and the
ranking leaves a partial entry out (shown, with what it misses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from bench.api import load_leaderboard
from bench.leaderboard.coverage import expected_jobs, gap
from bench.leaderboard.files import load_entry
from bench.leaderboard.ranking import pareto_front, tables_by_track
from tests.support.bench_root import REPO

ENTRIES = REPO / "leaderboard" / "entries" / "quick"
NOISE = "gaussian_noise__sigma-0.1.json"
TASK = "digits_mlp_fedsgd"


def _shrunk(folder: Path, keep: str) -> Path:
    """The committed gaussian_noise(sigma=0.1) entry cut down to the jobs and tracks of ``keep``."""
    data = json.loads((ENTRIES / NOISE).read_text())
    data["jobs"] = [j for j in data["jobs"] if j["task"] == keep]
    data["tracks"] = [t for t in data["tracks"] if t["task"] == keep]
    data["suite"]["spec_hashes"] = {keep: data["suite"]["spec_hashes"][keep]}
    data["galleries"] = {}  # the images stay with the committed entries
    path = folder / NOISE
    path.write_text(json.dumps(data, indent=2))
    return path


def test_the_committed_entries_cover_their_suite() -> None:
    for path in sorted(ENTRIES.glob("*.json")):
        entry = load_entry(path)
        assert entry.suite.expected, path.name
        assert gap(entry) == "", (path.name, gap(entry))


def test_export_records_the_tasks_the_defense_applies_to() -> None:
    everything = expected_jobs(REPO, "quick", "none", {})
    assert len(everything) == 13 and all(s == [0, 1, 2] for s in everything.values())
    secagg = expected_jobs(REPO, "quick", "secure_aggregation", {})
    assert set(secagg) < set(everything)  # not on PDMM: skipped as evaluate skips it
    assert load_entry(ENTRIES / "secure_aggregation.json").suite.expected == secagg


def test_an_entry_of_one_task_is_shown_partial_and_not_ranked(tmp_path: Path) -> None:
    folder = tmp_path / "quick"
    folder.mkdir()
    none = json.loads((ENTRIES / "none.json").read_text())
    (folder / "none.json").write_text(json.dumps({**none, "galleries": {}}))
    _shrunk(folder, TASK)
    board = load_leaderboard(tmp_path)
    row = board[(board["defense"] == "gaussian_noise(sigma=0.1)") & (board["task"] == TASK)].iloc[0]
    assert row["partial"].startswith("covers 1 of the ") and "missing" in row["partial"]
    assert pd.isna(row["rank"])
    none = board[(board["defense"] == "none") & (board["task"] == TASK)].iloc[0]
    assert none["partial"] == "" and int(none["rank"]) == 1
    for track, table in tables_by_track(board).items():
        assert "gaussian_noise(sigma=0.1)" not in pareto_front(table), track


def test_validate_refuses_a_coverage_record_the_suite_does_not_plan(tmp_path: Path) -> None:
    folder = tmp_path / "quick"
    folder.mkdir()
    path = _shrunk(folder, TASK)
    data = json.loads(path.read_text())
    data["suite"]["expected"] = {TASK: [0, 1, 2]}  # "my defense applies to one task only"
    path.write_text(json.dumps(data, indent=2))
    cmd = ["leaderboard", "validate", "--allow-uncommitted", "--entry", str(path)]
    out = subprocess.run(
        [sys.executable, "-m", "bench", *cmd],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "suite.expected" in out.stderr and "Traceback" not in out.stderr
