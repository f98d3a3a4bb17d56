"""Specifications: tasks, threat models with their attack suites, defenses, suites and runs.

Tasks live as YAML files in ``tasks/`` (one task per file, named like the file, or a family of
tasks written once with ``variants``: :mod:`bench.spec.variants`); suites are named lists of tasks
(with the defense configurations and seeds to evaluate) in ``tasks/suites.yaml``. Every model
forbids unknown fields, so a typo is an error naming the field and the valid ones.
"""

from __future__ import annotations

import json
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bench.core.errors import BenchInputError, closest_name, did_you_mean, short_repr
from bench.core.yaml_io import read_yaml  # noqa: F401  (the one YAML reader, re-exported)
from bench.simulation.config import ParamValue, SimulationConfig
from bench.threats.view import KNOWLEDGE_ITEMS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class AttackSpec(_Strict):
    """One attack of a threat model's suite: a registered attack name and its parameters."""

    name: str = Field(description="Registered attack (`python -m bench list attacks`).")
    params: dict[str, ParamValue] = Field(
        default_factory=dict,
        description="The attack's parameters (e.g. `rounds`, `batch_size`, `restarts`), checked against "
        "its signature.",
    )


class ThreatSpec(_Strict):
    """A threat model of the task (``server``, ``neighbors`` …), its parameters (e.g. the
    coalition) and the attacks run against its View. Task + threat = a leaderboard track."""

    name: str = Field(
        description="Threat model (`python -m bench list threats`): `server`, `fl_user`, `neighbors` "
        "or `eavesdropper`."
    )
    params: dict[str, ParamValue] = Field(
        default_factory=dict,
        description="The threat model's parameters, e.g. `coalition: [0]` (the nodes the adversary "
        "controls or colludes with).",
    )
    attacks: list[AttackSpec] = Field(
        description="The attacks run against this threat's View; the track's privacy score is 1 − the "
        "worst leakage among them."
    )
    description: str = Field("", description="What this adversary observes, in one line.")


class UtilitySpec(_Strict):
    """The task's utility metric (a key of the evaluation: ``val_acc``, ``val_loss`` …) and the
    floor an entry must keep to be ranked."""

    metric: str = Field(
        "val_acc",
        description="Key of the evaluation on the held-out split: `val_acc` (the average model's "
        "accuracy), `val_local_acc` (the local models' mean accuracy) or `val_loss`.",
    )
    floor: float | None = Field(
        None,
        description="Absolute utility an entry must keep to be ranked (null: no absolute floor; see "
        "`floor_fraction`).",
    )
    higher_is_better: bool = Field(True, description="Whether larger values of the metric are better.")
    reference: Literal["central"] | None = Field(
        None,
        description="`central`: the undefended job also trains the model centrally on the pooled data "
        "of every node with the same budget (the reference utility U_ref); null: no reference "
        "(then the track is attack-only and `attack_only` says why).",
    )
    ranked_fraction: float = Field(
        0.8,
        gt=0,
        le=1,
        description="The track is ranked only where the undefended run reaches this fraction of the "
        "reference (U_none / U_ref, or U_ref / U_none for a lower-is-better metric).",
    )
    floor_fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="An entry must keep this fraction of the reference to be ranked (floor = "
        "fraction · U_ref; U_ref / fraction for a lower-is-better metric).",
    )
    attack_only: str | None = Field(
        None,
        min_length=1,
        description="Why the task's tracks are shown but not ranked (its point is the attack, e.g. a "
        "source setting in which the undefended run does not learn).",
    )

    @model_validator(mode="after")
    def _reference_or_reason(self) -> UtilitySpec:
        if self.reference is not None and self.attack_only is not None:
            raise ValueError("a task declares either `reference` or `attack_only`, not both")
        if self.floor_fraction is not None and self.reference is None:
            raise ValueError("`floor_fraction` needs `reference: central`")
        return self

    def rule(self) -> dict[str, Any]:
        """What decides whether the task's tracks are ranked, as each job records it."""
        return {
            "reference": self.reference,
            "ranked_fraction": self.ranked_fraction,
            "floor_fraction": self.floor_fraction,
            "attack_only": self.attack_only,
            "higher_is_better": self.higher_is_better,
        }


