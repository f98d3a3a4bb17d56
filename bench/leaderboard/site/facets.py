"""What the page's filters select on: each track's protocol, threat model and attack families.

The protocol comes from the task's spec (``simulation.protocol``), the threat model from the
track, and an attack's family from its class (:attr:`bench.attacks.base.Attack.family`; a
defense-aware variant ``<name>+adaptive`` is of its attack's family).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["attack_family", "track_facets"]

#: the family shown for an attack name no registered attack has (an entry of other code)
UNKNOWN = "other"


def attack_family(label: str) -> str:
    """The family of an attack label (``dlg``, ``inverting_gradients+adaptive``,
    ``membership_threshold(source=received)`` …)."""
    from bench.attacks import ATTACKS

    name = re.split(r"[+(]", label, maxsplit=1)[0]
    return ATTACKS.get(name).family if name in ATTACKS.names() else UNKNOWN


def track_facets(
    tracks: Mapping[str, Iterable[str]], tasks: Mapping[str, Any] | None
) -> dict[str, dict[str, Any]]:
    """``track -> {"protocol", "threat", "families"}`` for ``track -> its attack labels``.

    ``tasks`` maps task names to their specs (``None`` or a missing task: protocol ``"?"``)."""
    out = {}
    for track, attacks in tracks.items():
        task, _, threat = track.partition("/")
        spec = (tasks or {}).get(task)
        protocol = str(spec.simulation.protocol) if spec is not None else "?"
        out[track] = {
            "protocol": protocol,
            "threat": threat,
            "families": sorted({attack_family(a) for a in attacks}),
        }
    return out
