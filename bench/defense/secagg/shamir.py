"""Shamir's t-out-of-n secret sharing of byte strings, vectorized over secrets and holders.

A secret ``s ∈ GF(p)`` is hidden as the constant term of a random polynomial
``f(x) = s + a_1 x + … + a_{t−1} x^{t−1}``; holder ``j`` (``j = 1 … n``) gets ``f(j)``. Any ``t``
shares give ``s = f(0) = Σ_j f(x_j) λ_j`` with the Lagrange coefficients
``λ_j = Π_{i≠j} x_i / (x_i − x_j)``; fewer than ``t`` shares are independent of ``s`` (Shamir 1979;
the sharing of Bonawitz et al., CCS 2017, §4, "SS.share" / "SS.recon").

The field is ``GF(p)``, ``p = 2^31 − 1`` (a Mersenne prime), so products of two elements fit in
``int64`` and everything runs as array operations (numpy, whose integer remainder is faster
than torch's on a CPU; see performance/README.md): secrets ``[S, L]`` of ``L`` field elements
each, shares ``[S, n, L]``, one Horner step per coefficient and one Lagrange sum — loops over the
polynomial degree only, never over secrets, holders or bytes. A byte string is split into
16-bit chunks (each below ``p``), each chunk shared with its own independent polynomial; since
each chunk's sharing is perfectly hiding, so is the whole string's.

Hand-written because the ``cryptography`` package has no secret sharing, and the one of
PyCryptodome (``Crypto.Protocol.SecretSharing``) shares one 16-byte secret per call, in a Python
loop over holders; a secure aggregation round shares two 32-byte secrets for every client.
"""

from __future__ import annotations

import numpy as np
import torch

PRIME = 2**31 - 1


class ShamirError(ValueError):
    """Too few or inconsistent shares to reconstruct."""


def bytes_to_field(secrets: list[bytes]) -> torch.Tensor:
    """``[S, L]`` field elements: each (equal-length, even-length) secret as big-endian 16-bit chunks."""
    data = b"".join(secrets)
    length = len(secrets[0]) if secrets else 0
    if any(len(s) != length for s in secrets) or length % 2:
        raise ValueError("secrets must all have the same even length")
    words = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64).reshape(len(secrets), -1, 2)
    return words[..., 0] * 256 + words[..., 1]


def field_to_bytes(values: torch.Tensor) -> list[bytes]:
    """The inverse of :func:`bytes_to_field` (values must be below ``2^16``)."""
    if bool(((values < 0) | (values >= 2**16)).any()):
        raise ShamirError("reconstructed chunks out of the 16-bit range: wrong shares")
    pairs = torch.stack([values // 256, values % 256], dim=-1).to(torch.uint8)
    return [bytes(row.reshape(-1).tolist()) for row in pairs]


def share(secrets: torch.Tensor, n: int, t: int, generator: torch.Generator) -> torch.Tensor:
    """``[S, n, L]``: holder ``j``'s share ``f(j + 1)`` of every secret of ``secrets [S, L]``.

    The ``t − 1`` random coefficients per secret and chunk are uniform on ``GF(p)``, drawn from
    ``generator``."""
    if not 1 <= t <= n:
        raise ValueError(f"threshold t = {t} must be in 1 … n = {n}")
    s, length = secrets.shape
    coeffs = torch.randint(0, PRIME, (t - 1, s, 1, length), generator=generator, dtype=torch.int64).numpy()
    x = np.arange(1, n + 1, dtype=np.int64)[None, :, None]  # [1, n, 1]
    acc = np.zeros((s, n, length), dtype=np.int64)
    for a in coeffs[::-1]:  # Horner, highest degree first: acc ← (acc + a) · x
        acc = (acc + a) % PRIME * x % PRIME
    return torch.from_numpy((acc + secrets.numpy()[:, None, :]) % PRIME)


def lagrange_at_zero(xs: torch.Tensor) -> torch.Tensor:
    """``[m]`` coefficients ``λ_j = Π_{i≠j} x_i / (x_i − x_j) mod p`` for distinct points ``xs``."""
    x = [int(v) % PRIME for v in xs.tolist()]
    if len(set(x)) != len(x):
        raise ShamirError("share points must be distinct")
    lam = []
    for j, xj in enumerate(x):  # Python integers: m ≤ n products of m numbers, exact
        num = den = 1
        for i, xi in enumerate(x):
            if i != j:
                num = num * xi % PRIME
                den = den * (xi - xj) % PRIME
        lam.append(num * pow(den, PRIME - 2, PRIME) % PRIME)
    return torch.tensor(lam, dtype=torch.int64)


def reconstruct(shares: torch.Tensor, xs: torch.Tensor, t: int) -> torch.Tensor:
    """``[S, L]`` secrets from ``shares [S, m, L]`` held at points ``xs [m]`` (``f(x)`` values).

    The first ``t`` shares are used.

    Raises
    ------
    ShamirError
        With fewer than ``t`` shares: they carry no information about the secret.
    """
    if shares.shape[1] < t or len(xs) < t:
        raise ShamirError(f"{shares.shape[1]} shares cannot reconstruct a {t}-out-of-n secret")
    lam = lagrange_at_zero(xs[:t]).numpy()
    terms = shares[:, :t, :].numpy() * lam[None, :, None] % PRIME  # each product < 2^62
    return torch.from_numpy(terms.sum(1) % PRIME)  # a sum of t < 2^32 terms below 2^31: no overflow
