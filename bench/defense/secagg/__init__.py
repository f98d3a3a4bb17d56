"""Secure aggregation (Bonawitz et al., CCS 2017): fixed-point encoding into ``Z_{2^k}``
(:mod:`~bench.defense.secagg.fixed_point`), X25519 key agreement (:mod:`~bench.defense.secagg.keys`), the
PRG that
expands seeds into masks (:mod:`~bench.defense.secagg.prg`), Shamir secret sharing
(:mod:`~bench.defense.secagg.shamir`) and the masking/unmasking of one aggregation
(:mod:`~bench.defense.secagg.protocol`). The defense plugin ``defenses/secure_aggregation.py`` runs it
on the protocols' messages."""

from bench.defense.secagg.fixed_point import SecAggError, SecAggOverflow, check_sum_range, decode, encode
from bench.defense.secagg.protocol import Instance, SecAggFailure, SecureAggregator, threshold

__all__ = [
    "Instance",
    "SecAggError",
    "SecAggFailure",
    "SecAggOverflow",
    "SecureAggregator",
    "check_sum_range",
    "decode",
    "encode",
    "threshold",
]