class TaskSpec(_Strict):
    """A standardized task: how to simulate it and how to attack it.

    ``simulation`` holds the fields of :class:`~bench.simulation.config.SimulationConfig`
    except the seed (set per run). ``public`` lists what the adversary may know (a subset of
    graph, mixing, architecture, hyperparameters, n_nodes, protocol).
    """

    name: str = Field(description="Unique task name; a one-task file is `tasks/<name>.yaml`.")
    description: str = Field(
        "", description="What the task measures and where its settings come from (paper, section)."
    )
    simulation: SimulationConfig = Field(
        description="How the protocol is run: the fields of SimulationConfig; `seed` is replaced by each "
        "job's seed."
    )
    utility: UtilitySpec = Field(
        default_factory=UtilitySpec, description="The utility metric and the floor an entry must keep."
    )
    threats: list[ThreatSpec] = Field(
        description="The threat models, each with its attacks; task + threat = a leaderboard track."
    )
    public: list[str] = Field(
        default_factory=lambda: list(KNOWLEDGE_ITEMS),
        description=f"What every adversary may know, a subset of: {', '.join(KNOWLEDGE_ITEMS)}.",
    )

    @field_validator("public")
    @classmethod
    def _known_items(cls, value: list[str]) -> list[str]:
        for item in value:
            if item not in KNOWLEDGE_ITEMS:
                hint = did_you_mean(closest_name(item, KNOWLEDGE_ITEMS))
                valid = ", ".join(KNOWLEDGE_ITEMS)
                raise ValueError(f"unknown knowledge item {item!r}.{hint} Valid: {valid}")
        return value


class DefenseSpec(_Strict):
    """A defense configuration: a defense plugin (``defenses/<name>.py``) and its parameters."""

    name: str = Field(description="A defense plugin `defenses/<name>.py` (`python -m bench list defenses`).")
    params: dict[str, ParamValue] = Field(
        default_factory=dict, description="The defense's parameters, e.g. `sigma: 0.1` for `gaussian_noise`."
    )

    @property
    def label(self) -> str:
        """Display label, e.g. ``gaussian_noise(sigma=1.0)``."""
        if not self.params:
            return self.name
        args = ",".join(
            f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in sorted(self.params.items())
        )
        return f"{self.name}({args})"


class SuiteSpec(_Strict):
    """A named list of tasks with the defense configurations and number of seeds to run."""

    name: str = Field(
        description="The suite's name: its key in `tasks/suites.yaml` (not repeated in the entry)."
    )
    description: str = Field("", description="What the suite covers and what it needs (data, hardware).")
    tasks: list[str] = Field(description="Names of tasks (`python -m bench list tasks`).")
    defenses: list[DefenseSpec] = Field(
        default_factory=lambda: [DefenseSpec(name="none")],
        description="The defense configurations evaluated on every task (`- none` is short for "
        "`- {name: none}`); one that does not apply to a task's protocol is skipped for it.",
    )
    seeds: int = Field(2, gt=0, description="Seeds per (task, defense) pair.")

    @field_validator("defenses", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """Allow ``- none`` for ``- {name: none}``."""
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value


class RunSpec(_Strict):
    """One job: a task under a defense configuration with one seed."""

    task: TaskSpec
    defense: DefenseSpec
    seed: int

    def key(self) -> str:
        """Hash of everything that determines the result (and the bench version)."""
        from bench import __version__
        from bench.results.provenance import spec_hash

        return spec_hash(
            {
                "task": self.task.model_dump(mode="json"),
                "defense": self.defense.model_dump(mode="json"),
                "seed": self.seed,
                "bench": __version__,
            }
        )


# ----------------------------------------------------------------------------------- loading
def _unwrap(annotation: Any) -> Any:
    """The model or container an annotation holds: ``X | None`` → ``X``."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(args) == 1:
        return _unwrap(args[0])
    return annotation


def annotation_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> Any:
    """The annotation of the field found at ``loc`` inside ``model`` (list indices step into
    the item type; ``X | None`` is ``X``), or ``None`` when ``loc`` does not lead to a field of
    a model (e.g. into a free-form ``params`` mapping)."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(part, int):
            if get_origin(current) is not list:
                return None
            current = get_args(current)[0]
        elif isinstance(current, type) and issubclass(current, BaseModel) and part in current.model_fields:
            current = current.model_fields[part].annotation
        else:
            return None
    return _unwrap(current)


def fields_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str] | None:
    """The field names of the model found at ``loc`` inside ``model`` (see
    :func:`annotation_at`), or ``None`` when ``loc`` does not lead to a model."""
    current = annotation_at(model, loc)
    is_model = isinstance(current, type) and issubclass(current, BaseModel)
    return list(current.model_fields) if is_model else None


