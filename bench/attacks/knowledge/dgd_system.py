"""The D-GD knowledge system of a colluding coalition: the targets' gradients from the models they
send, by generalized least squares (El Mrini, Cyffers & Bellet, "Privacy Attacks in Decentralized
Learning", ICML 2024, §4 and its appendix).

D-GD is D-SGD with one sample per node and one gossip step per gradient step (the Bellet et al.
slides, §2.2): node ``v`` sends its half-step ``θ_v^{t+½} = θ_v^t + g_v^t`` with the scaled
gradient ``g_v^t = −γ ∇ℓ(θ_v^t; x_v)``, then ``θ^{t+1} = W θ^{t+½}``. With a common, known
initialization ``θ^0`` (subtracted everywhere: ``W`` is stochastic, so the shift commutes with
gossip) and ``z^t = θ^{t+½} − θ^0``, ``z^t = W z^{t−1} + g^t`` (``z^{−1} = 0``). Order the nodes as
attackers ``A`` then targets ``T = V \\ A`` and unroll the targets' rows:

    z_T^t = (Σ_{i=0}^{t} W_TT^i) g_T + Σ_{i=0}^{t} W_TT^i N_T^{t−i} + B^t,
    B^t = W_TT B^{t−1} + W_TA z_A^{t−1},  B^0 = 0,

under the attack's gradient model ``g_v^t = g_v + N_v^t`` (a fixed part and zero-mean noise,
i.i.d. over rounds and nodes with per-coordinate variance ``σ²``; false in practice, close with
small step sizes). The coalition knows ``z_A`` (what it sent) and receives ``z_w^t`` from its
neighbours ``w ∈ N(A) ∩ T``, so :func:`remove_attackers` subtracts ``B^t`` (the appendix's
recursion) and each received message is one row of

    K_T g_T + ε = Ŷ_T,   K_T[(t, w), :] = (S_t)_{w,:},  S_t = Σ_{j=0}^{t} W_TT^j

(:func:`dgd_knowledge`, the appendix's algorithm). The noise ``ε_{t,w} = Σ_{s≤t} (W_TT^{t−s}
N^s)_w`` is correlated across rounds and nodes: with ``W_TT`` symmetric,

    Cov(ε_t, ε_{t'}) = σ² Σ_{s=0}^{min(t,t')} W_TT^{t−s} W_TT^{t'−s} = σ² C_{min(t,t')} W_TT^{|t−t'|},
    C_t = Σ_{j=0}^{t} W_TT^{2j}

(:func:`dgd_covariance`; the structure only — generalized least squares does not depend on
``σ²``). It is positive definite: every row holds the fresh innovation ``N_w^t``.
:func:`gls` whitens with its Cholesky factor and solves by the rank-``r`` pseudo-inverse,
``ĝ = (K_Tᵀ Σ⁻¹ K_T)^+ K_Tᵀ Σ⁻¹ Ŷ_T``; a target is identifiable iff ``e_v ∈ rowspace(K_T)``
(the float test of :func:`~bench.attacks.knowledge.knowledge_matrix.identify`; whitening by
an invertible factor does not change the row space). Estimates of the other targets are NaN.

A defense that adds fresh, independent noise to every half-step before gossip (Muffliato's private
D-SGD) only adds to ``N^t`` — the same covariance structure, so the same estimator is already the
defense-aware one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from bench.attacks.knowledge.knowledge_matrix import IDENTIFY_TOL, RANK_RTOL, identify

#: what the coalition observes of its neighbours: each half-step model, or (secure aggregation)
#: only each member's weighted sum of them
OBSERVATIONS = ("messages", "aggregate")


@dataclass(frozen=True)
class Blocks:
    """``W`` split by the coalition: ``targets`` (``T = V \\ A``, sorted), ``w_tt``, ``w_ta``, the
    positions ``observed`` (in ``targets``) of the targets adjacent to the coalition,
    ``N(A) ∩ T``, and the observation map ``m [k, |T|]``: what the coalition sees of ``z_T^t``
    each round is ``m z_T^t`` — the rows ``e_w`` of ``N(A) ∩ T`` (``"messages"``), or the rows
    ``W_{a,T}`` of its members ``a`` (``"aggregate"``: under secure aggregation a member learns
    only ``Σ_u W_au z_u^t``, which its next model reveals)."""

    coalition: tuple[int, ...]
    targets: np.ndarray
    w_tt: np.ndarray
    w_ta: np.ndarray
    observed: np.ndarray
    m: np.ndarray


def split(w: np.ndarray, coalition: tuple[int, ...], observe: str = "messages") -> Blocks:
    """The blocks of ``W`` (float64) for coalition ``A``, observing ``observe``."""
    w = np.asarray(w, dtype=np.float64)
    members = np.array(coalition, dtype=np.int64)
    targets = np.setdiff1d(np.arange(w.shape[0]), members)
    w_ta = w[np.ix_(targets, members)]
    observed = np.flatnonzero((w_ta != 0).any(1))
    if observe == "messages":
        m = np.eye(len(targets))[observed]
    elif observe == "aggregate":
        m = w_ta.T[(w_ta != 0).any(0)]
    else:
        raise ValueError(f"observe must be one of {OBSERVATIONS}; got {observe!r}")
    return Blocks(tuple(coalition), targets, w[np.ix_(targets, targets)], w_ta, observed, m)


def dgd_knowledge(blocks: Blocks, steps: int) -> np.ndarray:
    """``K_T`` ``[steps · k, |T|]``: rows ``(t, i)`` (round-major) are ``m (Σ_{j≤t} W_TT^j)``."""
    n_t = len(blocks.targets)
    partial = np.eye(n_t)
    power = np.eye(n_t)
    rows = []
    for _ in range(steps):
        rows.append(blocks.m @ partial)
        power = power @ blocks.w_tt
        partial = partial + power
    return np.concatenate(rows) if rows else np.zeros((0, n_t))


def dgd_covariance(blocks: Blocks, steps: int) -> np.ndarray:
    """The structure ``Σ`` ``[steps · k, steps · k]`` of ``Cov(ε)`` (``σ² = 1``), rows as
    :func:`dgd_knowledge`: block ``(t, t')`` is ``m C_{min(t,t')} W_TT^{|t−t'|} mᵀ``,
    ``C_t = Σ_{j≤t} W_TT^{2j}``."""
    n_t, m = len(blocks.targets), blocks.m
    powers = [np.eye(n_t)]
    for _ in range(1, steps):
        powers.append(powers[-1] @ blocks.w_tt)
    square = blocks.w_tt @ blocks.w_tt
    c = [np.eye(n_t)]
    for _ in range(1, steps):
        c.append(np.eye(n_t) + square @ c[-1])  # C_t = I + W² C_{t−1}
    k = m.shape[0]
    cov = np.empty((steps * k, steps * k))
    for t in range(steps):
        for u in range(t, steps):
            block = m @ c[t] @ powers[u - t] @ m.T
            cov[t * k : (t + 1) * k, u * k : (u + 1) * k] = block
            cov[u * k : (u + 1) * k, t * k : (t + 1) * k] = block.T
    return cov


def remove_attackers(blocks: Blocks, received: np.ndarray, sent: np.ndarray) -> np.ndarray:
    """``Ŷ_T`` ``[steps · k, d]``: the observed ``m z_T^t`` ``[steps, k, d]`` minus the attackers'
    contributions ``m B^t`` (the appendix's recursion ``B ← W_TT B + W_TA z_A^t``), with
    ``sent`` ``[steps, |A|, d]`` the coalition's own half-steps ``z_A^t``."""
    steps, k, d = received.shape
    b = np.zeros((len(blocks.targets), d))
    out = np.empty((steps, k, d))
    for t in range(steps):
        out[t] = received[t] - blocks.m @ b
        b = blocks.w_tt @ b + blocks.w_ta @ sent[t]
    return out.reshape(steps * k, d)


@dataclass(frozen=True)
class Solution:
    """``estimate [|T|, d]`` (NaN rows: not identifiable), ``identifiable [|T|]``, ``residual [|T|]``
    (distance of ``e_v`` to ``rowspace(K_T)``), the numerical ``rank`` and ``cond`` (σ_1/σ_r of the
    whitened system)."""

    estimate: np.ndarray
    identifiable: np.ndarray
    residual: np.ndarray
    rank: int
    cond: float


def gls(
    k: np.ndarray,
    y: np.ndarray,
    cov: np.ndarray | None,
    rtol: float = RANK_RTOL,
    tol: float = IDENTIFY_TOL,
) -> Solution:
    """Generalized least squares ``ĝ = (Kᵀ Σ⁻¹ K)^+ Kᵀ Σ⁻¹ Y`` on the identifiable columns:
    whitening by the Cholesky factor ``Σ = L Lᵀ`` (``K ← L⁻¹K``, ``Y ← L⁻¹Y``), then the rank-``r``
    pseudo-inverse (``r = #{σ_i > rtol · σ_1}``). ``cov = None``: ordinary least squares."""
    ident = identify(k, rtol, tol)
    if cov is not None and k.shape[0]:
        factor = scipy.linalg.cholesky(cov, lower=True)
        k = scipy.linalg.solve_triangular(factor, k, lower=True)
        y = scipy.linalg.solve_triangular(factor, y, lower=True)
    n = k.shape[1]
    if k.shape[0] == 0:
        return Solution(np.full((n, y.shape[1]), np.nan), ident.identifiable, ident.residual, 0, np.inf)
    u, s, vh = np.linalg.svd(k, full_matrices=False)
    r = int((s > rtol * s[0]).sum()) if s[0] > 0 else 0
    est = vh[:r].T @ ((u[:, :r].T @ y) / s[:r, None])
    est[~ident.identifiable] = np.nan
    cond = float(s[0] / s[r - 1]) if r else np.inf
    return Solution(est, ident.identifiable, ident.residual, ident.rank, cond)
