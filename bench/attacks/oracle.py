"""The attack side of the defense oracle: queries an attack sends to the sandboxed process that
runs the job's defense (:mod:`bench.evaluation.oracle`), through the harness's relay.

A generic defense-aware variant (``<attack>+oracle``) gets an :class:`OracleClient` in ``run``:
gradient-matching attacks ask it for their objective through the defense's send pipeline
(a :class:`~bench.attacks.inversion.oracle_transform.DefenseTransform` over the client),
reference-model membership attacks for reference worlds trained under the defense
(:meth:`OracleClient.reference_worlds`), so that their signals are calibrated to the defended
distribution. Queries and answers are plain data. The client knows nothing of what is built on
it: it carries queries and answers.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from bench.attacks.base import OracleUnavailable
from bench.attacks.membership.reference_worlds import ReferenceModels
from bench.simulation.messages import SERVER
from bench.threats import View

#: the query channel: plain data in, plain data out (raises when the oracle cannot answer)
Ask = Callable[[dict[str, Any]], dict[str, Any]]

#: the oracle's reason when an evaluate query names a problem set it does not keep (e.g. its
#: process was restarted): the client sends ``θ`` and ``g`` again
UNKNOWN_PROBLEMS = "unknown problem set"


class OracleClient:
    """Queries of one attack to the defense oracle of its job; ``receiver`` is the node whose
    deliveries the attack reads (the server, or the coalition's first node for a neighbour)."""

    def __init__(self, ask: Ask, receiver: int = SERVER) -> None:
        self.ask, self.receiver = ask, int(receiver)
        self._info: dict[str, Any] | None = None

    def info(self) -> dict[str, Any]:
        """What the oracle says of the send pipeline ``D`` (asked once): ``per_sample`` (it reads
        per-sample gradients), ``random`` and the EOT ``draws`` each answer averages."""
        if self._info is None:
            self._info = self.query({"op": "info", "receiver": self.receiver})
        return self._info

    @property
    def per_sample(self) -> bool:
        return bool(self.info()["per_sample"])

    def for_view(self, view: View) -> OracleClient:
        """This client with the receiver of ``view``'s adversary."""
        receiver = view.coalition[0] if view.threat == "neighbors" and view.coalition else SERVER
        out = copy.copy(self)  # shares the channel and what info() learnt
        out.receiver = int(receiver)
        return out

    def query(self, q: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.ask(q)
        except Exception as exc:
            raise OracleUnavailable(f"the defense oracle cannot answer: {exc}") from None

    def reference_worlds(self, **args: Any) -> dict[int, ReferenceModels]:
        """Reference worlds trained *under the defense*, in the oracle process: the arguments of
        :func:`bench.attacks.membership.reference_worlds.reference_worlds_at` (``cfg`` as JSON, tensors for
        the
        rest), answered as ``round -> ReferenceModels``."""
        answer = self.query({"op": "reference_worlds", **args})
        out = {}
        for t, m in answer.get("worlds", {}).items():
            if not all(isinstance(m.get(k), torch.Tensor) for k in ("theta", "world", "trained_on")):
                raise OracleUnavailable("the defense oracle answered with malformed reference worlds")
            out[int(t)] = ReferenceModels(m["theta"], m["world"], m["trained_on"])
        return out
