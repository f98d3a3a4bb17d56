"""System knowledge in D-PSGD: a victim's model recomputed from what the coalition saw one round
earlier, its exact gradient at any round, and neighbour discovery (Pasquini, Raynal & Troncoso,
"On the (In)security of Peer-to-Peer Decentralized Machine Learning", S&P 2023, §4.2.1).

In round ``t`` node ``v`` sends ``Θ_v^{t+½} = Θ_v^t − η m_v^t`` and then mixes
``Θ_v^{t+1} = Σ_{u∈N(v)} W_vu Θ_u^{t+½}`` (Eq. 8, self-inclusive ``N(v)``; uniform
``W_vu = 1/|N(v)|`` in the paper). A coalition ``A`` with ``N(v) ⊆ N(A) ∪ A`` has received (or
sent) every ``Θ_u^{t−½}``, ``u ∈ N(v)`` — including ``v``'s own — so it recomputes ``Θ_v^t`` exactly
(case 3 of §4.2.1) and gets the exact step ``m_v^t = (Θ_v^t − Θ_v^{t+½}) / η``, the gradient itself
under plain SGD. With heavy-ball momentum ``μ`` (``m^t = μ m^{t−1} + ∇L^t``, PyTorch's
convention, the paper's training uses μ = 0.9) the step is the momentum buffer; the gradient is
``∇L^t = m^t − μ m^{t−1}`` from two consecutive recoveries (the caveat the paper leaves open),
which needs rounds ``t − 2 … t`` recorded. Each round's ``η_t`` follows the protocol's public
step-decay schedule (:func:`~bench.protocols.decentralized.lr_at`). Round 0 uses the common initialization
(:func:`~bench.attacks.observe.common_model.common_model`), ``m^{−1} = 0``.

What the coalition itself sent, ``Θ_a^{t−½}``, comes from its own mixing:
``Θ_a^{t} = W_aa Θ_a^{t−½} + Σ_{u≠a} W_au Θ_u^{t−½}`` (:func:`sent_models`) — unless it sent ``v``
something else (an active coalition's forgery, which its view records): then that is what ``v``
mixed (:func:`delivered_by_coalition`).

Neighbour discovery (the corrected form of §4.2.1): when ``N(v)`` is not known,
``Q* = argmin_{Q ∋ v, Q ⊆ S} ‖Θ_v^{t+½} − mean_{u∈Q} Θ_u^{t−½}‖`` over the senders ``S`` the
coalition knows at ``t − 1``; at ``Q = N(v)`` the residual is ``η ‖m_v^t‖``. Exhaustive over the
``2^{|S|−1}`` subsets up to :data:`EXHAUSTIVE_MAX` candidates, greedy (add the sender that lowers
the residual most, while it does) beyond — the paper suggests both — and, as it also suggests,
refined over several rounds (the sum of squared residuals over a window: the neighbourhood is
fixed). Uniform mixing only (the mean): with another rule the weights of an unknown
neighbourhood are unknown too.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from bench.attacks.base import AttackError
from bench.attacks.observe.common_model import MODEL_KIND, common_model
from bench.attacks.observe.gradients import (
    dummy_gradient,
    first_payloads,
    flat_model,
    knowledge,
    loss_function,
    parameter_leaves,
)
from bench.protocols.decentralized import lr_at
from bench.threats import View

#: largest number of candidate senders (besides the victim) searched exhaustively
EXHAUSTIVE_MAX = 12
NEIGHBOURHOODS = ("known", "discovered")


def sent_models(view: View, round_: int) -> dict[int, torch.Tensor]:
    """``node -> Θ_u^{t+½}`` of round ``t``: every model the coalition received at gossip step 0
    and what each member sent, ``Θ_a^{t+½} = (Θ_a^{t+1} − Σ_{u≠a} W_au Θ_u^{t+½}) / W_aa`` (its own
    mixing; needs ``own_states[t + 1]`` and every neighbour's message).

    Raises
    ------
    AttackError
        Without the coalition's state at the start of round ``t + 1``, a neighbour's message or
        with ``W_aa = 0``.
    """
    w = np.asarray(knowledge(view, "mixing"), dtype=np.float64)
    got = first_payloads(view, round_, MODEL_KIND, step=0)
    if round_ + 1 not in view.own_states:
        raise AttackError(f"the coalition's state at the start of round {round_ + 1} is not in the view")
    states = view.own_states[round_ + 1]
    out = {int(u): p for u, p in got.items() if u not in view.coalition}
    for j, a in enumerate(view.coalition):
        nbrs = [int(u) for u in np.flatnonzero(w[a]) if u != a]
        missing = [u for u in nbrs if u not in got]
        if missing or w[a, a] == 0:
            raise AttackError(
                f"coalition member {a}'s own message of round {round_} cannot be recomputed "
                f"({'W_aa = 0' if w[a, a] == 0 else f'no message from {missing}'})"
            )
        theta = states[j].to(torch.float64)
        mixed = sum((float(w[a, u]) * got[u].to(torch.float64) for u in nbrs), torch.zeros_like(theta))
        out[a] = ((theta - mixed) / float(w[a, a])).to(states.dtype)
    return out


def discover_neighbourhood(
    updates: list[torch.Tensor], previous: list[dict[int, torch.Tensor]], victim: int
) -> tuple[list[int], float]:
    """``(Q*, residual)``: the subset ``Q ∋ victim`` of the senders known in every round that
    minimizes ``Σ_r ‖Θ_v^{r+½} − mean_{u∈Q} Θ_u^{r−½}‖²`` over the rounds ``r`` given
    (``updates[i]`` the victim's update of a round, ``previous[i]`` the models of the round
    before), exhaustively up to :data:`EXHAUSTIVE_MAX` other candidates, greedily beyond;
    ``residual`` is the root of the minimum. Over one round this is the paper's rule; the sum
    over several rounds is its suggested refinement — on small graphs whose nodes' models differ
    by little more than ``η‖∇L‖`` a single round often picks a wrong ``Q``."""
    common = set.intersection(*(set(p) for p in previous))
    if victim not in common:
        raise AttackError(f"neighbour discovery needs node {victim}'s own previous model")
    others = sorted(common - {victim})
    order = [victim, *others]
    stacks = [torch.stack([p[u] for u in order]).to(torch.float64) for p in previous]  # [R][1+k, P]
    targets = [u.to(torch.float64) for u in updates]

    def residual(rows: list[int]) -> float:
        return float(sum((t - s[rows].mean(0)).pow(2).sum() for t, s in zip(targets, stacks, strict=True)))

    best, best_r = [0], residual([0])
    if len(others) <= EXHAUSTIVE_MAX:
        for size in range(1, len(others) + 1):
            for combo in itertools.combinations(range(1, len(others) + 1), size):
                r = residual([0, *combo])
                if r < best_r:
                    best, best_r = [0, *combo], r
    else:
        while True:
            trials = [(residual([*best, i]), i) for i in range(1, len(order)) if i not in best]
            if not trials or min(trials)[0] >= best_r:
                break
            best_r, i = min(trials)
            best.append(i)
    return sorted(order[i] for i in best), best_r**0.5


def discovery_window(view: View, round_: int, window: int | None) -> list[int]:
    """The rounds ``r ≤ t`` (the last ``window`` of them; all when ``None``) whose previous round
    and own states the view holds, for :func:`discover_neighbourhood`."""
    recorded = set(view.rounds())
    rounds = [r for r in range(1, round_ + 1) if r in recorded and r - 1 in recorded and r in view.own_states]
    return rounds if window is None else rounds[-window:]


def victim_models(
    view: View, round_: int, neighbourhood: str = "known", window: int | None = None
) -> dict[int, torch.Tensor]:
    """``v -> Θ_v^t`` for every observed non-coalition sender whose model at the start of
    ``round_`` the coalition can recompute: the common initialization at ``t = 0``; for ``t > 0``
    ``Σ_{u∈N(v)} W_vu Θ_u^{t−½}`` when every ``u ∈ N(v)`` sent (or is) a coalition-known model in
    round ``t − 1`` (``"known"``: ``N(v)`` and ``W`` from the public mixing matrix), or the mean
    over the ``Q*`` discovered over the last ``window`` recorded rounds (``"discovered"``)."""
    if round_ == 0:
        theta = common_model(view, 0)
        return {v: theta for v in first_payloads(view, 0, MODEL_KIND, step=0, exclude=view.coalition)}
    previous = sent_models(view, round_ - 1)
    current = first_payloads(view, round_, MODEL_KIND, step=0, exclude=view.coalition)
    forged = delivered_by_coalition(view, round_ - 1)
    out: dict[int, torch.Tensor] = {}
    if neighbourhood == "discovered":
        rounds = discovery_window(view, round_, window)
        history = {r: (sent_models(view, r - 1), first_payloads(view, r, MODEL_KIND, step=0)) for r in rounds}
        for v, update in current.items():
            if all(v in history[r][0] and v in history[r][1] for r in rounds):
                q, _ = discover_neighbourhood(
                    [history[r][1][v] for r in rounds], [history[r][0] for r in rounds], v
                )
                out[v] = torch.stack([previous[u] for u in q]).to(torch.float64).mean(0).to(update.dtype)
        return out
    w = np.asarray(knowledge(view, "mixing"), dtype=np.float64)
    for v, update in current.items():
        nbrs = [int(u) for u in np.flatnonzero(w[v])]
        if all(u in previous for u in nbrs):
            got = {u: forged.get((u, v), previous[u]) for u in nbrs}
            acc = sum((float(w[v, u]) * got[u].to(torch.float64) for u in nbrs), torch.zeros(()))
            out[v] = acc.to(update.dtype)
    return out


def delivered_by_coalition(view: View, round_: int) -> dict[tuple[int, int], torch.Tensor]:
    """``(member, receiver) -> model`` the coalition delivered in ``round_`` as the view shows it
    (an ``active`` view sees what its members send, forgeries included; other views see only the
    deliveries between members, which equal their own models)."""
    out: dict[tuple[int, int], torch.Tensor] = {}
    members = set(view.coalition)
    for batch in view.select(round_, MODEL_KIND, 0):
        for row, receiver in batch.edges.tolist():
            sender = int(batch.senders[row])
            if sender in members and batch.payload.is_floating_point():
                out.setdefault((sender, int(receiver)), batch.payload[row])
    return out


def recover_steps(view: View, round_: int, neighbourhood: str = "known") -> dict[int, torch.Tensor]:
    """``v -> m_v^t = (Θ_v^t − Θ_v^{t+½}) / η`` for every victim of :func:`victim_models`."""
    lr = lr_at(knowledge(view, "hyperparameters"), round_)  # the public schedule's η_t
    models = victim_models(view, round_, neighbourhood)
    current = first_payloads(view, round_, MODEL_KIND, step=0, exclude=view.coalition)
    return {v: (models[v] - current[v].to(models[v].dtype)) / lr for v in sorted(models)}


def recover_gradients(view: View, round_: int, neighbourhood: str = "known") -> dict[int, torch.Tensor]:
    """``v -> ∇L_v^t``: the step of :func:`recover_steps`, corrected for momentum ``μ`` by
    ``m^t − μ m^{t−1}`` (only victims recovered at both rounds)."""
    require_neighbourhood(neighbourhood)
    hyper = knowledge(view, "hyperparameters")
    if int(hyper.get("local_steps", 1)) != 1 or int(hyper.get("gossip_steps", 1)) != 1:
        raise AttackError(
            "gradient recovery needs one local SGD step and one gossip step per round "
            f"(local_steps = {hyper.get('local_steps')}, gossip_steps = {hyper.get('gossip_steps')})"
        )
    steps = recover_steps(view, round_, neighbourhood)
    momentum = float(hyper.get("momentum", 0.0))
    if momentum == 0.0 or round_ == 0:
        return steps
    before = recover_steps(view, round_ - 1, neighbourhood)
    return {v: m - momentum * before[v] for v, m in steps.items() if v in before}


def require_neighbourhood(neighbourhood: str) -> None:
    if neighbourhood not in NEIGHBOURHOODS:
        raise AttackError(f"neighbourhood must be one of {NEIGHBOURHOODS}; got {neighbourhood!r}")


def recovery_rounds(round_: int, momentum: bool) -> tuple[int, ...]:
    """Rounds a transcript must keep to recover round ``t``'s gradients: ``t − 1, t`` (``t − 2``
    too with momentum; only ``0`` at ``t = 0``)."""
    back = 2 if momentum else 1
    return tuple(range(max(0, round_ - back), round_ + 1))


def own_half_steps(view: View, rounds: range | list[int], lr: float, theta0: torch.Tensor) -> np.ndarray:
    """``[len(rounds), |A|, P]``: the coalition's half-steps ``θ_a^t − γ ∇ℓ(θ_a^t; D_a) − θ^0`` of
    ``rounds``, computed from its own states and data (full-batch mean loss), for when its
    messages are masked."""
    model, loss = flat_model(view), loss_function(view)
    base = theta0.detach().cpu().double()
    rounds = list(rounds)
    out = np.empty((len(rounds), len(view.coalition), base.numel()))
    for i, t in enumerate(rounds):
        if t not in view.own_states:
            raise AttackError(f"the coalition's state at the start of round {t} is not in the view")
        for j, a in enumerate(view.coalition):
            theta = view.own_states[t][j]
            x, y = view.own_data[a]
            grad = dummy_gradient(model, loss, parameter_leaves(model, theta), x, y, create_graph=False)
            out[i, j] = (theta - lr * grad).detach().cpu().double().numpy() - base.numpy()
    return out
