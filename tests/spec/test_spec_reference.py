"""`python -m bench schema`: the field reference generated from the pydantic models."""

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from bench.cli import main
from bench.core.errors import BenchInputError
from bench.simulation.config import SimulationConfig
from bench.spec.reference import (
    KINDS,
    REGENERATE,
    default_text,
    field_entries,
    markdown,
    reference,
    sections,
    type_name,
)
from bench.spec.schema import SuiteSpec, TaskSpec
from bench.spec.variants import TaskFamily
from tests.support.bench_root import REPO


class _Item(BaseModel):
    name: str = Field(description="the item's name")


class _Sample(BaseModel):
    """A sample model with ``code`` and a :class:`~bench.spec.schema.TaskSpec` role."""

    count: int = Field(3, gt=0, description="how many")
    ratio: float | None = Field(None, description="a ratio")
    mode: Literal["a", "b"] = Field("a", description="the mode")
    items: list[_Item] = Field(default_factory=lambda: [_Item(name="x")], description="the items")
    tags: list[str] = Field(min_length=1, description="the tags")
    inner: _Item = Field(default_factory=lambda: _Item(name="y"), description="one item")


def test_committed_reference_is_current():
    committed = (REPO / "docs" / "task-reference.md").read_text()
    assert committed == reference(), (
        f"docs/task-reference.md is out of date; regenerate it with: {REGENERATE}"
    )


def test_fields_types_defaults_and_nesting():
    entries = {name: (shape, text) for name, shape, text in field_entries(_Sample)}
    assert list(entries) == ["count", "ratio", "mode", "items", "items[].name", "tags", "inner", "inner.name"]
    assert entries["count"] == ("integer, > 0, default `3`", "how many")
    assert entries["ratio"][0] == "number or null, default `null`"
    assert entries["mode"][0] == "one of `a`, `b`, default `a`"
    assert entries["items"][0] == "list of mappings (fields below), default `[{name: x}]`"
    assert entries["items[].name"] == ("string, required", "the item's name")
    assert entries["tags"][0] == "list of strings, at least 1 item, required"
    assert entries["inner"][0] == "mapping (fields below), default: its fields' defaults"
    assert type_name(dict[str, int]) == "mapping"
    assert default_text(SuiteSpec.model_fields["description"]) == "default `''`"
    assert markdown(_Sample.__doc__) == "A sample model with `code` and a `TaskSpec` role."


@pytest.mark.parametrize("model", [TaskSpec, TaskFamily, SuiteSpec, SimulationConfig])
def test_every_field_of_the_file_models_is_described(model):
    missing = [name for name, _, text in field_entries(model) if not text.strip()]
    assert not missing, f"{model.__name__}: add Field(description=...) to {missing}"


def test_the_task_reference_lists_nested_fields_with_their_descriptions(capsys):
    assert main(["schema", "task"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## Task (a file `tasks/<name>.yaml`)")
    assert "- `simulation.nodes` — integer, > 0, default `10`.\n  Number of nodes" in out
    assert "- `threats[].attacks[].params` — mapping, default `{}`." in out
    assert "- `utility.floor` — number or null, default `null`." in out
    assert "## Task family" in out and "- `variants[].remove` — list of strings, default `[]`." in out
    assert "## Suite" not in out
    for name in SimulationConfig.model_fields:
        assert f"- `simulation.{name}` — " in out


def test_suite_and_simulation_references_and_the_whole_document(capsys):
    assert main(["schema", "suite", "simulation"]) == 0
    out = capsys.readouterr().out
    assert out.index("## Suite") < out.index("## Simulation") and "## Task" not in out
    assert "- `defenses` — list of mappings (fields below), default `[{name: none, params: {}}]`." in out
    assert "- `dtype` — one of `float32`, `float64`, default `float32`." in out
    assert main(["schema"]) == 0
    assert capsys.readouterr().out == reference()
    assert reference().startswith("# Task and suite files: field reference\n")
    assert set(KINDS) == {"task", "suite", "simulation"}


def test_an_unknown_kind_is_an_input_error(capsys):
    assert main(["schema", "task", "tsk"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        "error: invalid value for 'kind': 'tsk'. Did you mean 'task'? Valid choices: simulation, suite, task"
    )
    with pytest.raises(BenchInputError, match="tsk"):
        sections("tsk")
