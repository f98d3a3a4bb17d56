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
    from bench.errors import BenchInputError

    with pytest.raises(BenchInputError):
        main(["--debug", "simulate", "--topology", "tours", "--protocol", "dpsgd"])


def test_list_prints_every_registry(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("torus", "metropolis_hastings", "dpsgd", "fedavg", "eavesdropper", "digits", "mlp"):
        assert name in out
