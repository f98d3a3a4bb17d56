"""The D-GD attack of El Mrini, Cyffers & Bellet (ICML 2024): the coalition recovers the gradients
of distant nodes by generalized least squares, then inverts them into their data points."""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np
import torch

from bench.attacks.base import ATTACKS, Attack, AttackError, Reconstruction, Requirement
from bench.attacks.inversion.analytic import invert_linear, linear_slots
from bench.attacks.inversion.inverting_gradients import InvertingGradients
from bench.attacks.knowledge.dgd_system import (
    OBSERVATIONS,
    Blocks,
    dgd_covariance,
    dgd_knowledge,
    gls,
    remove_attackers,
    split,
)
from bench.attacks.knowledge.knowledge_matrix import IDENTIFY_TOL, RANK_RTOL
from bench.attacks.observe.common_model import MODEL_KIND, common_model
from bench.attacks.observe.gradients import (
    GradientTarget,
    architecture,
    flat_model,
    input_shape,
    knowledge,
)
from bench.attacks.observe.system_knowledge import own_half_steps
from bench.core.errors import require, require_positive_int
from bench.core.params import require_choice
from bench.threats import View

ESTIMATORS = ("gls", "ols")
INVERSIONS = ("analytic", "inverting_gradients")


def _payloads(view: View, node: int, round_: int) -> dict[int, np.ndarray]:
    got = view.received(node, round_, MODEL_KIND)
    for sender, p in got.items():
        if not p.is_floating_point():
            raise AttackError(
                f"the model node {sender} sent in round {round_} is masked ({p.dtype}; secure aggregation?): "
                f"attack what the coalition's own models reveal instead (observe: aggregate)"
            )
    return {s: p.detach().cpu().double().numpy() for s, p in got.items()}


def observations(
    view: View, blocks: Blocks, steps: int, theta0: torch.Tensor, lr: float, observe: str = "messages"
) -> tuple[np.ndarray, np.ndarray]:
    """``(observed [steps, k, P], sent [steps, |A|, P])`` relative to ``θ^0``, float64: what the
    coalition sees of its neighbours each round (``m z_T^t``, :class:`~.dgd_system.Blocks`) and
    its own half-steps ``z_A^t``.

    ``"messages"``: ``observed[t, i]`` is the half-step model ``θ_w^{t+½}`` received from the
    ``i``-th neighbouring target, and what member ``a`` sent comes from the mixing it applied:
    ``θ_a^{t+1} = W_aa θ_a^{t+½} + Σ_{u≠a} W_au m_{u→a}``, so ``θ_a^{t+½} = (θ_a^{t+1} −
    Σ_{u≠a} W_au m_{u→a}) / W_aa`` — exactly the (possibly defended, e.g. noised) message its
    neighbours mixed. ``"aggregate"`` (secure aggregation: single messages are masked): the
    members compute their half-steps from their own data (:func:`own_half_steps`; exact when no
    defense perturbs the local step) and each member ``a`` with a neighbouring target observes
    ``θ_a^{t+1} − θ^0 − Σ_{b∈A} W_ab z_b^t = Σ_{u∈T} W_au z_u^t``.

    Raises
    ------
    AttackError
        When a round's messages or the coalition's state at the start of round ``t + 1`` are not
        in the View, a message is masked (``"messages"``), or ``W_aa = 0``.
    """
    w = np.asarray(knowledge(view, "mixing"), dtype=np.float64)
    base = theta0.detach().cpu().double().numpy()
    members = list(blocks.coalition)
    sent = own_half_steps(view, range(steps), lr, theta0) if observe == "aggregate" else None
    observed = np.empty((steps, blocks.m.shape[0], base.size))
    mixed_sent = np.empty((steps, len(members), base.size))
    for t in range(steps):
        if t + 1 not in view.own_states:
            raise AttackError(
                f"the coalition's state at the start of round {t + 1} is not in the view (the run has "
                f"fewer than {steps + 1} rounds? lower attack.rounds)"
            )
        states = view.own_states[t + 1].detach().cpu().double().numpy() - base
        if sent is not None:
            rows = (w[np.ix_(members, blocks.targets)] != 0).any(1)
            observed[t] = (states - w[np.ix_(members, members)] @ sent[t])[rows]
            continue
        heard: dict[int, dict[int, np.ndarray]] = {}
        for j, a in enumerate(members):
            heard[a] = _payloads(view, a, t)
            if w[a, a] == 0:
                raise AttackError(f"W_aa = 0 for coalition member {a}: its own half-step is not recoverable")
            mixed = sum((w[a, u] * (p - base) for u, p in heard[a].items() if u != a), np.zeros_like(base))
            mixed_sent[t, j] = (states[j] - mixed) / w[a, a]
        for i, v in enumerate(blocks.targets[blocks.observed]):
            payload = next((heard[a][int(v)] for a in members if int(v) in heard[a]), None)
            if payload is None:
                raise AttackError(f"no model from neighbour {int(v)} observed in round {t}")
            observed[t, i] = payload - base
    return observed, (sent if sent is not None else mixed_sent)


