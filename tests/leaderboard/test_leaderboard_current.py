"""``leaderboard current`` (bench.leaderboard.current): CI skips re-running the quick suite only
when the jobs this code plans have exactly the committed entries' keys, on their kind of machine."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.leaderboard import files
from bench.leaderboard.current import compare, planned
from tests.support.bench_root import REPO

ENTRIES = REPO / "leaderboard" / "entries"


@pytest.fixture(scope="module")
def quick() -> tuple[dict[str, str], list]:
    """The quick suite's planned jobs and the committed entries (planned once: ~10 s)."""
    return planned(REPO, "quick"), [files.load_entry(p) for p in files.entry_paths(ENTRIES / "quick")]


def test_the_committed_entries_are_this_codes(quick):
    jobs, entries = quick
    here = dict(entries[0].hardware)
    report = compare(jobs, "quick", entries, here)
    assert report.ok, report.lines()
    assert report.jobs == sum(len(e.jobs) for e in entries)


def test_a_job_of_other_code_or_another_machine_is_named(quick):
    jobs, entries = quick
    here = dict(entries[0].hardware)
    first = entries[0]
    job = first.jobs[0]
    changed = first.model_copy(update={"jobs": [job.model_copy(update={"key": "0" * 16}), *first.jobs[1:]]})
    report = compare(jobs, "quick", [changed, *entries[1:]], here)
    name = f"{first.defense.label} {job.task} {job.seed}"
    assert not report.ok
    assert report.missing == [name] and report.extra == [name]
    assert report.hardware == []
    # a new defense's jobs: planned, held by no entry
    report = compare(jobs, "quick", entries[1:], here)
    assert len(report.missing) == len(first.jobs) and not report.extra
    # another CPU type: every entry is named, whatever the keys
    report = compare(jobs, "quick", entries, {**here, "cpu": "Another CPU"})
    assert sorted(report.hardware) == sorted(e.defense.label for e in entries)
    assert any("another kind of machine" in line for line in report.lines())


def test_the_command_exits_1_naming_what_differs(tmp_path):
    """An entries folder with one entry: the other defenses' jobs are planned and held by none."""
    one = sorted(files.entry_paths(ENTRIES))[0]
    folder = tmp_path / "entries" / "quick"
    folder.mkdir(parents=True)
    (folder / one.name).write_text(one.read_text())
    out = subprocess.run(
        [sys.executable, "-m", "bench", "leaderboard", "current", "--entries", str(tmp_path / "entries")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "not current" in out.stdout and "planned, in no entry" in out.stdout
