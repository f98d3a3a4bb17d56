"""The coalition's knowledge matrix for gossip averaging, its float identifiability test and the
least-squares reconstruction of the identifiable nodes (El Mrini, Cyffers & Bellet, "Privacy
Attacks in Decentralized Learning", ICML 2024, §3).

Gossip averaging (Boyd et al. 2006) runs ``X^{k+1} = W X^k`` from the private values
``X^0 = X = (x_1, …, x_n)``, so ``X^k = W^k X``: every value ``x_w^k`` a node sends at gossip
step ``k`` is the known linear combination ``(W^k)_{w,:} X`` of the unknown private values. A
colluding set ``A`` knows the public ``W``, its own values ``x_a = e_aᵀ X`` and every message it
receives. Stacking one row per known quantity gives the linear system (El Mrini et al. §3.1)

    K_T X = Y_T,   K_T = [e_aᵀ (a ∈ A); (W^k)_{w,:} (w → A at step k < T)],   Y_T = [x_a; x_w^k],

with the *knowledge matrix* ``K_T`` (one row per observation, ``n`` columns) and the
*observations* ``Y_T`` (one row per observation, ``d`` columns: one ``K_T`` serves all
coordinates). Node ``v`` is exactly reconstructable iff ``e_v ∈ rowspace(K_T)``: then
``e_vᵀ = cᵀ K_T`` and ``x_v = cᵀ Y_T`` for any data; otherwise two datasets that differ only along
a null vector ``z`` of ``K_T`` with ``z_v ≠ 0`` give the same observations.

Here ``K_T`` is built from what the coalition's :class:`~bench.threats.View` holds (its own
values, then every received ``value`` message as the sender's row of ``W^s``, ``s`` the global
gossip step ``round · gossip_steps + step``), never from simulation internals.

Float test (:func:`identify`): with the full SVD ``K_T = U Σ Vᵀ`` and numerical rank
``r = #{σ_i > rtol · σ_1}``, the distance of ``e_v`` to the row space is the norm of row ``v`` of
the null-space basis, ``ρ_v = ‖V_{v, r:}‖`` (no cancellation, all ``v`` at once); ``v`` is
identifiable iff ``ρ_v ≤ tol``. Reconstruction (:func:`reconstruct`): ``X̂ = K_T^+ Y_T`` with
the rank-``r`` pseudo-inverse, exact on identifiable rows since ``e_vᵀ K_T^+ K_T = e_vᵀ`` there;
the other rows are NaN (not reconstructed), never a guess. The exact test over the rationals is
:mod:`bench.attacks.knowledge.exact_rowspace`.

The float test decides *numerical* identifiability: rows ``(W^k)_{w,:}`` form a Krylov basis,
whose conditioning worsens geometrically with the number of distinct eigenvalues, so a node that
is identifiable over ℚ can have its coefficient vector ``c`` so large that the float test (and
any float reconstruction) loses it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.threats import View

#: default relative singular-value threshold of the numerical rank
RANK_RTOL = 1e-10
#: default bound on the distance of ``e_v`` to the row space for a node to count as identifiable
IDENTIFY_TOL = 1e-6


@dataclass(frozen=True)
class KnowledgeSystem:
    """The linear system ``K_T X = Y_T`` of a coalition (El Mrini et al. 2024, §3.1).

    Attributes
    ----------
    mixing:
        The public gossip matrix ``W`` ``[n, n]`` (float64).
    coalition:
        The colluding nodes ``A``.
    senders, powers:
        ``[m]`` each: row ``i`` of ``K_T`` is ``(W^{powers[i]})_{senders[i], :}`` (the coalition's
        own values are the rows ``(a, 0)``, i.e. ``e_aᵀ``).
    observations:
        ``Y_T`` ``[m, d]``: the value row ``i`` describes.
    """

    mixing: np.ndarray
    coalition: tuple[int, ...]
    senders: np.ndarray
    powers: np.ndarray
    observations: np.ndarray

    @property
    def n_nodes(self) -> int:
        return int(self.mixing.shape[0])

    @property
    def steps(self) -> int:
        """``T``: the number of gossip steps whose messages are in the system."""
        received = self.powers[len(self.coalition) :]
        return int(received.max()) + 1 if received.size else 0

    def matrix(self) -> np.ndarray:
        """``K_T`` ``[m, n]``, gathered from the stacked powers ``W^0 … W^{max power}``."""
        return knowledge_rows(self.mixing, self.senders, self.powers)

    def prefix(self, steps: int) -> KnowledgeSystem:
        """The system of the first ``steps`` gossip steps (own values always kept)."""
        keep = self.powers < steps
        keep[: len(self.coalition)] = True
        return KnowledgeSystem(
            self.mixing, self.coalition, self.senders[keep], self.powers[keep], self.observations[keep]
        )


def matrix_powers(w: np.ndarray, k_max: int) -> np.ndarray:
    """``[k_max + 1, n, n]``: ``W^0 = I, W^1, …, W^{k_max}`` (float64)."""
    n = w.shape[0]
    out = np.empty((k_max + 1, n, n), dtype=np.float64)
    out[0] = np.eye(n)
    for k in range(1, k_max + 1):
        out[k] = out[k - 1] @ w
    return out


def knowledge_rows(w: np.ndarray, senders: np.ndarray, powers: np.ndarray) -> np.ndarray:
    """``[m, n]``: rows ``(W^{powers[i]})_{senders[i], :}`` in one gather."""
    if len(senders) == 0:
        return np.zeros((0, w.shape[0]))
    stack = matrix_powers(np.asarray(w, dtype=np.float64), int(np.max(powers)))
    return stack[np.asarray(powers), np.asarray(senders)]


def structural_rows(w: np.ndarray, coalition: tuple[int, ...], steps: int) -> tuple[np.ndarray, np.ndarray]:
    """``(senders, powers)`` of the rows the coalition ``A`` collects in ``steps`` gossip steps
    on the support of ``W``: ``(a, 0)`` for ``a ∈ A``, then ``(w, k)`` for ``k < steps`` and every
    ``w ∉ A`` with ``W_{a,w} ≠ 0`` for some ``a ∈ A`` — the neighbours ``N(A)``. (Messages between
    coalition members are rows of ``span{e_a W^k}`` that the members' own values and received
    messages already give, ``x_a^{k} = Σ_u W_{a,u} x_u^{k-1}``; they are left out here.)"""
    w = np.asarray(w)
    members = np.array(coalition, dtype=np.int64)
    mask = (w[members] != 0).any(0)
    mask[members] = False
    nbrs = np.flatnonzero(mask)
    senders = np.concatenate([members, np.tile(nbrs, steps)])
    powers = np.concatenate([np.zeros(len(members), np.int64), np.repeat(np.arange(steps), len(nbrs))])
    return senders.astype(np.int64), powers.astype(np.int64)


def knowledge_system(view: View, kind: str = "value", steps: int | None = None) -> KnowledgeSystem:
    """The coalition's ``K_T, Y_T`` from its View (El Mrini et al. 2024, §3.1).

    Rows: the coalition's own private values (its states at the start of round 0, else the mean
    of its local samples), then every observed delivery of ``kind`` to a coalition member as the
    sender's row of ``W^s``, ``s = round · gossip_steps + step``; deliveries at ``s ≥ steps`` are
    left out when ``steps`` is given. A sender heard by several members (or with per-edge
    payloads) gives one row per delivery: repeated rows leave the row space unchanged and least
    squares averages their observations.

    Raises
    ------
    ValueError
        Without a coalition, without the public mixing matrix or the protocol's
        ``gossip_steps``, or when a payload is not a real vector (e.g. masked by secure
        aggregation).
    """
    if not view.coalition:
        raise ValueError("the knowledge matrix needs a coalition (own values and received messages)")
    w = np.asarray(view.knowledge["mixing"], dtype=np.float64)
    per_round = int(view.knowledge["hyperparameters"].get("gossip_steps", 1))
    coalition = tuple(view.coalition)
    if 0 in view.own_states:
        own = view.own_states[0].detach().to("cpu").double().reshape(len(coalition), -1).numpy()
    else:
        own = np.stack(
            [view.own_data[a][0].detach().cpu().double().flatten(1).mean(0).numpy() for a in coalition]
        )
    senders = [np.array(coalition, dtype=np.int64)]
    powers = [np.zeros(len(coalition), dtype=np.int64)]
    values = [own]
    members = np.array(coalition, dtype=np.int64)
    for m in view.select(kind=kind):
        if not m.payload.is_floating_point():
            raise ValueError(f"'{kind}' payloads are not real vectors (dtype {m.payload.dtype}; masked?)")
        s = m.round * per_round + m.step
        if steps is not None and s >= steps:
            continue
        hit = np.isin(m.receivers.cpu().numpy(), members)
        rows = m.edges[:, 0].cpu().numpy()[hit]
        senders.append(m.senders.cpu().numpy()[rows].astype(np.int64))
        powers.append(np.full(len(rows), s, dtype=np.int64))
        values.append(m.payload.detach().cpu().double().numpy()[rows].reshape(len(rows), -1))
    return KnowledgeSystem(
        w, coalition, np.concatenate(senders), np.concatenate(powers), np.concatenate(values)
    )


@dataclass(frozen=True)
class Identification:
    """Result of the float rank test: ``identifiable [n]`` (bool), ``residual [n]`` (the distance
    ``ρ_v`` of ``e_v`` to ``rowspace(K_T)``), the numerical ``rank`` and the singular values."""

    identifiable: np.ndarray
    residual: np.ndarray
    rank: int
    singular_values: np.ndarray


def identify(k: np.ndarray, rtol: float = RANK_RTOL, tol: float = IDENTIFY_TOL) -> Identification:
    """Which ``e_v`` lie in ``rowspace(K)``, all ``v`` at once: full SVD ``K = U Σ Vᵀ``, rank
    ``r = #{σ_i > rtol · σ_1}``, residual ``ρ_v = ‖V_{v, r:}‖`` (the norm of the projection of
    ``e_v`` on the null space of ``K``), identifiable iff ``ρ_v ≤ tol``."""
    n = k.shape[1]
    if k.shape[0] == 0:
        return Identification(np.zeros(n, bool), np.ones(n), 0, np.zeros(0))
    _, s, vh = np.linalg.svd(k, full_matrices=True)
    rank = int((s > rtol * s[0]).sum()) if s.size and s[0] > 0 else 0
    residual = np.linalg.norm(vh[rank:], axis=0)  # [n]: ‖V_{v, r:}‖
    return Identification(residual <= tol, residual, rank, s)


def reconstruct(
    k: np.ndarray, y: np.ndarray, identifiable: np.ndarray, rtol: float = RANK_RTOL
) -> np.ndarray:
    """``X̂ = K^+ Y`` ``[n, d]`` with the rank-``r`` pseudo-inverse (``r`` as in :func:`identify`);
    rows of non-identifiable nodes are NaN (not reconstructed)."""
    if k.shape[0] == 0:
        return np.full((k.shape[1], y.shape[1]), np.nan)
    u, s, vh = np.linalg.svd(k, full_matrices=False)
    r = int((s > rtol * s[0]).sum()) if s[0] > 0 else 0
    x_hat = vh[:r].T @ ((u[:, :r].T @ y) / s[:r, None])
    x_hat[~np.asarray(identifiable, bool)] = np.nan
    return x_hat


def identified_by_step(
    system: KnowledgeSystem, rtol: float = RANK_RTOL, tol: float = IDENTIFY_TOL
) -> tuple[np.ndarray, np.ndarray]:
    """``(counts [T + 1], ranks [T + 1])``: identifiable nodes and ``rank(K_t)`` after each prefix
    of ``t = 0 … T`` gossip steps (``t = 0``: own values only) — where the reconstructed set
    stops growing. One SVD per prefix; the test inside is batched over the nodes."""
    k = system.matrix()
    counts, ranks = [], []
    for t in range(system.steps + 1):
        keep = system.powers < t
        keep[: len(system.coalition)] = True
        ident = identify(k[keep], rtol, tol)
        counts.append(int(ident.identifiable.sum()))
        ranks.append(ident.rank)
    return np.array(counts), np.array(ranks)


def distinct_eigenvalues(w: np.ndarray, tol: float = 1e-8) -> int:
    """The number of distinct eigenvalues of a symmetric ``W`` (eigenvalues within ``tol`` of the
    previous one in sorted order are merged)."""
    eig = np.sort(np.linalg.eigvalsh(np.asarray(w, dtype=np.float64)))
    return int(1 + (np.diff(eig) > tol).sum()) if eig.size else 0
