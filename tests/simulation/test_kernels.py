"""The fused round kernels compute the eager numbers when compiled (``compile: true``)."""

import pytest
import torch

from bench.simulation import Simulation
from bench.simulation import kernels as K
from tests.support.runs import PDMM_MLP


def random(*shape):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(sum(shape)))


def test_each_compiled_kernel_equals_its_eager_form_in_float64():
    w, g, a, rd = random(7, 33), random(7, 34)[:, 1:], random(8, 33)[1:], random(7, 1).abs()
    i, j = torch.randint(0, 7, (11,)), torch.randint(0, 7, (11,))
    for fn, args in [
        (K.prox_step, (w, g, a, rd, 0.3)),
        (K.quadratic_step, (w, g, a, rd, 2.5)),
        (K.pair_increments, (w, random(11, 33), i, j, 0.7, 0.5)),
    ]:
        eager, compiled = fn(*args), K.kernel(fn, True)(*args)
        assert K.kernel(fn, True) is not fn and K.kernel(fn, False) is fn
        torch.testing.assert_close(compiled, eager, rtol=1e-13, atol=1e-13)
    d_eager, delivered = random(11, 33), random(22, 33)
    d_compiled = d_eager.clone()
    K.integrate_pairs(d_eager, delivered)
    K.kernel(K.integrate_pairs, True)(d_compiled, delivered)  # in place, through the compiled graph
    torch.testing.assert_close(d_compiled, d_eager, rtol=1e-13, atol=1e-13)
    halves = delivered.view(2, 11, 33)
    assert not torch.equal(d_eager, random(11, 33))
    torch.testing.assert_close(d_eager, random(11, 33) + halves[1] - halves[0], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(
    "params",
    [{"solver": "gradient_step", "mu": 0.02}, {"solver": "quadratic", "mu": 40.0}],
)
def test_compiled_pdmm_runs_the_eager_iterates(params, monkeypatch):
    """A lean PDMM run with ``compile: true`` goes through the compiled kernels and ends where the
    eager run ends (float64, 10 rounds; the size gate lowered to this small model)."""
    monkeypatch.setattr(K, "MIN_COMPILED_NUMEL", 0)
    cfg = {**PDMM_MLP, "protocol_params": {"z0_variance": 4.0, **params}}
    eager, compiled = Simulation(cfg), Simulation({**cfg, "compile": True})
    K._COMPILED.clear()
    eager.run(10)
    assert not K._COMPILED  # the eager run compiles nothing
    compiled.run(10)
    step = K.prox_step if params["solver"] == "gradient_step" else K.quadratic_step
    assert {step, K.pair_increments, K.integrate_pairs} <= set(K._COMPILED)
    assert set(compiled.state) == {"theta", "dz", "a"}
    for key in ("theta", "dz", "a"):
        torch.testing.assert_close(compiled.state[key], eager.state[key], rtol=1e-10, atol=1e-10)
    assert float((eager.theta - Simulation(cfg).theta).abs().max()) > 1e-3  # the run moved


def test_compile_leaves_protocols_without_fused_kernels_bit_identical():
    """D-PSGD has no fused kernel (each pass is one ATen op between defense hooks): compile is a no-op."""
    cfg = {**PDMM_MLP, "protocol": "dpsgd", "protocol_params": {"lr": 0.1}}
    eager, compiled = Simulation(cfg), Simulation({**cfg, "compile": True})
    eager.run(5)
    compiled.run(5)
    assert torch.equal(eager.theta, compiled.theta)


def test_small_operands_stay_eager_under_compile():
    """Below ``MIN_COMPILED_NUMEL`` elements a compiled call costs more than the eager ops: eager."""
    assert K.kernel(K.prox_step, True, K.MIN_COMPILED_NUMEL - 1) is K.prox_step
    assert K.kernel(K.prox_step, True, K.MIN_COMPILED_NUMEL) is not K.prox_step
    K._COMPILED.clear()
    Simulation({**PDMM_MLP, "compile": True}).run(2)  # 12 x 460 parameters
    assert not K._COMPILED
