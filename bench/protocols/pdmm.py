"""A/PDMM for decentralized learning, with differential transmission and subspace perturbation.

The consensus problem (Yu et al. TIFS 2025 Eq. 3; thesis Eq. 2.1)

    min Σ_i f_i(w_i)  s.t.  B_{i|j} w_i + B_{j|i} w_j = 0  for every edge (i, j),
    B_{i|j} = +I if i < j, −I if i > j,

is solved by synchronous A/PDMM (TIFS Algorithm 1, Eqs. 4–5). Round ``t``, every node ``i``:

    w_i^(t) = argmin_w f_i(w) + Σ_{j∈N_i} z_{i|j}^(t)ᵀ B_{i|j} w + (ρ d_i / 2) ‖w‖²          (4)
    z_{j|i}^(t+1) = (1 − θ) z_{j|i}^(t) + θ (z_{i|j}^(t) + 2ρ B_{i|j} w_i^(t))   ∀ j ∈ N_i     (5)

θ = 1 is PDMM, θ = ½ ADMM (the papers' "Peaceman/Douglas–Rachford" labels are swapped relative
to standard usage; we key on θ). ``f_i`` is the *sum* of the per-sample losses of node ``i``'s whole
local set (the papers' convention; ``loss_reduction="mean"`` divides by ``n_i``).

Transmission. With ``differential=True`` (TIFS Eqs. 13–14) the initial ``z^(0)`` — drawn i.i.d.
``N(0, σ_z²)`` per directed edge and coordinate (subspace perturbation; the papers leave the
distribution open, this is the authors' code's choice) — is delivered once over a *secure*
channel (kind ``z0``, round 0, step 0), and afterwards node ``i`` sends only the increment
``Δz_{j|i}^(t+1) = z_{j|i}^(t+1) − z_{j|i}^(t)`` to ``j`` in plaintext (kind ``delta_z``, step 1);
the receiver adds what it receives. With ``differential=False`` (plain PDMM) ``z_{j|i}^(t+1)``
itself is sent in plaintext (kind ``z``). A defense on the Channel (quantization, noise) changes
what is delivered, and receivers integrate the delivered values.

Local solvers (``solver``):

* ``exact`` — the sub-problem (4) solved: closed form for linear least squares, else
  safeguarded gradient descent (warm-started, per-node adaptive steps) until the optimality
  condition (TIFS Eq. 12) holds to 1e-12 relative, at most ``exact_steps`` steps;
* ``gradient_step`` — one explicit step of size ``mu`` from the previous iterate
  (thesis Eq. 4.2, TIFS Eq. 13): ``w ← w − μ (∇f_i(w) + Σ_j B_{i|j} z_{i|j} + ρ d_i w)``;
* ``inexact`` — ``k_max`` such steps of size ``alpha`` (thesis Eq. 4.1);
* ``quadratic`` — QA-PDMM with curvature ``mu`` (thesis Eq. 4.9):
  ``w ← (μ w − ∇f_i(w) − Σ_j B_{i|j} z_{i|j}) / (μ + ρ d_i)``.

Defense contract: every gradient evaluation of the solvers (each inner step) passes
``per_sample_gradients``/``local_gradients`` (on the gradient of the mean local loss; the sum
reduction multiplies by ``n_i`` afterwards); the closed-form least-squares solve evaluates no
gradient. ``w^(t)`` passes ``local_update``; the ``z0`` and ``delta_z``/``z`` messages pass
``outgoing``; the receivers' integration ``z ← z + Δz`` (or ``z ← z``-as-delivered) is the
aggregation rule (``decode`` per delivered message, then the rule, ``own`` = the current ``z`` rows).

Indexing: ``w^(t)`` is the iterate computed in round ``t`` from ``z^(t)``; the one-step solvers
start from ``w^(t−1)`` (``w^(−1)`` = the common initialization). All nodes and all directed edges
are updated at once: ``z`` is stacked as ``[2|E|, P]`` (row ``e`` = ``z_{src(e)|dst(e)}``, edges in
lexicographic order), with no Python loop over nodes or edges in a round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch

from bench.core.errors import BenchInputError, require, require_number, require_positive_int
from bench.core.params import require_choice
from bench.data.stacked import derive_seed
from bench.defense.hooks import (
    GRADIENT_HOOKS,
    HOOK_NAMES,
    Aggregator,
    DefenseHooks,
    RoundContext,
)
from bench.protocols.base import PROTOCOLS, BatchPlan, Protocol, ProtocolContext, State, check_batch
from bench.protocols.pdmm_edges import EdgeStructure, PairLayout
from bench.simulation.kernels import kernel, prox_step, quadratic_step
from bench.simulation.messages import MessageBatch

if TYPE_CHECKING:
    from bench.data.stacked import NodeBatch

SOLVERS = ("exact", "gradient_step", "inexact", "quadratic")
EDGE_STATES = ("auto", "lean", "full")

__all__ = ["EDGE_STATES", "PDMM", "SOLVERS", "EdgeStructure", "subspace_perturbation_dimension"]


@PROTOCOLS.register(
    "pdmm", "A/PDMM (θ=1 PDMM, θ=½ ADMM) with differential transmission and subspace perturbation"
)
class PDMM(Protocol):
    """A/PDMM on the communication graph (see the module docstring for the equations).

    Parameters
    ----------
    rho:
        Penalty ρ (0.4 in every experiment of the PDMM papers).
    theta:
        Averaging θ: 1 = PDMM, 0.5 = ADMM.
    solver:
        ``exact``, ``gradient_step``, ``inexact`` or ``quadratic``.
    mu:
        Step of ``gradient_step`` (μ = 0.1 for logistic regression, TIFS App. E-A) or the
        curvature of ``quadratic``.
    k_max, alpha:
        Inner steps and their size for ``inexact``.
    exact_steps, exact_lipschitz:
        Gradient steps and the smoothness bound ``L`` of ``f_i`` used by ``exact`` when no
        closed form exists (step ``1 / (L + ρ d_i)``).
    z0_variance:
        σ_z², the variance of the initial ``z^(0)`` (subspace perturbation; 0 = none).
    differential:
        Send increments ``Δz`` after a secure ``z^(0)`` (True) or ``z`` itself in plaintext.
    batch_size:
        ``None`` = the full local set every round (the papers); else a minibatch.
    loss_reduction:
        ``"sum"`` (the papers' ``f_i``) or ``"mean"``.
    record_trajectory:
        Keep ``z^(0)`` and every round's true ``w`` and ``z`` (for oracle comparisons in small
        runs).
    edge_state:
        How ``z`` is stored (:mod:`bench.protocols.pdmm_edges`). ``"lean"``: after round 0,
        ``D_ij = z_{i|j} − z_{j|i}`` per undirected pair and ``a_i = Σ_j B_{i|j} z_{i|j}`` per
        node (half the memory of ``z``, and a round makes a constant number of passes over it);
        needs differential transmission, no ``record_trajectory`` and no defense wrapping the
        aggregation (whose contract hands it the ``z`` rows). ``"full"``: ``z`` as
        ``[2|E|, P]``. ``"auto"`` (default): lean whenever it applies. The two compute the same
        iterates (equal in exact arithmetic; the lean form accumulates ``a``).

    Hooks
    -----
    per_sample_gradients, local_gradients: each solver step
    local_update: the local solution ``w^(t)``
    decode: the receivers' integration ``z ← z + Δz`` (or ``z`` as delivered)
    """

    def __init__(
        self,
        rho: float = 0.4,
        theta: float = 1.0,
        solver: str = "gradient_step",
        mu: float = 0.1,
        k_max: int = 10,
        alpha: float = 0.1,
        exact_steps: int = 2000,
        exact_lipschitz: float = 1.0,
        z0_variance: float = 0.0,
        differential: bool = True,
        batch_size: int | None = None,
        loss_reduction: str = "sum",
        record_trajectory: bool = False,
        edge_state: str = "auto",
    ) -> None:
        super().__init__()
        self.rho = require_number(rho, "protocol.rho")
        self.theta = require_number(theta, "protocol.theta")
        require(self.theta <= 1, "protocol.theta", theta, "must be in (0, 1]")
        self.solver = require_choice(solver, SOLVERS, "protocol.solver")
        self.mu = require_number(mu, "protocol.mu")
        self.k_max = require_positive_int(k_max, "protocol.k_max")
        self.alpha = require_number(alpha, "protocol.alpha")
        self.exact_steps = require_positive_int(exact_steps, "protocol.exact_steps")
        self.exact_lipschitz = require_number(exact_lipschitz, "protocol.exact_lipschitz")
        self.z0_variance = require_number(z0_variance, "protocol.z0_variance", positive=False)
        require(
            isinstance(differential, bool), "protocol.differential", differential, "must be true or false"
        )
        self.differential = differential
        self.batch_size = check_batch(batch_size)
        self.loss_reduction = require_choice(loss_reduction, ("sum", "mean"), "protocol.loss_reduction")
        self.record_trajectory = bool(record_trajectory)
        self.edge_state = require_choice(edge_state, EDGE_STATES, "protocol.edge_state")
        if self.edge_state == "lean":
            require(self.differential, "protocol.edge_state", edge_state, "needs differential = true")
            require(not self.record_trajectory, "protocol.edge_state", edge_state, "records no z trajectory")
        self._edges: EdgeStructure | None = None
        self.trajectory: dict[str, list[torch.Tensor]] = {"w": [], "z": [], "z0": []}

    # ------------------------------------------------------------------------------ set-up
    @property
    def batch_plan(self) -> BatchPlan:
        return BatchPlan(self.batch_size, local_steps=1)

    hook_points = frozenset(HOOK_NAMES)

    def bind(self, ctx: ProtocolContext) -> None:
        super().bind(ctx)
        if ctx.edges.shape[0] == 0:
            raise BenchInputError("topology", "a graph without edges", reason="PDMM needs a graph with edges")

    MESSAGE_KINDS: ClassVar[dict[str, str]] = {
        "z0": "node i → j, round 0, secure channel: z_{i|j}^(0) (differential transmission)",
        "delta_z": "node i → j: the increment Δz_{j|i}^(t+1) (plaintext; differential transmission)",
        "z": "node i → j: z_{j|i}^(t+1) (plaintext; without differential transmission)",
    }

    def message_kinds(self) -> dict[str, str]:
        keep = ("z0", "delta_z") if self.differential else ("z",)
        return {k: v for k, v in self.MESSAGE_KINDS.items() if k in keep}

    @property
    def edges(self) -> EdgeStructure:
        c = self.context
        if self._edges is None or self._edges.src.device != c.edges.device:
            self._edges = EdgeStructure(c.edges, c.n_nodes, c.dtype)
        return self._edges

    def init_state(self, theta0: torch.Tensor) -> State:
        """``w^(−1)`` = the initialization; ``z^(0) ~ N(0, σ_z²)`` per directed edge."""
        e = self.edges
        gen = torch.Generator().manual_seed(derive_seed(self.context.seed, "pdmm_z0"))
        z0 = torch.randn(e.n_edges, theta0.shape[1], generator=gen, dtype=torch.float64)
        z0 = (self.z0_variance**0.5 * z0).to(device=theta0.device, dtype=theta0.dtype)
        if self.record_trajectory:
            self.trajectory["z0"] = [z0.detach().cpu().clone()]
        return {"theta": theta0.clone(), "z": z0}

    # ------------------------------------------------------------------------------ solvers
    def _grad(
        self, w: torch.Tensor, batch: NodeBatch, ctx: RoundContext | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``∇f_i(w_i)`` for all nodes (sum or mean reduction) and the per-node losses, through the
        defense's gradient hooks (``ctx`` given) or bare (``ctx=None``: the attacker's oracle)."""
        x, y, mask = batch.x[:, 0], batch.y[:, 0], batch.mask[:, 0]
        if ctx is None:
            grads, losses = self.context.objective.node_grads(w, x, y, mask)
        else:
            grads, losses = self.gradients(w, x, y, mask, ctx)
        if self.loss_reduction == "sum":
            n = mask.sum(1, keepdim=True).to(w.dtype)
            grads, losses = grads * n, losses * n[:, 0]
        return grads, losses

    def has_observed_gradient(self) -> bool:
        """One-gradient solvers only: their step is affine in one gradient, so the gradient the
        PDMM inversions decode from the traffic (TIFS Eq. 21/31) is the one the hooks made."""
        return self.solver in ("gradient_step", "quadratic")

    def observed_gradient_covers(self, hooks: frozenset[str]) -> bool:
        """Gradient hooks only: through ``local_update`` or ``outgoing`` the decoded gradient
        depends on the node's state (``w^(t−1)``, ``Σ_j B z``), which the oracle does not have."""
        return hooks <= GRADIENT_HOOKS

    def observed_gradient(
        self,
        hooks: DefenseHooks,
        theta: torch.Tensor,
        per_sample: torch.Tensor,
        ctx: RoundContext,
        receiver: int,
    ) -> torch.Tensor:
        """The gradient the one-step solver of round ``k + 1`` used, ``D(∇f_i(w^(k)))``: what the
        noisy-gradient decoding reads as ``g̃[k]`` besides its ``z^(0)`` term (mean-loss scale,
        the hooks' round ``k + 1``, step 0, as :meth:`local_solve`)."""
        assert ctx.nodes is not None
        return self.reduce_gradients(hooks, per_sample, RoundContext(ctx.round + 1, 0, ctx.nodes))

    def _least_squares(self, a: torch.Tensor, batch: NodeBatch) -> torch.Tensor | None:
        """Closed-form exact step for a linear model with squared loss, else ``None``.

        ``min_θ Σ_k (x̃_kᵀθ − y_k)² + aᵀθ + (ρd/2)‖θ‖²`` with ``x̃ = [x, 1]`` (the flat layout of
        ``Linear(d, 1)`` is ``[weight, bias]``): ``(2 X̃ᵀX̃ + ρ d I) θ = 2 X̃ᵀ y − a``."""
        objective = self.context.objective
        linear = [m for m in objective.model.module.modules() if isinstance(m, torch.nn.Linear)]
        if objective.loss_name != "squared" or len(linear) != 1 or linear[0].out_features != 1:
            return None
        x = batch.x[:, 0].flatten(2)
        w = batch.mask[:, 0].to(x.dtype)[..., None]
        xt = torch.cat([x, torch.ones_like(x[..., :1])], dim=2) * w
        scale = 2.0 if self.loss_reduction == "sum" else 2.0 / w.sum(1, keepdim=True).clamp_min(1.0)
        gram = scale * xt.transpose(1, 2) @ xt
        rhs = (scale * xt.transpose(1, 2) @ (batch.y[:, 0].to(x.dtype)[..., None] * w))[..., 0] - a
        eye = torch.eye(gram.shape[-1], dtype=x.dtype, device=x.device)
        system = gram + (self.rho * self.edges.degree)[:, None, None] * eye
        return torch.linalg.solve(system, rhs)

    def local_solve(
        self, w_prev: torch.Tensor, a: torch.Tensor, batch: NodeBatch, t: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The local primal update (4) with the configured solver; returns ``w^(t)`` and losses.
        Inner gradient evaluation ``k`` of round ``t`` calls the gradient hooks with
        ``RoundContext(t, k)``."""
        rd = (self.rho * self.edges.degree)[:, None]
        compiled = self.context.compile
        if self.solver == "gradient_step":
            g, loss = self._grad(w_prev, batch, RoundContext(t))
            return kernel(prox_step, compiled, a.numel())(w_prev, g, a, rd, self.mu), loss
        if self.solver == "quadratic":
            g, loss = self._grad(w_prev, batch, RoundContext(t))
            return kernel(quadratic_step, compiled, a.numel())(w_prev, g, a, rd, self.mu), loss
        if self.solver == "inexact":
            w = w_prev
            for k in range(self.k_max):
                g, loss = self._grad(w, batch, RoundContext(t, k))
                w = kernel(prox_step, compiled, a.numel())(w, g, a, rd, self.alpha)
            return w, loss
        closed = self._least_squares(a, batch)
        if closed is not None:
            x, y, mask = batch.x[:, 0], batch.y[:, 0], batch.mask[:, 0]
            losses = self.context.objective.node_losses(closed, x, y, mask)
            if self.loss_reduction == "sum":
                losses = losses * mask.sum(1).to(losses.dtype)
            return closed, losses
        return self._exact_descent(w_prev, a, batch, rd, t)

    def _exact_descent(
        self, w: torch.Tensor, a: torch.Tensor, batch: NodeBatch, rd: torch.Tensor, t: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Solve (4) by safeguarded gradient descent, all nodes at once: per-node steps start at
        ``1 / (L + ρ d_i)``, halve when neither the sub-problem objective
        ``f_i(w) + aᵀw + (ρ d_i / 2)‖w‖²`` nor the residual decreases and grow by 10 % otherwise; stop
        when every node's optimality residual ``‖∇f_i + a_i + ρ d_i w_i‖`` is below 1e-12
        (relative) or after ``exact_steps`` steps."""

        def objective(w_: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
            g, f = self._grad(w_, batch, RoundContext(t, k))
            return f + (a * w_).sum(1) + 0.5 * rd[:, 0] * (w_ * w_).sum(1), g + a + rd * w_

        step = 1.0 / (self.exact_lipschitz + rd)
        obj, res = objective(w, 0)
        scale = res.norm(dim=1).max().clamp_min(1.0)
        for k in range(self.exact_steps):
            w_try = w - step * res
            obj_try, res_try = objective(w_try, k + 1)
            # accept when the objective decreases, or (near the optimum, where rounding hides
            # objective changes) when the optimality residual does
            ok = ((obj_try < obj) | (res_try.norm(dim=1) < res.norm(dim=1)))[:, None]
            w, obj = torch.where(ok, w_try, w), torch.where(ok[:, 0], obj_try, obj)
            res = torch.where(ok, res_try, res)
            step = torch.where(ok, step * 1.1, step * 0.5)
            if k % 20 == 19 and bool(res.norm(dim=1).max() < 1e-12 * scale):
                break
        x, y, mask = batch.x[:, 0], batch.y[:, 0], batch.mask[:, 0]
        losses = self.context.objective.node_losses(w, x, y, mask)
        if self.loss_reduction == "sum":
            losses = losses * mask.sum(1).to(losses.dtype)
        return w, losses

    # ------------------------------------------------------------------------------- round
    def lean(self) -> bool:
        """Whether this run keeps the lean edge state (``edge_state``; see the parameter)."""
        if self.edge_state == "full" or not self.differential or self.record_trajectory:
            return False
        wrapped = "decode" in self.context.hooks.active_hooks()
        if wrapped and self.edge_state == "lean":
            raise BenchInputError(
                "protocol.edge_state", "lean", reason="the defense wraps the aggregation: use full or auto"
            )
        return not wrapped

    def round(self, t: int, state: State, batch: NodeBatch | None) -> dict[str, torch.Tensor]:
        assert batch is not None
        channel, hooks = self.context.channel, self.context.hooks
        e = self.edges
        if t == 0 and self.differential:
            # z_{i|j}^(0) held by i, shared once with j over a secure channel; what is delivered
            # (after the defense's outgoing hook) is the initial value both endpoints hold
            msgs = MessageBatch(0, 0, "z0", state["z"], e.src, e.deliveries, secure=True)
            state["z"] = self._delivered(channel.send(msgs, RoundContext(0)))
            if self.record_trajectory:
                self.trajectory["z0"] = [state["z"].detach().cpu().clone()]
        if "z" in state and self.lean():
            state["dz"], state["a"] = e.pairs.from_z(state.pop("z"), e)
        if "z" not in state:
            return self._lean_round(t, state, batch)
        z = state["z"]
        w, losses = self.local_solve(state["theta"], e.bz(z), batch, t)
        w = hooks.local_update(w, state["theta"], RoundContext(t))
        # along e = (i → j) node i computes z_{j|i}^(t+1) = (1−θ) z_{j|i} + θ (z_{i|j} + 2ρ B_{i|j} w_i)
        z_rev = z.index_select(0, e.rev)  # z_{j|i}^(t) for every e
        y = torch.addcmul(z, (2.0 * self.rho) * e.sign[:, None], w.index_select(0, e.src))
        step = y - z_rev if self.theta == 1.0 else self.theta * (y - z_rev)  # Δz_{j|i}^(t+1)
        payload = step if self.differential else z_rev + step
        msgs = MessageBatch(t, 1, "delta_z" if self.differential else "z", payload, e.src, e.deliveries)
        ctx = RoundContext(t, 1)
        got = channel.send(msgs, ctx)
        z_new = channel.aggregate(self.aggregation_rule(got.kind, ctx), z, got, ctx)
        state["z"], state["theta"] = z_new, w
        if self.record_trajectory:
            self.trajectory["w"].append(w.detach().cpu().clone())
            self.trajectory["z"].append(z_new.detach().cpu().clone())
        return {"loss": losses.mean()}

    def _lean_round(self, t: int, state: State, batch: NodeBatch) -> dict[str, torch.Tensor]:
        """One round on the lean edge state ``(D, a)`` (:mod:`bench.protocols.pdmm_edges`): the
        same Eqs. 4–5, the increments sent pair-major, the receivers integrating what is
        delivered. The aggregation is the protocol's own (no defense wraps it on this path)."""
        channel, hooks, pairs = self.context.channel, self.context.hooks, self.edges.pairs
        w, losses = self.local_solve(state["theta"], state["a"], batch, t)
        w = hooks.local_update(w, state["theta"], RoundContext(t))
        compiled = self.context.compile
        payload = pairs.increments(w, state["dz"], self.rho, self.theta, compiled)
        msgs = MessageBatch(t, 1, "delta_z", payload, pairs.senders, pairs.deliveries)
        got = channel.send(msgs, RoundContext(t, 1))
        pairs.integrate(state["dz"], state["a"], self._delivered(got, layout=pairs), compiled)
        state["theta"] = w
        return {"loss": losses.mean()}

    def edge_state_bytes(self, state: State) -> int:
        """Bytes of the edge state the protocol keeps between rounds (``z``, or ``D`` and ``a``)."""
        return sum(state[k].numel() * state[k].element_size() for k in ("z", "dz", "a") if k in state)

    def _delivered(
        self, got: MessageBatch, order: torch.Tensor | None = None, layout: PairLayout | None = None
    ) -> torch.Tensor:
        """The payload row delivered along each slot of the layout the protocol sent (directed
        edges in edge order, or ``layout``'s pair-major order), ``[2|E|, P]``; with ``order``,
        along slots ``order``. One gather, none when the layout came back unchanged."""
        e = self.edges
        sent = e.deliveries if layout is None else layout.deliveries
        if got.payload.shape[0] != e.n_edges or got.edges.shape[0] != e.n_edges:
            raise RuntimeError("a defense or adversary changed the number of PDMM messages")
        if got.edges is sent:  # row r delivered along slot r (unchanged layout)
            return got.payload if order is None else got.payload.index_select(0, order)
        rows = got.edges[:, 0]
        return got.payload.index_select(0, rows if order is None else rows.index_select(0, order))

    def aggregation_rule(self, kind: str, ctx: RoundContext) -> Aggregator:
        """The receivers' integration :meth:`integrate`."""
        return self.integrate

    def delivery_slots(self, delivered: MessageBatch, ctx: RoundContext) -> tuple[torch.Tensor, torch.Tensor]:
        """The increment sent along slot ``s = (i → j)`` lands in row ``rev(s)`` (``z_{i|j}``,
        held by ``j``) with coefficient 1 (the full edge state a receive-side defense gets)."""
        rows = self.edges.rev.to(delivered.edges.device)[: len(delivered)]  # delivery d: slot d
        return rows, torch.ones(len(rows), dtype=delivered.payload.dtype, device=rows.device)

    def integrate(self, z: torch.Tensor, got: MessageBatch) -> torch.Tensor:
        """The receivers' rule: row ``r = (j → i)`` of ``z`` (``z_{j|i}``, held by ``i``) becomes
        ``z_r + Δ`` (differential) or ``Δ`` (plain), where ``Δ`` travelled along
        ``rev(r) = (i → j)``; ``rev`` is an involution."""
        delivered = self._delivered(got, self.edges.rev)
        return z + delivered if self.differential else delivered

    def hyperparameters(self) -> dict[str, Any]:
        hp = super().hyperparameters()
        hp.pop("trajectory", None)
        return hp


def subspace_perturbation_dimension(n_nodes: int, edges: torch.Tensor) -> int:
    """``dim Ψ⊥`` per coordinate, ``Ψ⊥ = ker Cᵀ ∩ ker (PC)ᵀ`` (TIFS Eq. 15; thesis §1.4).

    ``C`` maps node values to directed edges (row ``e``: ``B_{src|dst}`` at column ``src``) and
    ``P`` swaps each directed edge with its reverse. ``z`` components in ``Ψ⊥`` never reach the
    primal updates: they are the persistent secret noise of subspace perturbation. Returns
    ``2|E| − rank([Cᵀ; (PC)ᵀ])``, which is positive iff ``|E| ≥ |V|`` for a connected graph
    (0 on a star or any tree)."""
    st = EdgeStructure(edges, n_nodes, torch.float64)
    C = torch.zeros(st.n_edges, n_nodes, dtype=torch.float64)
    C[torch.arange(st.n_edges), st.src] = st.sign
    PC = C[st.rev]
    stacked = torch.cat([C.T, PC.T], dim=0)
    return st.n_edges - int(torch.linalg.matrix_rank(stacked))
