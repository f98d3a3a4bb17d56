"""``leaderboard verify``: a real entry exported from a real run is reproduced by re-running one
seed per task; a hand-edited number fails (validate's consistency check, or the re-run); an entry
made by other code is reported stale; the seed choice is fixed per entry and spread over seeds."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.core.errors import BenchInputError
from bench.leaderboard import files
from bench.leaderboard.convert import tracks_of
from bench.leaderboard.entry import Entry
from bench.leaderboard.files import entry_text, jobs_of, load_entry
from bench.leaderboard.verify import chosen_jobs, compare_jobs, same_hardware, same_jobs, same_results
from tests.support.bench_root import REPO

TASKS = ("gaussians_logreg_fedsgd", "digits_mlp_fedsgd")
#: the entry's defense: quantization (declared source and summary, a gallery of reconstructions);
#: at this step the standard attacks already leak ≥ 0.99 on digits, so no generic defense-aware
#: variant runs and a job takes about a second
DEFENSE, STEPS = "quantization:delta={}", ("0.01", "0.02")


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def entry_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real entry: quantization on two quick tasks, two seeds, exported from the store."""
    tmp = tmp_path_factory.mktemp("verify")
    tasks = [a for t in TASKS for a in ("--task", t)]
    run = bench(
        "evaluate", "--suite", "quick", *tasks, "--defense", DEFENSE.format(STEPS[0]), "--seeds", "2",
        "--jobs", "2", "--no-progress", "--out", str(tmp / "runs"), "--site", str(tmp / "site"),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = bench(
        "leaderboard", "export", "--store", str(tmp / "runs" / "results.sqlite"),
        "--entries", str(tmp / "entries"), "--allow-uncommitted", *tasks,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    (path,) = (tmp / "entries" / "quick").glob("*.json")
    return path


def copy_to(tmp_path: Path, text: str, source: Path | None = None) -> Path:
    """``text`` as an entry file, beside the gallery images of ``source`` (the exported entry)."""
    target = tmp_path / "entries" / "quick" / "edited.json"
    target.parent.mkdir(parents=True)
    if source is not None and (source.parent / "images").is_dir():
        shutil.copytree(source.parent / "images", target.parent / "images")
    target.write_text(text)
    return target


@pytest.mark.slow  # needs entry_file (a real sweep)
def test_verify_reproduces_an_exported_entry(entry_file: Path) -> None:
    out = bench("leaderboard", "verify", "--entry", str(entry_file))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 jobs re-run and reproduced" in out.stdout and "1 of 1 entries verified" in out.stdout


@pytest.mark.slow  # needs entry_file (a real sweep)
def test_gallery_takes_back_the_worst_case_grids_from_reproduced_reruns(
    entry_file: Path, tmp_path: Path
) -> None:
    """The entry with its galleries lost: ``leaderboard gallery`` re-runs each image track's
    worst-case job (the synthetic Gaussians are no images) and takes back the same grid — same
    attack, seed and bytes; a second run has nothing to add. With the worst case's numbers
    forged (aggregates kept consistent), the re-run does not reproduce them and no grid is
    taken."""
    entry = Entry.model_validate_json(entry_file.read_text())
    want = {t: (g.attack, g.seed, g.sha256) for t, g in entry.galleries.items()}
    assert set(want) == {"digits_mlp_fedsgd/server"}
    bare = entry.model_copy(update={"galleries": {}})
    target = copy_to(tmp_path, entry_text(bare))
    out = bench("leaderboard", "gallery", "--entry", str(target))
    assert out.returncode == 0, out.stdout + out.stderr
    again = load_entry(target)
    assert {t: (g.attack, g.seed, g.sha256) for t, g in again.galleries.items()} == want
    assert bench("leaderboard", "validate", "--entry", str(target)).returncode == 0
    assert "0 galleries added" in bench("leaderboard", "gallery", "--entry", str(target)).stdout

    ((track, (_, seed, _)),) = want.items()
    job = next(j for j in bare.jobs if j.task == track.split("/")[0] and j.seed == seed)
    job.utility = (job.utility or 0.0) + 0.01
    bare.tracks = tracks_of(jobs_of(bare))
    forged = tmp_path / "forged" / "entries" / "quick" / "edited.json"
    forged.parent.mkdir(parents=True)
    forged.write_text(entry_text(bare))
    out = bench("leaderboard", "gallery", "--entry", str(forged))
    assert out.returncode == 1 and "not reproduced, no gallery taken" in out.stdout, out.stdout
    assert f"still no gallery: {track}" in out.stdout and not load_entry(forged).galleries


@pytest.mark.slow  # needs entry_file (a real sweep)
def test_a_hand_edited_number_fails(entry_file: Path, tmp_path: Path) -> None:
    """One per-seed number edited: validate's recomputed aggregates disagree (exit 2). Edited
    together with the aggregates it feeds: the re-run disagrees (exit 1), naming both numbers."""
    entry = Entry.model_validate_json(entry_file.read_text())
    job = chosen_jobs(entry)[0]
    stated = job.utility
    job.utility = (stated or 0.0) + 0.01
    target = copy_to(tmp_path, entry_text(entry), entry_file)
    alone = bench("leaderboard", "verify", "--entry", str(target))
    assert alone.returncode == 2 and "utility_mean stated" in alone.stderr and "Traceback" not in alone.stderr

    entry.tracks = tracks_of(jobs_of(entry))  # a careful forger keeps the aggregates consistent
    target.write_text(entry_text(entry))
    assert bench("leaderboard", "validate", "--entry", str(target)).returncode == 0
    forged = bench("leaderboard", "verify", "--entry", str(target))
    assert forged.returncode == 1, forged.stdout + forged.stderr
    assert f"{job.task} seed {job.seed}: utility stated {job.utility}, re-run {stated}" in forged.stdout
    assert "note:" not in forged.stdout  # made on this kind of machine: no excuse offered


@pytest.mark.slow  # needs entry_file (a real sweep)
def test_a_mismatch_on_another_kind_of_machine_says_so(entry_file: Path, tmp_path: Path) -> None:
    """An entry recorded on another CPU type whose numbers the re-run does not reproduce still
    fails (a stated machine is no licence), with a note naming both machines; one whose numbers
    do reproduce passes."""
    entry = Entry.model_validate_json(entry_file.read_text())
    here = entry.hardware["cpu"]
    entry.hardware = {**entry.hardware, "cpu": "Another CPU"}
    target = copy_to(tmp_path, entry_text(entry), entry_file)
    assert bench("leaderboard", "verify", "--entry", str(target)).returncode == 0

    job = chosen_jobs(entry)[0]
    job.utility = (job.utility or 0.0) + 0.01
    entry.tracks = tracks_of(jobs_of(entry))
    target.write_text(entry_text(entry))
    out = bench("leaderboard", "verify", "--entry", str(target))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "MISMATCH" in out.stdout and "note: the entry was made on another kind of machine" in out.stdout
    assert "cpu Another CPU" in out.stdout and f"cpu {here}" in out.stdout


@pytest.mark.slow  # needs entry_file (a real sweep)
def test_an_entry_of_other_code_is_stale(entry_file: Path, tmp_path: Path) -> None:
    entry = Entry.model_validate_json(entry_file.read_text())
    for job in entry.jobs:
        job.key = "0" * 64
    target = copy_to(tmp_path, entry_text(entry), entry_file)
    out = bench("leaderboard", "verify", "--entry", str(target))
    assert out.returncode == 1 and "STALE" in out.stdout and "export the entry again" in out.stdout


@pytest.mark.slow  # needs entry_file (a real sweep)
def test_record_writes_the_status(entry_file: Path, tmp_path: Path) -> None:
    """``--record`` names the check, the commit it ran (``+uncommitted`` from a checkout with
    uncommitted changes, which only ``--allow-uncommitted`` accepts) and the machine."""
    from bench.results.provenance import git_state

    target = copy_to(tmp_path, entry_file.read_text(), entry_file)
    args = ("leaderboard", "verify", "--entry", str(target), "--record", "--allow-uncommitted")
    out = bench(*args)
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(target.read_text())
    v = data["verification"]
    assert v["status"] == "verified" and v["check"] == "python -m bench leaderboard verify"
    assert all(t in v["details"] for t in TASKS)
    state = git_state(REPO, ignore=REPO / "leaderboard" / "entries")
    assert v["commit"] == state["commit"] + ("+uncommitted" if state["dirty"] is not False else "")
    assert v["machine"].startswith(data["hardware"]["machine"]) and data["hardware"]["cpu"] in v["machine"]
    assert bench("leaderboard", "validate", "--entry", str(target)).returncode == 0


@pytest.mark.slow  # needs entry_file (a real sweep)
def test_seed_choice_is_fixed_and_spread(entry_file: Path) -> None:
    entry = Entry.model_validate_json(entry_file.read_text())
    first = [(j.task, j.seed) for j in chosen_jobs(entry)]
    assert first == [(j.task, j.seed) for j in chosen_jobs(entry)]
    assert sorted(t for t, _ in first) == sorted(TASKS)  # one per task
    assert len(chosen_jobs(entry, all_seeds=True)) == len(entry.jobs)
    seeds = set()
    for k in range(40):  # over many defense labels, every seed index is chosen
        entry.defense.label = f"d{k}"
        seeds |= {j.seed for j in chosen_jobs(entry)}
    assert seeds == {0, 1}


@pytest.mark.slow  # needs entry_file (a real sweep)
def test_compare_jobs_names_every_differing_number(entry_file: Path) -> None:
    entry = Entry.model_validate_json(entry_file.read_text())
    job = entry.jobs[0]
    assert compare_jobs(job, job) == []
    other = job.model_copy(deep=True)
    other.attacks[0].leakage = (other.attacks[0].leakage or 0.0) + 1e-3
    threat = next(iter(other.privacy))
    other.privacy[threat] += 1e-9  # within the tolerance
    (line,) = compare_jobs(job, other)
    assert f"leakage[{job.attacks[0].threat}/{job.attacks[0].attack}]" in line
    assert compare_jobs(job, other, tolerance=1e-2) == []
    other.status = "failed"
    assert any("status stated ok, re-run failed" in x for x in compare_jobs(job, other))
    # the undefended job's central reference and the task's ranking rule are re-derived too
    stated = job.model_copy(update={"utility_reference": 0.9, "utility_rule": {"reference": "central"}})
    again = stated.model_copy(update={"utility_reference": 0.8})
    assert [x for x in compare_jobs(stated, again) if "utility_reference stated 0.9, re-run 0.8" in x]
    again = stated.model_copy(update={"utility_rule": {"reference": None}})
    assert [x for x in compare_jobs(stated, again) if "utility rule stated" in x]


def test_bad_options_are_input_errors(tmp_path: Path) -> None:
    out = bench("leaderboard", "verify", "--entry", str(tmp_path / "missing.json"))
    assert out.returncode == 2 and "--entry" in out.stderr and "Traceback" not in out.stderr
    out = bench("leaderboard", "verify", "--changed-since", "no-such-ref-xyz")
    assert out.returncode == 2 and "--changed-since" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow  # needs entry_file (a real sweep)
def test_export_of_a_rerun_changes_no_file(entry_file: Path, tmp_path: Path) -> None:
    """The suite re-run from scratch (a new store) and exported over the entry: the file is left
    byte for byte (its results reproduced); an entry of other results is rewritten."""
    entries = tmp_path / "entries"
    copy = entries / "quick" / entry_file.name
    copy.parent.mkdir(parents=True)
    copy.write_bytes(entry_file.read_bytes())
    tasks = [a for t in TASKS for a in ("--task", t)]
    for step, expect in ((STEPS[0], "0 entries written"), (STEPS[1], "1 entries written")):
        runs = tmp_path / f"runs{step}"
        run = bench(
            "evaluate", "--suite", "quick", *tasks, "--defense", DEFENSE.format(step),
            "--seeds", "2", "--jobs", "2", "--no-progress", "--out", str(runs), "--site", str(runs / "site"),
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        store = str(runs / "results.sqlite")
        out = bench(
            "leaderboard",
            "export",
            "--store",
            store,
            "--entries",
            str(entries),
            "--allow-uncommitted",
            *tasks,
        )
        assert out.returncode == 0 and expect in out.stdout, out.stdout + out.stderr
    assert copy.read_bytes() == entry_file.read_bytes()
    assert len(list((entries / "quick").glob("*.json"))) == 2


def rerun(entry: Entry, cpu: str | None = None, shift: float = 0.0) -> list:
    """``entry``'s jobs as a re-run would store them (the same job keys: the same code) on the
    entry's machine, or on one with CPU ``cpu``; the first job's utility moved by ``shift``."""
    hw = entry.hardware
    results = jobs_of(entry)
    for r in results:
        r.provenance.update(
            cpu=cpu or hw["cpu"],
            isa=hw["isa"],
            torch_build=hw["torch"],
            device="cpu",
            code={"defense": entry.defense.source_hash},
            spec_hash=entry.suite.spec_hashes[r.task],
        )
    results[0].utility = (results[0].utility or 0.0) + shift
    return results


@pytest.mark.slow  # needs entry_file (a real sweep)
def test_a_rerun_on_another_kind_of_machine_keeps_the_entry(entry_file: Path, tmp_path: Path) -> None:
    """Export over an entry of the same jobs: numbers that differ on the machine that made the
    entry rewrite it (they should have reproduced); the same difference from another CPU type
    does not (rounding differs there); a change of job keys (code) always does."""
    entries = tmp_path / "entries"
    path = entries / "quick" / entry_file.name
    path.parent.mkdir(parents=True)
    path.write_bytes(entry_file.read_bytes())
    shutil.copytree(entry_file.parent / "images", path.parent / "images")
    entry = load_entry(entry_file)
    assert {"cpu", "isa", "torch"} <= set(entry.hardware)  # recorded by the run
    tasks = sorted({j.task for j in entry.jobs})
    source = entry.defense.source
    source = source if isinstance(source, str) else source.model_dump()
    declared = {entry.defense.name: {"source": source, "summary": entry.defense.description}}
    assert source != "undeclared" and entry.defense.description  # quantization declares both

    def export(results: list) -> list[Path]:
        return files.export(
            results, entry.suite.name, tasks, entries, declared, expected=lambda e: entry.suite.expected
        )

    assert export(rerun(entry)) == []  # reproduced: left as it is
    assert export(rerun(entry, "Another CPU", shift=0.25)) == []  # rounding elsewhere: left
    assert path.read_bytes() == entry_file.read_bytes()
    assert len(export(rerun(entry, shift=0.25))) == 1  # not reproduced where it was made: rewritten
    changed = rerun(entry, "Another CPU")
    changed[0].key = "0" * len(changed[0].key)
    assert len(export(changed)) == 1  # other code: rewritten wherever it ran
    assert load_entry(path).hardware["cpu"] == "Another CPU"


@pytest.mark.slow  # needs entry_file (a real sweep)
def test_hardware_is_compared_on_the_fields_both_entries_record(entry_file: Path) -> None:
    entry = load_entry(entry_file)
    known = {"device": "cpu", "cpu": "A", "isa": "AVX2", "torch": "2.14.1"}
    mine = entry.model_copy(update={"hardware": known})
    for field, value in (("cpu", "B"), ("isa", "AVX512"), ("torch", "2.13.0")):
        other = mine.model_copy(update={"hardware": {**mine.hardware, field: value}})
        assert not same_hardware(mine, other) and same_jobs(mine, other)
    legacy = mine.model_copy(update={"hardware": {"device": "cpu", "machine": "x86_64"}})
    assert same_hardware(legacy, mine) and same_results(legacy, mine)  # nothing to tell them apart


def test_an_entry_not_committed_is_among_the_changed_ones(tmp_path: Path) -> None:
    """`verify --changed-since REF` (CI on a pull request) used to pass over an entry file git did
    not track: it is verified like a changed one."""

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    folder = tmp_path / "leaderboard" / "entries" / "quick"
    folder.mkdir(parents=True)
    (folder / "old.json").write_text("{}")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    (folder / "edited.json").write_text("{}")
    git("add", "leaderboard/entries/quick/edited.json")
    (folder / "untracked.json").write_text("{}")
    found = files.changed_entries(tmp_path, tmp_path / "leaderboard" / "entries", "HEAD")
    assert [p.name for p in found] == ["edited.json", "untracked.json"]


def test_changed_since_takes_a_revision_never_an_option(tmp_path: Path) -> None:
    """`--changed-since=--output=FILE` used to reach git as an option (and truncate FILE)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    for ref in (f"--output={victim}", "-p", "no-such-revision"):
        with pytest.raises(BenchInputError, match="--changed-since"):
            files.changed_entries(REPO, REPO / "leaderboard" / "entries", ref)
    assert victim.read_text() == "keep me"
    assert isinstance(files.changed_entries(REPO, REPO / "leaderboard" / "entries", "HEAD"), list)


def test_a_recorded_verification_carries_a_bounded_tolerance() -> None:
    """Issue 39 item 7: ``verified`` only with the tolerance it was checked at, at most
    MAX_RECORDED_TOLERANCE; ``verify --record --tolerance 1e9`` (or ``inf``) is refused before
    any job runs."""
    from bench.leaderboard import MAX_RECORDED_TOLERANCE
    from bench.leaderboard.entry import Verification

    named = {
        "status": "verified",
        "commit": "abc",
        "machine": "x86_64",
        "check": "python -m bench leaderboard verify",
    }
    assert Verification(**named, tolerance=1e-6).tolerance == 1e-6
    for bad in (None, 1e9, math.inf, -1.0, 10 * MAX_RECORDED_TOLERANCE):
        with pytest.raises(ValueError, match="tolerance"):
            Verification(**named, tolerance=bad)
    entry = REPO / "leaderboard" / "entries" / "quick" / "none.json"
    for tol in ("1e9", "inf"):
        out = bench("leaderboard", "verify", "--entry", str(entry), "--record", "--tolerance", tol)
        assert out.returncode == 2 and "--tolerance" in out.stderr and "Traceback" not in out.stderr, tol


def test_gallery_names_the_tracks_it_takes() -> None:
    out = bench("leaderboard", "gallery", "--suite", "real", "--task", "mnist_mlp_fedsgd_cpu")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "'--task': 'mnist_mlp_fedsgd_cpu'" in out.stderr and "mnist_mlp_fedsgd_cpu/server" in out.stderr
