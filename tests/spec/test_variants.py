"""Task families (``variants``): the repository's families and the format's rules and errors."""

import copy
from pathlib import Path

import pytest
import yaml

from bench.cli import main
from bench.core.errors import BenchInputError
from bench.spec.catalog import Catalog, bench_root
from bench.spec.schema import SpecError, TaskSpec
from bench.spec.variants import TaskVariant, is_family

FAMILIES = {
    "mnist_mlp_fedsgd": [f"mnist_mlp_fedsgd_n{n}" for n in (1, 2, 4, 8)],
    "mnist_mlp_pdmm": [f"mnist_mlp_pdmm_n{n}" for n in (1, 2, 4, 8)],
    "cifar10_lenet_fedsgd": [f"cifar10_lenet_fedsgd_n{n}" for n in (1, 2, 4, 8)],
    "cifar10_lenet_pdmm": [f"cifar10_lenet_pdmm_n{n}" for n in (1, 2, 4, 8)],
}

BASE = {
    "description": "base",
    "simulation": {
        "dataset": "two_gaussians",
        "dataset_params": {"n_train": 12, "n_test": 20},
        "model": "logreg",
        "nodes": 12,
        "protocol": "fedsgd",
        "protocol_params": {"lr": 0.5},
    },
    "threats": [
        {
            "name": "server",
            "attacks": [
                {"name": "analytic_logreg", "params": {"rounds": [0], "x": 1}},
                {"name": "dlg", "params": {"rounds": [0, 1], "y": 2}},
            ],
        },
        {"name": "fl_user", "params": {"coalition": [1]}, "attacks": [{"name": "dlg"}]},
    ],
}


def _attacks(task: TaskSpec, threat: str) -> dict[str, dict]:
    (found,) = [t for t in task.threats if t.name == threat]
    return {a.name: a.params for a in found.attacks}


# ---------------------------------------------------------------------------- the repository
def test_repository_families_expand_to_their_tasks_with_unique_names():
    tasks_dir = bench_root() / "tasks"
    catalog = Catalog(bench_root())
    plain = set()
    for path in tasks_dir.glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        if path.name != "suites.yaml" and not is_family(data):
            plain.add(path.stem)
    members = []
    for family, names in FAMILIES.items():
        data = yaml.safe_load((tasks_dir / f"{family}.yaml").read_text())
        assert is_family(data)
        assert [v["name"] for v in data["variants"]] == names
        members += names
        for name in names:
            assert catalog.sources()[name].path == tasks_dir / f"{family}.yaml"
            task = catalog.task(name)
            assert isinstance(task, TaskSpec) and task.name == name
    assert len(members) == len(set(members)) == 16
    assert not plain & set(members)  # no member shadows a one-task file
    assert not plain & set(FAMILIES)  # a family file is not a task
    assert set(catalog.task_names()) == plain | set(members)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_fedsgd_families_vary_the_samples_per_node(n):
    for name, dataset, lr in (("mnist_mlp", "mnist", 0.1), ("cifar10_lenet", "cifar10", 1 / 30)):
        task = Catalog(bench_root()).task(f"{name}_fedsgd_n{n}")
        sim = task.simulation
        assert (sim.dataset, sim.nodes, sim.protocol) == (dataset, 50, "fedsgd")
        assert sim.dataset_params == {"subset": 100 * n} and sim.partition_params == {"n_per_node": n}
        assert sim.protocol_params == {"lr": pytest.approx(lr)}
        attacks = _attacks(task, "server")
        assert list(attacks) == ["dlg_batched", "inverting_gradients"]
        dlg = {"rounds": [0], "batch_size": n, "labels": "auto", "restarts": 4, "iterations": 300}
        assert attacks["dlg_batched"] == dlg
        assert attacks["inverting_gradients"]["batch_size"] == n
        assert f"with n_i = {n} (TIFS" in task.description


