"""Entries carry their provenance: every defense declares its source (a paper of the bibliography,
or "original") and a plain-text summary; the harness reads them in a sandboxed child and checks
the answer; export and validate refuse an undeclared source; a recorded verification names its
check, commit and machine; the entry page shows both."""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest
from pydantic import ValidationError

from bench import cli
from bench.core.errors import BenchInputError
from bench.defense.loading import discover_defenses, load_all_defenses, load_defense_module
from bench.defense.plugin import DEFENSES
from bench.defense.sources import (
    ORIGINAL,
    PAPERS,
    UNDECLARED,
    Paper,
    check_declared,
    source_record,
    summary_problem,
)
from bench.leaderboard import files
from bench.leaderboard.declared import checked_declarations
from bench.leaderboard.entry import DefenseInfo, Entry, Verification
from bench.leaderboard.site.entry_page import source_line, verification_line
from bench.leaderboard.verify import VerifyReport
from bench.results import provenance
from bench.results.store import ResultStore
from tests.support.result_samples import sample_results

REPO = Path(__file__).resolve().parents[2]
SUMMARY = "A test defense that changes nothing. It is aimed at no adversary."


def test_every_committed_defense_declares_a_source_and_a_plain_summary() -> None:
    assert load_all_defenses(REPO) == []
    names = discover_defenses(REPO)
    assert names and set(names) <= set(DEFENSES.names())
    problems = {n: check_declared(DEFENSES.get(n)) for n in names}
    assert {n: p for n, p in problems.items() if p} == {}
    for n in names:
        assert source_record(DEFENSES.get(n).source) not in (UNDECLARED,), n


def test_an_undeclared_defense_is_reported() -> None:
    class Bare:
        pass

    class Bad:
        source = "nobody1999"
        summary = "Uses ``markup``."

    assert len(check_declared(Bare)) == 2  # no source, empty summary
    problems = check_declared(Bad)
    assert "nobody1999" in problems[0] and "reST literal" in problems[1]
    assert source_record("nobody1999") == UNDECLARED and source_record(ORIGINAL) == ORIGINAL
    assert source_record("abadi2016") is PAPERS["abadi2016"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("adds noise to messages.", "capital letter"),
        ("Adds noise to every message", "full stop"),
        ("Adds noise to every message, then", "full stop"),
        ("Adds noise to every message...", "full stop"),
        ("Adds ``sigma`` noise.", "reST literal"),
        ("Adds `sigma` noise.", "backtick"),
        ("Adds **much** noise.", "bold"),
        ("Adds noise :math:`\\sigma`.", "reST role"),
        ("See :class:`Defense` for details.", "reST role"),
        ("Noise | clipping.", "table"),
        ("See section #2.", "heading"),
        ("Two parts:\n- noise.", "list item"),
        ("- Adds noise.", "capital letter"),
    ],
)
def test_summary_problem_catches_markup_and_cut_sentences(text: str, reason: str) -> None:
    why = summary_problem(text)
    assert why is not None and reason in why, why


def test_plain_summaries_pass() -> None:
    assert summary_problem("Adds Gaussian noise to every message. It gives no guarantee.") is None
    assert summary_problem("3 rounds only: training stops early.") is None
    assert summary_problem(None) is not None


def test_every_paper_record_is_complete() -> None:
    assert PAPERS and load_all_defenses(REPO) == []
    for key, paper in PAPERS.items():
        assert isinstance(paper, Paper), key
        assert paper.title.strip() and paper.authors.strip() and paper.venue.strip(), key
        assert isinstance(paper.year, int) and 1950 <= paper.year <= 2030, key
        assert paper.url == "" or paper.url.startswith("https://"), key
        assert key.endswith(str(paper.year)), key
    used = {DEFENSES.get(n).source for n in discover_defenses(REPO)}
    assert set(PAPERS) <= used  # the bibliography lists only papers a committed defense implements


def _defense(**extra: object) -> dict:
    return {"name": "d", "label": "d", "params": {}, "source_hash": "h", **extra}


def test_defense_info_requires_a_source() -> None:
    with pytest.raises(ValidationError, match="source"):
        DefenseInfo.model_validate(_defense())
    with pytest.raises(ValidationError):
        DefenseInfo.model_validate(_defense(source="somebody2020"))
    with pytest.raises(ValidationError):  # a paper record is complete
        DefenseInfo.model_validate(_defense(source={"title": "T", "authors": "A", "venue": "V"}))
    with pytest.raises(ValidationError, match="paper"):  # the old field is gone
        DefenseInfo.model_validate(_defense(source="original", paper="x"))
    ok = DefenseInfo.model_validate(_defense(source=asdict(PAPERS["zhu2019"])))
    assert ok.source.title == "Deep Leakage from Gradients"  # type: ignore[union-attr]


