"""The ``decoded_local_model`` source of the membership attacks: the local optimum of each FedAvg
client decoded by Xu & Neglia (2021, "What else is leaked when eavesdropping federated
learning?") from what a curious server or eavesdropper observes — the issue's "decoded model
handed to the membership inference suite as one more target".

For the attacked round ``t`` and each client ``c`` observed by then, the target is

    θ̂_c*(t) = decode({(θ(s), θ_c(s)) : s ∈ T^c, s ≤ t}),

the decoder of :class:`~bench.attacks.model_recovery.local_model.LocalModelReconstruction` run on the pairs
of the rounds up to ``t``
(:meth:`~bench.attacks.model_recovery.local_model.LocalModelReconstruction.decode_pairs`):
Observation 1's ``θ̂ = W⁻¹v`` from the float64 least squares of ``[θ(s)ᵀ, −1] S = Δθ(s)ᵀ``
(``method: exact``; exact for linear least squares, a fitted affine model of the local
training otherwise) or Algorithm 3 (``method: mapping``, Eqs. 6–7). The decoder's parameters are
the attack's ``decoder`` mapping (every parameter of ``local_model_reconstruction`` but
``rounds`` and ``victims``, which the membership attack sets). Only the View is read: the
``global_model`` each client received and the ``local_model`` it returned, in every round up to
the last attacked one.

Why: ``θ_c*`` minimizes client ``c``'s loss alone, so it fits ``c``'s samples more closely than
the global model (every client's data) or ``c``'s returned model (``E`` local steps from the
global model) — a sharper target for a loss-threshold attack (Xu & Neglia 2021, §2 and §5).
"""

from __future__ import annotations

from typing import Any

import torch

from bench.attacks.base import AttackError, Requirement
from bench.attacks.membership.observed import LAST, fixed_rounds
from bench.attacks.model_recovery.decoder import ObservedPairs, observed_pairs
from bench.attacks.model_recovery.local_model import LocalModelReconstruction
from bench.core.errors import require
from bench.threats import View

DECODED = "decoded_local_model"
#: decoder parameters the membership attack sets itself
RESERVED = ("rounds", "victims")


def build_decoder(params: dict[str, Any] | None) -> LocalModelReconstruction:
    """The Xu & Neglia decoder configured by ``params`` (``None``: the exact decoder with its
    defaults), validated by :class:`LocalModelReconstruction` itself."""
    params = {} if params is None else params
    require(isinstance(params, dict), "attack.decoder", params, "must be a mapping of decoder parameters")
    taken = [k for k in RESERVED if k in params]
    require(not taken, "attack.decoder", params, f"must not set {taken}: the membership attack's rounds do")
    return LocalModelReconstruction(**params)


def decoded_requirement(rounds: list[int | str]) -> Requirement:
    """Every round up to the last attacked one (the decoder stacks them all), FedAvg's
    ``global_model`` and ``local_model`` messages; with ``"last"``, the whole transcript."""
    kinds = ("global_model", "local_model")
    if LAST in rounds:
        return Requirement(rounds=(), kinds=kinds, all_rounds=True)
    return Requirement(rounds=tuple(range(max(fixed_rounds(rounds)) + 1)), kinds=kinds)


def _until(obs: ObservedPairs, t: int) -> ObservedPairs | None:
    k = sum(1 for r in obs.rounds if r <= t)
    if k == 0:
        return None
    return ObservedPairs(obs.node, obs.rounds[:k], obs.server[:k], obs.returned[:k])


def decoded_rounds(view: View, rounds: list[int | str]) -> list[int]:
    """The attacked rounds: ``"last"`` is the last round a pair was observed in."""
    pairs = observed_pairs(view)
    fixed = fixed_rounds(rounds)
    if LAST not in rounds:
        return fixed
    last = max(obs.rounds[-1] for obs in pairs.values())
    return sorted({r for r in fixed if r <= last} | {last})


def decoded_targets(
    view: View, t: int, decoder: LocalModelReconstruction
) -> tuple[list[int], torch.Tensor, list[dict[str, float]]]:
    """The clients observed in some round ``≤ t``, their decoded local optima ``[V, P]`` from
    those rounds' pairs (module docstring) and the decoder's diagnostics per client."""
    victims, thetas, extras = [], [], []
    for v, obs in sorted(observed_pairs(view).items()):
        if v in view.coalition:
            continue
        seen = _until(obs, t)
        if seen is None:
            continue
        theta, extra = decoder.decode_pairs(seen)
        victims.append(v)
        thetas.append(theta)
        extras.append(extra)
    if not victims:
        raise AttackError(f"no (global_model, local_model) pair observed up to round {t}")
    return victims, torch.stack(thetas), extras
