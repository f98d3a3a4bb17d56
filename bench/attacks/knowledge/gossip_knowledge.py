"""Knowledge-matrix attack on gossip averaging: a colluding coalition solves ``K_T X = Y_T`` for
the private values of the nodes whose unit vector lies in ``rowspace(K_T)``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.knowledge.exact_rowspace import exact_identifiable
from bench.attacks.knowledge.knowledge_matrix import (
    IDENTIFY_TOL,
    RANK_RTOL,
    identified_by_step,
    identify,
    knowledge_system,
    reconstruct,
)
from bench.attacks.knowledge.noisy_knowledge import posterior_mean
from bench.attacks.observe import gradients
from bench.core.errors import require, require_positive_int
from bench.core.params import require_choice
from bench.threats import View

#: identifiability tests: numerical rank (SVD) or exact over the rationals
TESTS = ("float", "exact")


@ATTACKS.register(
    "gossip_knowledge_matrix",
    "gossip averaging: solve the coalition's knowledge-matrix system K_T X = Y_T for identifiable nodes",
)
class GossipKnowledgeMatrix(Attack):
    """The reconstruction attack on gossip averaging of El Mrini, Cyffers & Bellet, "Privacy
    Attacks in Decentralized Learning", ICML 2024, §3.1.

    Every value ``x_w^k`` a coalition member receives is ``(W^k)_{w,:} X`` (``X^k = W^k X^0``,
    Boyd et al. 2006), so the coalition's own values and received messages form ``K_T X = Y_T``
    (:mod:`bench.attacks.knowledge.knowledge_matrix`). Node ``v`` is reconstructable iff
    ``e_v ∈ rowspace(K_T)``, and then ``x̂_v = (K_T^+ Y_T)_v`` is exact.

    The attack answers one :class:`Reconstruction` per node outside the coalition (round 0, the
    private value as a ``[1, *input_shape]`` input): the estimate for identifiable nodes, an
    all-NaN ``x`` — *not reconstructed*, no estimate — for the others; ``extra`` holds
    ``identifiable`` (0/1), the distance ``residual`` of ``e_v`` to the row space, the
    ``amplification`` ``‖(K_T^+)_{v,:}‖`` (how much message error reaches ``x̂_v``) and, on every
    reconstruction, the run-level diagnostics ``n_identifiable``, ``n_targets``, ``rank``,
    ``rows``, ``steps`` (gossip steps observed) and ``saturation_step`` (the first prefix of
    steps after which the identifiable set stops growing).

    Parameters
    ----------
    rounds:
        Rounds ``0 … rounds − 1`` whose ``value`` messages are recorded and used (each has
        ``gossip_steps`` gossip steps). Once ``rounds · gossip_steps ≥ n`` more cannot add rows
        outside the span (Cayley–Hamilton: ``W^n`` is a combination of ``I … W^{n-1}``).
    test:
        ``"float"``: numerical rank of the SVD (``rtol``, ``tol``); ``"exact"``: over ℚ with the
        rational ``W`` (:mod:`~bench.attacks.knowledge.exact_rowspace`; small graphs). The
        estimate is the float least-squares one in both cases.
    rtol:
        Singular values ``≤ rtol · σ_1`` count as zero (rank and pseudo-inverse).
    tol:
        Largest distance of ``e_v`` to the row space for ``v`` to count as identifiable.
    noise_var:
        The declared variance of the defense's perturbation of each message (``None``: none, the
        exact solve): then every node gets the posterior-mean estimate (:meth:`adapt`).
    """

    threats = ("neighbors",)
    metrics = ("reconstructed_fraction",)
    protocols = ("gossip_averaging",)
    family = "linear-algebra reconstruction"

    def __init__(
        self,
        rounds: int = 50,
        test: str = "float",
        rtol: float = RANK_RTOL,
        tol: float = IDENTIFY_TOL,
        noise_var: float | None = None,
    ) -> None:
        self.rounds = require_positive_int(rounds, "attack.rounds")
        self.test = require_choice(test, TESTS, "attack.test")
        for name, value in (("rtol", rtol), ("tol", tol)):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1
            require(ok, f"attack.{name}", value, "must be a number in (0, 1)")
        self.rtol = float(rtol)
        self.tol = float(tol)
        ok = noise_var is None or (isinstance(noise_var, (int, float)) and noise_var >= 0)
        require(ok, "attack.noise_var", noise_var, "must be a non-negative number or null")
        self.noise_var = None if noise_var is None else float(noise_var)

    def adapt(self, defense: str, knowledge: dict[str, Any]) -> dict[str, Any] | None:
        """Against a defense that declares its perturbation — a noise scale ``sigma`` (Gaussian
        noise, Muffliato) or a quantization step ``delta`` (variance ``δ²/12``) — the posterior
        mean under that noise (:mod:`~bench.attacks.knowledge.noisy_knowledge`) for every
        node, instead of the exact solve that amplifies the noise."""
        sigma, delta = knowledge.get("sigma"), knowledge.get("delta")
        if isinstance(sigma, (int, float)) and sigma > 0:
            return {"noise_var": float(sigma) ** 2}
        if isinstance(delta, (int, float)) and delta > 0:
            return {"noise_var": float(delta) ** 2 / 12.0}
        return None

    def requirements(self) -> Requirement:
        return Requirement(rounds=tuple(range(self.rounds)), kinds=("value",))

    def run(self, view: View) -> list[Reconstruction]:
        protocol = gradients.knowledge(view, "protocol")
        if protocol != "gossip_averaging":
            raise AttackError(f"gossip_knowledge_matrix attacks gossip_averaging, not {protocol}")
        gradients.knowledge(view, "mixing")
        try:
            system = knowledge_system(view, "value", steps=None)
        except ValueError as err:
            raise AttackError(str(err)) from None
        k, y = system.matrix(), system.observations
        ident = identify(k, self.rtol, self.tol)
        mask, rank = ident.identifiable, ident.rank
        if self.test == "exact":
            try:
                mask, rank = exact_identifiable(system.mixing, system.senders, system.powers)
            except ValueError as err:
                raise AttackError(str(err)) from None
        if self.noise_var is None:
            x_hat = reconstruct(k, y, mask, self.rtol)
        else:  # defense-aware: an estimate for every node, the posterior mean under the noise
            x_hat = posterior_mean(system, self.noise_var)
        amplification = np.linalg.norm(np.linalg.pinv(k, rtol=self.rtol), axis=1)  # [n]
        counts, _ = identified_by_step(system, self.rtol, self.tol)
        saturation = int(np.argmax(counts == counts[-1]))
        shape = gradients.input_shape(view)
        members = set(system.coalition)
        targets = [v for v in range(system.n_nodes) if v not in members]
        run_level = {
            "n_identifiable": float(sum(bool(mask[v]) for v in targets)),
            "n_targets": float(len(targets)),
            "rank": float(rank),
            "rows": float(k.shape[0]),
            "steps": float(system.steps),
            "saturation_step": float(saturation),
        }
        if x_hat.shape[1] != int(np.prod(shape)):
            raise AttackError(f"values of width {x_hat.shape[1]} do not match the input shape {shape}")
        x_t = torch.from_numpy(x_hat)
        return [
            Reconstruction(
                v,
                0,
                x=x_t[v].reshape(1, *shape),
                extra={
                    "identifiable": float(mask[v]),
                    "residual": float(ident.residual[v]),
                    "amplification": float(amplification[v]),
                    **run_level,
                },
            )
            for v in targets
        ]
