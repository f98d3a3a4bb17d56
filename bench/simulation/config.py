"""The configuration of one simulation run (validated; unknown fields are errors)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from bench.core.errors import NON_FINITE, find_non_finite

#: ``dtype`` names → torch dtypes
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}


def finite_param(value: Any) -> Any:
    """``value`` (a parameter of a registered factory) if no number inside it is infinite or NaN."""
    found = find_non_finite(value)
    if found is not None:
        path, number = found
        raise ValueError(f"{path.lstrip('.')} is {number}: {NON_FINITE}" if path else NON_FINITE)
    return value


#: the value of a ``*_params`` entry: anything YAML holds except infinite or NaN numbers
ParamValue = Annotated[Any, AfterValidator(finite_param)]

#: keys of each ``<group>_params`` mapping that the engine passes itself, and the field (or
#: other source) they come from: a user may not give them
ENGINE_PARAMS: dict[str, dict[str, str]] = {
    "dataset": {"name": "dataset", "seed": "seed"},
    "partition": {
        "n_samples": "dataset",
        "n_nodes": "nodes",
        "seed": "seed",
        "labels": "dataset",
        "attributes": "dataset",
    },
    "model": {"name": "model", "input_shape": "dataset", "n_outputs": "dataset", "for_engine": "engine"},
    "topology": {
        "name": "topology",
        "n": "nodes",
        "seed": "seed",
        "mixing": "mixing",
        "mixing_params": "mixing",
    },
    "mixing": {"name": "mixing", "graph": "topology"},
    "protocol": {},
}


class SimulationConfig(BaseModel):
    """Everything that defines a run; the same config and seed give bit-identical results.

    Names (``dataset``, ``model``, ``topology``, ``mixing``, ``protocol``, ``partition``) are
    registry keys; ``*_params`` are passed to the registered factory and checked against its
    signature. ``eval_local`` adds the mean test accuracy of the local models to each evaluation
    (it costs one model evaluation per node; the average model's accuracy is always computed).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    dataset: str = Field("two_gaussians", description="Registered dataset (`python -m bench list datasets`).")
    dataset_params: dict[str, ParamValue] = Field(
        default_factory=dict,
        description="The dataset's parameters (e.g. `subset`, `n_train`), checked against its loader.",
    )
    partition: str = Field(
        "iid",
        description="How the training set is split over the nodes: a registered partition "
        "(`python -m bench list partitions`).",
    )
    partition_params: dict[str, ParamValue] = Field(
        default_factory=dict,
        description="The partition's parameters (e.g. `n_per_node` for `fixed_size`, `alpha` for "
        "`dirichlet`).",
    )
    model: str = Field(
        "logreg",
        description="Registered model (`python -m bench list models`); the engine needs buffer-free "
        "models (the `_gn` twins of BatchNorm models).",
    )
    model_params: dict[str, ParamValue] = Field(
        default_factory=dict, description="The model's parameters (e.g. `hidden: [100]` for `mlp`)."
    )
    loss: str | None = Field(
        None,
        description="Registered loss (`python -m bench list losses`); null: squared error for regression, "
        "binary cross-entropy for one logit, else cross-entropy.",
    )
    nodes: int = Field(10, gt=0, description="Number of nodes (clients, or vertices of the graph).")
    topology: str = Field(
        "complete",
        description="Communication graph of decentralized protocols (`python -m bench list topologies`); "
        "federated protocols do not use it.",
    )
    topology_params: dict[str, ParamValue] = Field(
        default_factory=dict, description="The graph's parameters (e.g. `degree`, `radius`)."
    )
    mixing: str = Field(
        "uniform",
        description="Gossip-matrix rule of decentralized protocols (`python -m bench list mixings`).",
    )
    mixing_params: dict[str, ParamValue] = Field(
        default_factory=dict, description="The mixing rule's parameters (e.g. `offset` for `max_degree`)."
    )
    protocol: str = Field("fedsgd", description="Learning protocol (`python -m bench list protocols`).")
    protocol_params: dict[str, ParamValue] = Field(
        default_factory=dict,
        description="The protocol's hyperparameters (e.g. `lr`, `batch_size`, `rho`, `mu`), checked "
        "against its signature.",
    )
    rounds: int = Field(10, ge=0, description="Communication rounds to run.")
    seed: int = Field(
        0, description="Seed of the data subset, partition, graph, initialization and minibatches."
    )
    dtype: Literal["float32", "float64"] = Field("float32", description="Floating-point precision.")
    device: str = Field(
        "auto", description="`auto` (CUDA when available, else CPU), `cpu`, `cuda` or `cuda:K`."
    )
    common_init: bool = Field(
        True, description="Start every node from the same initial model (else one initialization per node)."
    )
    vectorize: Literal["auto", "vmap", "stacked"] = Field(
        "auto",
        description="How all nodes' losses are evaluated: `stacked` (batched matrix products, for "
        "Sequential MLPs), `vmap` (any buffer-free model) or `auto` (stacked where possible).",
    )
    eval_local: bool = Field(
        True,
        description="Also report the local models' mean test accuracy (`val_local_acc`; one model "
        "evaluation per node).",
    )
    eval_every: int = Field(
        10, gt=0, description="Rounds between evaluations on the held-out split (one Lightning epoch)."
    )
    rounds_per_step: int = Field(
        1, gt=0, description="Rounds per Lightning training step (more amortize the loop's overhead)."
    )
    compile: bool = Field(
        False,
        description="Run the protocol's fused round kernels compiled by `torch.compile` (PDMM's "
        "primal step, increments and integration): faster rounds after a one-off compilation of "
        "5-20 s per kernel, so for long runs; the same numbers to float tolerance.",
    )

    @field_validator(*(f"{group}_params" for group in ENGINE_PARAMS))
    @classmethod
    def _not_set_by_the_engine(cls, params: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        group = str(info.field_name).removesuffix("_params")
        for key, source in ENGINE_PARAMS[group].items():
            if key in params:
                origin = "by the engine" if source == "engine" else f"from the field '{source}'"
                raise ValueError(f"'{key}' is set {origin}, not a parameter of the {group} to give here")
        return params
