"""The papers' claims as named checks: every registered check passes at the quick scale (this is
where the tests of those claims live — one implementation, shared with ``python -m bench
reproduce``), every claim of the papers' tables is either checked or listed with a reason, and the
command's report and errors."""

from __future__ import annotations

import json

import pytest

from bench.claims import CLAIMS, UNCHECKED, check, load
from bench.claims.report import markdown, select, to_json
from bench.cli import main

load()

#: the numbered claims of each paper's claims table (the catalogue the benchmark must cover)
TABLES = {
    "pasquini2023": [f"C{i}" for i in range(1, 23)],
    "yu2025": [f"C{i}" for i in range(1, 15)],
    "yu2023": [f"C{i}" for i in range(1, 16)],
}


#: checks that take more than about 10 s at the quick scale
SLOW_CLAIMS = {"xu2021:table1"}


@pytest.mark.claims
@pytest.mark.parametrize(
    "claim_id",
    [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CLAIMS else c for c in sorted(CLAIMS.names())],
)
def test_claim_holds_at_quick_scale(claim_id: str) -> None:
    m = check(claim_id, "quick")
    assert m.passed, f"{claim_id}: {m.text}"


def test_every_numbered_claim_is_checked_or_listed_with_a_reason() -> None:
    for paper, names in TABLES.items():
        for n in names:
            cid = f"{paper}:{n}"
            assert cid in CLAIMS.names() or cid in UNCHECKED, cid
    assert not set(CLAIMS.names()) & set(UNCHECKED)
    assert all(u.reason.strip() for u in UNCHECKED.values())


def test_selection_and_unknown_names_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    claims, skipped = select(["xu2021"])
    assert {c.id for c in claims} == {"xu2021:obs1", "xu2021:obs1-krylov", "xu2021:obs2", "xu2021:table1"}
    assert skipped and all(u.paper == "xu2021" for u in skipped)
    assert main(["reproduce", "--claim", "pasquini2023:C99"]) == 2
    err = capsys.readouterr().err
    assert "'--claim'" in err and "pasquini2023:C7" in err and "Traceback" not in err
    assert main(["reproduce", "--paper", "nobody"]) == 2
    assert "pasquini2023" in capsys.readouterr().err


def test_reproduce_writes_the_report_and_json(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    report, js = tmp_path / "r.md", tmp_path / "r.json"
    code = main(
        [
            "reproduce",
            "--claim",
            "pasquini2023:C2",
            "--claim",
            "yu2025:C4",
            "--report",
            str(report),
            "--json",
            str(js),
            "--no-progress",
            "--results",
            str(tmp_path / "journal.jsonl"),
        ]
    )
    assert code == 0
    text = report.read_text()
    assert "`pasquini2023:C2`" in text and "| pass |" in text
    assert "## Not checked here" in text and "`yu2025:C4`" in text
    data = json.loads(js.read_text())
    assert [r["id"] for r in data["results"]] == ["pasquini2023:C2"] and data["results"][0][
        "status"
    ] == "pass"
    assert [u["id"] for u in data["unchecked"]] == ["yu2025:C4"]
    assert "1 passed, 0 failed" in capsys.readouterr().err  # progress and summary on stderr


def _replace_check(monkeypatch, claim_id: str, fn) -> None:
    import dataclasses

    entry = CLAIMS._entries[claim_id]
    patched = dataclasses.replace(entry, obj=dataclasses.replace(entry.obj, check=fn))
    monkeypatch.setitem(CLAIMS._entries, claim_id, patched)


def test_a_failing_check_fails_the_command(monkeypatch, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.claims.base import Measured

    _replace_check(monkeypatch, "pasquini2023:C2", lambda scale: Measured(0.0, "broken on purpose", False))
    journal = ["--results", str(tmp_path / "j.jsonl")]
    code = main(["reproduce", "--claim", "pasquini2023:C2", "--no-progress", *journal])
    captured = capsys.readouterr()
    assert code == 1 and "pasquini2023:C2: fail: broken on purpose" in captured.err
    assert "| FAIL |" in captured.out  # the report on stdout


def test_reproduce_keeps_each_result_and_resumes_after_an_interrupt(
    monkeypatch, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 38 item 8: each check's result is written as it finishes; a Ctrl-C keeps what
    finished (exit 130) and the same command resumes without running it again."""
    from bench.claims.base import Measured

    calls: list[str] = []

    def ok(name: str):
        def check(scale: str) -> Measured:
            calls.append(name)
            return Measured(1.0, f"{name} ran", True)

        return check

    def interrupt(scale: str) -> Measured:
        raise KeyboardInterrupt

    _replace_check(monkeypatch, "pasquini2023:C2", ok("C2"))
    _replace_check(monkeypatch, "pasquini2023:C3", interrupt)
    argv = ["reproduce", "--claim", "pasquini2023:C2", "--claim", "pasquini2023:C3", "--no-progress"]
    argv += ["--results", str(tmp_path / "j.jsonl")]
    assert main(argv) == 130 and calls == ["C2"]
    assert "run the same command again to resume" in capsys.readouterr().err
    assert len((tmp_path / "j.jsonl").read_text().splitlines()) == 1
    _replace_check(monkeypatch, "pasquini2023:C3", ok("C3"))
    assert main(argv) == 0 and calls == ["C2", "C3"]  # C2 taken from the journal
    assert main([*argv, "--fresh"]) == 0 and calls == ["C2", "C3", "C2", "C3"]


def test_a_crashing_check_is_an_error_row_not_a_crash(monkeypatch) -> None:
    from bench.claims.base import run

    def boom(scale: str):
        raise RuntimeError("kaput")

    _replace_check(monkeypatch, "pasquini2023:C2", boom)
    row = run(CLAIMS.get("pasquini2023:C2"), "quick")
    assert row.status == "error" and "kaput" in row.measured
    md = markdown([row], [], "quick", "abc")
    assert "ERROR" in md and "0 of 1 checks pass" in md
    assert json.loads(to_json([row], [], "quick", "abc"))["results"][0]["status"] == "error"
