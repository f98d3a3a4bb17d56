"""The pseudorandom generator that expands a 32-byte seed into a mask vector of ``Z_{2^k}``.

Bonawitz et al. (CCS 2017, §4) expand each seed — a pairwise key-agreement secret ``s_{u,v}`` or
a self-mask seed ``b_u`` — with a secure PRG into a vector of ``Z_R``. Here the PRG is a stream
cipher of the ``cryptography`` package keyed with the seed: AES-256 in counter mode (``"aes"``)
or ChaCha20 (``"chacha20"``); its keystream is read as little-endian unsigned words of 4 bytes
(``k ≤ 32``) or 8 bytes (``k > 32``) whose low ``k`` bits are the ring elements — uniform on
``Z_{2^k}`` because the keystream is indistinguishable from uniform bytes.

One seed serves many aggregations (rounds, gossip steps, receivers' groups): the 16-byte
counter block / nonce is the *instance* ``(round, step, group, purpose)``, so every instance
reads a disjoint keystream (AES-CTR: the instance fills the high 64 bits of the counter block and
the block counter the low 64; ChaCha20: the instance is its 96-bit nonce, the 32-bit block
counter starts at 0, enough for 256 GiB per instance).

The keystream is written into a tensor's memory and viewed as words — no Python loop over
coordinates; a loop
over *seeds* remains (one cipher per key), each call expanding a whole vector.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import torch
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from bench.defense.secagg.fixed_point import ring_mask

PRGS = ("aes", "chacha20")

#: what the 4th field of an instance means: a pairwise mask or a self mask
PAIR, SELF = 0, 1

_SLACK = 64


def instance_nonce(round_: int, step: int, group: int, purpose: int) -> bytes:
    """The 8-byte instance id ``(round: 32 bits, step: 12, group + 1: 18, purpose: 2)``.

    ``group`` is the receiver whose neighbourhood aggregates (``−1``: the federated server)."""
    if not (0 <= round_ < 2**32 and 0 <= step < 2**12 and -1 <= group < 2**18 - 1 and 0 <= purpose < 4):
        raise ValueError(f"instance ({round_}, {step}, {group}, {purpose}) is out of the nonce's range")
    return struct.pack(
        ">IHH", round_, (step << 4) | ((group + 1) >> 14), (((group + 1) & 0x3FFF) << 2) | purpose
    )


def _encryptor(seed: bytes, nonce: bytes, prg: str) -> Any:  # a cryptography CipherContext
    if len(seed) != 32:
        raise ValueError("PRG seeds are 32 bytes")
    if prg == "aes":
        return Cipher(algorithms.AES(seed), modes.CTR(nonce + bytes(8))).encryptor()
    return Cipher(algorithms.ChaCha20(seed, bytes(4) + nonce + bytes(4)), mode=None).encryptor()


def word_dtype(k: int) -> torch.dtype:
    """The keystream word read per ring element: 4 bytes (unsigned) for ``k ≤ 32``, else 8."""
    return torch.uint32 if k <= 32 else torch.int64


def expand(seed: bytes, nonce: bytes, n: int, k: int, prg: str = "aes") -> torch.Tensor:
    """``PRG(seed)`` for instance ``nonce``: ``n`` uniform elements of ``Z_{2^k}`` (``int64``)."""
    return expand_many([seed], [nonce], n, k, prg)[0]


def expand_many(
    seeds: Sequence[bytes], nonces: Sequence[bytes], n: int, k: int, prg: str = "aes"
) -> torch.Tensor:
    """``[len(seeds), n]``: ``PRG(seeds[i])`` for instance ``nonces[i]``, as ring elements.

    Each seed's keystream is written straight into one preallocated byte tensor (the cipher's
    ``update_into``), viewed as words, then every row is widened and reduced mod ``2^k`` at once."""
    if prg not in PRGS:
        raise ValueError(f"unknown PRG {prg!r}; choose one of {PRGS}")
    word = word_dtype(k)
    row = n * torch.empty(0, dtype=word).element_size()
    zeros = bytes(row)  # the keystream is the encryption of zeros
    # update_into wants up to a block (16 bytes) of slack after each output: rows are written in
    # order, so row i's slack is overwritten by row i + 1, and the last one has its own
    buf = torch.empty(len(seeds) * row + _SLACK, dtype=torch.uint8)
    view = buf.numpy()
    for i, (seed, nonce) in enumerate(zip(seeds, nonces, strict=True)):  # one cipher per key
        _encryptor(seed, nonce, prg).update_into(zeros, view[i * row : (i + 1) * row + _SLACK])
    out = buf[: len(seeds) * row].view(word).reshape(len(seeds), n).to(torch.int64)
    if k != 32:  # uint32 words widen to [0, 2^32) already
        out &= ring_mask(k)
    return out
