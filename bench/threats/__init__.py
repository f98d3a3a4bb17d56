"""Threat models (adversary views): server, fl_user, neighbors, eavesdropper, active."""

from bench.threats import active, eavesdropper, fl_user, neighbors, server  # noqa: F401  (registration)
from bench.threats.base import THREATS, Threat
from bench.threats.view import KNOWLEDGE_ITEMS, KnowledgeError, PublicKnowledge, View

__all__ = [
    "KNOWLEDGE_ITEMS",
    "THREATS",
    "KnowledgeError",
    "PublicKnowledge",
    "Threat",
    "View",
    "build_threat",
]


def build_threat(name: str, **params) -> Threat:
    """Instantiate threat model ``name`` with ``params`` (errors name the field)."""
    from bench.registry_utils import call_with_params

    return call_with_params(THREATS, name, "threat", **params)
