"""Input errors: "Did you mean" wherever a name is looked up, and task and suite files whose
numbers, keys and types are checked like command-line values."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from bench.core.errors import BenchInputError, closest_name
from bench.core.registry import Registry
from bench.simulation.config import SimulationConfig
from bench.spec.catalog import Catalog
from bench.spec.schema import DefenseSpec, SuiteSpec, TaskSpec, validation_message

TASK = """\
name: t
simulation:
  nodes: 2
  protocol_params: {lr: 1e30}
threats:
- name: server
  attacks:
  - {name: dlg, params: {restarts: 2}}
"""
SUITES = "quick:\n  tasks: [t]\n  defenses: [none]\n"


@pytest.mark.parametrize(
    ("name", "choices", "expected"),
    [
        ("gausian_noise", ["gaussian_noise", "none", "quantization"], "gaussian_noise"),
        ("Gaussian_Noise", ["gaussian_noise", "none"], "gaussian_noise"),
        ("tours", ["torus", "ring", "star"], "torus"),
        ("xyz", ["torus", "ring", "star"], None),
        ("a", [], None),
    ],
)
def test_closest_name(name, choices, expected):
    assert closest_name(name, choices) == expected


def test_the_message_suggests_the_closest_choice():
    err = BenchInputError("defense", "gausian_noise", choices=["none", "gaussian_noise", "quantization"])
    assert err.message == (
        "invalid value for 'defense': 'gausian_noise'. Did you mean 'gaussian_noise'? "
        "Valid choices: gaussian_noise, none, quantization."
    )
    assert BenchInputError("defense", "zzz", choices=["none"]).message == (
        "invalid value for 'defense': 'zzz'. Valid choices: none."
    )
    # an unknown parameter suggests from the field's last part (the value is the parameter's value);
    # rebuilt from its four attributes (as the harness does across processes) it says the same
    err = BenchInputError("protocol.lrr", 0.1, choices=["lr", "momentum"], reason="unknown parameter")
    assert "(unknown parameter). Did you mean 'lr'? Valid choices: lr, momentum." in err.message
    again = BenchInputError(err.field, err.value, choices=err.choices, reason=err.reason)
    assert again.message == err.message


def test_registry_lookups_suggest_the_closest_name():
    registry: Registry = Registry("topology")
    for name in ("torus", "ring", "star"):
        registry.register(name)(object())
    with pytest.raises(BenchInputError) as info:
        registry.get("tours")
    assert "'topology': 'tours'. Did you mean 'torus'?" in info.value.message


def _catalog(tmp_path, task: str = TASK, suites: str = SUITES) -> Catalog:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.yaml").write_text(task)
    (tmp_path / "tasks" / "suites.yaml").write_text(suites)
    return Catalog(tmp_path)


def test_catalog_names_suggest_the_closest(tmp_path):
    catalog = _catalog(tmp_path, suites=SUITES + "other:\n  tasks: [tt]\n")
    with pytest.raises(BenchInputError, match="Did you mean 't'"):
        catalog.task("tt")
    with pytest.raises(BenchInputError, match=re.escape("'suite 'other'.tasks': 'tt'. Did you mean 't'")):
        catalog.suite("quick")


def test_unknown_suite_suggests_the_closest(tmp_path):
    with pytest.raises(BenchInputError, match=re.escape("'suite': 'quik'. Did you mean 'quick'")):
        _catalog(tmp_path).suite("quik")


def test_a_task_file_reads_scientific_notation_as_numbers(tmp_path):
    task = _catalog(tmp_path).task("t")
    assert task.simulation.protocol_params == {"lr": 1e30}


@pytest.mark.parametrize(
    ("replace", "by", "expected"),
    [
        ("lr: 1e30", "lr: .inf", "t.yaml' (line 4, column 25: 'lr': '.inf' is not a finite number"),
        ("lr: 1e30", "lr: 1e999", "(line 4, column 25: 'lr': '1e999' is not a finite number"),
        ("restarts: 2", "restarts: 2, restarts: 3", "line 8, column 39: duplicate key 'restarts'"),
        ("nodes: 2", "nodes: 2\n  nodes: 3", "line 4, column 3: duplicate key 'nodes' (first at line 3)"),
        ("nodes: 2", "nodes: true", "invalid value for 'simulation.nodes': True"),
        ("nodes: 2", "nodes: 2.0", "invalid value for 'simulation.nodes': 2.0"),
        ("nodes: 2", "nodez: 2", "unknown field 'simulation.nodez' (value 2). Did you mean 'nodes'?"),
        ("nodes: 2", "nodes: 2\n  dtype: float46", "'simulation.dtype': 'float46' (Input should be"),
        ("nodes: 2", "nodes: 2\n  dataset_params: {seed: 1}", "'seed' is set from the field 'seed'"),
        ("nodes: 2", "nodes: 2\n  topology_params: {n: 4}", "'n' is set from the field 'nodes'"),
        (
            "name: dlg",
            "nmae: dlg",
            "unknown field 'threats.0.attacks.0.nmae' (value 'dlg'). Did you mean 'name'?",
        ),
    ],
)
def test_a_bad_task_file_names_the_file_the_field_and_the_value(tmp_path, replace, by, expected):
    assert replace in TASK
    catalog = _catalog(tmp_path, task=TASK.replace(replace, by))
    with pytest.raises(BenchInputError) as info:
        catalog.task("t")
    assert str(tmp_path / "tasks" / "t.yaml") in info.value.message
    assert expected in info.value.message


def test_a_task_file_that_is_not_utf8_names_the_file_and_the_line(tmp_path):
    catalog = _catalog(tmp_path, task=TASK.replace("name: t", "name: t\ndescription: x"))
    path = tmp_path / "tasks" / "t.yaml"
    path.write_bytes(path.read_bytes().replace(b"x", b"caf\xe9"))
    with pytest.raises(BenchInputError) as info:
        catalog.task("t")
    assert info.value.field == str(path) and "not UTF-8 text: byte 0xe9 at line 2" in info.value.message


@pytest.mark.parametrize(
    ("model", "data", "expected"),
    [
        (DefenseSpec, {"name": "gaussian_noise", "params": {"sigma": float("inf")}}, "'params.sigma': inf"),
        (DefenseSpec, {"name": "x", "params": {"kinds": [1.0, float("nan")]}}, "[1] is nan: not a finite"),
        (SuiteSpec, {"name": "s", "tasks": [], "seeds": True}, "'seeds': True"),
        (SuiteSpec, {"name": "s", "tasks": [], "seeds": 1.5}, "'seeds': 1.5"),
        (SimulationConfig, {"protocol_params": {"lr": float("nan")}}, "'protocol_params.lr': nan"),
        (SimulationConfig, {"rounds": True}, "'rounds': True"),
        (SimulationConfig, {"eval_local": 1}, "'eval_local': 1"),
        (SimulationConfig, {"mixing_params": {"graph": 1}}, "'graph' is set from the field 'topology'"),
        (SimulationConfig, {"model_params": {"for_engine": False}}, "'for_engine' is set by the engine"),
    ],
)
def test_models_refuse_non_finite_numbers_booleans_as_numbers_and_engine_keys(model, data, expected):
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    assert expected in validation_message(info.value, model=model)


def test_the_floor_of_a_task_must_be_finite():
    data = {"name": "t", "simulation": {}, "threats": [], "utility": {"floor": float("-inf")}}
    with pytest.raises(ValidationError) as info:
        TaskSpec.model_validate(data)
    assert "'utility.floor': -inf" in validation_message(info.value, model=TaskSpec)
