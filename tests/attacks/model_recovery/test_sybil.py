"""Secure-aggregation evasion with two Sybils (Pasquini et al., S&P 2023, §6.1; claim C9)."""

import pytest

from bench.attacks import AttackError, build_attack
from bench.attacks.model_recovery.sybil import sybil_models
from bench.claims.pasquini2023 import fig10_run
from bench.defense.loading import build_defense
from bench.evaluation.truth import Scorer
from bench.metrics import build_metric
from tests.support.bench_root import REPO


def test_the_recovered_gradient_is_inverted_under_secure_aggregation():
    """End to end: the round-0 gradient ``(Θ⁰ − Θ_v^{½})/η`` from the Sybils, inverted by Inverting
    Gradients, gives the victim's digit under the real secure aggregation (default encoding)."""
    secagg = build_defense("secure_aggregation", {}, REPO, None)
    sim = fig10_run(secagg, model="mlp")
    attack = build_attack(
        "inverting_gradients", rounds=[0], source="sybil_difference", iterations=300, restarts=1
    )
    recs = attack.run(sim.view("sybils"))
    scorer = Scorer(sim.config, sim.data)
    values = build_metric("image_psnr").compute(recs, [scorer.truth(r) for r in recs], scorer.info)
    assert [r.node for r in recs] == [2]
    assert values["headline"] > 25 > values["baseline"]


def test_the_sybils_need_neighbourhoods_differing_by_one_node():
    sim = fig10_run(topology="torus", nodes=9)
    with pytest.raises(AttackError, match="differ by exactly one node"):
        sybil_models(sim.view("sybils"), 0)
