"""Key agreement: fresh X25519 key pairs per aggregation session and the pairwise seeds ``s_{u,v}``.

Bonawitz et al. (CCS 2017, §4, "Key Agreement"; Round 0 "AdvertiseKeys" of the protocol) give
each user a key pair ``(s_u^SK, s_u^PK)`` *per protocol instance*; two users ``u, v`` agree on
``s_{u,v} = KA.agree(s_u^SK, s_v^PK) = KA.agree(s_v^SK, s_u^PK)`` without talking to each other
(the public keys are relayed by the server, or in a decentralized network by the receiver whose
neighbourhood aggregates). Here ``KA`` is X25519 Diffie–Hellman followed by HKDF-SHA256 (both from
the ``cryptography`` package), which turns the shared point into the 32-byte PRG seed, as the paper
prescribes ("agree … composed with a hash function").

Fresh keys per session (one receiver's aggregation in one round and step) are what makes a
revealed key harmless. An aggregation in which user ``u`` drops out reveals ``s_u^SK`` to its
receiver (it reconstructs it to remove ``u``'s pairwise masks). Were that key long-term, the same
receiver — with a second receiver in whose aggregation ``u`` survived in the same gossip step,
which learns ``u``'s self-mask seed ``b_u`` — could remove every mask of ``u``'s message to that
second receiver and read it: two colluding receivers would unmask an individual message
(``tests/defenses/test_secure_aggregation.py`` runs that attack). With session keys the revealed
``s_u^SK`` opens nothing but the session it came from.

Cost: ``m`` key generations and ``m(m−1)/2`` agreements per session of ``m`` users;
``performance/secagg.py`` measures it (see performance/README.md).
"""

from __future__ import annotations

import torch
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

_INFO = b"bench secure aggregation pairwise seed"


def random_bytes(generator: torch.Generator, n: int = 32) -> bytes:
    """``n`` bytes from ``generator`` (the run's seeded stream: reproducible runs)."""
    return bytes(torch.randint(0, 256, (n,), generator=generator, dtype=torch.uint8).tolist())


def agree(secret: bytes, peer_public: bytes) -> bytes:
    """``KA.agree``: HKDF-SHA256 of the X25519 shared point of ``secret`` and ``peer_public``."""
    shared = X25519PrivateKey.from_private_bytes(secret).exchange(
        X25519PublicKey.from_public_bytes(peer_public)
    )
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(shared)


def public_key(secret: bytes) -> bytes:
    """The raw 32-byte X25519 public key of a raw 32-byte secret key."""
    return (
        X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    )


def normalized_secret(raw: bytes) -> bytes:
    """The raw private bytes X25519 keeps for ``raw`` (what is secret-shared and reconstructed)."""
    return X25519PrivateKey.from_private_bytes(raw).private_bytes(
        Encoding.Raw, PrivateFormat.Raw, NoEncryption()
    )


def session_keys(m: int, generator: torch.Generator) -> tuple[list[bytes], list[bytes]]:
    """Fresh key pairs of the ``m`` users of one session: ``(secret keys, public keys)``."""
    secret = [normalized_secret(random_bytes(generator)) for _ in range(m)]
    return secret, [public_key(sk) for sk in secret]
