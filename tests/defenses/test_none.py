"""The undefended baseline ``none``."""

from defense_runs import PROTOCOL_CONFIGS, defense, differs, protocol_of, run


def test_none_is_the_identity_on_every_protocol():
    for key in PROTOCOL_CONFIGS:
        name, protocol = protocol_of(key)
        d = defense("none")
        assert d.applies_to(name, protocol) is None
        sim = run(key, d)
        assert not differs(sim, run(key, None))
        # as the harness runs it: no hook point, no mechanism, no override, nothing accounted
        hooks = sim.hooks
        assert hooks.active_hooks() == frozenset() and hooks.mechanisms == []
        assert hooks.accounting() == {} and hooks.protocol_overrides(name) == {}
