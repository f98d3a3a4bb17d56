"""Task families: several tasks in one file, as a base and a list of variants.

A task file with a ``variants`` field holds a family instead of one task. Its other fields are
the *base*, written like a task without a ``name``; each variant names one task of the family
and states only what differs from the base::

    # tasks/mnist_mlp_fedsgd.yaml — the base is written with n_i = 1
    description: MNIST mlp under FedSGD, 50 clients with n_i = 1 …
    simulation:
      dataset: mnist
      dataset_params: {subset: 100}
      partition: fixed_size
      partition_params: {n_per_node: 1}
      …
    threats:
    - name: server
      attacks:
      - name: dlg_batched
        params: {rounds: [0], batch_size: 1, labels: auto, restarts: 4, iterations: 300}
    variants:
    - name: mnist_mlp_fedsgd_n1
    - name: mnist_mlp_fedsgd_n2
      description: MNIST mlp under FedSGD, 50 clients with n_i = 2 …
      simulation: {dataset_params: {subset: 200}, partition_params: {n_per_node: 2}}
      threats:
      - name: server
        attacks:
        - {name: dlg_batched, params: {batch_size: 2}}

A variant's task is the base with the variant's ``remove`` paths deleted and then its other
fields merged in:

* mappings merge key by key (recursively); a key the base lacks is added after the base's;
* lists of named items — a task's ``threats`` and a threat's ``attacks`` — merge by ``name``: an
  override item changes the base item of the same name, which must exist (so a misspelt name is
  an error, not a new item); the base lists every item, in order, that any variant has;
* any other value (a number, a string, another list) replaces the base's;
* ``remove`` lists dotted paths to delete: mapping keys, and named items by their name, e.g.
  ``threats.eavesdropper.attacks.pdmm_difference_inversion``.

The result is validated as a task (:class:`~bench.spec.schema.TaskSpec`), so an unknown field or a bad
value in an override is an error naming the file, the variant and the field. Variants are named
``<file name>_<suffix>`` (``mnist_mlp_fedsgd_n2`` in ``mnist_mlp_fedsgd.yaml``), so the file of
any task is found from its name; a variant whose name is also another task's is an error.

Why overrides rather than a template with placeholders: in the families that motivated this
(the papers' n_i ∈ {1, 2, 4, 8} sweeps) several fields vary together but not by one rule — the
data subset is 100·n_i, the PDMM step μ changes at n_i = 4, the enumerated victims and restarts
differ per n_i and n_i = 8 drops an attack — so each variant states its values outright and
reads like a small task file.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.core.errors import closest_name, did_you_mean, short_repr
from bench.spec.schema import SpecError, TaskSpec, validation_message

VARIANTS = "variants"


class TaskVariant(BaseModel):
    """One task of a family: its name, the base paths it removes and its overrides."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(
        description="The task's name: the family file's name, an underscore and a suffix "
        "(`mnist_mlp_fedsgd_n2` in `mnist_mlp_fedsgd.yaml`); unique among all tasks."
    )
    remove: list[str] = Field(
        default_factory=list,
        description="Dotted paths of the base to delete before the overrides are merged: mapping "
        "keys, and items of `threats` / `attacks` by their name, e.g. "
        "`threats.eavesdropper.attacks.pdmm_difference_inversion`.",
    )


class TaskFamily(BaseModel):
    """A task file with ``variants``: every other field is the base that the variants share, written
    like a task without a ``name``. A variant's task is the base with the variant's ``remove`` paths
    deleted and its other fields (any task field but ``name``) merged in: mappings key by key,
    ``threats`` and ``attacks`` by name (the named item must exist in the base), anything else
    replaced. Each variant is then validated as a task."""

    model_config = ConfigDict(extra="allow")

    variants: list[TaskVariant] = Field(
        min_length=1,
        description="The family's tasks: each a `name`, optional `remove` paths and any task "
        "fields (except `name`) that differ from the base.",
    )


def is_family(data: Any) -> bool:
    """Whether a task file's content is a family (a mapping with ``variants``)."""
    return isinstance(data, dict) and VARIANTS in data


def variant_names(data: dict[str, Any], path: Path) -> list[str]:
    """The names of a family's tasks, after checking the family's structure.

    Parameters
    ----------
    data:
        The family file's content.
    path:
        The file (named in errors; its stem starts every variant's name).

    Raises
    ------
    SpecError
        If ``variants`` is not a non-empty list of mappings with a ``name``, the base has a
        ``name``, two variants share a name or a name does not start with the file's name.
    """
    family = _family(data, path)
    names: list[str] = []
    for variant in family.variants:
        if not variant.name.startswith(f"{path.stem}_"):
            raise SpecError(
                f"{path}: variant '{variant.name}' must be named '{path.stem}_<suffix>' (a family's "
                "tasks start with the file's name, so that a task's file is found from its name)."
            )
        if variant.name in names:
            raise SpecError(f"{path}: two variants are named '{variant.name}'.")
        names.append(variant.name)
    return names


