"""Active adversaries: a coalition that deviates from the protocol (Pasquini et al.'s Ā^DL)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from bench.defense.hooks import AdversaryPolicy
from bench.simulation.messages import MessageBatch
from bench.threats.base import THREATS, Threat


@THREATS.register(
    "active",
    "colluding nodes that rewrite what they send (state override, echo) and see what they send and receive",
)
class ActiveThreat(Threat):
    """``Ā^DL`` (Pasquini et al., S&P 2023, §2.2): a coalition running an active policy of
    :mod:`bench.threats.active.policy` (which rewrites the models it sends, per receiver) and observing every
    message delivered to *or sent by* its members — the forged ones included — with its members'
    data and states. A task has at most one active threat: its policy changes the run, and every
    threat of the task observes that (attacked) run.

    Parameters
    ----------
    coalition:
        The deviating nodes.
    policy, policy_params:
        A registered policy (``python -m bench list policies``) and its parameters.
    """

    name = "active"

    def __init__(
        self,
        coalition: Sequence[int] = (0,),
        policy: str = "state_override",
        policy_params: Mapping[str, Any] | None = None,
    ) -> None:
        from bench.threats.active.policy import build_policy

        super().__init__(coalition)
        self.policy_name = str(policy)
        self.policy_params = dict(policy_params or {})
        self._policy = build_policy(self.policy_name, self.coalition, **self.policy_params)

    def adversary(self) -> AdversaryPolicy:
        """The policy the simulation runs (one instance per threat)."""
        return self._policy

    def visible(self, msgs: MessageBatch) -> torch.Tensor:
        return self._in_coalition(msgs.receivers) | self._in_coalition(msgs.edge_senders)


def adversary_of(threats: Mapping[str, Threat]) -> AdversaryPolicy | None:
    """The policy of the task's active threat, if any (threats are keyed by name: one at most)."""
    return next((t.adversary() for t in threats.values() if isinstance(t, ActiveThreat)), None)