#: the most problems one validation message lists (the rest are counted)
MAX_PROBLEMS = 20


def validation_message(
    exc: ValidationError, source: str | None = None, model: type[BaseModel] | None = None
) -> str:
    """One paragraph from a pydantic error: each bad field with its value (cut by
    :func:`~bench.core.errors.short_repr`) and what is wrong; the first :data:`MAX_PROBLEMS` problems,
    then how many more there are.

    Parameters
    ----------
    exc:
        The error.
    source:
        What was validated (a file, a file and a suite …); the paragraph starts with it.
    model:
        The model that was validated: an unknown field is then listed with the valid fields of
        the (nested) model it was found in (ignored when ``exc`` comes from another model).
    """
    if model is not None and exc.title != model.__name__:
        model = None
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        value = err.get("input")
        if err["type"] == "extra_forbidden":
            valid = fields_at(model, tuple(err["loc"][:-1])) if model is not None else None
            hint = did_you_mean(closest_name(str(err["loc"][-1]), valid or ()))
            hint += f" Valid fields here: {', '.join(valid)}." if valid else ""
            parts.append(f"unknown field '{loc}' (value {short_repr(value)}).{hint}")
        elif err["type"] == "missing":
            parts.append(f"missing field '{loc}'.")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            hint = ""
            if err["type"] == "literal_error" and model is not None and isinstance(value, str):
                literal = annotation_at(model, tuple(err["loc"]))
                choices = [str(a) for a in get_args(literal)] if get_origin(literal) is Literal else []
                hint = did_you_mean(closest_name(value, choices))
            parts.append(f"invalid value for '{loc}': {short_repr(value)} ({msg}).{hint}")
    if len(parts) > MAX_PROBLEMS:
        parts[MAX_PROBLEMS:] = [f"… and {len(parts) - MAX_PROBLEMS} more problems."]
    return (f"{source}: " if source else "") + " ".join(parts)


class SpecError(BenchInputError):
    """A task or suite file that does not validate; the message is the whole paragraph."""

    def __init__(self, message: str) -> None:
        self._message = message
        ValueError.__init__(self, message)
        self.field, self.value, self.choices, self.reason = "spec", None, None, message

    @property
    def message(self) -> str:
        return self._message


def parse_task(data: Any, source: str) -> TaskSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a task file must hold a mapping of fields (name, simulation, threats …).")
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(validation_message(exc, source, TaskSpec)) from None


def parse_suites(data: Any, source: str) -> dict[str, SuiteSpec]:
    if not isinstance(data, dict):
        raise SpecError(f"{source}: the suites file must map suite names to suites.")
    suites = {}
    for name, body in data.items():
        if not isinstance(body, dict):
            raise SpecError(f"{source}: suite '{name}' must be a mapping (tasks, defenses, seeds).")
        try:
            suites[name] = SuiteSpec.model_validate({"name": name, **body})
        except ValidationError as exc:
            raise SpecError(validation_message(exc, f"{source}, suite '{name}'", SuiteSpec)) from None
    return suites
