"""Bad input and faults against ``python -m bench``: every one is a clear error before anything
runs (exit code 2; 130 for Ctrl-C), with no traceback, naming the field and the value, and the
results store holds exactly the rows it should (none for bad input; every finished job and no
other after a fault).

Each case mutates a small valid benchmark root (one tiny task, a suite, the repository's
defenses) or the command line; most run with ``--jobs 1`` and ``--jobs 2``. A few run the real
command in a subprocess, where a traceback would be printed.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from bench.cli import main
from tests.support import bench_root
from tests.support.bench_root import REPO, evaluate_argv, run_evaluate, tiny_task

TASK = tiny_task(n_test=50, utility={"metric": "val_acc", "floor": 0.5})

GOSSIP_TASK = {
    **TASK,
    "name": "tiny_gossip",
    "simulation": {
        **TASK["simulation"],
        "protocol": "dpsgd",
        "topology": "ring",
        "protocol_params": {"lr": 0.5},
    },
    "threats": [
        {
            "name": "neighbors",
            "params": {"coalition": [0]},
            "attacks": [{"name": "dlg", "params": {"iterations": 2}}],
        }
    ],
}


def make_root(tmp_path: Path, tasks: list[dict] | None = None, suites: dict | None = None) -> Path:
    """A root with ``tasks`` (default: the tiny task) and every committed defense."""
    return bench_root.make_root(tmp_path, tasks or [TASK], suites, defenses=None)


def evaluate(tmp_path: Path, root: Path, *extra: str, jobs: int = 1) -> int:
    return run_evaluate(root, tmp_path, "--jobs", str(jobs), *extra)


def stored_rows(tmp_path: Path) -> int:
    db = tmp_path / "out" / "results.sqlite"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as con:
        tables = {n for (n,) in con.execute("select name from sqlite_master where type='table'")}
        return con.execute("select count(*) from jobs").fetchone()[0] if "jobs" in tables else 0


def task_with(**changes: Callable[[dict], None]) -> dict:
    task = yaml.safe_load(yaml.safe_dump(TASK))
    for change in changes.values():
        change(task)
    return task


# ------------------------------------------------------------------ bad task files and suites
#: (id, how to break the task, texts the message must contain)
TASK_CASES: list[tuple[str, Callable[[dict], None], list[str]]] = [
    ("unknown field", lambda t: t.update(colour="red"), ["colour", "red"]),
    ("unknown nested field", lambda t: t["simulation"].update(protocl="fedsgd"), ["simulation.protocl"]),
    ("negative nodes", lambda t: t["simulation"].update(nodes=-2), ["simulation.nodes", "-2"]),
    ("missing threats", lambda t: t.pop("threats"), ["threats"]),
    ("no threats", lambda t: t.update(threats=[]), ["threats", "at least one threat"]),
    ("unknown knowledge item", lambda t: t.update(public=["graph", "secrets"]), ["public", "secrets"]),
    (
        "unknown protocol",
        lambda t: t["simulation"].update(protocol="fedsgdd"),
        ["protocol", "fedsgdd", "fedsgd"],
    ),
    (
        "unknown model",
        lambda t: t["simulation"].update(model="resnet9000"),
        ["model", "resnet9000", "logreg"],
    ),
    ("unknown dataset", lambda t: t["simulation"].update(dataset="imagenet9"), ["dataset", "imagenet9"]),
    (
        "unknown partition",
        lambda t: t["simulation"].update(partition="random"),
        ["partition", "random", "iid"],
    ),
    (
        "unknown protocol parameter",
        lambda t: t["simulation"]["protocol_params"].update(lrr=0.1),
        ["lrr", "lr"],
    ),
    (
        "negative learning rate",
        lambda t: t["simulation"]["protocol_params"].update(lr=-1),
        ["protocol.lr", "-1"],
    ),
    (
        "boolean learning rate",
        lambda t: t["simulation"]["protocol_params"].update(lr=True),
        ["protocol.lr", "True"],
    ),
    ("unknown model parameter", lambda t: t["simulation"].update(model_params={"width": 3}), ["width"]),
    (
        "impossible partition",
        lambda t: t["simulation"]["partition_params"].update(n_per_node=5),
        ["n_per_node"],
    ),
    (
        "unknown utility metric",
        lambda t: t["utility"].update(metric="f1"),
        ["utility.metric", "f1", "val_acc"],
    ),
    ("impossible floor", lambda t: t["utility"].update(floor=1.5), ["utility.floor", "1.5"]),
    (
        "infinite learning rate",
        lambda t: t["simulation"]["protocol_params"].update(lr=float("inf")),
        ["lr", "not a finite"],
    ),
    (
        "attack on a round that never happens",
        lambda t: t["threats"][0]["attacks"][0]["params"].update(rounds=[9]),
        ["attacks", "9", "4 rounds"],
    ),
    (
        "unknown attack",
        lambda t: t["threats"][0]["attacks"][0].update(name="telepathy"),
        ["attack", "telepathy", "dlg"],
    ),
    (
        "attack of another threat model",
        lambda t: t["threats"][0].update(name="fl_user"),
        ["applies to threat models"],
    ),
    (
        "unknown attack parameter",
        lambda t: t["threats"][0]["attacks"][0]["params"].update(steps=3),
        ["steps"],
    ),
    (
        "threat without attacks",
        lambda t: t["threats"][0].update(attacks=[]),
        ["attacks", "at least one attack"],
    ),
    ("unknown threat model", lambda t: t["threats"][0].update(name="aliens"), ["threat", "aliens", "server"]),
]


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize(("case", "mutate", "expected"), TASK_CASES, ids=[c[0] for c in TASK_CASES])
def test_a_bad_task_is_one_clear_error_before_anything_runs(tmp_path, capsys, case, mutate, expected, jobs):
    task = task_with(m=mutate)
    root = make_root(tmp_path, [task])
    assert evaluate(tmp_path, root, jobs=jobs) == 2, case
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    for text in expected:
        assert text in err, (case, err)
    assert stored_rows(tmp_path) == 0


GOSSIP_CASES: list[tuple[str, Callable[[dict], None], list[str]]] = [
    ("unknown topology", lambda t: t["simulation"].update(topology="tours"), ["topology", "tours", "torus"]),
    (
        "unknown mixing",
        lambda t: t["simulation"].update(mixing="foo"),
        ["mixing", "foo", "metropolis_hastings"],
    ),
    (
        "coalition naming a missing node",
        lambda t: t["threats"][0]["params"].update(coalition=[42]),
        ["coalition", "42"],
    ),
    (
        "repeated coalition node",
        lambda t: t["threats"][0]["params"].update(coalition=[1, 1]),
        ["coalition", "repeated"],
    ),
    (
        "impossible graph",
        lambda t: t["simulation"].update(topology="random_regular", topology_params={"degree": 9}),
        ["degree"],
    ),
]


@pytest.mark.parametrize(("case", "mutate", "expected"), GOSSIP_CASES, ids=[c[0] for c in GOSSIP_CASES])
def test_a_bad_graph_or_coalition_is_one_clear_error(tmp_path, capsys, case, mutate, expected):
    task = yaml.safe_load(yaml.safe_dump(GOSSIP_TASK))
    mutate(task)
    root = make_root(tmp_path, [task])
    assert evaluate(tmp_path, root) == 2, case
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, (case, err)
    assert stored_rows(tmp_path) == 0


def test_every_problem_is_reported_not_only_the_first(tmp_path, capsys):
    bad_metric = task_with(m=lambda t: (t.update(name="a"), t["utility"].update(metric="f1")))
    bad_attack = task_with(
        m=lambda t: (t.update(name="b"), t["threats"][0]["attacks"][0].update(name="telepathy"))
    )
    root = make_root(tmp_path, [bad_metric, bad_attack])
    assert evaluate(tmp_path, root, "--defense", "gaussian_noise:sigma=-1", "--seeds", "0") == 2
    err = capsys.readouterr().err
    assert "problems found before any job ran" in err
    for text in ("--seeds", "defense.sigma", "f1", "telepathy"):
        assert text in err, err
    assert stored_rows(tmp_path) == 0


# ------------------------------------------------------------------------ bad command lines
CLI_CASES: list[tuple[str, list[str], list[str]]] = [
    ("unknown task", ["--task", "nope"], ["'task': 'nope'", "tiny"]),
    ("unknown suite", ["--suite", "slow"], ["'suite': 'slow'", "quick"]),
    ("unknown defense", ["--defense", "magic"], ["'defense': 'magic'", "gaussian_noise"]),
    ("bad defense value", ["--defense", "gaussian_noise:sigma=-1"], ["defense.sigma", "-1"]),
    ("boolean defense value", ["--defense", "gaussian_noise:sigma=true"], ["defense.sigma", "True"]),
    ("string defense value", ["--defense", "gaussian_noise:sigma=high"], ["defense.sigma", "high"]),
    ("unknown defense parameter", ["--defense", "gaussian_noise:scale=3"], ["defense.scale", "sigma"]),
    ("defense parameter without a value", ["--defense", "gaussian_noise:sigma"], ["--defense", "key=value"]),
    (
        "a string where a list is expected",
        ["--defense", "gaussian_noise:kinds=gradient"],
        ["defense.kinds", "gradient"],
    ),
    (
        "unknown message kind",
        ["--defense", "gaussian_noise:kinds=[gradients]"],
        ["defense.kinds", "gradients"],
    ),
    ("bad quantization step", ["--defense", "quantization:delta=0"], ["defense.delta", "0"]),
    ("early stopping without a criterion", ["--defense", "early_stopping"], ["defense.max_rounds"]),
    ("top-k keeping nothing", ["--defense", "top_k:k=0"], ["defense.k", "0"]),
    ("top-k without k or fraction", ["--defense", "top_k"], ["defense.k", "exactly one of k and fraction"]),
    ("top-k fraction above 1", ["--defense", "top_k:fraction=1.5"], ["defense.fraction", "1.5", "(0, 1]"]),
    ("top-k fraction of zero", ["--defense", "top_k:fraction=0"], ["defense.fraction", "(0, 1]"]),
    ("zero clipping norm", ["--defense", "gradient_clipping:max_norm=0"], ["defense.max_norm", "0"]),
    ("negative clipping norm", ["--defense", "gradient_clipping:max_norm=-2"], ["defense.max_norm", "-2"]),
    (
        "per-sample clipping of messages",
        ["--defense", "gradient_clipping:per_sample=true,on=messages"],
        ["defense.per_sample", "on=gradients"],
    ),
    ("zero SCC radius", ["--defense", "scc:tau=0"], ["defense.tau", "0"]),
    ("negative SCC radius", ["--defense", "scc:tau=-1"], ["defense.tau", "-1"]),
    ("unknown SCC radius rule", ["--defense", "scc:tau=auto"], ["defense.tau", "auto", "'adaptive'"]),
    ("DP clip norm zero", ["--defense", "dp_sgd:noise_multiplier=1,clip_norm=0"], ["defense.clip_norm", "0"]),
    ("DP negative noise", ["--defense", "dp_sgd:noise_multiplier=-1"], ["defense.noise_multiplier", "-1"]),
    ("DP delta of 1", ["--defense", "dp_fedavg:noise_multiplier=1,delta=1"], ["defense.delta", "(0, 1)"]),
    (
        "DP noise and target both",
        ["--defense", "distributed_dp:noise_multiplier=1,target_epsilon=2"],
        ["defense.noise_multiplier", "exactly one"],
    ),
    ("DP neither noise nor target", ["--defense", "dp_sgd"], ["defense.noise_multiplier", "exactly one"]),
    (
        "DP target no noise can meet",
        ["--defense", "dp_sgd:target_epsilon=1e-9"],
        ["defense.target_epsilon", "cannot be met", "4 steps"],
    ),
    (
        "DP unknown sampling",
        ["--defense", "dp_sgd:noise_multiplier=1,sampling=shuffle"],
        ["defense.sampling", "poisson"],
    ),
    ("zero seeds", ["--seeds", "0"], ["--seeds", "0"]),
    ("absurd seeds", ["--seeds", "100000000"], ["--seeds", "100000000"]),
    ("zero jobs", ["--jobs", "0"], ["--jobs", "0"]),
    ("absurd jobs", ["--jobs", "5000"], ["--jobs", "5000"]),
    ("unknown store dialect", ["--store", "nosuchdialect://x"], ["--store"]),
    ("store in a missing folder", ["--store", "/nonexistent/dir/results.sqlite"], ["--store"]),
    ("infinite defense value", ["--defense", "gaussian_noise:sigma=.inf"], ["defense.sigma", "not a finite"]),
    ("NaN defense value", ["--defense", "gaussian_noise:sigma=.nan"], ["defense.sigma", "not a finite"]),
    ("empty defense value", ["--defense", "gaussian_noise:sigma="], ["defense.sigma", "empty value"]),
    (
        "defense parameter given twice",
        ["--defense", "gaussian_noise:sigma=1,sigma=2"],
        ["--defense", "'sigma' is given twice"],
    ),
    ("defense without a name", ["--defense", ":sigma=1"], ["--defense", "no defense name"]),
    ("misspelt defense", ["--defense", "gausian_noise"], ["gausian_noise", "Did you mean 'gaussian_noise'?"]),
    (
        "misspelt defense parameter",
        ["--defense", "gaussian_noise:sigmaa=1"],
        ["defense.sigmaa", "Did you mean 'sigma'?"],
    ),
    ("misspelt task", ["--task", "tinny"], ["'tinny'", "Did you mean 'tiny'?"]),
    (
        "malformed list value",
        ["--defense", "gaussian_noise:kinds=[gradients"],
        ["defense.kinds", "[gradients"],
    ),
]


@pytest.mark.parametrize(("case", "extra", "expected"), CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_a_bad_command_line_is_one_clear_error(tmp_path, capsys, case, extra, expected):
    root = make_root(tmp_path)
    jobs_given = "--jobs" in extra
    code = run_evaluate(root, tmp_path, *extra) if jobs_given else evaluate(tmp_path, root, *extra)
    assert code == 2, case
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    for text in expected:
        assert text in err, (case, err)
    assert stored_rows(tmp_path) == 0


def test_unwritable_outputs_are_refused_before_anything_runs(tmp_path, capsys):
    root = make_root(tmp_path)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for option in ("--site", "--out"):
        args = [
            "evaluate",
            "--root",
            str(root),
            "--no-progress",
            "--out",
            str(tmp_path / "out"),
            "--site",
            str(tmp_path / "site"),
        ]
        args[args.index(option) + 1] = str(blocker / "sub")
        assert main(args) == 2
        err = capsys.readouterr().err
        assert option in err and "is a file" in err
    assert stored_rows(tmp_path) == 0


def test_a_root_without_tasks_and_a_suite_naming_a_missing_task(tmp_path, capsys):
    assert main(["evaluate", "--root", str(tmp_path), "--no-progress"]) == 2
    assert "--root" in capsys.readouterr().err
    root = make_root(tmp_path, suites={"quick": {"tasks": ["tiny", "ghost"]}})
    assert evaluate(tmp_path, root) == 2
    err = capsys.readouterr().err
    assert "ghost" in err and "tiny" in err


@pytest.mark.parametrize(
    ("case", "source", "expected"),
    [
        ("syntax error", "def oops(:\n", "SyntaxError"),
        # the plugin rules leave a module only constants to compute at import: one can still raise
        ("raises at import", "RATE = 1 / 0\n", "ZeroDivisionError: division by zero"),
        ("non-UTF-8 bytes", b"\xff\xfe not python\n", "utf-8"),
        (
            "takes another defense's name",
            "from bench.defense.base import DEFENSES, Defense\n"
            "@DEFENSES.register('none', 'x')\nclass N(Defense):\n    pass\n",
            "registers none",
        ),
        ("registers nothing", "x = 1\n", "registers no defense"),
        # a plugin cannot reach sys.exit at import: the plugin rules refuse it before it runs
        ("exits at import", "import sys\nsys.exit(0)\n", "broken.py:1 breaks the plugin rules: 'import sys'"),
        (
            "exits with a message",
            "raise SystemExit('bye')\n",
            "broken.py:1 breaks the plugin rules: a plugin's module holds imports, functions, classes and "
            "constants, not Raise",
        ),
    ],
)
def test_a_broken_plugin_is_one_line_and_does_not_break_the_rest(tmp_path, capsys, case, source, expected):
    root = make_root(tmp_path)
    path = root / "defenses" / "broken.py"
    path.write_bytes(source if isinstance(source, bytes) else source.encode())
    assert evaluate(tmp_path, root, "--defense", "broken") == 2, case
    err = capsys.readouterr().err
    assert "broken.py" in err and expected in err and "Traceback" not in err
    assert main(["list", "defenses", "--root", str(root)]) == 2  # the others are still listed
    captured = capsys.readouterr()
    assert "gaussian_noise" in captured.out and "broken.py" in captured.err
    assert evaluate(tmp_path, root, "--defense", "none") == 0  # and still run
    assert stored_rows(tmp_path) == 1


@pytest.mark.slow
def test_a_plugin_reaching_for_sys_exit_does_not_end_list_silently(tmp_path):
    root = make_root(tmp_path)
    (root / "defenses" / "exits.py").write_text("import sys\nsys.exit(0)\n")
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "list", "--root", str(root)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "tiny" in proc.stdout and "gaussian_noise" in proc.stdout  # the rest is listed
    # refused by the plugin rules before any of it runs (it never reaches sys.exit)
    assert "exits.py:1 breaks the plugin rules: 'import sys'" in proc.stderr


def test_a_broken_task_file_does_not_hide_the_other_tasks(tmp_path, capsys):
    root = make_root(tmp_path)
    (root / "tasks" / "broken.yaml").write_text("name: [broken\n")
    assert main(["list", "tasks", "--root", str(root)]) == 2  # and the others listed
    captured = capsys.readouterr()
    assert "tiny" in captured.out and "broken.yaml" in captured.err
    assert evaluate(tmp_path, root, "--task", "broken") == 2
    assert "malformed YAML" in capsys.readouterr().err
    assert evaluate(tmp_path, root) == 0


def test_debug_shows_the_traceback_wherever_it_is_given(tmp_path):
    root = make_root(tmp_path)
    for argv in (
        ["--debug", "evaluate", "--root", str(root), "--task", "nope"],
        ["evaluate", "--root", str(root), "--task", "nope", "--debug"],
    ):
        with pytest.raises(Exception, match="nope"):
            main(argv)


def test_repeated_tasks_and_defenses_run_once(tmp_path, capsys):
    root = make_root(tmp_path)
    assert (
        evaluate(tmp_path, root, "--task", "tiny", "--task", "tiny", "--defense", "none", "--defense", "none")
        == 0
    )
    assert "1 jobs run" in capsys.readouterr().out and stored_rows(tmp_path) == 1


# ------------------------------------------------------------------------------- faults
def test_a_failing_job_is_recorded_and_the_sweep_goes_on(tmp_path, capsys):
    """A defense that raises inside a round fails its own job, with the reason; the others run."""
    root = make_root(tmp_path)
    (root / "defenses" / "faulty.py").write_text(
        "from bench.defense.base import DEFENSES, Defense\n"
        "@DEFENSES.register('faulty', 'raises in round 2')\n"
        "class Faulty(Defense):\n"
        "    def outgoing(self, msgs, ctx):\n"
        "        if ctx.round == 2:\n"
        "            raise ArithmeticError('defense bug')\n"
        "        return msgs\n"
    )
    for jobs in (1, 2):
        assert (
            evaluate(tmp_path, root, "--defense", "none", "--defense", "faulty", "--seeds", "2", jobs=jobs)
            == 0
        )
    from bench.results.store import ResultStore

    results = ResultStore(str(tmp_path / "out" / "results.sqlite")).results()
    assert len(results) == 4
    faulty = [r for r in results if r.defense == "faulty"]
    assert all(r.status == "failed" and "defense bug" in r.reason for r in faulty)
    assert all(r.status == "ok" for r in results if r.defense == "none")


def _sigint_default() -> None:
    """In the child before exec: Ctrl-C's default action. A shell's background job starts with
    SIGINT ignored, and an ignored signal stays ignored across exec (Python then installs no
    KeyboardInterrupt handler), so a test suite run in the background would see no Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(
    tmp_path: Path, jobs: int, delay: float, sig: signal.Signals = signal.SIGINT
) -> tuple[subprocess.CompletedProcess, int]:
    task = {**TASK, "simulation": {**TASK["simulation"], "rounds": 3000, "eval_every": 1000}}
    root = make_root(tmp_path, [task], {"quick": {"tasks": ["tiny"], "defenses": ["none"], "seeds": 6}})
    argv = evaluate_argv(root, tmp_path / "out", tmp_path / "site")
    cmd = [sys.executable, "-m", "bench", *argv, "--no-progress", "--jobs", str(jobs)]
    proc = subprocess.Popen(
        cmd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_sigint_default,
    )
    deadline = time.time() + 180
    while stored_rows(tmp_path) < 1 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(delay)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground process group
    else:
        proc.send_signal(sig)  # `kill PID`, a scheduler's stop: the main process only
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), stored_rows(tmp_path)


