"""Every suite ranks defenses: each of its tasks has defenses besides ``none`` that apply to it."""

from __future__ import annotations

import pytest

from bench.core.params import call_with_params
from bench.defense.loading import build_defense
from bench.protocols import PROTOCOLS
from bench.spec.catalog import Catalog, bench_root


@pytest.mark.parametrize("suite", ["quick", "real", "standard"])
def test_every_task_of_a_suite_has_defenses_that_apply_to_it(suite: str):
    root = bench_root()
    catalog = Catalog(root)
    spec = catalog.suite(suite)
    defenses = [build_defense(d.name, dict(d.params), root) for d in spec.defenses if d.name != "none"]
    for name in spec.tasks:
        sim = catalog.task(name).simulation
        protocol = call_with_params(PROTOCOLS, sim.protocol, "protocol", **sim.protocol_params)
        applying = [d for d in defenses if d.applies_to(sim.protocol, protocol) is None]
        assert len(applying) >= 4, (suite, name, len(applying))
