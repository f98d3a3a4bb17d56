"""The defense probe: what a defense configuration declares, asked in a process of its own.

The parent never imports defense code. Before a sweep it asks, once per defense
configuration, a child process (:mod:`bench.evaluation.isolation`) to build the defense from the
plugin source the parent hashed and report, for each protocol configuration of the sweep's
tasks: whether the defense applies (and why not), the protocol parameters it overrides, and
what an adaptive attacker is told about it. A bad parameter is an input error that crosses
back intact.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core.params import call_with_params
from bench.core.wire import unblob
from bench.defense.loading import build_defense
from bench.defense.plugin import acting_points
from bench.protocols import PROTOCOLS


def describe_defense(request: dict[str, Any]) -> dict[str, Any]:
    """Child side. ``request``: ``name``, ``params``, ``source`` (a blob), ``root``, and
    ``protocols``: ``key -> [protocol name, protocol params]``. Returns ``protocols`` (the
    names the defense declares), ``threats`` (the threat models it claims to address),
    ``adaptive_knowledge``, ``hooks`` (the hook points where it acts), ``mechanisms`` (the names
    of the harness mechanisms it uses) and, per key, ``reason`` (``None`` when
    it applies) and ``overrides``."""
    defense = build_defense(
        request["name"], request["params"], Path(request["root"]), unblob(request["source"])
    )
    per_key = {}
    for key, (name, params) in request["protocols"].items():
        protocol = call_with_params(PROTOCOLS, name, "protocol", **params)
        overrides = dict(defense.protocol_overrides(name))
        per_key[key] = {"reason": defense.applies_to(name, protocol), "overrides": overrides}
    return {
        "protocols": list(defense.protocols),
        "threats": [str(t) for t in defense.threats],
        "adaptive_knowledge": dict(defense.adaptive_knowledge()),
        "hooks": sorted(acting_points(defense)),
        "mechanisms": [type(m).__name__ for m in defense.mechanisms()],
        "per_protocol": per_key,
    }


@dataclass(frozen=True)
class DefensePlan:
    """What the parent knows of one defense configuration (from the probe) and its source.

    Attributes
    ----------
    name, params:
        The configuration.
    source:
        The plugin's source bytes (executed verbatim by the simulation process).
    digest:
        Hash of ``source`` (part of every job's key).
    reasons, overrides:
        Per protocol key: why the defense does not apply (``None``: it does), and the protocol
        parameters it sets.
    adaptive_knowledge:
        What an adaptive attacker is told about the defense.
    threats:
        The threat models the defense claims to address (:attr:`Defense.threats`); on other
        tracks its entries are not ranked.
    """

    name: str
    params: dict[str, Any]
    source: bytes
    digest: str
    reasons: dict[str, str | None]
    overrides: dict[str, dict[str, Any]]
    adaptive_knowledge: dict[str, Any]
    threats: tuple[str, ...] = ()
    #: the hook points where the defense acts, by its own hooks or its mechanisms
    #: (:func:`~bench.defense.plugin.acting_points`): which generic defense-aware variants have
    #: anything to put into their objective
    hooks: tuple[str, ...] = ()
