"""Spec loading: one YAML reader, one pydantic-error paragraph, packages that register their members."""

import subprocess
import sys

import pytest
from pydantic import ValidationError

from bench.core.errors import BenchInputError
from bench.simulation.config import SimulationConfig
from bench.spec.schema import SuiteSpec, TaskSpec, fields_at, read_yaml, validation_message

TASK = {
    "name": "t",
    "simulation": {"nodes": 2},
    "threats": [{"name": "server", "attacks": [{"name": "dlg"}]}],
}


def _error(model, data) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    return info.value


def test_unknown_nested_field_lists_the_valid_fields_of_its_own_model():
    bad = {**TASK, "threats": [{"name": "server", "attacks": [{"name": "dlg", "colour": "red"}]}]}
    text = validation_message(_error(TaskSpec, bad), "tasks/t.yaml", TaskSpec)
    assert text.startswith("tasks/t.yaml: unknown field 'threats.0.attacks.0.colour' (value 'red').")
    assert text.endswith("Valid fields here: name, params.")
    bad = {**TASK, "simulation": {"nodes": 2, "protocl": "fedsgd"}}
    text = validation_message(_error(TaskSpec, bad), "x", TaskSpec)
    assert "unknown field 'simulation.protocl'" in text and "protocol_params" in text


def test_error_paragraph_names_bad_values_missing_fields_and_no_source():
    text = validation_message(_error(SimulationConfig, {"nodes": -3, "bogus": 1}), model=SimulationConfig)
    assert text.startswith("invalid value for 'nodes': -3 (") and "greater than 0" in text
    assert "unknown field 'bogus' (value 1). Valid fields here: dataset, dataset_params" in text
    text = validation_message(_error(TaskSpec, {"name": "t", "simulation": {}}), "f.yaml", TaskSpec)
    assert text == "f.yaml: missing field 'threats'."


def test_hint_only_from_the_model_that_was_validated():
    exc = _error(SuiteSpec, {"name": "s", "tasks": [], "colour": 1})
    assert "Valid fields" not in validation_message(exc, model=TaskSpec)
    assert "Valid fields here: name, description, tasks" in validation_message(exc, model=SuiteSpec)


def test_fields_at_walks_lists_and_optionals_and_stops_at_free_form_mappings():
    assert fields_at(TaskSpec, ("threats", 0, "attacks", 3)) == ["name", "params"]
    assert fields_at(TaskSpec, ("utility",)) == [
        "metric",
        "floor",
        "higher_is_better",
        "reference",
        "ranked_fraction",
        "floor_fraction",
        "attack_only",
    ]
    assert fields_at(TaskSpec, ("threats", 0, "params")) is None
    assert fields_at(TaskSpec, ("nothing",)) is None


def test_read_yaml_names_the_file_and_the_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(BenchInputError) as info:
        read_yaml(bad)
    assert info.value.field == str(bad) and info.value.value == "bad.yaml"
    assert "malformed YAML at line 2, column 1" in info.value.message
    with pytest.raises(BenchInputError) as info:
        read_yaml(tmp_path / "none.yaml", field="--config")
    assert info.value.field == "--config" and info.value.value == str(tmp_path / "none.yaml")
    assert "no such file" in info.value.message
    with pytest.raises(BenchInputError, match="cannot read"):
        read_yaml(tmp_path)
    (tmp_path / "ok.yaml").write_text("a: [1, 2]\n")
    assert read_yaml(tmp_path / "ok.yaml") == {"a": [1, 2]}


@pytest.mark.parametrize(
    ("package", "registry", "expected"),
    [
        (
            "bench.attacks",
            "ATTACKS",
            {
                "analytic_logreg",
                "analytic_logreg_aggregate",
                "dlg",
                "dlg_batched",
                "first_layer_inversion",
                "inverting_gradients",
                "pdmm_analytic_logreg",
                "pdmm_analytic_first_layer",
                "pdmm_difference_inversion",
                "pdmm_noisy_gradient_inversion",
                "pdmm_sum_inversion",
                "fedavg_update_inversion",
                "membership_threshold",
                "membership_lira",
                "membership_rmia",
                "gossip_knowledge_matrix",
                "dgd_knowledge_matrix",
                "local_model_reconstruction",
                "trap_inversion",
            },
        ),
        (
            "bench.metrics",
            "METRICS",
            {
                "image_ssim",
                "image_psnr",
                "image_lpips",
                "label_accuracy",
                "input_mse",
                "membership_auc",
                "reconstructed_fraction",
                "psnr_success",
                "local_model_accuracy",
            },
        ),
    ],
)
def test_importing_a_package_registers_all_its_members(package, registry, expected):
    """In a fresh interpreter (this one has imported everything already)."""
    code = f"from {package} import {registry}; print(' '.join({registry}.names()))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) == expected