@pytest.mark.slow
def test_sigterm_stops_evaluate_saying_what_is_saved(tmp_path):
    """Issue 39 item 9: SIGTERM is an interruption like Ctrl-C — the message says what is saved
    (it used to stop silently)."""
    done, rows = _interrupt(tmp_path, 1, delay=0.3, sig=signal.SIGTERM)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert f"interrupted: {rows} of the 6 jobs to run finished and are saved" in done.stderr
    assert 1 <= rows < 6


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_ctrl_c_exits_130_saying_what_is_saved(tmp_path, jobs):
    done, rows = _interrupt(tmp_path, jobs, delay=0.3)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert f"interrupted: {rows} of the 6 jobs to run finished and are saved" in done.stderr
    assert "run the same command again" in done.stderr
    assert 1 <= rows < 6
    # no worker is left behind, and re-running resumes from there
    resumed = subprocess.run(
        done.args, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0 and f"{6 - rows} jobs run, {rows} already in the store" in resumed.stdout
    assert stored_rows(tmp_path) == 6


@pytest.mark.slow
def test_ctrl_c_during_the_first_job_saves_nothing_and_says_so(tmp_path):
    task = {**TASK, "simulation": {**TASK["simulation"], "rounds": 200000, "eval_every": 100000}}
    root = make_root(tmp_path, [task])
    argv = evaluate_argv(root, tmp_path / "out", tmp_path / "site")
    cmd = [sys.executable, "-m", "bench", *argv, "--no-progress"]
    proc = subprocess.Popen(
        cmd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_sigint_default,
    )
    db = tmp_path / "out" / "results.sqlite"
    deadline = time.time() + 180
    while not db.exists() and time.time() < deadline:  # the store is opened just before the sweep
        time.sleep(0.1)
    time.sleep(1.0)  # inside the first (200,000-round) job's simulation
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in out + err
    assert "interrupted: 0 of the 1 jobs to run finished" in err
    assert stored_rows(tmp_path) == 0


# ------------------------------------------------------------------ values read like YAML, files like text


def test_scientific_notation_is_a_number_and_is_stored_as_standard_json(tmp_path, capsys):
    root = make_root(tmp_path)
    assert evaluate(tmp_path, root, "--defense", "gaussian_noise:sigma=1e6") == 0, capsys.readouterr().err
    with sqlite3.connect(tmp_path / "out" / "results.sqlite") as con:
        (params,) = con.execute("select defense_params from jobs").fetchone()
    assert json.loads(params)["sigma"] == 1e6  # a float, not the string '1e6'
    assert "Infinity" not in params and "NaN" not in params


@pytest.mark.parametrize(
    ("case", "text", "expected"),
    [
        ("duplicate key", "name: tiny\nname: tiny\n", ["tiny.yaml", "duplicate key 'name'"]),
        ("non-UTF-8 bytes", "name: tiny\n# caf\xe9\n", ["tiny.yaml", "UTF-8"]),
        ("not a mapping", "- tiny\n", ["tiny.yaml"]),
    ],
)
def test_a_task_file_that_is_not_clean_yaml_is_one_clear_error(tmp_path, capsys, case, text, expected):
    root = make_root(tmp_path)
    data = text.encode("latin-1")
    (root / "tasks" / "tiny.yaml").write_bytes(data)
    assert evaluate(tmp_path, root) == 2, case
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    for part in expected:
        assert part in err, (case, err)
    assert stored_rows(tmp_path) == 0


def flow_alias_bomb(levels: int) -> str:
    """A one-line "billion laughs" list: each level holds the one below nine times."""
    text = "&a0 [0, 0, 0, 0, 0, 0, 0, 0, 0]"
    for i in range(1, levels):
        text = f"&a{i} [{', '.join([text] + [f'*a{i - 1}'] * 8)}]"
    return text


@pytest.mark.parametrize("where", ["an unknown task field", "an attack's rounds"])
@pytest.mark.parametrize("levels", [5, 9])  # 66 430 values (read, shown cut) and 9**9 (refused)
def test_an_alias_bomb_is_one_short_error(tmp_path, capsys, where, levels):
    root = make_root(tmp_path)
    task = json.loads(json.dumps(TASK))
    if where == "an unknown task field":
        task["bomb"] = "BOMB"
    else:
        task["threats"][0]["attacks"][0]["params"]["rounds"] = "BOMB"
    text = yaml.safe_dump(task, sort_keys=False).replace("BOMB", flow_alias_bomb(levels))
    (root / "tasks" / "tiny.yaml").write_text(text)
    start = time.monotonic()
    assert evaluate(tmp_path, root) == 2
    err = capsys.readouterr().err
    assert time.monotonic() - start < 60 and len(err) < 2000, (where, levels, len(err))
    assert err.startswith("error: ") and "Traceback" not in err
    assert ("tiny.yaml" in err and "alias" in err) if levels == 9 else ("…" in err)
    assert stored_rows(tmp_path) == 0


def test_a_store_password_is_never_shown(tmp_path, capsys):
    root = make_root(tmp_path)
    url = "postgresql+pg8000://bench:pw-4711@127.0.0.1:1/results"
    assert evaluate(tmp_path, root, "--store", url) == 2
    captured = capsys.readouterr()
    assert "pw-4711" not in captured.out + captured.err
    assert "bench:***@127.0.0.1:1/results" in captured.err and "Traceback" not in captured.err


@pytest.mark.parametrize(
    ("case", "argv", "expected"),
    [
        ("threat nodes not numbers", ["--threat", "neighbors:abc"], ["--threat", "neighbors:abc"]),
        ("record rounds not numbers", ["--record-rounds", "0,x"], ["--record-rounds", "0,x"]),
        ("unknown parameter group", ["--param", "protocl.lr=0.1"], ["--param", "protocl"]),
        (
            "parameter given twice",
            ["--param", "rounds=2", "--param", "rounds=3"],
            ["'rounds' is given twice"],
        ),
        ("infinite parameter", ["--param", "protocol.lr=.inf"], ["protocol.lr", "not a finite"]),
        ("missing config file", ["--config", "/nonexistent/sim.yaml"], ["--config", "/nonexistent/sim.yaml"]),
    ],
)
def test_a_bad_simulate_command_is_one_clear_error(tmp_path, capsys, case, argv, expected):
    base = ["simulate", "--dataset", "two_gaussians", "--nodes", "2", "--rounds", "1", "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "sim"), *argv]) == 2, case
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    for part in expected:
        assert part in err, (case, err)


def test_simulate_into_an_unwritable_folder_is_refused_before_it_runs(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    argv = ["simulate", "--dataset", "two_gaussians", "--nodes", "2", "--rounds", "1", "--no-progress"]
    assert main([*argv, "--out", str(blocker / "sim")]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "Traceback" not in err


def test_a_config_file_that_is_not_utf8_names_the_file(tmp_path, capsys):
    config = tmp_path / "sim.yaml"
    config.write_bytes(b"dataset: two_gaussians\n# caf\xe9\n")
    assert main(["simulate", "--config", str(config), "--out", str(tmp_path / "sim"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(config) in err and "UTF-8" in err and "Traceback" not in err
