"""The one module a defense plugin imports: everything ``defenses/*.py`` builds on, re-exported
from where it lives — the plugin base class and registry (:mod:`bench.defense.plugin`), the hooks'
arguments (:mod:`bench.defense.hooks`), the messages (:mod:`bench.simulation.messages`), the
parameter checks (:mod:`bench.core.errors`, :mod:`bench.core.params`), the row-wise defenses
(:mod:`bench.defense.rowwise`), the DP defenses' base classes (:mod:`bench.defense.dp`) and the
protocol type. Libraries a defense may use besides (differential-privacy accounting and mechanisms,
secure aggregation) are imported from their own modules (``bench/defense/privacy/``,
``bench/defense/secagg/``). Nothing of the engine imports this module.
"""

from bench.core.errors import BenchInputError, require, require_number, require_positive_int
from bench.core.params import require_choice
from bench.defense.dp import DPDefense, PerSampleDP
from bench.defense.hooks import Aggregator, RoundContext, RunInfo
from bench.defense.plugin import ALL_THREATS, DEFENSES, PASSIVE_THREATS, Defense, check_kinds, kinds_reason
from bench.defense.rowwise import (
    RowwiseDefense,
    clip_rows,
    clip_scale,
    column_blocks,
    norm_scale,
    top_k_count,
    top_k_rows,
)
from bench.protocols import Protocol
from bench.simulation.messages import SERVER, MessageBatch

__all__ = [
    "ALL_THREATS",
    "DEFENSES",
    "PASSIVE_THREATS",
    "SERVER",
    "Aggregator",
    "BenchInputError",
    "DPDefense",
    "Defense",
    "MessageBatch",
    "PerSampleDP",
    "Protocol",
    "RoundContext",
    "RowwiseDefense",
    "RunInfo",
    "check_kinds",
    "clip_rows",
    "clip_scale",
    "column_blocks",
    "kinds_reason",
    "norm_scale",
    "require",
    "require_choice",
    "require_number",
    "require_positive_int",
    "top_k_count",
    "top_k_rows",
]
