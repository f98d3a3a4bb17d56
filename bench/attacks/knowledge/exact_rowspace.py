"""Exact identifiability over the rationals for the gossip knowledge matrix (El Mrini, Cyffers &
Bellet, ICML 2024, §3.1: node ``v`` is reconstructable iff ``e_v ∈ rowspace(K_T)``).

Choice: exact arithmetic over ℚ with Python integers and :class:`fractions.Fraction` — certain,
unlike modular arithmetic over a prime ``p``, whose rank can drop when ``p`` divides a minor.
The gossip matrices of :mod:`bench.topology.mixing` are rational with small denominators
(Metropolis–Hastings ``1/(1 + max(d_v, d_w))``, uniform ``1/(d_v + 1)``, max-degree
``1/(d_max + offset)``); :func:`rational_mixing` recovers the exact ``W`` from its float64 copy
(off-diagonal entries by bounded-denominator approximation, the diagonal as
``1 − Σ_{u≠v} W_vu`` since every rule is row-stochastic) and refuses a ``W`` it cannot recover to
1e-12.

With ``D`` the common denominator and the integer matrix ``M = D W``, the row
``(W^k)_{w,:} = e_wᵀ M^k / D^k`` spans the same line as the integer row ``e_wᵀ M^k``, so the rows
are integers (each divided by the gcd of its entries after every product). They are reduced one
by one to an integer echelon basis (each reduced row divided by the gcd of its entries; rows
already in the span are dropped, so at most ``n`` are kept), whose reduced row echelon form over
ℚ then answers the
question: ``e_v ∈ rowspace`` iff some RREF row equals ``e_vᵀ`` (a vector of the row space with a
single non-zero entry at ``v`` forces ``v`` to be a pivot column and its pivot row to be ``e_vᵀ``).
Cost grows with the digits of ``M^k`` (about ``k log10(D · n)``); meant for small graphs and
tests — the attack uses the float test by default.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

#: largest denominator tried when recovering a rational off-diagonal weight
MAX_DENOMINATOR = 10**6


def rational_mixing(w: np.ndarray, max_denominator: int = MAX_DENOMINATOR) -> list[list[Fraction]]:
    """The exact rational ``W`` of a float64 row-stochastic gossip matrix.

    Raises
    ------
    ValueError
        When an entry is not within 1e-12 of a fraction with denominator ``≤ max_denominator``.
    """
    w = np.asarray(w, dtype=np.float64)
    n = w.shape[0]
    out: list[list[Fraction]] = []
    for v in range(n):
        row = [
            Fraction(0)
            if u == v or w[v, u] == 0
            else Fraction(float(w[v, u])).limit_denominator(max_denominator)
            for u in range(n)
        ]
        row[v] = 1 - sum(row, Fraction(0))
        out.append(row)
    err = max((abs(float(out[v][u]) - w[v, u]) for v in range(n) for u in range(n)), default=0.0)
    if err > 1e-12:
        raise ValueError(
            f"the gossip matrix is not rational with denominators ≤ {max_denominator} "
            f"(largest deviation {err:.3g}); the exact test does not apply"
        )
    return out


def integer_mixing(wq: list[list[Fraction]]) -> tuple[list[list[int]], int]:
    """``(M, D)`` with ``W = M / D``, ``D`` the least common denominator."""
    d = 1
    for row in wq:
        for x in row:
            d = math.lcm(d, x.denominator)
    return [[int(x * d) for x in row] for row in wq], d


def _primitive(row: list[int]) -> list[int]:
    g = 0
    for x in row:
        g = math.gcd(g, x)
    return row if g in (0, 1) else [x // g for x in row]


class ExactRowSpace:
    """An integer echelon basis of the span of the rows added so far."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.basis: dict[int, list[int]] = {}  # pivot column -> primitive integer row

    @property
    def rank(self) -> int:
        return len(self.basis)

    def add(self, row: list[int]) -> bool:
        """Add ``row``; ``True`` when it enlarged the span."""
        r = list(row)
        for p in sorted(self.basis):  # increasing pivots: a cleared column stays cleared
            b = self.basis[p]
            if r[p]:
                r = _primitive([b[p] * x - r[p] * y for x, y in zip(r, b, strict=True)])
        pivot = next((j for j, x in enumerate(r) if x), None)
        if pivot is None:
            return False
        self.basis[pivot] = _primitive(r)
        return True

    def unit_vectors(self) -> np.ndarray:
        """``[n]`` bool: ``e_v ∈`` the span, from the RREF over ℚ of the (at most ``n``) basis rows."""
        rows = [[Fraction(x) for x in self.basis[p]] for p in sorted(self.basis)]
        pivots = sorted(self.basis)
        for i, p in enumerate(pivots):
            piv = rows[i][p]
            rows[i] = [x / piv for x in rows[i]]
            for j in range(len(rows)):
                if j != i and rows[j][p]:
                    f = rows[j][p]
                    rows[j] = [x - f * y for x, y in zip(rows[j], rows[i], strict=True)]
        out = np.zeros(self.n, dtype=bool)
        for i, p in enumerate(pivots):
            out[p] = all(x == 0 for j, x in enumerate(rows[i]) if j != p)
        return out


def exact_identifiable(
    w: np.ndarray, senders: np.ndarray, powers: np.ndarray, max_denominator: int = MAX_DENOMINATOR
) -> tuple[np.ndarray, int]:
    """``(identifiable [n], rank)`` of ``K_T`` with rows ``(W^{powers[i]})_{senders[i], :}``, over
    ℚ (El Mrini et al. 2024, §3.1; see the module docstring)."""
    m_int, _ = integer_mixing(rational_mixing(w, max_denominator))
    n = len(m_int)
    space = ExactRowSpace(n)
    senders, powers = np.asarray(senders), np.asarray(powers)
    for s in sorted(set(int(x) for x in senders)):
        want = sorted(set(int(k) for k in powers[senders == s]))
        row = [int(u == s) for u in range(n)]
        k = 0
        for target in want:
            while k < target:  # row ← row · M
                row = _primitive([sum(row[u] * m_int[u][j] for u in range(n) if row[u]) for j in range(n)])
                k += 1
            space.add(row)
    return space.unit_vectors(), space.rank
