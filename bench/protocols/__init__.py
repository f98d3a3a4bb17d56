"""Learning protocols: FedSGD, FedAvg, D-PSGD, gossip averaging."""

from bench.protocols import decentralized, federated, pdmm, pdmm_centralized  # noqa: F401  (registration)
from bench.protocols.base import PROTOCOLS, BatchPlan, Protocol

__all__ = ["PROTOCOLS", "BatchPlan", "Protocol"]
