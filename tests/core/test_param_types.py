"""Parameters of registered factories are checked like types: unknown names with the closest
valid one, and values against the annotation (this module's annotations are strings, as under
``from __future__ import annotations`` everywhere in bench)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import pytest

from bench.core.errors import NON_FINITE, BenchInputError
from bench.core.params import accepted_parameters, call_with_params, check_params, type_mismatch
from bench.core.registry import Registry


@pytest.mark.parametrize(
    ("value", "annotation", "expected"),
    [
        (0.5, float, None),
        (1, float, None),  # an integer is a valid float
        (True, float, "expected a number, got a boolean"),
        ("0.5", float, "expected a number, got a string"),
        (None, float, "expected a number, got null"),
        (float("inf"), float, NON_FINITE),
        (float("nan"), float | None, NON_FINITE),
        (3, int, None),
        (3.0, int, "expected an integer, got a number"),
        (False, int, "expected an integer, got a boolean"),
        (None, int | None, None),
        ("3", int | None, "expected an integer or null, got a string"),
        (True, bool, None),
        (1, bool, "expected a boolean, got an integer"),
        ("yes", bool, "expected a boolean, got a string"),
        ("a", str, None),
        (1, str, "expected a string, got an integer"),
        (["gradient"], list[str] | None, None),
        ("gradient", list[str] | None, "expected a list of strings or null, got a string"),
        (
            [64, "a"],
            list[int] | tuple[int, ...],
            "expected a list of integers, got a list whose item 1 is a string",
        ),
        ([1.5], list[int], "expected a list of integers, got a list whose item 0 is a number"),
        ([0, 3], tuple[int, ...], None),  # YAML has lists only
        ((0, 3), list[int], None),
        ([1, 2], tuple[int, int], None),
        ([1], tuple[int, int], "expected a list of 2 items (an integer, an integer), got a list of 1 item"),
        ([0, 1], Sequence[int], None),
        ("01", Sequence[int], "expected a list of integers, got a string"),
        ([1.0, float("inf")], list[float], NON_FINITE),
        ([0.5], list[float] | float | None, None),
        (0.5, list[float] | float | None, None),
        ("pdmm", float | str, None),
        (True, float | str, "expected a number or a string, got a boolean"),
        ("b", Literal["a", "b"], None),
        ("c", Literal["a", "b"], "expected one of 'a', 'b'"),
        (1, Literal["a", "b"], "expected one of 'a', 'b', got an integer"),
        (True, Literal[1], "expected one of 1, got a boolean"),
        ({"a": 1}, dict[str, int], None),
        ({"a": "x"}, dict[str, int], "expected a mapping of strings to integers, got a mapping"),
        ([1], dict, "expected a mapping, got a list of 1 item"),
        ("anything", Any, None),
        ("anything", object, None),
        ("a tensor?", "torch.Tensor", None),  # not a simple type: not checked
        ("x", int | Any, None),
    ],
)
def test_type_mismatch(value, annotation, expected):
    assert type_mismatch(value, annotation) == expected


def factory(
    sigma: float = 0.1, kinds: list[str] | None = None, mode: Literal["fast", "slow"] = "fast"
) -> None:
    """A factory with string annotations."""


class Base:
    def __init__(self, rounds: list[int] | tuple[int, ...] = (0,), restarts: int = 1) -> None:
        self.rounds, self.restarts = rounds, restarts


class Forwarding(Base):
    def __init__(self, lag: int = 1, **params: object) -> None:
        super().__init__(**params)  # type: ignore[arg-type]
        self.lag = lag


class Anything:
    def __init__(self, **params: object) -> None:
        self.params = params


def test_accepted_parameters_follow_kwargs_up_the_mro():
    assert accepted_parameters(factory) == {
        "sigma": float,
        "kinds": list[str] | None,
        "mode": Literal["fast", "slow"],
    }
    assert accepted_parameters(Forwarding) == {
        "lag": int,
        "rounds": list[int] | tuple[int, ...],
        "restarts": int,
    }
    assert accepted_parameters(Anything) is None  # **params reach object: anything goes


@pytest.mark.parametrize(
    ("fn", "params", "field", "expected"),
    [
        (factory, {"sigma": True}, "defense.sigma", "(expected a number, got a boolean)"),
        (factory, {"kinds": "gradient"}, "defense.kinds", "expected a list of strings or null, got a string"),
        (factory, {"sgima": 1}, "defense.sgima", "Did you mean 'sigma'? Valid choices: kinds, mode, sigma."),
        (factory, {"mode": "fsat"}, "defense.mode", "Did you mean 'fast'? Valid choices: fast, slow."),
        (Forwarding, {"restartz": 3}, "defense.restartz", "Did you mean 'restarts'?"),
        (Forwarding, {"restarts": "3"}, "defense.restarts", "expected an integer, got a string"),
        (Forwarding, {"rounds": [0, "x"]}, "defense.rounds", "got a list whose item 1 is a string"),
    ],
)
def test_check_params_names_the_field_the_value_and_the_expected_type(fn, params, field, expected):
    with pytest.raises(BenchInputError) as info:
        check_params(fn, params, "defense")
    assert info.value.field == field and info.value.value == next(iter(params.values()))
    assert expected in info.value.message


def test_reserved_parameters_are_not_the_users():
    with pytest.raises(BenchInputError, match="unknown parameter") as info:
        check_params(factory, {"sigma": 1.0}, "defense", reserved=("sigma",))
    assert info.value.choices == ["kinds", "mode"]
    check_params(Anything, {"whatever": object()}, "x")  # accepts anything


def test_call_with_params_checks_before_calling():
    registry: Registry = Registry("thing")
    calls = []
    registry.register("noisy")(lambda sigma=0.1: calls.append(sigma))

    def typed(sigma: float = 0.1) -> None:
        calls.append(sigma)

    registry.register("typed")(typed)
    call_with_params(registry, "typed", "thing", sigma=2)
    with pytest.raises(BenchInputError, match="expected a number, got a string"):
        call_with_params(registry, "typed", "thing", sigma="2")
    with pytest.raises(BenchInputError, match="unknown parameter of thing 'typed'"):
        call_with_params(registry, "typed", "thing", sigmaa=2)
    with pytest.raises(BenchInputError, match=r"'thing.name': 'typd'\. Did you mean 'typed'\?"):
        call_with_params(registry, "typd", "thing")
    call_with_params(registry, "noisy", "thing", sigma="not annotated")
    assert calls == [2, "not annotated"]


@pytest.mark.parametrize(
    ("kind", "name", "params", "expected"),
    [
        ("defense", "gaussian_noise", {"sigma": True}, "expected a number, got a boolean"),
        ("defense", "gaussian_noise", {"sigma": None}, "expected a number, got null"),
        ("defense", "gaussian_noise", {"kinds": "gradient"}, "got a string"),
        ("defense", "gaussian_noise", {"sigma": float("inf")}, NON_FINITE),
        ("defense", "quantization", {"dithered": "yes"}, "expected a boolean"),
        ("defense", "early_stopping", {"max_rounds": 2.5}, "expected an integer or null"),
        ("defense", "gaussian_noise", {"sigam": 1.0}, "Did you mean 'sigma'?"),
        ("attack", "pdmm_difference_inversion", {"restartz": 3}, "Did you mean 'restarts'?"),
        ("attack", "pdmm_difference_inversion", {"restarts": "3"}, "expected an integer"),
        ("attack", "dlg", {"rounds": "0"}, "expected a list of integers, got a string"),
        ("threat", "neighbors", {"coalition": "0"}, "expected a list of integers"),
        ("protocol", "dpsgd", {"lr": "0.1"}, "expected a number, got a string"),
        ("protocol", "fedsgd", {"batch_size": True}, "expected an integer or null"),
        ("dataset", "two_gaussians", {"n_train": 1e3}, "expected an integer, got a number"),
    ],
)
def test_every_registry_checks_parameter_types(kind, name, params, expected):
    from bench.attacks import build_attack
    from bench.data import load_dataset
    from bench.defense.loading import build_defense
    from bench.protocols import PROTOCOLS
    from bench.spec.catalog import bench_root
    from bench.threats import build_threat

    builders = {
        "defense": lambda: build_defense(name, params, bench_root()),
        "attack": lambda: build_attack(name, **params),
        "threat": lambda: build_threat(name, **params),
        "protocol": lambda: call_with_params(PROTOCOLS, name, "protocol", **params),
        "dataset": lambda: load_dataset(name, **params),
    }
    with pytest.raises(BenchInputError) as info:
        builders[kind]()
    assert info.value.field == f"{kind}.{next(iter(params))}" and expected in info.value.message
