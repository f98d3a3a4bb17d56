"""System knowledge in D-PSGD (Pasquini et al., S&P 2023, §4.2.1): the victim's model recomputed
from the previous round. The claims C4–C6 and C22 (exact gradients at any round, the momentum
correction and the learning-rate schedule, neighbour discovery, inversion of a recovered gradient)
are named checks in ``bench/claims/pasquini2023_system.py``, run by ``tests/claims/test_claims.py``."""

from bench.attacks.observe.system_knowledge import sent_models, victim_models
from bench.claims.pasquini2023_system import fig6_sim


def test_victim_models_are_recomputed_exactly_from_the_previous_round():
    """Eq. 8/9: ``Θ_v^t = Σ_{u∈N(v)} W_vu Θ_u^{t−½}`` equals every honest node's true state, and
    what the attacker sent is recovered from its own mixing."""
    sim = fig6_sim()
    view = sim.view("A")
    for t in (1, 2, 3):
        models = victim_models(view, t)
        assert sorted(models) == [1, 2, 3]
        for v, theta in models.items():
            assert float((theta - sim.view(f"v{v}").own_states[t][0]).abs().max()) < 1e-12
        sent = sent_models(view, t - 1)
        assert sorted(sent) == [0, 1, 2, 3]
