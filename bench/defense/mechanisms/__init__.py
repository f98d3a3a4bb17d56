"""The harness's privacy mechanisms, configured by defenses and run by bench
(:mod:`bench.defense.mechanisms.base`): DP-SGD's per-sample clipping and noise
(:class:`PerSampleGaussian`, also distributed DP), DP-FedAvg's clipped updates and server noise
(:class:`CentralGaussian`), Muffliato's private gossip and private D-SGD (:class:`PrivateGossip`,
:class:`PrivateDSGD`), message noise (:class:`MessageNoise`) and secure aggregation
(:class:`SecureAggregation`)."""

from bench.defense.mechanisms.base import Mechanism, MechanismHooks
from bench.defense.mechanisms.central import CentralGaussian
from bench.defense.mechanisms.gossip import PrivateDSGD, PrivateGossip
from bench.defense.mechanisms.message import MessageNoise
from bench.defense.mechanisms.per_sample import PerSampleGaussian
from bench.defense.mechanisms.secure_aggregation import SecureAggregation

__all__ = [
    "CentralGaussian",
    "Mechanism",
    "MechanismHooks",
    "MessageNoise",
    "PerSampleGaussian",
    "PrivateDSGD",
    "PrivateGossip",
    "SecureAggregation",
]
