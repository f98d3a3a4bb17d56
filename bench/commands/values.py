"""Values given on the command line: ``--defense NAME:k=v,...``, ``--param GROUP.KEY=VALUE``
and ``--config FILE``, read with the rules of task files (:mod:`bench.spec.arguments`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.core.errors import BenchInputError


def parse_value(text: str, field: str = "value", argument: str | None = None) -> Any:
    """A ``key=value`` value, read with the same YAML rules as task files (``1e-3`` is a float;
    an empty value, ``.inf``, ``.nan`` or a key given twice is an error naming ``field``):
    :func:`bench.spec.arguments.parse_value`."""
    from bench.spec.arguments import parse_value as parse

    return parse(text, field, text if argument is None else argument)


def apply_param(config: dict[str, Any], assignment: str, seen: set[str] | None = None) -> None:
    """``--param protocol.lr=0.1`` → ``config["protocol_params"]["lr"] = 0.1``;
    ``--param rounds=5`` → ``config["rounds"] = 5`` (a value from ``--config`` is replaced).

    ``seen`` holds the keys of the ``--param`` options applied so far: a key given twice is an
    error, and so are an unknown group, an empty key and an empty value.
    """
    from bench.simulation.config import SimulationConfig

    key, eq, value = assignment.partition("=")
    key = key.strip()
    if not eq or not key or key.endswith(".") or key.startswith("."):
        raise BenchInputError("--param", assignment, reason="expected KEY=VALUE, e.g. protocol.lr=0.1")
    if seen is not None:
        if key in seen:
            raise BenchInputError("--param", assignment, reason=f"'{key}' is given twice")
        seen.add(key)
    if "." not in key:
        config[key] = parse_value(value, key, assignment)
        return
    group, name = key.split(".", 1)
    groups = [f.removesuffix("_params") for f in SimulationConfig.model_fields if f.endswith("_params")]
    if group not in groups:
        raise BenchInputError(
            "--param", group, choices=groups, reason=f"no such group of parameters (in {assignment!r})"
        )
    params = config.setdefault(f"{group}_params", {})
    if not isinstance(params, dict):
        raise BenchInputError(f"{group}_params", params, reason=f"must be a mapping to set {key}")
    params[name] = parse_value(value, key, assignment)


def load_config(path: str) -> dict[str, Any]:
    from bench.core.yaml_io import read_yaml

    data = read_yaml(Path(path), field="--config")
    if not isinstance(data, dict):
        raise BenchInputError("--config", path, reason="the file must hold a mapping of fields")
    return data


def parse_defense(text: str) -> Any:
    """``name`` or ``name:key=value,key=value`` → a :class:`~bench.spec.schema.DefenseSpec`.

    Values are YAML, read like a task file's (:func:`parse_value`); commas inside brackets,
    braces or quotes do not separate parameters (``quantization:kinds=[z0, dz],delta=0.1``).
    A missing name, an item without ``=``, an empty value and a key given twice are errors.
    """
    from bench.spec.arguments import split_items
    from bench.spec.schema import DefenseSpec

    name, _, rest = text.partition(":")
    if not name.strip():
        raise BenchInputError(
            "--defense", text, reason="no defense name: expected NAME or NAME:key=value,..."
        )
    params: dict[str, Any] = {}
    for item in split_items(rest):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise BenchInputError(
                "--defense", text, reason="parameters are key=value, e.g. gaussian_noise:sigma=0.5"
            )
        if key in params:
            raise BenchInputError("--defense", text, reason=f"parameter '{key}' is given twice")
        params[key] = parse_value(value, f"defense.{key}", text)
    return DefenseSpec(name=name.strip(), params=params)
