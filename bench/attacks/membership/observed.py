"""The models a membership attacker observes in one round, per victim (shared by the
membership attacks).

* ``"global_model"`` — FL: the global model ``θ(t)`` a curious user (``fl_user``) receives in
  round ``t``; every other node is a victim, evaluated on the same model (Pasquini et al. 2023
  §3, ``A^FL_user``);
* ``"local_model"`` — FedAvg: each client's local model ``θ_c(t)`` after its local steps, as
  the server (or an eavesdropper) receives it (the individual update Pasquini et al. §1.3 note
  the server sees);
* ``"received"`` — D-PSGD: each neighbour's half-step update ``Θ_v^{t+1/2}`` the coalition
  receives in round ``t`` (§4.1.1);
* ``"marginalized"`` — D-PSGD: the same update after functional marginalization (Eq. 6, or
  Algorithm 2's normalization with ``include_self=False``; :mod:`bench.threats.active.marginalization`),
  which needs the coalition's own update of the round, recovered from its next state.

Rounds: a list of round indices and/or ``"last"`` — the last round the run actually ran,
whatever stopped it (a fixed-round attack would find nothing to attack under early stopping;
listed rounds after the last one are then left out). ``"last"`` reads the last round's observed
batch that the transcript's running total of the source's message kind keeps
(:class:`~bench.simulation.transcript.RunningTotal`), so no round needs to be declared in
advance; the coalition's final state comes with it (Eq. 6).
"""

from __future__ import annotations

import torch

from bench.attacks.base import AttackError, Requirement
from bench.attacks.observe.gradients import first_payloads
from bench.core.errors import require
from bench.simulation.messages import SERVER
from bench.threats import View
from bench.threats.active.marginalization import marginalize

SOURCES = ("global_model", "local_model", "received", "marginalized")
#: the ``rounds`` value that attacks the last round the run ran
LAST = "last"
#: the message kind each source reads
KINDS = {
    "global_model": "global_model",
    "local_model": "local_model",
    "received": "model",
    "marginalized": "model",
}


def check_rounds(rounds: object) -> list[int | str]:
    """``rounds`` validated: a non-empty list of round indices and/or ``"last"``, or ``"last"``
    alone (normalized to a list)."""
    if rounds == LAST:
        return [LAST]
    require(
        isinstance(rounds, (list, tuple))
        and len(rounds) > 0
        and all(r == LAST or (isinstance(r, int) and not isinstance(r, bool) and r >= 0) for r in rounds),
        "attack.rounds",
        rounds,
        "must be a non-empty list of round indices (and/or 'last'), or 'last'",
    )
    ints = sorted({int(r) for r in rounds if r != LAST})  # type: ignore[union-attr]
    return [*ints, LAST] if LAST in rounds else list(ints)  # type: ignore[operator]


def fixed_rounds(rounds: list[int | str]) -> list[int]:
    """The explicit round indices of ``rounds`` (without ``"last"``)."""
    return [int(r) for r in rounds if r != LAST]


def requirement(rounds: list[int | str], source: str, include_self: bool = True) -> Requirement:
    """The attacked rounds' messages (and, for Eq. 6 marginalization, the coalition's state
    after each round: :func:`own_update`); with ``"last"``, also the running total of the
    source's kind (module docstring)."""
    needed = set(fixed_rounds(rounds))
    if source == "marginalized" and include_self:
        needed |= {r + 1 for r in needed}
    totals = (KINDS[source],) if LAST in rounds else ()
    return Requirement(rounds=tuple(sorted(needed)), kinds=(KINDS[source],), totals=totals)


def resolve_rounds(view: View, rounds: list[int | str], source: str) -> list[int]:
    """The attacked round indices. ``"last"`` becomes the last observed round, whose batch is
    put back among the View's messages (the View is the attack's own copy); then listed rounds
    after it — which a run stopped early never reached — are left out."""
    fixed = fixed_rounds(rounds)
    if LAST not in rounds:
        return fixed
    total = view.totals.get(KINDS[source])
    if total is None:
        raise AttackError(f"no '{KINDS[source]}' message observed in any round")
    last = int(total.last_round)
    if not view.select(last, KINDS[source]):
        view.messages.append(total.last)
    return sorted({r for r in fixed if r <= last} | {last})


def observed_models(view: View, t: int, source: str, include_self: bool = True) -> dict[int, torch.Tensor]:
    """``victim -> the model attacked`` in round ``t`` (module docstring); empty when nothing of
    ``source`` was observed in round ``t``."""
    coalition = tuple(view.coalition)
    if source == "global_model":
        batches = view.select(t, "global_model")
        rows = [b.payload[i] for b in batches for i, s in enumerate(b.senders.tolist()) if s == SERVER]
        if not rows:
            return {}
        n = int(view.knowledge["n_nodes"])
        return {v: rows[0] for v in range(n) if v not in coalition}
    if source == "local_model":
        return first_payloads(view, t, "local_model", exclude=coalition)
    received = first_payloads(view, t, "model", exclude=coalition)
    if source == "received" or not received:
        return received
    victims = sorted(received)
    others = torch.stack([received[v] for v in victims])
    own = own_update(view, t, victims, others) if include_self else torch.zeros_like(others[0])
    updates = torch.cat([own[None], others])
    marg = marginalize(updates, 0, list(range(1, len(victims) + 1)), include_self)
    return dict(zip(victims, marg, strict=True))


def own_update(view: View, t: int, victims: list[int], others: torch.Tensor) -> torch.Tensor:
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


def stacked_targets(
    view: View, t: int, source: str, include_self: bool = True
) -> tuple[list[int], torch.Tensor]:
    """The victims of round ``t`` and their observed models ``[V, P]`` (an :class:`AttackError`
    when nothing was observed)."""
    models = observed_models(view, t, source, include_self)
    if not models:
        raise AttackError(f"no '{KINDS[source]}' model observed in round {t}")
    victims = sorted(models)
    return victims, torch.stack([models[v] for v in victims])