@pytest.mark.parametrize(
    ("n", "mu_mnist", "difference"),
    [
        (1, 0.02, {"restarts": 4}),
        (2, 0.02, {"restarts": 2, "victims": list(range(1, 11))}),
        (4, 0.01, {"restarts": 1, "victims": [1, 2, 3, 4, 5]}),
        (8, 0.01, None),
    ],
)
def test_pdmm_families_vary_step_victims_and_drop_the_difference_attack_at_8(n, mu_mnist, difference):
    if difference is not None:
        difference = {"rounds": [0], "batch_size": n, "iterations": 300, **difference}
    for name, mu in (("mnist_mlp", mu_mnist), ("cifar10_lenet", 0.05)):
        task = Catalog(bench_root()).task(f"{name}_pdmm_n{n}")
        sim = task.simulation
        assert sim.protocol_params == {"rho": 0.4, "solver": "gradient_step", "mu": mu, "z0_variance": 1.0}
        assert sim.dataset_params == {"subset": 100 * n} and sim.partition_params == {"n_per_node": n}
        assert task.threats[0].params == {"coalition": [0]}
        attacks = _attacks(task, "eavesdropper")
        expected = ["pdmm_noisy_gradient_inversion", "pdmm_difference_inversion", "pdmm_sum_inversion"]
        assert list(attacks) == [a for a in expected if difference or a != "pdmm_difference_inversion"]
        assert attacks.get("pdmm_difference_inversion") == difference
        sums = {"rounds": [0], "batch_size": n, "iterations": 300, "restarts": 2}
        assert attacks["pdmm_sum_inversion"] == sums
        assert f"n_i = {n} (TIFS" in task.description and f"μ = {mu}" in task.description


def test_reserved_variant_keys_are_not_task_fields():
    assert set(TaskVariant.model_fields) & set(TaskSpec.model_fields) == {"name"}


# ------------------------------------------------------------------------------- the format
def _root(tmp_path: Path, files: dict[str, object]) -> Catalog:
    (tmp_path / "tasks").mkdir(exist_ok=True)
    for stem, body in files.items():
        text = body if isinstance(body, str) else yaml.safe_dump(body, sort_keys=False, allow_unicode=True)
        (tmp_path / "tasks" / f"{stem}.yaml").write_text(text)
    return Catalog(tmp_path)


def _family(*variants: dict, **base_changes) -> dict:
    return {**copy.deepcopy(BASE), **base_changes, "variants": list(variants)}


