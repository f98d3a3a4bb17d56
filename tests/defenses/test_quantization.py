"""``quantization``: Q(m) = Δ round(m / Δ), or with subtractive dither."""

import pytest
import torch
from defense_runs import PROTOCOL_CONFIGS, defense, protocol_of, run

from bench.core.errors import BenchInputError


def _node_messages(sim):
    return [m for m in sim.transcript.messages["all"] if m.kind not in ("global_model", "z_si")]


@pytest.mark.parametrize("key", ["fedsgd", "dpsgd", "pdmm", "pdmm_centralized"])
def test_every_delivered_coordinate_is_on_the_grid(key):
    delta = 0.05
    sim = run(key, defense("quantization", delta=delta))
    for m in _node_messages(sim):
        cells = m.payload / delta
        torch.testing.assert_close(cells, torch.round(cells), rtol=0, atol=1e-9)


def test_dithered_error_is_bounded_and_unbiased():
    delta = 0.2
    clean, dithered = run("fedsgd", None), run("fedsgd", defense("quantization", delta=delta, dithered=True))
    a = next(m for m in clean.transcript.messages["all"] if m.kind == "gradient" and m.round == 0).payload
    b = next(m for m in dithered.transcript.messages["all"] if m.kind == "gradient" and m.round == 0).payload
    err = b - a
    assert float(err.abs().max()) <= delta / 2 + 1e-12
    assert not torch.equal(a, b)


def test_it_applies_to_every_protocol_by_default():
    for key in PROTOCOL_CONFIGS:
        assert defense("quantization", delta=0.01).applies_to(*protocol_of(key)) is None


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"delta": 0}, "defense.delta"),
        ({"delta": -0.1}, "defense.delta"),
        ({"dithered": "yes"}, "defense.dithered"),
    ],
)
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(BenchInputError) as err:
        defense("quantization", **params)
    assert err.value.field == field