def test_a_verified_status_names_commit_machine_and_check() -> None:
    assert Verification().status == "unverified"
    named = {"commit": "abc", "machine": "x86_64, CPU", "check": files.VERIFY_CHECK}
    for status in ("verified", "mismatch"):
        for missing in named:
            with pytest.raises(ValidationError, match=missing):
                Verification(
                    status=status, tolerance=1e-6, **{k: v for k, v in named.items() if k != missing}
                )
        assert Verification(status=status, tolerance=1e-6, **named).commit == "abc"
    with pytest.raises(ValidationError, match="tolerance"):  # a verified status records its tolerance
        Verification(status="verified", **named)


def test_declared_isolated_reads_the_committed_declarations() -> None:
    load_all_defenses(REPO)
    declared = files.declared_isolated(REPO)
    assert set(declared) == set(discover_defenses(REPO))
    for name, got in declared.items():
        cls = DEFENSES.get(name)
        want = asdict(PAPERS[cls.source]) if cls.source in PAPERS else cls.source
        assert got == {"source": want, "summary": " ".join(cls.summary.split())}, name


def test_a_plugin_cannot_cite_a_paper_the_bibliography_lacks(tmp_path: Path) -> None:
    """A plugin that would add a paper to the bibliography imports ``bench.defense.sources``,
    which the plugin rules refuse before any of its code runs: it does not load (in the child
    that reads the declarations, nor anywhere else), so it declares nothing, and the parent's
    bibliography stays as it was (the parent never imports the plugin)."""
    (tmp_path / "defenses").mkdir()
    (tmp_path / "defenses" / "forger.py").write_text(
        "from bench.defense.sources import PAPERS, Paper\n"
        "from bench.defense.base import DEFENSES, Defense\n"
        "PAPERS['forged2024'] = Paper('Forged', 'Nobody', 'Nowhere', 2024, 'https://example.org')\n"
        "@DEFENSES.register('forger', 'a forged source')\n"
        "class Forger(Defense):\n"
        "    source = 'forged2024'\n"
        "    summary = 'Claims a paper that is not in the bibliography.'\n",
        encoding="utf-8",
    )
    refused = r"forger\.py:1 breaks the plugin rules.*bench\.defense\.sources"
    with pytest.raises(BenchInputError, match=refused):
        load_defense_module("forger", tmp_path)
    assert "forged2024" not in PAPERS and "forger" not in DEFENSES.names()
    assert files.declared_isolated(tmp_path) == {}  # refused in the child too: nothing declared
    assert "forged2024" not in PAPERS and "forger" not in DEFENSES.names()


@pytest.mark.parametrize(
    "answer",
    [
        None,
        [],
        "original",
        {"x": "original"},
        {1: {"source": "original", "summary": SUMMARY}},
        {"x": {"source": {"title": "T", "authors": "A", "venue": "V", "year": 2020, "url": ""}}},
        {"x": {"source": ["abadi2016"], "summary": 3}},
        {"x": {"source": "Abadi2016", "summary": None}},
    ],
)
def test_a_malformed_answer_is_undeclared(answer: object) -> None:
    out = checked_declarations(answer)
    assert all(d == {"source": UNDECLARED, "summary": ""} for d in out.values()), out
    assert set(out) <= {"x"}


def test_a_well_formed_answer_is_resolved_in_the_bibliography() -> None:
    out = checked_declarations(
        {"a": {"source": "abadi2016", "summary": "  Clips \n and adds noise. "}, "b": {"source": "original"}}
    )
    assert out["a"] == {"source": asdict(PAPERS["abadi2016"]), "summary": "Clips and adds noise."}
    assert out["b"] == {"source": ORIGINAL, "summary": ""}
    long = checked_declarations({"a": {"source": "original", "summary": "A" * 10_000}})
    assert len(long["a"]["summary"]) == 2000


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'r.sqlite'}"
    with ResultStore(url) as store:
        for r in sample_results():
            store.add(r)
    return url


def _declared(summary: str = SUMMARY) -> dict[str, dict]:
    return {r.defense_name: {"source": ORIGINAL, "summary": summary} for r in sample_results()}


def test_export_and_validate_refuse_an_undeclared_source(tmp_path, monkeypatch, capsys) -> None:
    clean = {"commit": "c", "dirty": False}
    monkeypatch.setattr(provenance, "git_state", lambda root=None, ignore=None: clean)
    tasks = [a for t in sorted({r.task for r in sample_results()}) for a in ("--task", t)]
    entries = tmp_path / "e"
    argv = ["leaderboard", "export", "--store", _store(tmp_path), "--entries", str(entries), *tasks]
    declarations: dict[str, dict] = {}
    monkeypatch.setattr(files, "declared_isolated", lambda root: declarations)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "defense none: no source declared" in err and "defenses/none.py" in err
    assert not entries.exists()  # nothing written

    declarations.update(_declared("uses ``markup``"))
    assert cli.main(argv) == 2
    assert "defense none: description" in capsys.readouterr().err

    assert cli.main([*argv, "--allow-uncommitted"]) == 0  # a local look
    paths = sorted((entries / "quick").glob("*.json"))
    assert paths and json.loads(paths[0].read_text())["defense"]["source"] == ORIGINAL
    assert cli.main(["leaderboard", "validate", "--entries", str(entries)]) == 2
    assert "description" in capsys.readouterr().err
    assert cli.main(["leaderboard", "validate", "--entries", str(entries), "--allow-uncommitted"]) == 0

    declarations.update(_declared())
    assert cli.main(argv) == 0
    assert cli.main(["leaderboard", "validate", "--entries", str(entries)]) == 0
    data = json.loads(paths[0].read_text())
    data["defense"]["source"] = UNDECLARED
    paths[0].write_text(json.dumps(data))
    assert cli.main(["leaderboard", "validate", "--entries", str(entries)]) == 2
    assert f"defense {data['defense']['name']}: no source declared" in capsys.readouterr().err


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _entry() -> Entry:
    results = sample_results()
    tasks = sorted({r.task for r in results})
    return files.build_entries(results, "quick", tasks, _declared())[0]


