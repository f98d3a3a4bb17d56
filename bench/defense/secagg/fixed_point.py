"""Fixed-point encoding of real vectors into the ring ``Z_{2^k}`` and back.

Secure aggregation sums vectors of a finite ring (Bonawitz et al., CCS 2017, §3: inputs are
vectors of ``Z_R``, ``R = 2^k``, so that one-time pads mask them perfectly). A real vector is
encoded with a public scale ``s`` as

    enc(x) = round(x · s)  mod 2^k,

and a ring element ``z`` is decoded as the centred (two's complement) integer
``z̃ = z − 2^k · [z ≥ 2^(k−1)]`` divided by ``s``. The sum of encodings decodes to the sum of the
inputs up to the rounding of each term, ``|dec(Σ enc(x_u)) − Σ x_u| ≤ m / (2 s)`` per coordinate
for ``m`` terms, **provided the integer sum ``Σ round(x_u s)`` lies in ``[−2^(k−1), 2^(k−1))``**;
otherwise it wraps around and decodes to a wrong value. :func:`check_sum_range` checks that
condition on the plaintexts and raises :class:`SecAggOverflow` instead (a clear failure, never a
wrong sum).

Ring elements are stored as ``int64`` tensors with values in ``[0, 2^k)``, ``1 ≤ k ≤ 62``, so a
sum of two never overflows; :func:`ring_add`/:func:`ring_sub` reduce after every operation and
:func:`ring_sum` sums in chunks short enough that no partial sum can overflow.
"""

from __future__ import annotations

import math

import torch

#: largest ring exponent: values < 2^62, so ``a + b < 2^63`` never overflows ``int64``
MAX_K = 62


class SecAggError(RuntimeError):
    """Secure aggregation cannot produce a correct sum (never a silent wrong one)."""


class SecAggOverflow(SecAggError):
    """The sum of the encoded inputs leaves the ring's range: it would decode wrongly."""


def ring_mask(k: int) -> int:
    """``2^k − 1``: ``x & ring_mask(k)`` is ``x mod 2^k`` for two's complement ``int64``."""
    return (1 << k) - 1


def encode(x: torch.Tensor, scale: float, k: int) -> torch.Tensor:
    """``round(x · scale) mod 2^k`` as ``int64`` (``x`` is computed in float64).

    Raises
    ------
    SecAggOverflow
        If a coordinate is not finite or ``|round(x · scale)| ≥ 2^(k−1)``: not encodable.
    """
    scaled = torch.round(x.to(torch.float64) * scale)
    half = float(1 << (k - 1))
    if not bool(torch.isfinite(scaled).all()) or bool((scaled.abs() >= half).any()):
        worst = float(scaled.abs().nan_to_num(math.inf).max()) if scaled.numel() else 0.0
        raise SecAggOverflow(
            f"secure aggregation: an input of magnitude {worst / scale:.4g} is not encodable in "
            f"Z_2^{k} at scale {scale:g} (|x · scale| must stay below 2^{k - 1}); increase k or "
            f"decrease the scale"
        )
    return scaled.to(torch.int64) & ring_mask(k)


def centred(z: torch.Tensor, k: int) -> torch.Tensor:
    """Ring elements ``[0, 2^k)`` as the integers ``[−2^(k−1), 2^(k−1))`` they represent."""
    return torch.where(z >= (1 << (k - 1)), z - (1 << k), z)


def decode(z: torch.Tensor, scale: float, k: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``centred(z) / scale`` in ``dtype`` (exact in float64 for a power-of-two scale, ``k ≤ 53``)."""
    return (centred(z, k).to(torch.float64) / scale).to(dtype)


def check_sum_range(encoded: torch.Tensor, k: int, groups: torch.Tensor | None = None) -> None:
    """Check that the sum of ``centred(encoded)`` rows — over all rows, or per group when
    ``groups [R]`` gives each row's group — stays in ``[−2^(k−1), 2^(k−1))``.

    The exact integer sums are computed in ``int64``: each term is below ``2^(k−1)`` in magnitude
    and rows are added in chunks of ``2^(62−k)`` so that no partial sum can overflow; a sum already
    out of range after a chunk stays detectably out of range.

    Raises
    ------
    SecAggOverflow
        If some coordinate's sum leaves the range (the masked sum would wrap around).
    """
    signed = centred(encoded, k)
    groups = torch.zeros(len(encoded), dtype=torch.long) if groups is None else groups
    n = int(groups.max()) + 1 if len(groups) else 0
    total = torch.zeros(n, *encoded.shape[1:], dtype=torch.int64)
    half = 1 << (k - 1)
    chunk = max(1, 1 << max(0, 62 - k))
    for start in range(0, len(signed), chunk):  # one chunk unless k > 62 − log2(rows)
        total.index_add_(0, groups[start : start + chunk], signed[start : start + chunk])
        total.clamp_(-(1 << 62), 1 << 62)  # out of range is out of range: keep it from overflowing
    bad = (total < -half) | (total >= half)
    if bool(bad.any()):
        raise SecAggOverflow(
            f"secure aggregation: the sum of the encoded inputs leaves Z_2^{k} in {int(bad.sum())} "
            f"coordinate(s) (|sum| ≥ 2^{k - 1}): the unmasked sum would wrap around; increase k or "
            f"decrease the scale"
        )


def ring_add(a: torch.Tensor, b: torch.Tensor, k: int) -> torch.Tensor:
    """``(a + b) mod 2^k`` of ring elements."""
    return (a + b) & ring_mask(k)


def ring_sub(a: torch.Tensor, b: torch.Tensor, k: int) -> torch.Tensor:
    """``(a − b) mod 2^k`` of ring elements."""
    return (a - b) & ring_mask(k)


def ring_sum(x: torch.Tensor, k: int, dim: int = 0) -> torch.Tensor:
    """``Σ x mod 2^k`` over ``dim``, in chunks of ``2^(63−k)`` terms (no ``int64`` overflow)."""
    chunk = max(1, 1 << max(0, 63 - k) - 1)
    if x.shape[dim] <= chunk:
        return x.sum(dim) & ring_mask(k)
    total = None
    for part in torch.split(x, chunk, dim=dim):
        s = part.sum(dim) & ring_mask(k)
        total = s if total is None else ring_add(total, s, k)
    assert total is not None
    return total
