"""`python -m bench evaluate`: specs, bad input, failed runs, resume after a kill, the ranking."""

import copy
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import tests.support.bench_root as support
from bench.cli import main
from bench.core.errors import BenchInputError
from bench.evaluation.planning import build_attacks
from bench.results.store import ResultStore
from bench.spec.catalog import Catalog, bench_root
from tests.support.bench_root import REPO, TINY_LOGREG, diverging_task, run_evaluate

LOGREG_TASK = TINY_LOGREG


def make_root(tmp_path: Path, tasks: list[dict], suites: dict) -> Path:
    """A root with ``tasks`` and every committed defense."""
    return support.make_root(tmp_path, tasks, suites, defenses=None)


def evaluate(root: Path, tmp_path: Path, *extra: str) -> int:
    return run_evaluate(root, tmp_path, *extra)


def test_repository_tasks_and_suites_validate():
    catalog = Catalog(bench_root())
    names = catalog.task_names()
    assert {"gaussians_logreg_fedsgd", "digits_mlp_fedsgd", "digits_mlp_dpsgd_torus16"} <= set(names)
    for name in names:
        assert catalog.task(name).threats
    quick = catalog.suite("quick")
    assert set(quick.tasks) <= set(names) and quick.defenses[0].name == "none"
    assert set(catalog.suite("standard").tasks) <= set(names)


def name_of(attack) -> str:
    from bench.attacks import ATTACKS

    return next(n for n, cls in ATTACKS.items() if cls is type(attack))


def test_every_task_attack_builds_applies_to_its_threat_and_records_a_bounded_transcript():
    """Attack names, parameters and threat models of every repository task are valid (what
    ``evaluate`` checks before a sweep), the papers' inversion tasks have their attacks, and no
    attack of a paper-scale task asks for the whole transcript (running totals instead)."""
    catalog = Catalog(bench_root())
    attached = {}
    for name in catalog.task_names():
        task = catalog.task(name)
        attacks = build_attacks(task)
        attached[name] = {a for lst in attacks.values() for a, _, _ in lst}
        for lst in attacks.values():
            for _, _, attack in lst:
                req = attack.requirements()
                assert not req.all_rounds, (name, attack)
                assert len(req.rounds) <= task.simulation.rounds, (name, attack, req.rounds)
                # linear-system attacks stack many rounds of small vectors: Xu & Neglia's decoder
                # (≥ d + 1 rounds of linear models), the gossip knowledge matrix (private values)
                # and the D-GD one (the few models a coalition receives, one sample per node)
                many = (
                    (
                        name_of(attack) == "local_model_reconstruction"
                        and task.simulation.model in ("logreg", "linear")
                    )
                    or (
                        name_of(attack) == "gossip_knowledge_matrix"
                        and task.simulation.protocol == "gossip_averaging"
                    )
                    or (
                        name_of(attack) == "dgd_knowledge_matrix"
                        and task.simulation.partition_params.get("n_per_node") == 1
                    )
                )
                assert many or len(req.rounds) < 10, (name, attack, req.rounds)
    assert {"dlg", "inverting_gradients"} <= attached["digits_mlp_fedsgd"]
    assert {"dlg", "inverting_gradients"} <= attached["digits_mlp_dpsgd_torus16"]
    pdmm = {"pdmm_noisy_gradient_inversion", "pdmm_difference_inversion", "pdmm_sum_inversion"}
    assert attached["digits_mlp_pdmm"] == pdmm | {"pdmm_analytic_first_layer"}
    for ds in ("mnist_mlp", "cifar10_lenet"):
        for n in (1, 2, 4, 8):
            # the MLP family's first-layer attack where one sample makes a gradient
            family = {"first_layer_inversion"} if (ds, n) == ("mnist_mlp", 1) else set()
            assert attached[f"{ds}_fedsgd_n{n}"] == {"dlg_batched", "inverting_gradients"} | family
            dfl = attached[f"{ds}_pdmm_n{n}"]
            assert dfl == (pdmm - {"pdmm_difference_inversion"} if n == 8 else pdmm), (ds, n)
    for model in ("vgg11", "alexnet"):
        assert attached[f"cifar10_{model}_fedsgd_ig"] == {"inverting_gradients"}
        assert "pdmm_difference_inversion" in attached[f"cifar10_{model}_pdmm_ig"]


