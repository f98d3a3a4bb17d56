"""Learning protocols, one family per module, each seeing the run only through a
:class:`~bench.protocols.base.ProtocolContext`: FedSGD and FedAvg (``federated``), D-PSGD and
gossip averaging (``decentralized``), A/PDMM with differential transmission (``pdmm``, its edge
state in ``pdmm_edges``) and centralized PDMM (``pdmm_centralized``); :mod:`bench.protocols.base`
holds the interface — message kinds, the defense hooks a protocol calls, its batch plan — and
the registry :data:`PROTOCOLS`.
"""

from bench.protocols import decentralized, federated, pdmm, pdmm_centralized  # noqa: F401  (registration)
from bench.protocols.base import PROTOCOLS, BatchPlan, Protocol

__all__ = ["PROTOCOLS", "BatchPlan", "Protocol"]
