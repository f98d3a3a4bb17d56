"""``membership_threshold``: the metric-based membership attack on the models a view holds.

The attacker evaluates a per-sample signal of an observed model on every candidate and calls
a candidate a member of the model's owner when the signal says "fits well" (Yeom et al. 2018:
the loss; Song & Mittal 2021: the modified entropy ``Mentr``, which Pasquini et al. 2023 use,
§2.2.1). The threshold is not the attack's business: the scorer sweeps every threshold (ROC,
AUC, TPR at low FPR) and reports Pasquini's oracle ``M − 0.5`` (:mod:`bench.metrics.membership`).

Which model (``source``):

* ``"global_model"`` — FL: the global model ``θ(t)`` a curious user (``fl_user``) receives in
  round ``t``; every other node is a victim, evaluated on the same scores (Pasquini et al. §3:
  ``A^FL_user``);
* ``"received"`` — D-PSGD: each neighbour's half-step update ``Θ_v^{t+1/2}`` the coalition
  receives in round ``t`` (Pasquini et al. §4.1.1);
* ``"marginalized"`` — D-PSGD: the same update after functional marginalization (Eq. 6, or
  Algorithm 2's normalization with ``include_self=False``; :mod:`bench.membership.marginalization`),
  which needs the coalition's own update of the round in the view.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.gradients import first_payloads, flat_model
from bench.errors import require
from bench.membership.marginalization import marginalize
from bench.membership.signals import SIGNALS, membership_score
from bench.registry_utils import require_choice
from bench.simulation.messages import SERVER
from bench.threats import View

SOURCES = ("global_model", "received", "marginalized")
_KINDS = {"global_model": "global_model", "received": "model", "marginalized": "model"}


@ATTACKS.register(
    "membership_threshold",
    "metric-based MIA (loss, Mentr …) on the FL global model or D-PSGD received/marginalized updates",
)
class MembershipThreshold(Attack):
    """Score every candidate by ``signal`` on the observed model of each victim (module docstring).

    Parameters
    ----------
    rounds:
        Rounds whose models are attacked (one answer per victim and round).
    source:
        ``"global_model"``, ``"received"`` or ``"marginalized"``.
    signal:
        A registered signal of :data:`bench.membership.signals.SIGNALS` (``"mentr"``: Pasquini
        et al.; ``"loss"``: Yeom et al.).
    include_self:
        Marginalization: Eq. 6 (``True``) or Algorithm 2's normalization (``False``).
    """

    threats: ClassVar[tuple[str, ...]] = ("fl_user", "neighbors")
    metrics: ClassVar[tuple[str, ...]] = ("membership_auc",)
    #: the harness passes the candidate pool to :meth:`run`
    needs_candidates: ClassVar[bool] = True

    def __init__(
        self,
        rounds: list[int] | tuple[int, ...] = (0,),
        source: str = "global_model",
        signal: str = "mentr",
        include_self: bool = True,
    ) -> None:
        require(
            isinstance(rounds, (list, tuple))
            and len(rounds) > 0
            and all(isinstance(r, int) and r >= 0 for r in rounds),
            "attack.rounds",
            rounds,
            "must be a non-empty list of round indices",
        )
        self.rounds = [int(r) for r in rounds]
        self.source = require_choice(source, SOURCES, "attack.source")
        self.signal = require_choice(signal, tuple(SIGNALS.names()), "attack.signal")
        self.include_self = bool(include_self)

    def requirements(self) -> Requirement:
        """The attacked rounds' models (and, for Eq. 6 marginalization, the coalition's state
        after each: :meth:`_own_update`)."""
        rounds = set(self.rounds)
        if self.source == "marginalized" and self.include_self:
            rounds |= {r + 1 for r in self.rounds}
        return Requirement(rounds=tuple(sorted(rounds)), kinds=(_KINDS[self.source],))

    def run(  # type: ignore[override]
        self, view: View, x: torch.Tensor | None = None, y: torch.Tensor | None = None
    ) -> list[Reconstruction]:
        if x is None or y is None:
            raise AttackError("a membership attack needs the harness' candidate pool")
        model = flat_model(view)
        out = []
        for t in self.rounds:
            models = self._models(view, t)
            if not models:
                raise AttackError(f"no '{_KINDS[self.source]}' model observed in round {t}")
            victims = sorted(models)
            theta = torch.stack([models[v] for v in victims]).to(x.dtype)
            scores = membership_score(self.signal, model, theta, x, y)  # [V, C]
            out += [Reconstruction(node=v, round=t, scores=s) for v, s in zip(victims, scores, strict=True)]
        return out

    def _models(self, view: View, t: int) -> dict[int, torch.Tensor]:
        """``victim -> the model attacked`` in round ``t``."""
        coalition = tuple(view.coalition)
        if self.source == "global_model":
            batches = view.select(t, "global_model")
            rows = [b.payload[i] for b in batches for i, s in enumerate(b.senders.tolist()) if s == SERVER]
            if not rows:
                return {}
            n = int(view.knowledge["n_nodes"])
            return {v: rows[0] for v in range(n) if v not in coalition}
        received = first_payloads(view, t, "model", exclude=coalition)
        if self.source == "received" or not received:
            return received
        victims = sorted(received)
        others = torch.stack([received[v] for v in victims])
        own = self._own_update(view, t, victims, others) if self.include_self else torch.zeros_like(others[0])
        updates = torch.cat([own[None], others])
        marg = marginalize(updates, 0, list(range(1, len(victims) + 1)), self.include_self)
        return dict(zip(victims, marg, strict=True))

    @staticmethod
    def _own_update(view: View, t: int, victims: list[int], others: torch.Tensor) -> torch.Tensor:
        """The coalition's own ``Θ_A^{t+1/2}``, from its next state and the public mixing matrix:
        ``Θ_A^{t+1} = Σ_u W_{Au} Θ_u^{t+1/2}`` (one gossip step), solved for ``u = A``. (Eq. 6
        needs it; Algorithm 2's normalization does not.)"""
        a = view.coalition[0]
        if t + 1 not in view.own_states:
            raise AttackError(f"Eq. 6 marginalization needs the coalition's state after round {t}")
        w = torch.as_tensor(view.knowledge["mixing"], dtype=others.dtype)
        nxt = view.own_states[t + 1][0].to(others.dtype)
        if float(w[a, a]) == 0.0:
            raise AttackError("the attacker's own mixing weight is 0: its update cannot be recovered")
        return (nxt - w[a, victims] @ others) / w[a, a]