def test_list_tasks_suites_attacks_defenses(capsys):
    for kind, expected in [
        ("tasks", "digits_mlp_fedsgd"),
        ("suites", "quick"),
        ("attacks", "dlg"),
        ("defenses", "gaussian_noise"),
        ("metrics", "image_ssim"),
    ]:
        assert main(["list", kind]) == 0
        assert expected in capsys.readouterr().out


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda t: t.update(colour="red"), ["unknown field 'colour'", "simulation", "threats"]),
        (lambda t: t["simulation"].update(protocl="fedsgd"), ["unknown field 'simulation.protocl'"]),
        (lambda t: t["simulation"].update(nodes=-2), ["simulation.nodes", "-2"]),
        (lambda t: t.pop("threats"), ["missing field 'threats'"]),
        (lambda t: t.update(public=["graph", "secrets"]), ["public", "secrets", "hyperparameters"]),
    ],
)
def test_task_spec_errors_name_the_field(tmp_path, capsys, mutate, expected):
    task = yaml.safe_load(yaml.safe_dump(LOGREG_TASK))
    mutate(task)
    root = make_root(tmp_path, [task], {"quick": {"tasks": ["tiny_logreg"]}})
    assert evaluate(root, tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    for text in expected:
        assert text in err


def test_malformed_yaml_and_unknown_names(tmp_path, capsys):
    root = make_root(tmp_path, [LOGREG_TASK], {"quick": {"tasks": ["tiny_logreg"]}})
    (root / "tasks" / "broken.yaml").write_text("name: broken\nsimulation: {nodes: [1, 2\n")
    assert evaluate(root, tmp_path, "--task", "broken") == 2
    assert "malformed YAML at line" in capsys.readouterr().err
    cases = [
        (["--task", "nope"], ["'task': 'nope'", "tiny_logreg"]),
        (["--suite", "slow"], ["'suite': 'slow'", "quick"]),
        (["--defense", "magic"], ["'defense': 'magic'", "gaussian_noise", "none"]),
        (["--defense", "gaussian_noise:sigma=-1"], ["defense.sigma"]),
        (["--defense", "gaussian_noise:scale=3"], ["defense.scale", "sigma"]),
        (["--store", "nosuchdialect://x"], ["--store"]),
        (["--store", "/nonexistent/dir/results.sqlite"], ["--store"]),
        (["--jobs", "0"], ["--jobs"]),
    ]
    for extra, expected in cases:
        assert evaluate(root, tmp_path, "--task", "tiny_logreg", *extra) == 2, extra
        err = capsys.readouterr().err
        assert "Traceback" not in err
        for text in expected:
            assert text in err, (extra, err)


def test_unknown_attack_and_wrong_threat_are_input_errors(tmp_path, capsys):
    bad_attack = yaml.safe_load(yaml.safe_dump(LOGREG_TASK))
    bad_attack["threats"][0]["attacks"][0]["name"] = "telepathy"
    root = make_root(tmp_path, [bad_attack], {"quick": {"tasks": ["tiny_logreg"]}})
    assert evaluate(root, tmp_path) == 2
    err = capsys.readouterr().err
    assert "attack.name" in err and "dlg" in err
    wrong = yaml.safe_load(yaml.safe_dump(LOGREG_TASK))
    wrong["threats"][0]["name"] = "fl_user"
    (root / "tasks" / "tiny_logreg.yaml").write_text(yaml.safe_dump(wrong))
    assert evaluate(root, tmp_path) == 2
    assert "applies to threat models" in capsys.readouterr().err


def test_debug_flag_shows_traceback(tmp_path):
    root = make_root(tmp_path, [LOGREG_TASK], {"quick": {"tasks": ["tiny_logreg"]}})
    with pytest.raises(BenchInputError):
        main(["--debug", "evaluate", "--root", str(root), "--task", "nope", "--no-progress"])


def test_diverging_run_is_recorded_as_failed_and_the_sweep_goes_on(tmp_path, capsys):
    root = make_root(
        tmp_path,
        [LOGREG_TASK, diverging_task()],
        {"quick": {"tasks": ["diverging", "tiny_logreg"], "seeds": 1}},
    )
    assert evaluate(root, tmp_path) == 0
    out = capsys.readouterr().out
    results = {r.task: r for r in ResultStore(str(tmp_path / "out" / "results.sqlite")).results()}
    assert results["diverging"].status == "failed" and "diverged" in results["diverging"].reason
    assert results["tiny_logreg"].status == "ok"
    assert results["tiny_logreg"].privacy["server"] == pytest.approx(0.0, abs=1e-6)  # exact inversion
    partition = results["tiny_logreg"].provenance["partition"]  # exported with the run's provenance
    assert partition["name"] == "fixed_size" and partition["sizes"] == [1] * 12
    assert "1 failed" in out
    # a re-run skips both finished jobs
    assert evaluate(root, tmp_path) == 0
    assert "0 jobs run, 2 already in the store" in capsys.readouterr().out


@pytest.mark.slow
def test_killed_sweep_resumes_without_loss_or_duplicates(tmp_path):
    root = make_root(
        tmp_path,
        [LOGREG_TASK],
        {
            "quick": {
                "tasks": ["tiny_logreg"],
                "seeds": 6,
                "defenses": ["none", {"name": "gaussian_noise", "params": {"sigma": 0.5}}],
            }
        },
    )
    db = tmp_path / "out" / "results.sqlite"
    cmd = [
        sys.executable,
        "-m",
        "bench",
        "evaluate",
        "--root",
        str(root),
        "--out",
        str(tmp_path / "out"),
        "--site",
        str(tmp_path / "site"),
        "--no-progress",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def rows() -> int:
        if not db.exists():
            return 0
        try:
            with sqlite3.connect(db, timeout=5) as con:
                return con.execute("select count(*) from jobs").fetchone()[0]
        except sqlite3.OperationalError:
            return 0

    deadline = time.time() + 240
    while rows() < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep finished before it could be killed; make it longer"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = rows()
    assert 2 <= killed_at < 12
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"{12 - killed_at} jobs run, {killed_at} already in the store" in done.stdout
    with sqlite3.connect(db) as con:
        keys = [k for (k,) in con.execute("select key from jobs")]
        per_attack = con.execute("select count(*) from attack_results group by job_id, attack").fetchall()
        jobs_with_attacks = con.execute("select count(distinct job_id) from attack_results").fetchone()[0]
    assert len(keys) == 12 == len(set(keys))
    # each job's attacks once (the round-0 attack, and its variants on later rounds where it ran them)
    assert all(n == 1 for (n,) in per_attack) and jobs_with_attacks == 12


@pytest.mark.slow
def test_ranking_reflects_noise_on_digits_fedsgd(tmp_path, capsys):
    """Acceptance: undefended DLG reaches mean SSIM >= 0.8 at batch size 1; large noise drives
    leakage down and privacy up while utility falls; the ranking shows it."""
    root = make_root(
        tmp_path,
        {},
        {
            "quick": {
                "tasks": ["digits_mlp_fedsgd"],
                "seeds": 1,
                "defenses": ["none", {"name": "gaussian_noise", "params": {"sigma": 1.0}}],
            }
        },
    )
    shutil.copy(REPO / "tasks" / "digits_mlp_fedsgd.yaml", root / "tasks")
    assert evaluate(root, tmp_path) == 0
    results = {r.defense: r for r in ResultStore(str(tmp_path / "out" / "results.sqlite")).results()}
    clean, noisy = results["none"], results["gaussian_noise(sigma=1.0)"]
    ssim = {a.attack: a for a in clean.attacks}["dlg"].metrics["image_ssim.headline"]
    assert ssim >= 0.8
    grid = tmp_path / "out" / "reconstructions" / clean.key / "server_dlg.png"
    assert grid.is_file() and grid.stat().st_size > 100  # reconstructions saved for the page
    assert noisy.privacy["server"] > clean.privacy["server"] + 0.5
    assert noisy.utility < clean.utility
    from bench.leaderboard.ranking import entry_table

    table = entry_table(list(results.values())).set_index("defense")
    if table.loc["gaussian_noise(sigma=1.0)", "above_floor"]:
        assert table.loc["gaussian_noise(sigma=1.0)", "rank"] == 1 and table.loc["none", "rank"] == 2
    else:  # listed, unranked: below the utility floor
        assert table.loc["none", "rank"] == 1
    html = (tmp_path / "site" / "index.html").read_text()
    assert "gaussian_noise(sigma=1.0)" in html and "digits_mlp_fedsgd" in html


def test_skipped_pairs_are_one_line_per_reason(capsys: pytest.CaptureFixture[str]) -> None:
    """80 "skipping" lines used to flood the terminal: one line per reason with its count, each
    pair only with --verbose."""
    from bench.commands.evaluate import _print_skipped

    pairs = [(f"task{i}", "muffliato(sigma=0.1)", "applies to gossip_averaging only") for i in range(12)]
    pairs += [
        ("task0", "scc(tau=0.1)", "applies to dpsgd only"),
        ("task1", "scc(tau=0.1)", "applies to dpsgd only"),
    ]
    _print_skipped(pairs, verbose=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "skipping 14 (task, defense) pairs whose defense does not apply:"
    assert lines[1].split() == ["12", "×", "applies", "to", "gossip_averaging", "only", "(muffliato)"]
    assert lines[2].split()[0] == "2" and len(lines) == 4  # and the hint about --verbose
    _print_skipped(pairs, verbose=True)
    assert len(capsys.readouterr().out.splitlines()) == 1 + 2 + 14


def test_every_marker_of_the_terminal_tables_is_explained() -> None:
    from bench.commands.evaluate import TABLE_LEGEND

    for marker in ("rank — :", "defense * :", "ε — :", "ε lb ! :"):
        assert marker in TABLE_LEGEND


def test_a_suite_runs_the_tasks_whose_data_is_here_and_says_which_it_skipped(tmp_path, capsys, monkeypatch):
    from bench.data import packaged

    monkeypatch.setitem(packaged.PACKAGED, "mnist", ())  # no package to take MNIST from, no network
    on_mnist = copy.deepcopy(LOGREG_TASK)
    on_mnist["name"] = "tiny_on_mnist"
    on_mnist["simulation"].update(dataset="mnist", dataset_params={"root": str(tmp_path / "no_data")})
    root = make_root(
        tmp_path, [LOGREG_TASK, on_mnist], {"quick": {"tasks": ["tiny_on_mnist", "tiny_logreg"], "seeds": 1}}
    )
    assert evaluate(root, tmp_path, "--defense", "none") == 0
    out = capsys.readouterr().out
    assert "skipping 1 task whose dataset is not on this machine:" in out
    assert "mnist: tiny_on_mnist (`python -m bench data get mnist`" in out
    stored = ResultStore(str(tmp_path / "out" / "results.sqlite")).results()
    assert {r.task for r in stored} == {"tiny_logreg"}
    # named explicitly, a task without its data is an input error naming the dataset and the remedies
    assert evaluate(root, tmp_path, "--task", "tiny_on_mnist") == 2
    err = capsys.readouterr().err
    assert "dataset" in err and "mnist" in err and "python -m bench data import mnist PATH" in err