def variant_task(data: dict[str, Any], path: Path, name: str) -> TaskSpec:
    """The validated task of one variant of a family.

    Parameters
    ----------
    data:
        The family file's content.
    path:
        The file (named in errors).
    name:
        The variant's name (one of :func:`variant_names`).

    Raises
    ------
    SpecError
        Naming the file and the variant, if a ``remove`` path or a named override item does not
        exist in the base, or if the merged task does not validate.
    """
    variant = next(v for v in _family(data, path).variants if v.name == name)
    where = f"{path}, variant '{name}'"
    task = copy.deepcopy({k: v for k, v in data.items() if k != VARIANTS})
    for dotted in variant.remove:
        _remove(task, dotted, where)
    _merge(task, copy.deepcopy(variant.model_extra or {}), TaskSpec, where, "")
    task = {"name": name, **task}
    try:
        return TaskSpec.model_validate(task)
    except ValidationError as exc:
        raise SpecError(validation_message(exc, where, TaskSpec)) from None


# ------------------------------------------------------------------------------------ helpers
def _family(data: dict[str, Any], path: Path) -> TaskFamily:
    if "name" in data:
        raise SpecError(
            f"{path}: a file with variants has no 'name' (value {short_repr(data['name'])}): each variant "
            "names one task."
        )
    try:
        return TaskFamily.model_validate(data)
    except ValidationError as exc:
        raise SpecError(validation_message(exc, str(path), TaskFamily)) from None


def _named_item_model(model: type[BaseModel] | None, key: str) -> type[BaseModel] | None:
    """The item model of ``model.key`` if it is a list of models with a ``name`` field."""
    if model is None or key not in model.model_fields:
        return None
    annotation = model.model_fields[key].annotation
    if get_origin(annotation) is not list:
        return None
    (item,) = get_args(annotation)
    named = isinstance(item, type) and issubclass(item, BaseModel) and "name" in item.model_fields
    return item if named else None


def _sub_model(model: type[BaseModel] | None, key: str) -> type[BaseModel] | None:
    """The model of field ``model.key`` if it is one (``simulation``, ``utility``)."""
    if model is None or key not in model.model_fields:
        return None
    annotation = model.model_fields[key].annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _names(items: list[Any]) -> list[str]:
    return [str(item.get("name")) for item in items if isinstance(item, dict)]


def _find(items: list[Any], name: str, field: str, where: str) -> dict[str, Any]:
    """The item of a named list called ``name``."""
    found = [item for item in items if isinstance(item, dict) and item.get("name") == name]
    if len(found) != 1:
        what = "no item" if not found else f"{len(found)} items"
        hint = did_you_mean(closest_name(name, _names(items))) if not found else ""
        raise SpecError(
            f"{where}: '{field}' has {what} named '{name}' in the base "
            f"(its items: {', '.join(_names(items)) or 'none'}).{hint}"
        )
    return found[0]


def _merge(
    base: dict[str, Any], override: dict[str, Any], model: type[BaseModel] | None, where: str, at: str
) -> None:
    """Merge ``override`` into ``base`` in place (see the module docstring)."""
    for key, value in override.items():
        field = f"{at}{key}"
        current = base.get(key)
        item_model = _named_item_model(model, key)
        if item_model is not None and isinstance(current, list) and isinstance(value, list):
            for item in value:
                if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                    raise SpecError(
                        f"{where}: an override of '{field}' lists items by their name, e.g. "
                        f"{{name: {(_names(current) or ['...'])[0]}, ...}}; got {item!r}."
                    )
                target = _find(current, item["name"], field, where)
                _merge(target, item, item_model, where, f"{field}.{item['name']}.")
        elif isinstance(current, dict) and isinstance(value, dict):
            _merge(current, value, _sub_model(model, key), where, f"{field}.")
        else:
            base[key] = value


def _remove(task: dict[str, Any], dotted: str, where: str) -> None:
    """Delete the mapping key or named list item at the dotted path ``dotted``."""
    parent: Any = None
    node: Any = task
    walked: list[str] = []
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            parent, node = node, node[part]
        elif isinstance(node, list) and part in _names(node):
            parent, node = node, _find(node, part, ".".join(walked), where)
        else:
            there = list(node) if isinstance(node, dict) else _names(node) if isinstance(node, list) else []
            raise SpecError(
                f"{where}: cannot remove '{dotted}': the base has no '{part}' in "
                f"'{'.'.join(walked) or '(top level)'}' (there: {', '.join(there) or 'nothing'})."
                + did_you_mean(closest_name(part, there))
            )
        walked.append(part)
    if isinstance(parent, dict):
        del parent[walked[-1]]
    else:
        del parent[next(i for i, item in enumerate(parent) if item is node)]