def test_record_verification_names_commit_machine_and_check(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    entries = repo / "entries"
    (entries / "quick").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    _git(repo, "add", "code.py")
    _git(repo, "commit", "-q", "-m", "code")
    head = _git(repo, "rev-parse", "HEAD")
    entry = _entry()
    path = entries / "quick" / "e.json"
    path.write_text(files.entry_text(entry))  # the entries folder itself does not count
    report = VerifyReport(entry.defense.label, rerun=[("img", 1)])

    files.record_verification(path, entry, report, repo, entries)
    v = files.load_entry(path).verification
    assert (v.status, v.commit, v.check) == ("verified", head, files.VERIFY_CHECK)
    assert v.machine and v.details == "re-ran img seed 1"

    (repo / "code.py").write_text("x = 2\n")  # uncommitted code
    with pytest.raises(BenchInputError, match="uncommitted changes"):
        files.record_verification(path, entry, report, repo, entries)
    assert files.load_entry(path).verification.commit == head  # left as it was
    files.record_verification(path, entry, report, repo, entries, allow_uncommitted=True)
    assert files.load_entry(path).verification.commit == f"{head}+uncommitted"
    with pytest.raises(BenchInputError, match="not a git checkout"):
        files.verification_commit(tmp_path / "elsewhere", None)


def test_verify_record_refuses_a_dirty_checkout_before_running(tmp_path, monkeypatch, capsys) -> None:
    dirty = {"commit": "c", "dirty": True}
    monkeypatch.setattr(provenance, "git_state", lambda root=None, ignore=None: dirty)
    path = tmp_path / "e.json"
    path.write_text(files.entry_text(_entry()))
    assert cli.main(["leaderboard", "verify", "--entry", str(path), "--record"]) == 2
    assert "uncommitted changes" in capsys.readouterr().err


def test_the_entry_page_shows_source_and_verification() -> None:
    entry = _entry()
    assert source_line(entry) == {"text": "original (new in this entry)", "url": ""}
    entry.defense.source = UNDECLARED
    assert source_line(entry)["text"] == "not declared"
    paper = PAPERS["abadi2016"]
    entry.defense.source = DefenseInfo.model_validate(_defense(source=asdict(paper))).source
    line = source_line(entry)
    assert line["text"] == f"{paper.authors}, “{paper.title}”, ACM CCS, 2016" and line["url"] == paper.url
    entry.defense.source.url = "javascript:alert(1)"  # type: ignore[union-attr]
    assert source_line(entry)["url"] == ""
    assert verification_line(entry)["status"] == "Not verified"
    entry.verification = Verification(
        status="verified",
        commit="0123456789abcdef+uncommitted",
        machine="x86_64, CPU",
        check="c",
        tolerance=1e-6,
    )
    assert verification_line(entry) == {
        "status": "Verified",
        "check": "c",
        "commit": "0123456789ab+uncommitted",
        "machine": "x86_64, CPU",
    }


def test_the_built_page_states_source_and_verification(tmp_path: Path) -> None:
    results = sample_results()
    tasks = sorted({r.task for r in results})
    declared = _declared()
    declared["none"] = {"source": asdict(PAPERS["zhu2019"]), "summary": SUMMARY}
    verified = {
        "status": "verified",
        "commit": "f" * 40,
        "machine": "x86_64, Some CPU",
        "check": "c",
        "tolerance": 0,
    }
    paths = []
    for e in files.build_entries(results, "quick", tasks, declared):
        if e.defense.name == "none":
            e.verification = Verification(**verified)
        paths.append(tmp_path / "entries" / f"{e.defense.name}.json")
        paths[-1].parent.mkdir(exist_ok=True)
        paths[-1].write_text(files.entry_text(e))
    site = tmp_path / "site"
    files.build(paths, site, {})
    page = next(p for p in (site / "entries").rglob("none.html")).read_text()
    assert 'Source: <a href="https://arxiv.org/abs/1906.08935" rel="noopener noreferrer">' in page
    assert "Ligeng Zhu, Zhijian Liu, Song Han, “Deep Leakage from Gradients”, NeurIPS, 2019</a>." in page
    assert f"Verified by <code>c</code> at commit {'f' * 12} on x86_64, Some CPU." in page
    other = next(p for p in (site / "entries").rglob("prune.html")).read_text()
    assert "Source: original (new in this entry)." in other and "Not verified." in other