@ATTACKS.register(
    "dgd_knowledge_matrix",
    "D-GD: the coalition recovers distant nodes' gradients by GLS on its knowledge matrix, then inverts them",
)
class DGDKnowledgeMatrix(Attack):
    """The attack on D-GD of El Mrini, Cyffers & Bellet, "Privacy Attacks in Decentralized
    Learning", ICML 2024 (§4 and appendix; the Bellet et al. slides, §3.3).

    Stage 1 (:mod:`bench.attacks.knowledge.dgd_system`): every received half-step model is,
    after the attackers' own contributions are removed, ``(Σ_{j≤t} W_TT^j)_{w,:} g_T`` plus
    correlated noise, where ``g_v = −γ ∇ℓ(θ_v; x_v)`` is node ``v``'s gradient under the
    attack's model "gradients change slowly" (D-GD with small steps). Generalized least squares
    with the noise covariance of the note gives ``ĝ_v`` for every target whose ``e_v`` lies in
    ``rowspace(K_T)``; the gradient is ``∇ℓ_v ≈ −ĝ_v / γ``.

    Stage 2: the data point from the gradient, taken at the common initialization ``θ^0`` (known
    to the coalition; with the tiny step sizes of the setting the models barely move):
    ``"analytic"`` (one-sample softmax/logistic regression, ``x = ∇_{W_c}ℓ / ∂ℓ/∂b_c``,
    :func:`~bench.attacks.inversion.analytic.invert_linear`) or ``"inverting_gradients"`` (Geiping et al.
    2020 for the ConvNet, :class:`~bench.attacks.inversion.inverting_gradients.InvertingGradients`
    with ``inversion_params``; every target batched in one optimization).

    Returns one :class:`Reconstruction` per target (every node outside the coalition, round 0):
    non-identifiable targets get an all-NaN ``x`` (not reconstructed, no estimate). ``extra``:
    ``identifiable``, ``residual`` (distance of ``e_v`` to the row space), ``distance`` (hops to
    the coalition), ``grad_norm`` of the recovered gradient and, run-level, ``rank``, ``cond``,
    ``n_identifiable``, ``n_targets``, ``steps``.

    Requirements: D-PSGD with full local batches, one local and one gossip step per round, no
    momentum (D-GD), a common initialization, and the coalition's states up to the start of
    round ``rounds`` (the run needs more than ``rounds`` rounds).

    Parameters
    ----------
    rounds:
        ``T``, the D-GD rounds ``0 … T − 1`` whose messages form the system.
    estimator:
        ``"gls"`` (the note's covariance) or ``"ols"`` (ordinary least squares, for comparison).
    inversion, inversion_params:
        Stage 2 and, for ``inverting_gradients``, its parameters (preset, iterations, restarts,
        tv_weight, …; ``rounds``/``source`` are not used).
    observe:
        ``"messages"`` (each neighbour's half-step model) or ``"aggregate"`` (what secure
        aggregation leaves: each member's weighted sum of its neighbours' models, one row
        ``W_{a,T} S_t`` per member and round; the attack's variant against it, :meth:`adapt`).
    rtol, tol:
        Numerical rank and identifiability tolerances, as in ``gossip_knowledge_matrix``.
    """

    threats = ("neighbors",)
    metrics = ("psnr_success",)
    protocols = ("dpsgd",)
    family = "linear-algebra reconstruction"

    def __init__(
        self,
        rounds: int = 40,
        estimator: str = "gls",
        inversion: str = "analytic",
        inversion_params: dict[str, Any] | None = None,
        observe: str = "messages",
        rtol: float = RANK_RTOL,
        tol: float = IDENTIFY_TOL,
    ) -> None:
        self.rounds = require_positive_int(rounds, "attack.rounds")
        self.estimator = require_choice(estimator, ESTIMATORS, "attack.estimator")
        self.inversion = require_choice(inversion, INVERSIONS, "attack.inversion")
        self.observe = require_choice(observe, OBSERVATIONS, "attack.observe")
        require(
            inversion_params is None or isinstance(inversion_params, dict),
            "attack.inversion_params",
            inversion_params,
            "must be a mapping of inverting_gradients parameters",
        )
        self.inversion_params = dict(inversion_params or {})
        self._inverter = InvertingGradients(**self.inversion_params) if inversion != "analytic" else None
        for name, value in (("rtol", rtol), ("tol", tol)):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1
            require(ok, f"attack.{name}", value, "must be a number in (0, 1)")
        self.rtol, self.tol = float(rtol), float(tol)

    def adapt(self, defense: str, knowledge: dict[str, Any]) -> dict[str, Any] | None:
        """Against secure aggregation (a defense that declares it ``reveals`` only weighted sums),
        the aggregate observations: one row per member and round instead of none."""
        if "weighted sum" in str(knowledge.get("reveals", "")):
            return {"observe": "aggregate"}
        return None

    def requirements(self) -> Requirement:
        return Requirement(rounds=tuple(range(self.rounds + 1)), kinds=(MODEL_KIND,))

    def _check_protocol(self, view: View) -> float:
        protocol = knowledge(view, "protocol")
        if protocol != "dpsgd":
            raise AttackError(f"dgd_knowledge_matrix attacks D-GD (protocol dpsgd), not {protocol}")
        hp = knowledge(view, "hyperparameters")
        dgd = (
            hp.get("batch_size") is None
            and int(hp.get("local_steps", 1)) == 1
            and int(hp.get("gossip_steps", 1)) == 1
            and not hp.get("momentum")
            and not hp.get("lr_milestones")
        )
        if not dgd:
            raise AttackError(
                "the attack models D-GD: full local batches, one local and one gossip step, no momentum, "
                "a constant step; "
                f"got { ({k: hp.get(k) for k in ('batch_size', 'local_steps', 'gossip_steps', 'momentum')}) }"
            )
        return float(hp["lr"])

    def run(self, view: View) -> list[Reconstruction]:
        lr = self._check_protocol(view)
        if not view.coalition:
            raise AttackError("the attack needs a coalition")
        theta0 = common_model(view, 0)
        blocks = split(knowledge(view, "mixing"), tuple(view.coalition), self.observe)
        received, sent = observations(view, blocks, self.rounds, theta0, lr, self.observe)
        k = dgd_knowledge(blocks, self.rounds)
        y = remove_attackers(blocks, received, sent)
        cov = dgd_covariance(blocks, self.rounds) if self.estimator == "gls" else None
        sol = gls(k, y, cov, self.rtol, self.tol)
        grads = torch.from_numpy(-sol.estimate / lr).to(theta0.dtype)  # ∇ℓ_v = −ĝ_v / γ
        graph = knowledge(view, "graph")
        hops = nx.multi_source_dijkstra_path_length(graph, set(view.coalition))
        targets = [int(v) for v in blocks.targets]
        run_level = {
            "rank": float(sol.rank),
            "cond": float(sol.cond),
            "n_identifiable": float(sol.identifiable.sum()),
            "n_targets": float(len(targets)),
            "steps": float(self.rounds),
        }
        found = [i for i in range(len(targets)) if sol.identifiable[i]]
        inverted = self._invert(view, theta0, [(targets[i], grads[i]) for i in found])
        shape = input_shape(view)
        recs = []
        for i, v in enumerate(targets):
            extra = {
                "identifiable": float(sol.identifiable[i]),
                "residual": float(sol.residual[i]),
                "distance": float(hops.get(v, -1)),
                "grad_norm": float(grads[i].norm()) if sol.identifiable[i] else float("nan"),
                **run_level,
            }
            if v in inverted:
                rec = inverted[v]
                rec.extra.update(extra)
                recs.append(rec)
            else:
                recs.append(Reconstruction(v, 0, x=torch.full((1, *shape), float("nan")), extra=extra))
        return recs

    def _invert(
        self, view: View, theta0: torch.Tensor, grads: list[tuple[int, torch.Tensor]]
    ) -> dict[int, Reconstruction]:
        if not grads:
            return {}
        if self._inverter is not None:
            targets = [GradientTarget(v, 0, theta0, g) for v, g in grads]
            return {rec.node: rec for rec in self._inverter.invert(view, targets)}
        model, shape = flat_model(view), input_shape(view)
        n_classes = int(architecture(view).get("n_classes", 0))
        w_name, b_name = linear_slots(model, shape)
        out = {}
        for v, g in grads:
            x, y, denom, c = invert_linear(model, g, w_name, b_name, n_classes)
            extra = {"bias_grad": denom, "class_row": float(c)}
            out[v] = Reconstruction(v, 0, x=x.reshape(1, *shape).detach().clone(), y=y, extra=extra)
        return out
