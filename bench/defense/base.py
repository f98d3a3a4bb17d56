"""The one module a defense plugin imports: everything ``defenses/*.py`` builds on, re-exported
from where it lives — the plugin base class and registry (:mod:`bench.defense.plugin`), what a
per-node hook is told (:mod:`bench.defense.node`, :class:`~bench.defense.hooks.RunInfo`), the
harness's mechanisms a defense configures (:mod:`bench.defense.mechanisms`: DP-SGD, distributed
DP, DP-FedAvg, Muffliato, message noise, secure aggregation), the parameter checks
(:mod:`bench.core.errors`, :mod:`bench.core.params`), the row-wise defenses and their operations
(:mod:`bench.defense.rowwise`) and the protocol type. The plugin rules
(:mod:`bench.defense.source_policy`) allow a plugin no other bench import. Nothing of the engine
imports this module.
"""

from bench.core.errors import BenchInputError, require, require_number, require_positive_int
from bench.core.params import require_choice
from bench.defense.hooks import RunInfo
from bench.defense.kinds import check_kinds, kinds_reason
from bench.defense.mechanisms import (
    CentralGaussian,
    MessageNoise,
    PerSampleGaussian,
    PrivateDSGD,
    PrivateGossip,
    SecureAggregation,
)
from bench.defense.node import BROADCAST, MessageContext, NodeContext
from bench.defense.plugin import ALL_THREATS, DEFENSES, PASSIVE_THREATS, Defense
from bench.defense.privacy.accounting import DEFAULT_DELTA
from bench.defense.rowwise import RowwiseDefense, clip_rows, clip_scale, norm_scale, top_k_count, top_k_rows
from bench.protocols import Protocol
from bench.simulation.messages import SERVER

__all__ = [
    "ALL_THREATS",
    "BROADCAST",
    "DEFAULT_DELTA",
    "DEFENSES",
    "PASSIVE_THREATS",
    "SERVER",
    "BenchInputError",
    "CentralGaussian",
    "Defense",
    "MessageContext",
    "MessageNoise",
    "NodeContext",
    "PerSampleGaussian",
    "PrivateDSGD",
    "PrivateGossip",
    "Protocol",
    "RowwiseDefense",
    "RunInfo",
    "SecureAggregation",
    "check_kinds",
    "clip_rows",
    "clip_scale",
    "kinds_reason",
    "norm_scale",
    "require",
    "require_choice",
    "require_number",
    "require_positive_int",
    "top_k_count",
    "top_k_rows",
]
