"""What an eavesdropper (optionally with corrupt nodes) can compute from differential PDMM traffic.

Notation as in :mod:`bench.protocols.pdmm`: round ``t`` computes ``w^(t)`` from ``z^(t)`` and node
``i`` sends ``D_t[e] = Δz_{j|i}^(t+1)`` along each directed edge ``e = (i → j)`` (the change of
``z_{j|i}``, held by ``j``); ``s_e = B_{i|j}``; ``a_i^(t) = Σ_j B_{i|j} z_{i|j}^(t)``.

Recovered quantities (Yu et al. TIFS 2025, Proposition 1 and App. A; thesis Ch. 3–4):

* **weight increments** (TIFS Eq. 33, corrected; general θ):
  ``2ρ B_{i|j}(w_i^(t) − w_i^(t−1)) = (Δz_{j|i}^(t+1) − Δz_{j|i}^(t))/θ − Δz_{i|j}^(t) + Δz_{j|i}^(t)``,
  which for θ = 1 is ``Δz_{j|i}^(t+1) − Δz_{i|j}^(t)``; averaged over the edges of ``i``;
* **absolute weights** from an anchor ``w^(T−1)`` (a corrupt node's final model — the consensus
  estimate, thesis §4.1 — zeros, or the truth in oracle mode) minus the later increments; the
  anchor error ``ε_i = ŵ_i − w_i`` is the same in every round (thesis Eq. 6.1, claim C15);
* **noisy gradients** (TIFS Eq. 31/21): the solver's optimality condition with the observed part
  of ``z`` (all increments, plus ``z^(0)`` on edges into corrupt nodes); the error is
  ``Σ_{j∈N_i honest} B_{i|j} z_{i|j}^(0)``, constant in ``t`` — zero when σ_z² = 0;
* **gradient differences** at any lag ℓ (TIFS Eq. 22), where that constant cancels. Estimator
  ``"delta_z"`` uses the observed ``z`` increments (needs no anchor); estimator ``"weights"`` is
  the thesis' form (Eqs. 2.13 / 4.3 / 4.22), which eliminates ``z`` with
  ``a_i^(t+1) − a_i^(t−1) = 2ρ(d_i w_i^(t−1) − Σ_j w_j^(t))`` and so needs absolute weights of ``i``
  and its neighbours: its error comes from the anchor and shrinks as the run nears consensus
  (thesis C6/C15);
* **honest-component gradient sums** (TIFS Eq. 32): summed noisy gradients minus the
  learnable ``z^(0)`` edge differences;
* **z^(0) edge differences** (TIFS Eq. 34):
  ``z_{i|j}^(0) − z_{j|i}^(0) = Δz_{j|i}^(1)/θ − 2ρ B_{i|j} w_i^(0)``.

Which solver the attacker *assumes* (and its μ) is a parameter: the inexact-update defense works
exactly when that assumption is wrong (thesis C8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import networkx as nx
import torch

from bench.attacks.base import AttackError
from bench.protocols.pdmm import EdgeStructure
from bench.threats import View

ONE_STEP_SOLVERS = ("gradient_step", "quadratic", "inexact")
#: the local solvers whose updates reveal the gradient in closed form (:class:`SolverModel`)
CLOSED_FORM = ("exact", "gradient_step", "quadratic")
#: the solvers an attacker can model: the closed forms and the first-order model of ``inexact``
MODELLED = (*CLOSED_FORM, "inexact")


@dataclass
class SolverModel:
    """The attacker's assumption about the local solver: ``exact``, ``gradient_step`` (step μ),
    ``quadratic`` (curvature μ), or ``inexact`` (``k_max`` inner gradient steps of size
    ``alpha``, thesis Eq. 4.1) under the first-order model below."""

    name: str
    mu: float
    k_max: int = 1
    alpha: float = 0.1

    @property
    def shift(self) -> int:
        """The gradient recovered from round ``t`` is evaluated at ``w^(t − shift)``."""
        return 1 if self.name in ONE_STEP_SOLVERS else 0

    def gradient(
        self, w_prev: torch.Tensor, w: torch.Tensor, a: torch.Tensor, rd: torch.Tensor
    ) -> torch.Tensor:
        """The local gradient implied by one update ``w_prev → w`` with ``a = Σ_j B z``."""
        if self.name == "exact":  # 0 = ∇f(w) + a + ρ d w
            return -a - rd * w
        if self.name == "gradient_step":  # w = w_prev − μ(∇f(w_prev) + a + ρ d w_prev)
            return (w_prev - w) / self.mu - a - rd * w_prev
        if self.name == "quadratic":  # w = (μ w_prev − ∇f(w_prev) − a) / (μ + ρ d)
            return self.mu * w_prev - a - (self.mu + rd) * w
        if self.name == "inexact":
            return self.inexact_gradient(w_prev, w, a, rd)
        raise AttackError(
            f"no model of the local solver '{self.name}' (use exact, gradient_step, quadratic or inexact)"
        )

    def inexact_gradient(
        self, w_prev: torch.Tensor, w: torch.Tensor, a: torch.Tensor, rd: torch.Tensor
    ) -> torch.Tensor:
        """The defense-aware observer of ``inexact`` local solves (the inexact-update defense).

        ``K = k_max`` inner steps ``w_{k+1} = w_k − α(g_k + a + ρd w_k) = r w_k − α(g_k + a)``,
        ``r = 1 − αρd``, unroll to ``w_K = r^K w_0 − α Σ_k r^(K−1−k) (g_k + a)``. The attacker
        models the inner gradients as constant, ``g_k = ḡ`` — exact when they are, and for any
        model whose per-sample gradient has a fixed direction over the inner steps (logistic
        regression with one sample: ``g_k = c_k [x; 1]``, so the recovered ``ḡ`` is a positive
        combination of the ``g_k`` and ``x = w-part / b-part`` stays exact) — and solves

            ḡ = (r^K w_0 − w_K) / (α S) − a,   S = Σ_{k<K} r^k = (1 − r^K) / (αρd)

        (``S = K`` when ``ρd = 0``). ``K = 1`` is the ``gradient_step`` model with ``μ = α``.
        ``ḡ`` is a weighted mean of the inner gradients, evaluated near ``w_0``: the recovered
        gradient is attributed to ``w^(t−1)`` like a one-step solver's.
        """
        alpha, k = float(self.alpha), int(self.k_max)
        r = 1.0 - alpha * rd
        rk = r**k
        steps = torch.full_like(rd, float(k))
        geometric = (1.0 - rk) / torch.where(rd == 0, torch.ones_like(rd), alpha * rd)
        s = torch.where(rd == 0, steps, geometric)
        return (rk * w_prev - w) / (alpha * s) - a


class PDMMObservables:
    """Observables of a differential-PDMM run from a View that saw every ``delta_z`` message of
    rounds ``0 .. T−1`` (an eavesdropper, optionally with a coalition).

    Parameters
    ----------
    view:
        The adversary's View (needs public ``graph`` and ``hyperparameters``).
    solver, mu:
        The attacker's assumed local solver and its constant (default: the true ones, read from
        the public hyperparameters).
    """

    def __init__(
        self,
        view: View,
        solver: str | None = None,
        mu: float | None = None,
        k_max: int | None = None,
        alpha: float | None = None,
    ) -> None:
        hp = view.knowledge["hyperparameters"]
        graph = view.knowledge["graph"]
        if not hp.get("differential", True):
            raise AttackError("the run sent z in plaintext (differential=False): use its z directly")
        self.rho, self.theta = float(hp["rho"]), float(hp["theta"])
        self.solver = SolverModel(
            solver or hp["solver"],
            float(mu if mu is not None else hp["mu"]),
            int(k_max if k_max is not None else hp.get("k_max", 1)),
            float(alpha if alpha is not None else hp.get("alpha", 0.1)),
        )
        n = graph.number_of_nodes()
        pairs = sorted(
            {(int(u), int(v)) for u, v in graph.edges()} | {(int(v), int(u)) for u, v in graph.edges()}
        )
        edges = torch.tensor(pairs, dtype=torch.long)
        batches = sorted(view.select(kind="delta_z"), key=lambda m: m.round)
        if not batches:
            raise AttackError("the View holds no delta_z messages (is this a differential PDMM run?)")
        rounds = [m.round for m in batches]
        if rounds != list(range(len(rounds))):
            raise AttackError(f"needs every round from 0 on; observed rounds {rounds[:5]}…")
        dtype = batches[0].payload.dtype
        self.e = EdgeStructure(edges, n, dtype)
        keys = edges[:, 0] * n + edges[:, 1]  # sorted: edges are lexicographic

        def edge_rows(m: object) -> tuple[torch.Tensor, torch.Tensor]:
            """(directed-edge index, payload row) of every delivery of a batch, vectorized."""
            senders = m.senders[m.edges[:, 0]]  # type: ignore[attr-defined]
            idx = torch.searchsorted(keys, senders * n + m.edges[:, 1])  # type: ignore[attr-defined]
            return idx, m.edges[:, 0]  # type: ignore[attr-defined]

        self.n, self.T = n, len(batches)
        self.P = batches[0].payload.shape[1]
        self.D = torch.full((self.T, self.e.n_edges, self.P), float("nan"), dtype=dtype)
        for m in batches:  # one batch per round
            idx, rows = edge_rows(m)
            self.D[m.round, idx] = m.payload[rows]
        if torch.isnan(self.D).any():
            raise AttackError("some edges' delta_z messages were not observed (the attack needs all of them)")
        #: rounds of the whole run; > T when only rounds 0..T−1 were recorded explicitly and the
        #: rest is known through the running totals of Δz (see :meth:`weights`)
        self.T_run = self.T
        self.total_tail: torch.Tensor | None = None
        run = view.totals.get("delta_z")
        if run is not None and run.rounds > self.T:
            if run.rounds != run.last_round + 1:
                missing = run.last_round + 1 - run.rounds
                raise AttackError(f"the running totals of delta_z miss {missing} rounds")
            total = torch.full((self.e.n_edges, self.P), float("nan"), dtype=dtype)
            query = run.senders * n + run.receivers
            pos = torch.searchsorted(keys, query).clamp_max(self.e.n_edges - 1)
            if not bool((keys[pos] == query).all()):
                raise AttackError("the running totals hold delta_z along pairs that are not graph edges")
            total[pos] = run.total.to(dtype)
            last = torch.full_like(total, float("nan"))
            idx, rows = edge_rows(run.last)
            last[idx] = run.last.payload[rows].to(dtype)
            if torch.isnan(total).any() or torch.isnan(last).any():
                raise AttackError("the running totals do not cover every edge (the attack needs all of them)")
            self.T_run = run.rounds
            self.total_tail = self._telescoped_tail(total, last)
        # z^(0) the coalition received: z_{i|c}^(0) on edges (i → c)
        self.z0_known = torch.zeros(self.e.n_edges, self.P, dtype=dtype)
        for m in view.select(round_=0, kind="z0"):
            idx, rows = edge_rows(m)
            self.z0_known[idx] = m.payload[rows]
        self.coalition = view.coalition
        self.view = view
        self.rd = (self.rho * self.e.degree)[:, None]

    # ---------------------------------------------------------------------------- weights
    def _node_average(self, per_edge: torch.Tensor) -> torch.Tensor:
        """``[..., N, P]``: ``B_{i|j} · per_edge[e] / 2ρ`` averaged over the edges ``e = (i → j)``."""
        signed = per_edge * self.e.sign[:, None] / (2 * self.rho)
        shape = (*per_edge.shape[:-2], self.n, self.P)
        out = torch.zeros(shape, dtype=per_edge.dtype).index_add_(per_edge.dim() - 2, self.e.src, signed)
        return out / self.e.degree[:, None]

    def increments(self) -> torch.Tensor:
        """``[T, N, P]``: ``w_i^(t) − w_i^(t−1)`` for ``t ≥ 1`` (row 0 is NaN), averaged over
        the edges of ``i`` (each edge gives it exactly in exact arithmetic)."""
        D, rev, th = self.D, self.e.rev, self.theta
        per_edge = torch.full_like(D, float("nan"))
        # along e = (i → j): Δz_{j|i}^(t+1) = D_t[e]; Δz_{j|i}^(t) = D_{t−1}[e]; Δz_{i|j}^(t) = D_{t−1}[rev e]
        per_edge[1:] = (D[1:] - D[:-1]) / th - D[:-1][:, rev] + D[:-1]
        return self._node_average(per_edge)

    def _telescoped_tail(self, total: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """``[N, P]``: ``w^(T_run−1) − w^(T−1) = Σ_{t=T}^{T_run−1} inc[t]`` from the running
        total ``A = Σ_{τ<T_run} D_τ`` and the last round's ``D_{T_run−1}`` alone.

        The per-edge increment of :meth:`increments` is linear in ``D``, so its sum over
        ``t = T..T_run−1`` telescopes: ``(D_{T_run−1} − D_{T−1})/θ − S[rev] + S`` with
        ``S = Σ_{τ=T−1}^{T_run−2} D_τ = (A − D_{T_run−1}) − Σ_{τ<T−1} D_τ``."""
        window = (total - last) - self.D[:-1].sum(0)
        per_edge = (last - self.D[-1]) / self.theta - window[self.e.rev] + window
        return self._node_average(per_edge)

    def anchor_from_coalition(self) -> torch.Tensor:
        """A corrupt node's model after the last round of the run, for every node (``[N, P]``)."""
        if not self.coalition:
            raise AttackError("an anchor from the coalition needs at least one corrupt node")
        states = self.view.own_states
        if self.T_run not in states:
            raise AttackError(f"the coalition's state after round {self.T_run - 1} was not recorded")
        return states[self.T_run][0].to(self.D.dtype).expand(self.n, -1).clone()

    def weights(self, anchor: torch.Tensor | str = "coalition") -> torch.Tensor:
        """``[T, N, P]`` estimates of ``w^(t)``, ``t = 0..T−1``: the anchor (``"coalition"``,
        ``"zeros"`` or a tensor) is ``ŵ^(T_run−1)``, the weights after the run's last round;
        earlier rounds follow by subtracting increments — through the telescoped running totals
        (:meth:`_telescoped_tail`) down to the last explicitly recorded round, then round by
        round."""
        if isinstance(anchor, str):
            anchor = self.anchor_from_coalition() if anchor == "coalition" else torch.zeros(self.n, self.P)
        inc = self.increments()
        w = torch.empty_like(inc)
        w[-1] = anchor.to(inc.dtype)
        if self.total_tail is not None:
            w[-1] -= self.total_tail
        for t in range(self.T - 1, 0, -1):  # a loop over rounds (the recursion), not over nodes
            w[t - 1] = w[t] - inc[t]
        return w

    # --------------------------------------------------------------------------- gradients
    def observed_a(self) -> torch.Tensor:
        """``[T, N, P]``: the observed part of ``a_i^(t) = Σ_j B_{i|j} z_{i|j}^(t)``: every
        increment received so far plus ``z^(0)`` on edges into corrupt nodes."""
        # z_{i|j} (row e=(i→j)) changes by the message along rev(e) = (j → i)
        incr = self.D[:, self.e.rev]
        z_obs = torch.cumsum(torch.cat([self.z0_known[None], incr[:-1]], dim=0), dim=0)
        signed = self.e.sign[None, :, None] * z_obs
        return torch.zeros(self.T, self.n, self.P, dtype=self.D.dtype).index_add_(1, self.e.src, signed)

    def noisy_gradients(self, anchor: torch.Tensor | str = "coalition") -> tuple[torch.Tensor, torch.Tensor]:
        """``(g̃, ŵ_eval)``: ``g̃[k] ≈ ∇f_i(w^(k))`` + the constant honest-edge ``z^(0)`` term,
        for ``k = 0..T−1−shift``, and the weights they are evaluated at (TIFS Eq. 31)."""
        w = self.weights(anchor)
        a = self.observed_a()
        if self.solver.shift == 0:
            return self.solver.gradient(w, w, a, self.rd), w
        g = self.solver.gradient(w[:-1], w[1:], a[1:], self.rd)  # round t ≥ 1 gives ∇f(w^(t−1))
        return g, w[:-1]

    def gradient_differences(
        self, lag: int = 1, estimator: str = "delta_z", anchor: torch.Tensor | str = "coalition"
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(Δg, ŵ_early, ŵ_late)`` with ``Δg[k] ≈ ∇f_i(w^(k+lag)) − ∇f_i(w^(k))`` (TIFS Eq. 22).

        ``estimator="delta_z"``: from observed ``z`` increments; the anchor only affects the
        returned weights (and, for the one-step solvers, not even the difference).
        ``estimator="weights"``: the thesis' Eq. 2.13 / 4.3 / 4.22 (lag 2 only), eliminating ``z``
        through neighbours' anchored weights.
        """
        if estimator == "delta_z":
            g, w_eval = self.noisy_gradients(anchor)
            return g[lag:] - g[:-lag], w_eval[:-lag], w_eval[lag:]
        if estimator != "weights":
            raise AttackError(f"unknown estimator '{estimator}' (delta_z or weights)")
        if lag != 2:
            raise AttackError("the weights estimator is the thesis' lag-2 form")
        w = self.weights(anchor)
        # a^(t+1) − a^(t−1) = 2ρ (d_i w_i^(t−1) − Σ_j w_j^(t))  (θ = 1)
        nb_sum = torch.zeros_like(w).index_add_(1, self.e.src, w[:, self.e.dst])
        da = 2 * self.rho * (self.e.degree[None, :, None] * w[:-2] - nb_sum[1:-1])  # index by t−1
        s = self.solver.shift
        if s == 0:  # g(w^(t+1)) − g(w^(t−1)) = −Δa − ρ d (w^(t+1) − w^(t−1))
            dg = -da - self.rd * (w[2:] - w[:-2])
            return dg, w[:-2], w[2:]
        # one-step: g(w^(k)) from update k → k+1 with a^(k+1); Δa over k+1 ± 1 ↔ index (k+1)−1 = k
        g_late = self.solver.gradient(w[1:-1], w[2:], torch.zeros_like(w[2:]), self.rd)
        g_early = self.solver.gradient(w[:-2], w[1:-1], torch.zeros_like(w[2:]), self.rd)
        dg = g_late[1:] - g_early[:-1] - da[1:]
        return dg, w[:-3], w[2:-1]

    def z0_edge_differences(self, anchor: torch.Tensor | str = "coalition") -> torch.Tensor:
        """``[2E, P]``: ``z_{i|j}^(0) − z_{j|i}^(0)`` per directed edge (TIFS Eq. 34)."""
        w0 = self.weights(anchor)[0]
        return self.D[0] / self.theta - 2 * self.rho * self.e.sign[:, None] * w0[self.e.src]

    def components(self, honest: list[int]) -> list[list[int]]:
        """The connected components of the honest subgraph (:func:`honest_components`)."""
        return honest_components(self.view.knowledge["graph"], honest)

    def component_sums(
        self, honest: list[int], anchor: torch.Tensor | str = "coalition"
    ) -> dict[int, torch.Tensor]:
        """``component index → [T', P]``: ``Σ_{i∈V_h,l} ∇f_i(w_i)`` over each connected component
        of the honest subgraph (TIFS Eq. 32; indices as :meth:`components`): noisy gradients
        summed, minus the honest edges' ``z^(0)`` differences (each honest edge contributes
        ``B_{i|j}(z_{i|j}^(0) − z_{j|i}^(0))``). Row ``k`` is evaluated at the weights of
        :meth:`noisy_gradients`' row ``k``."""
        g_noisy, _ = self.noisy_gradients(anchor)
        diff = self.z0_edge_differences(anchor)
        out = {}
        for k, comp in enumerate(self.components(honest)):
            comp_t = torch.tensor(comp)
            inside = (
                torch.isin(self.e.src, comp_t) & torch.isin(self.e.dst, comp_t) & (self.e.src < self.e.dst)
            )
            correction = (self.e.sign[inside, None] * diff[inside]).sum(0)
            out[k] = g_noisy[:, comp_t].sum(1) - correction
        return out


#: what the PDMM attacks read: the observables rebuilt from traffic, or the harness's oracle
Observables = Union["PDMMObservables", "OracleObservables"]


def honest_components(graph: nx.Graph, honest: list[int]) -> list[list[int]]:
    """The connected components ``V_{h,1}, …`` of the honest subgraph ``G_h`` (TIFS §IV), each
    sorted, ordered by their smallest node (the order of :meth:`PDMMObservables.component_sums`)."""
    sub = graph.subgraph(honest)
    return sorted((sorted(int(v) for v in c) for c in nx.connected_components(sub)), key=lambda c: c[0])


def assumed_solver(view: View, assume: str | None = None) -> str:
    """The local solver an attacker models: ``assume`` if given, else the public solver when its
    update reveals the gradient in closed form (:data:`CLOSED_FORM`), else ``"exact"`` — which
    is wrong under the inexact-update defense, as it should be (thesis C8)."""
    if assume:
        return assume
    solver = view.knowledge["hyperparameters"]["solver"]
    return solver if solver in CLOSED_FORM else "exact"


def inexact_adaptation(knowledge: dict[str, Any]) -> dict[str, Any] | None:
    """The parameters that make a PDMM attack model inexact local solves, from a defense's
    declared knowledge (``k_max`` and ``alpha``, as the inexact-update defense declares them),
    or ``None`` when the defense declares no such solver."""
    if "k_max" not in knowledge or "alpha" not in knowledge:
        return None
    return {"assume": "inexact", "k_max": int(knowledge["k_max"]), "alpha": float(knowledge["alpha"])}


def honest_nodes(view: View) -> list[int]:
    """The nodes of the public graph outside the view's coalition, in order."""
    n = view.knowledge["graph"].number_of_nodes()
    return [v for v in range(n) if v not in set(view.coalition)]


class OracleObservables:
    """The quantities of :class:`PDMMObservables`, computed from the *true* trajectory, data and
    ``z^(0)`` of a run (harness side only — it reads the simulation, which no attack may do).

    Comparing the two separates estimation error (observables vs oracle) from attack error
    (an attack run on oracle targets: the PDMM inversion attacks take ``observables=``). Needs
    ``record_trajectory=True`` on the protocol.

    Parameters
    ----------
    sim:
        The finished simulation.
    coalition:
        The corrupt nodes: :meth:`noisy_gradients` adds the ``z^(0)`` terms of the edges to
        *honest* neighbours only (the coalition knows the others), as TIFS Eq. 21 (corrected).
    """

    def __init__(self, sim: object, coalition: tuple[int, ...] | list[int] = ()) -> None:
        protocol = sim.protocol  # type: ignore[attr-defined]
        if not protocol.trajectory["w"]:
            raise AttackError("the oracle needs protocol_params.record_trajectory = true")
        self.sim = sim
        self.W = torch.stack(protocol.trajectory["w"])  # [T, N, P]: w^(0..T-1)
        self.z0 = protocol.trajectory["z0"][0]  # [2E, P]
        self.e = protocol.edges
        self.graph = sim.topology.graph  # type: ignore[attr-defined]
        self.coalition = tuple(int(c) for c in coalition)
        self.shift = 1 if protocol.solver in ONE_STEP_SOLVERS or protocol.solver == "inexact" else 0

    def weights(self, anchor: object = None) -> torch.Tensor:
        return self.W

    def true_gradients(self, w: torch.Tensor) -> torch.Tensor:
        """``∇f_i(w_i)`` (the protocol's reduction) for ``w [K, N, P]``."""
        sim = self.sim
        batch = sim.batch(0)  # type: ignore[attr-defined]
        out = [sim.protocol._grad(wk, batch)[0] for wk in w]  # type: ignore[attr-defined]
        return torch.stack(out)

    def _evaluation_points(self) -> torch.Tensor:
        """``w^(k)`` at which the observables' row ``k`` is evaluated (``w^(k)`` for exact
        solvers; the one-step solvers' round ``k+1`` reveals ``∇f(w^(k))``)."""
        return self.W[: len(self.W) - self.shift] if self.shift else self.W

    def noisy_gradients(self, anchor: object = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(∇f_i(w^(k)) + Σ_{j∈N_i honest} B_{i|j} z_{i|j}^(0), w^(k))`` (TIFS Eq. 21)."""
        w_eval = self._evaluation_points()
        src, dst = self.e.src.cpu(), self.e.dst.cpu()
        hidden = ~torch.isin(dst, torch.tensor(self.coalition, dtype=dst.dtype))
        signed = (self.e.sign.cpu()[:, None] * self.z0) * hidden[:, None]
        noise = torch.zeros(self.W.shape[1], self.W.shape[2], dtype=self.W.dtype).index_add_(0, src, signed)
        return self.true_gradients(w_eval) + noise.to(w_eval.dtype), w_eval

    def gradient_differences(self, lag: int = 1, estimator: str = "oracle", anchor: object = None):
        """``(Δg, w_early, w_late)`` with the true ``∇f_i(w^(k+lag)) − ∇f_i(w^(k))``, evaluated at
        the same points as :meth:`PDMMObservables.gradient_differences` (``w^(k)`` for exact
        solvers, ``w^(k−1)`` for one-step ones)."""
        w_eval = self._evaluation_points()
        g = self.true_gradients(w_eval)
        return g[lag:] - g[:-lag], w_eval[:-lag], w_eval[lag:]

    def components(self, honest: list[int]) -> list[list[int]]:
        return honest_components(self.graph, honest)

    def component_sums(self, honest: list[int], anchor: object = None) -> dict[int, torch.Tensor]:
        """``component index → [T', P]``: the true ``Σ_{i∈V_h,l} ∇f_i(w_i^(k))`` (TIFS Eq. 23)."""
        g = self.true_gradients(self._evaluation_points())
        return {k: g[:, comp].sum(1) for k, comp in enumerate(self.components(honest))}
