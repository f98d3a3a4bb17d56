"""The committed leaderboard: entries exported from a store, schema and consistency checks, the
page built from entries alone, and the CLI's exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.core.errors import BenchInputError
from bench.leaderboard import files
from bench.leaderboard.entry import Entry, defense_id, schema_json
from bench.results.store import ResultStore
from tests.support.bench_root import REPO
from tests.support.result_samples import sample_results


def test_entries_round_trip_and_their_numbers_are_recomputed():
    results = sample_results()
    entries = files.build_entries(results, "quick", sorted({r.task for r in results}), {})
    assert {e.defense.label for e in entries} == {r.defense for r in results}
    for e in entries:
        assert files.inconsistencies(e) == []
        again = Entry.model_validate(json.loads(files.entry_text(e)))
        assert again == e
    e = entries[0]
    e.tracks[0].privacy_mean = (e.tracks[0].privacy_mean or 0.0) + 0.01  # edited by hand
    problems = files.inconsistencies(e)
    assert len(problems) == 1 and "privacy_mean stated" in problems[0]


def test_defense_ids_are_file_names():
    assert defense_id("gaussian_noise(sigma=0.1)") == "gaussian_noise__sigma-0.1"
    assert (
        defense_id("dp_sgd(clip_norm=1.0,noise_multiplier=2.0)")
        == "dp_sgd__clip_norm-1.0__noise_multiplier-2.0"
    )


def test_the_committed_schema_is_generated_from_the_models():
    committed = REPO / "leaderboard" / "schema" / "entry.schema.json"
    assert committed.read_text(encoding="utf-8") == schema_json(), "run: python -m bench leaderboard schema"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", "leaderboard", *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_cli_export_validate_build(tmp_path):
    """export → validate → build (twice: the same page); an edited number, an unknown field and
    malformed JSON fail validation with exit code 2 and a message naming the file."""
    store_url = f"sqlite:///{tmp_path / 'r.sqlite'}"
    with ResultStore(store_url) as store:
        for r in sample_results():
            store.add(r)
    entries, site = tmp_path / "entries", tmp_path / "site"
    tasks = [arg for t in sorted({r.task for r in sample_results()}) for arg in ("--task", t)]
    out = run(
        "export",
        "--store",
        store_url,
        "--entries",
        str(entries),
        "--suite",
        "quick",
        "--allow-uncommitted",
        *tasks,
    )
    assert out.returncode == 0, out.stderr
    # the sample defenses but ``none`` are no plugins: no declared source, accepted for a local look
    undeclared = run("validate", "--entries", str(entries))
    assert undeclared.returncode == 2 and "defense prune: no source declared" in undeclared.stderr
    assert "defense none" not in undeclared.stderr  # the plugin's declaration, read on export
    assert run("validate", "--entries", str(entries), "--allow-uncommitted").returncode == 0
    paths = sorted((entries / "quick").glob("*.json"))
    assert run("build", "--entries", str(entries), "--site", str(site)).returncode == 0
    first = (site / "index.html").read_text()
    pages = {p.stem: p.read_text() for p in (site / "entries").rglob("*.html")}
    assert "Source: not declared." in pages["prune"] and "Not verified." in pages["prune"]
    assert "Source: original (new in this entry)." in pages["none"]
    assert run("build", "--entries", str(entries), "--site", str(site)).returncode == 0
    assert (site / "index.html").read_text() == first
    assert str(tmp_path) not in first  # no local paths on the page
    target = paths[0]
    entry = json.loads(target.read_text())
    entry["tracks"][0]["privacy_mean"] = (entry["tracks"][0]["privacy_mean"] or 0) + 0.05
    target.write_text(json.dumps(entry))
    bad = run("validate", "--entries", str(entries))
    assert bad.returncode == 2 and "privacy_mean stated" in bad.stderr and target.name in bad.stderr
    entry["tracks"][0]["privacy_mean"] -= 0.05
    entry["surprise"] = 1
    target.write_text(json.dumps(entry))
    bad = run("validate", "--entries", str(entries))
    assert bad.returncode == 2 and "surprise" in bad.stderr
    target.write_text("{not json")
    bad = run("validate", "--entries", str(entries))
    assert bad.returncode == 2 and "not a readable JSON entry" in bad.stderr and "Traceback" not in bad.stderr


def test_load_entry_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"schema_version": 2}))
    with pytest.raises(BenchInputError, match="schema_version") as info:
        files.load_entry(path)
    assert str(path) in info.value.message


def test_every_defense_of_the_repository_has_a_quick_entry():
    """The committed leaderboard covers every defense plugin on the quick suite (one entry per
    configuration the suite lists), exported from a run of the current code."""
    from bench.defense.loading import discover_defenses
    from bench.spec.catalog import Catalog

    suite = Catalog(REPO).suite("quick")
    assert {d.name for d in suite.defenses} == set(discover_defenses(REPO))
    committed = {p.stem for p in (REPO / "leaderboard" / "entries" / "quick").glob("*.json")}
    assert committed == {defense_id(d.label) for d in suite.defenses}


def test_export_refuses_uncommitted_code_unless_told(tmp_path, monkeypatch, capsys):
    """Committed entries come from a clean commit: ``export`` refuses a checkout with
    uncommitted changes and jobs run from one (exit 2, a message naming what), unless
    ``--allow-uncommitted``, whose entries then say ``bench.dirty: true``."""
    import json

    from bench import cli
    from bench.results import provenance

    store_url = f"sqlite:///{tmp_path / 'r.sqlite'}"
    with ResultStore(store_url) as store:
        for r in sample_results():
            store.add(r)
    tasks = [arg for t in sorted({r.task for r in sample_results()}) for arg in ("--task", t)]
    argv = ["leaderboard", "export", "--store", store_url, "--entries", str(tmp_path / "e"), *tasks]
    state = {"commit": "c0ffee", "dirty": True}
    monkeypatch.setattr(provenance, "git_state", lambda root=None, ignore=None: state)
    declared = {"source": "original", "summary": "A sample defense. It is made up."}
    names = {r.defense_name for r in sample_results()}
    monkeypatch.setattr(files, "declared_isolated", lambda root: dict.fromkeys(names, declared))
    assert cli.main(argv) == 2
    assert "uncommitted changes" in capsys.readouterr().err and not (tmp_path / "e").exists()
    state["dirty"] = False
    assert cli.main(argv) == 0
    with ResultStore(store_url) as store:
        dirty = sample_results()[0]
        dirty.provenance = {**dirty.provenance, "dirty": True}
        dirty.key = "from-a-dirty-checkout"
        store.add(dirty)
    assert cli.main(argv) == 2
    assert f"jobs of {dirty.task} ran from a checkout with uncommitted changes" in capsys.readouterr().err
    assert cli.main([*argv, "--allow-uncommitted"]) == 0
    path = next(p for p in (tmp_path / "e" / "quick").glob("*.json") if dirty.defense.split("(")[0] in p.name)
    assert json.loads(path.read_text())["bench"]["dirty"] is True


def test_the_same_entry_in_two_files_is_refused(tmp_path: Path) -> None:
    """A copy of an entry under another name used to pass validate and double its seeds."""
    committed = REPO / "leaderboard" / "entries" / "quick" / "none.json"
    folder = tmp_path / "quick"
    shutil.copytree(committed.parent / "images" / "none", folder / "images" / "none")
    text = committed.read_text()
    (folder / "none.json").write_text(text)
    assert len(files.validate([folder / "none.json"])) == 1
    (folder / "copy.json").write_text(text)
    with pytest.raises(BenchInputError) as info:
        files.validate(sorted(folder.glob("*.json")))
    message = info.value.message
    assert "the entry 'none' of suite 'quick' is also in" in message
    assert "is also in" in message.split("none.json: job ", 1)[1]  # and each of its jobs


def test_export_refuses_results_whose_defense_code_ran_unsandboxed(tmp_path, monkeypatch, capsys):
    """Issue 39, item 1: a result computed with ``evaluate --unsandboxed`` (a kernel without
    Landlock) says ``sandbox: none``; nothing kept its defense from rewriting the store, so
    ``export`` refuses it (exit 2, naming the job) — with or without ``--allow-uncommitted``."""
    from bench import cli
    from bench.results import provenance

    store_url = f"sqlite:///{tmp_path / 'r.sqlite'}"
    with ResultStore(store_url) as store:
        for r in sample_results():
            r.provenance = {**r.provenance, "sandbox": "landlock"}
            store.add(r)
        loose = sample_results()[0]
        loose.provenance = {**loose.provenance, "sandbox": "none"}
        loose.key = "ran-unsandboxed"
        store.add(loose)
    tasks = [arg for t in sorted({r.task for r in sample_results()}) for arg in ("--task", t)]
    argv = ["leaderboard", "export", "--store", store_url, "--entries", str(tmp_path / "e"), *tasks]
    monkeypatch.setattr(
        provenance, "git_state", lambda root=None, ignore=None: {"commit": "c0ffee", "dirty": False}
    )
    declared = {"source": "original", "summary": "A sample defense. It is made up."}
    names = {r.defense_name for r in sample_results()}
    monkeypatch.setattr(files, "declared_isolated", lambda root: dict.fromkeys(names, declared))
    for extra in ([], ["--allow-uncommitted"]):
        assert cli.main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert "without the sandbox" in err and f"{loose.task}/{loose.defense} seed {loose.seed}" in err
        assert not (tmp_path / "e").exists()
