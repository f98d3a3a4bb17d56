"""The analytic attack on PDMM traffic and the defenses that act on it: the claims (TIFS C3, thesis
C6–C8) are named checks in ``bench/claims/yu2023.py``, run by ``tests/claims/test_claims.py``; here, the
attack's parameters and the relation of its estimators."""

from bench.claims.yu2023 import attack_error


def test_the_two_estimators_agree_at_consensus_and_the_lag_matters_only_to_the_anchored_one():
    """The anchor-free Δz estimator is exact at any lag; the anchored weights estimator is not
    exact after 40 rounds (its anchor error) at lag 2."""
    assert attack_error(0, t_max=40, estimator="delta_z", lag=1) < 1e-6
    assert attack_error(0, t_max=40, estimator="delta_z", lag=3) < 1e-6
    assert attack_error(0, t_max=40, estimator="weights", lag=2) > 1e-6