def test_merge_rules_mappings_named_lists_replaced_lists_and_removal(tmp_path):
    catalog = _root(
        tmp_path,
        {
            "fam": _family(
                {"name": "fam_a"},
                {
                    "name": "fam_b",
                    "description": "b",
                    "simulation": {"dataset_params": {"n_test": 30, "dim": 2}, "rounds": 3},
                    "threats": [{"name": "server", "attacks": [{"name": "dlg", "params": {"rounds": [5]}}]}],
                    "public": ["graph"],
                },
                {
                    "name": "fam_c",
                    "remove": ["threats.fl_user", "threats.server.attacks.analytic_logreg.params.x"],
                },
            )
        },
    )
    assert catalog.task_names() == ["fam_a", "fam_b", "fam_c"]
    a, b, c = (catalog.task(n) for n in ("fam_a", "fam_b", "fam_c"))
    assert a.model_dump(exclude={"name"}) == TaskSpec.model_validate({"name": "x", **BASE}).model_dump(
        exclude={"name"}
    )
    assert b.description == "b" and b.public == ["graph"] and b.simulation.rounds == 3
    # mappings merge key by key; a new key goes after the base's keys
    assert list(b.simulation.dataset_params.items()) == [("n_train", 12), ("n_test", 30), ("dim", 2)]
    # named lists merge by name (order kept); other lists are replaced
    assert [t.name for t in b.threats] == ["server", "fl_user"]
    assert _attacks(b, "server") == {
        "analytic_logreg": {"rounds": [0], "x": 1},
        "dlg": {"rounds": [5], "y": 2},
    }
    # removal of a named item and of a mapping key
    assert [t.name for t in c.threats] == ["server"]
    assert _attacks(c, "server")["analytic_logreg"] == {"rounds": [0]}
    # the variants do not share state
    assert _attacks(a, "server")["dlg"] == {"rounds": [0, 1], "y": 2} and len(a.threats) == 2


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        (
            {"name": "fam_x", "simulation": {"protocl": "fedavg"}},
            [
                "variant 'fam_x'",
                "'simulation.protocl' (value 'fedavg'). Did you mean 'protocol'?",
                "protocol_params",
            ],
        ),
        (
            {"name": "fam_x", "colour": "red"},
            ["variant 'fam_x'", "unknown field 'colour'", "threats, public"],
        ),
        ({"name": "fam_x", "simulation": {"nodes": -1}}, ["variant 'fam_x'", "'simulation.nodes': -1"]),
        (
            {"name": "fam_x", "threats": [{"name": "server", "attacks": [{"name": "dgl", "params": {}}]}]},
            [
                "'threats.server.attacks' has no item named 'dgl'",
                "analytic_logreg, dlg).",
                "Did you mean 'dlg'?",
            ],
        ),
        (
            {"name": "fam_x", "threats": [{"name": "srv", "attacks": []}]},
            ["'threats' has no item named 'srv'", "server, fl_user).", "Did you mean 'server'?"],
        ),
        (
            {"name": "fam_x", "threats": [{"attacks": []}]},
            ["an override of 'threats' lists items by their name", "{name: server, ...}"],
        ),
        (
            {"name": "fam_x", "remove": ["threats.server.attacks.idlg"]},
            ["cannot remove 'threats.server.attacks.idlg'", "no 'idlg' in", "dlg).", "Did you mean 'dlg'?"],
        ),
        (
            {"name": "fam_x", "remove": ["simulation.colour"]},
            ["cannot remove 'simulation.colour'", "(there: dataset, dataset_params, model"],
        ),
        (
            {"name": "fam_x", "remove": ["threats.fl_user"], "threats": [{"name": "fl_user", "attacks": []}]},
            ["'threats' has no item named 'fl_user'"],
        ),
        (
            {"name": "fam_x", "remove": "threats"},
            ["fam.yaml: invalid value for 'variants.1.remove': 'threats'", "valid list"],
        ),
    ],
)
def test_a_bad_variant_is_an_error_naming_the_file_the_variant_and_the_field(
    tmp_path, capsys, variant, expected
):
    catalog = _root(tmp_path, {"fam": _family({"name": "fam_ok"}, variant)})
    with pytest.raises(SpecError) as info:
        for name in catalog.task_names():
            catalog.task(name)
    message = info.value.message
    assert str(tmp_path / "tasks" / "fam.yaml") in message
    for text in expected:
        assert text in message, message
    assert main(["list", "tasks", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and expected[-1] in err


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"fam": _family({"name": "fam_a"}), "fam_a": {"name": "fam_a", **BASE}},
            "task 'fam_a' is defined twice: in {root}/fam.yaml (variant 'fam_a') and in {root}/fam_a.yaml",
        ),
        (
            {"fam": _family({"name": "fam_x_1"}), "fam_x": _family({"name": "fam_x_1"})},
            "task 'fam_x_1' is defined twice: in {root}/fam.yaml (variant 'fam_x_1') and in "
            "{root}/fam_x.yaml (variant 'fam_x_1')",
        ),
        (
            {"fam": _family({"name": "fam_a"}, {"name": "fam_a"})},
            "{root}/fam.yaml: two variants are named 'fam_a'",
        ),
        ({"fam": _family({"name": "other_a"})}, "variant 'other_a' must be named 'fam_<suffix>'"),
        (
            {"fam": _family({"name": "fam_a"}, name="fam")},
            "{root}/fam.yaml: a file with variants has no 'name'",
        ),
        ({"fam": _family()}, "{root}/fam.yaml: invalid value for 'variants': []"),
        ({"fam": _family({"nme": "fam_a"})}, "{root}/fam.yaml: missing field 'variants.0.name'"),
        ({"fam": {**BASE, "variants": "fam_a"}}, "invalid value for 'variants': 'fam_a'"),
    ],
)
def test_name_collisions_and_broken_families_fail_the_catalog(tmp_path, capsys, files, expected):
    catalog = _root(tmp_path, files)
    expected = expected.format(root=tmp_path / "tasks")
    with pytest.raises(SpecError) as info:
        catalog.task_names()
    assert expected in info.value.message
    assert main(["list", "tasks", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and "Traceback" not in err


def test_a_broken_plain_file_does_not_hide_a_family(tmp_path):
    catalog = _root(
        tmp_path, {"fam": _family({"name": "fam_a"}), "broken": "name: broken\nsimulation: {nodes: [1\n"}
    )
    assert catalog.task_names() == ["broken", "fam_a"]
    assert catalog.task("fam_a").name == "fam_a"
    with pytest.raises(BenchInputError, match="malformed YAML at line"):
        catalog.task("broken")
    with pytest.raises(BenchInputError, match="'task': 'fam'"):
        catalog.task("fam")  # a family file is not itself a task
