"""Command line: the main job runs; bad input is one clear paragraph with exit code 2."""

import json
import subprocess
import sys

import pytest

from bench.cli import main


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=300)


def test_simulate_runs_and_prints_summary(tmp_path):
    proc = run(
        "simulate",
        "--dataset",
        "digits",
        "--model",
        "mlp",
        "--protocol",
        "dpsgd",
        "--topology",
        "torus",
        "--nodes",
        "16",
        "--rounds",
        "20",
        "--param",
        "protocol.batch_size=8",
        "--threat",
        "neighbors:0",
        "--record-rounds",
        "0,1",
        "--no-progress",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout[: proc.stdout.rindex("}") + 1])
    assert summary["rounds"] == 20 and summary["val_acc"] > 0.3
    assert summary["observed_deliveries[neighbors]"] == 2 * 4  # 2 rounds × 4 torus neighbours
    assert (tmp_path / "metrics.csv").is_file()


def test_bad_topology_name_subprocess_has_no_traceback():
    proc = run("simulate", "--protocol", "dpsgd", "--topology", "tours")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "'topology.name': 'tours'" in proc.stderr and "torus" in proc.stderr


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["simulate", "--protocol", "gossip"], ["protocol.name", "dpsgd, fedavg, fedsgd, gossip_averaging"]),
        (["simulate", "--protocol", "dpsgd", "--mixing", "foo"], ["mixing.name", "metropolis_hastings"]),
        (["simulate", "--nodes", "-3"], ["'nodes'", "-3", "greater than 0"]),
        (["simulate", "--protocol", "dpsgd", "--param", "protocol.lrr=1"], ["protocol.lrr", "gossip_steps"]),
        (["simulate", "--protocol", "dpsgd", "--param", "protocol.lr=-1"], ["protocol.lr", "positive"]),
        (["simulate", "--param", "bogus=3"], ["unknown field 'bogus'", "topology_params"]),
        (
            [
                "simulate",
                "--protocol",
                "dpsgd",
                "--topology",
                "random_regular",
                "--nodes",
                "11",
                "--param",
                "topology.degree=3",
            ],
            ["topology.degree", "must be even"],
        ),
        (
            ["simulate", "--protocol", "dpsgd", "--topology", "davis_southern_women", "--nodes", "30"],
            ["topology.n", "32"],
        ),
        (
            ["simulate", "--protocol", "dpsgd", "--threat", "neighbors:0,99"],
            ["coalition", "node 99 does not exist"],
        ),
        (["simulate", "--threat", "spy"], ["threat.name", "eavesdropper, fl_user, neighbors, server"]),
        (["simulate", "--dataset", "imagenet"], ["dataset.name", "digits"]),
        (["simulate", "--model", "resnet"], ["model.name", "mlp"]),
        (["simulate", "--param", "partition.n_per_node=0"], ["partition.n_per_node"]),
        (
            ["simulate", "--device", "cuda:7"]
            if not __import__("torch").cuda.is_available()
            else ["simulate", "--device", "tpu"],
            ["device"],
        ),
        (["list", "nonsense"], ["'kind'", "protocols"]),
        (["simulate", "--config", "/no/such/file.yaml"], ["--config", "no such file"]),
    ],
)
def test_bad_input_is_a_clear_error(argv, expected, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    for text in expected:
        assert text in err


def test_malformed_yaml_names_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("protocol: dpsgd\nnodes: [1, 2\n")
    assert main(["simulate", "--config", str(bad)]) == 2
    assert "malformed YAML at line" in capsys.readouterr().err


def test_debug_shows_the_traceback():
    from bench.core.errors import BenchInputError

    with pytest.raises(BenchInputError):
        main(["--debug", "simulate", "--topology", "tours", "--protocol", "dpsgd"])


def test_list_prints_every_registry(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("torus", "metropolis_hastings", "dpsgd", "fedavg", "eavesdropper", "digits", "mlp"):
        assert name in out


# ------------------------------------------------------------------ parameters on the command line
@pytest.mark.parametrize(
    ("text", "params"),
    [
        ("none", {}),
        ("gaussian_noise:sigma=1e6", {"sigma": 1e6}),
        ("gaussian_noise:sigma=1e-3", {"sigma": 1e-3}),
        ("gaussian_noise: sigma = 0.5 ,", {"sigma": 0.5}),
        ("quantization:kinds=[z0, delta_z],delta=0.1", {"kinds": ["z0", "delta_z"], "delta": 0.1}),
        ("quantization:dithered=true", {"dithered": True}),
        ("early_stopping:max_rounds=null,patience=3", {"max_rounds": None, "patience": 3}),
    ],
)
def test_parse_defense_reads_values_like_a_task_file(text, params):
    from bench.commands.values import parse_defense

    spec = parse_defense(text)
    assert spec.name == text.partition(":")[0] and spec.params == params


@pytest.mark.parametrize(
    ("text", "field", "value", "reason"),
    [
        ("gaussian_noise:sigma=", "defense.sigma", "", "empty value in 'gaussian_noise:sigma='"),
        ("gaussian_noise:sigma=.inf", "defense.sigma", ".inf", "not a finite number"),
        ("gaussian_noise:sigma=.nan", "defense.sigma", ".nan", "not a finite number"),
        ("gaussian_noise:sigma=1e999", "defense.sigma", "1e999", "not a finite number"),
        (
            "gaussian_noise:sigma=1,sigma=2",
            "--defense",
            "gaussian_noise:sigma=1,sigma=2",
            "'sigma' is given twice",
        ),
        ("gaussian_noise:sigma", "--defense", "gaussian_noise:sigma", "parameters are key=value"),
        ("gaussian_noise:=1", "--defense", "gaussian_noise:=1", "parameters are key=value"),
        (":sigma=1", "--defense", ":sigma=1", "no defense name"),
        ("quantization:kinds=[z0", "defense.kinds", "[z0", "malformed YAML list or mapping"),
    ],
)
def test_parse_defense_errors_name_the_field_and_the_value(text, field, value, reason):
    from bench.commands.values import parse_defense
    from bench.core.errors import BenchInputError

    with pytest.raises(BenchInputError) as info:
        parse_defense(text)
    assert info.value.field == field and info.value.value == value and reason in info.value.message


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--param", "protocol.lr=.inf"], ["'protocol.lr': '.inf'", "not a finite number"]),
        (["--param", "protocol.lr=1e999"], ["'protocol.lr': '1e999'", "not a finite number"]),
        (["--param", "protocol.lr="], ["'protocol.lr': ''", "empty value"]),
        (["--param", "protocol.lr=true"], ["'protocol.lr': True", "expected a number, got a boolean"]),
        (["--param", "protocol.lr=abc"], ["'protocol.lr': 'abc'", "expected a number, got a string"]),
        (["--param", "protocol.lr=1", "--param", "protocol.lr=2"], ["'protocol.lr=2'", "given twice"]),
        (["--param", "protocl.lr=1"], ["'--param': 'protocl'", "Did you mean 'protocol'?"]),
        (["--param", "protocol.lrr=1"], ["'protocol.lrr': 1", "Did you mean 'lr'?"]),
        (
            ["--protocol", "fedsgd", "--param", "protocol.weighting=unifrom"],
            ["'protocol.weighting'", "Did you mean 'uniform'?"],
        ),
        (["--param", "roundz=3"], ["unknown field 'roundz'", "Did you mean 'rounds'?"]),
        (["--param", "rounds=true"], ["'rounds': True"]),
        (["--param", "nodes=.nan"], ["'nodes': '.nan'", "not a finite number"]),
        (["--param", "=3"], ["'--param': '=3'", "KEY=VALUE"]),
        (["--param", "protocol.=3"], ["'--param': 'protocol.=3'", "KEY=VALUE"]),
        (["--param", "protocol_params=5", "--param", "protocol.lr=1"], ["'protocol_params': 5", "mapping"]),
        (["--param", "dataset.seed=3"], ["'dataset_params'", "'seed' is set from the field 'seed'"]),
        (["--param", "model.n_outputs=3"], ["'model_params'", "'n_outputs' is set from the field 'dataset'"]),
        (["--model", "mlp", "--param", "model.hidden=[64, a]"], ["'model.hidden': [64, 'a']", "item 1"]),
        (["--model", "mlp", "--param", "model.hidden=[64"], ["'model.hidden': '[64'", "malformed"]),
        (["--protocol", "dpsg"], ["'protocol.name': 'dpsg'", "Did you mean 'dpsgd'?"]),
        (["--dtype", "float46"], ["'dtype': 'float46'", "Did you mean 'float64'?"]),
        (["--threat", "neighbors:abc"], ["'--threat': 'neighbors:abc'", "comma-separated node numbers"]),
        (["--threat", "neighbors:0,-1"], ["'--threat': 'neighbors:0,-1'", "comma-separated node numbers"]),
        (["--threat", "neighbors:"], ["'--threat': 'neighbors:'", "comma-separated node numbers"]),
        (["--threat", "server", "--threat", "server"], ["'--threat': 'server'", "given twice"]),
        (["--threat", "neighbours:0"], ["'threat.name': 'neighbours'", "Did you mean 'neighbors'?"]),
        (["--record-rounds", "0,x"], ["'--record-rounds': '0,x'", "comma-separated round numbers"]),
        (["--record-rounds", "-1"], ["'--record-rounds': '-1'", "comma-separated round numbers"]),
        (["--record-rounds", ""], ["'--record-rounds': ''", "comma-separated round numbers"]),
    ],
)
def test_bad_simulate_parameters_are_clear_errors(argv, expected, capsys, tmp_path):
    assert main(["simulate", "--protocol", "dpsgd", "--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    for text in expected:
        assert text in err
    assert not (tmp_path / "out").exists()  # nothing is written for bad input


def test_simulate_reads_scientific_notation(tmp_path, capsys):
    argv = [
        "simulate",
        "--rounds",
        "1",
        "--no-progress",
        "--out",
        str(tmp_path),
        "--param",
        "protocol.lr=1e-3",
    ]
    assert main(argv) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"protocol: dpsgd\ndescription: caf\xe9\n", "not UTF-8 text: byte 0xe9 at line 2"),
        (b"protocol: dpsgd\nnodes: [1, 2\n", "malformed YAML at line 3, column 1"),
        (
            b"protocol: dpsgd\nprotocol: fedsgd\n",
            "line 2, column 1: duplicate key 'protocol' (first at line 1)",
        ),
        (b"protocol_params: {lr: .inf}\n", "line 1, column 23: 'lr': '.inf' is not a finite number"),
        (b"1: 2\n", "invalid value for '1': 1 (Keys should be strings)"),
        (b"- protocol: dpsgd\n", "the file must hold a mapping of fields"),
        (b"", "the file must hold a mapping of fields"),
    ],
)
def test_a_bad_config_file_is_a_clear_error(tmp_path, content, expected, capsys):
    path = tmp_path / "run.yaml"
    path.write_bytes(content)
    assert main(["simulate", "--config", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and expected in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["simulate", "--threat", "neighbors:abc"], "'--threat': 'neighbors:abc'"),
        (["simulate", "--record-rounds", "0,x"], "'--record-rounds': '0,x'"),
        (["simulate", "--out", "{file}/out"], "cannot create the folder"),
        (["simulate", "--config", "{latin1}"], "not UTF-8 text: byte 0xe9 at line 1"),
        (["simulate", "--config", "{tab}"], "malformed YAML at line 2"),
        (["simulate", "--param", "dataset.seed=1"], "'seed' is set from the field 'seed'"),
        (["evaluate", "--defense", "gausian_noise"], "Did you mean 'gaussian_noise'?"),
        (["evaluate", "--defense", "gaussian_noise:sigma=true"], "'defense.sigma': True (expected a number"),
        (["evaluate", "--defense", "gaussian_noise:sigma="], "'defense.sigma': '' (empty value"),
        (["evaluate", "--defense", "gaussian_noise:sigma=.inf"], "'defense.sigma': '.inf' (not a finite"),
        (
            ["evaluate", "--defense", "gaussian_noise:kinds=gradient"],
            "'defense.kinds': 'gradient' (expected a",
        ),
    ],
)
def test_bad_input_subprocess_has_no_traceback(tmp_path, args, expected):
    (tmp_path / "file").write_text("")
    (tmp_path / "latin1.yaml").write_bytes(b"description: caf\xe9\n")
    (tmp_path / "tab.yaml").write_bytes(b"protocol: dpsgd\n\tnodes: 3\n")
    paths = {"file": tmp_path / "file", "latin1": tmp_path / "latin1.yaml", "tab": tmp_path / "tab.yaml"}
    argv = [a.format(**paths) for a in args]
    if argv[0] == "evaluate":
        argv += ["--task", "gaussians_logreg_fedsgd", "--seeds", "1", "--no-progress"]
        argv += ["--out", str(tmp_path / "runs"), "--site", str(tmp_path / "site")]
    proc = run(*argv)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("error: ")
    assert expected in proc.stderr


def test_every_option_of_every_command_has_help_text():
    import argparse

    from bench.cli import build_parser

    missing, todo = [], [("python -m bench", build_parser())]
    while todo:
        prog, parser = todo.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend((f"{prog} {name}", p) for name, p in action.choices.items())
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{prog} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, missing


def test_simulate_refuses_a_model_that_cannot_fit_in_memory(capsys) -> None:
    """Issue 39 item 9: ``model.hidden=[1000000000]`` is refused up front, naming the parameter
    count and the memory it needs (it used to grow to 21 GB until the kernel killed it)."""
    code = main(["simulate", "--dataset", "digits", "--model", "mlp", "--param", "model.hidden=[1000000000]"])
    err = capsys.readouterr().err
    assert code == 2 and "model.params" in err and "75,000,000,010 parameters" in err and "GiB" in err
