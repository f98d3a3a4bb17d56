"""Functional marginalization (Pasquini et al. 2023, Eq. 6 and Algorithm 2): the closed forms,
the exact identity at consensus (C11's "no effect at C = 0"), and bad inputs."""

import pytest
import torch

from bench.core.errors import BenchInputError
from bench.threats.active.marginalization import marginalize


def _updates(k=5, p=7, seed=0):
    return torch.randn(k, p, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("own", [0, 2])
def test_both_normalizations_equal_the_paper_formulas_term_by_term(own):
    u = _updates()
    k = u.shape[0]
    victims = [v for v in range(k) if v != own]
    eq6 = marginalize(u, own, victims, include_self=True)
    alg2 = marginalize(u, own, victims, include_self=False)
    for i, v in enumerate(victims):
        others = [w for w in range(k) if w != v]
        rest = [w for w in others if w != own]
        torch.testing.assert_close(eq6[i], k * u[v] - u[others].sum(0), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(alg2[i], (k - 1) * u[v] - u[rest].sum(0), rtol=1e-12, atol=1e-12)
        # the implementer's rewriting: an extrapolation away from the mean of the others
        torch.testing.assert_close(
            eq6[i], u[v] + (k - 1) * (u[v] - u[others].mean(0)), rtol=1e-12, atol=1e-12
        )


def test_at_consensus_marginalization_returns_the_received_update_exactly():
    theta = _updates(1, 9, seed=3)
    u = theta.expand(6, -1).clone()
    for include_self in (True, False):
        out = marginalize(u, 0, [1, 3, 5], include_self)
        torch.testing.assert_close(out, theta.expand(3, -1), rtol=1e-14, atol=1e-14)


def test_away_from_consensus_it_changes_the_update():
    u = _updates()
    assert (marginalize(u, 0, [1]) - u[1]).abs().max() > 0.1


def test_bad_rows_are_input_errors():
    u = _updates()
    with pytest.raises(BenchInputError, match="victims"):
        marginalize(u, 0, [0])
    with pytest.raises(BenchInputError, match="victims"):
        marginalize(u, 0, [5])
    with pytest.raises(BenchInputError, match="own"):
        marginalize(u, 7, [1])
