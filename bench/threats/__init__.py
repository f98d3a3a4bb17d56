"""Threat models: observers that say which deliveries an adversary sees and build its serializable
:class:`~bench.threats.view.View` — observed messages, the coalition's own data and states,
running totals and declared public knowledge (``base``, ``view``) — for the honest-but-curious
``server``, ``fl_user``, ``neighbors`` and ``eavesdropper`` and the deviating ``active``
coalition; importing the package registers them all.
"""

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
    from bench.core.params import call_with_params

    return call_with_params(THREATS, name, "threat", **params)
