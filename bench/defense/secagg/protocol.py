"""One secure-aggregation instance: masking a group's inputs, and unmasking only their sum.

The double-masking protocol of Bonawitz et al. (CCS 2017, §4, Figure 4; the idea in §3.1–3.3),
for a group ``M`` of ``m`` users (the sampled clients of a federated round, or the neighbours of a
receiver in a decentralized network) with encoded inputs ``x_u ∈ Z_{2^k}^P``:

* **Masking** (Round 2, "MaskedInputCollection"). User ``u`` sends

      y_u = x_u + PRG(b_u) + Σ_{v ∈ M, u < v} PRG(s_{u,v}) − Σ_{v ∈ M, v < u} PRG(s_{u,v})   mod 2^k

  with a fresh self-mask seed ``b_u`` and the pairwise seeds ``s_{u,v}`` agreed with key pairs
  fresh for this instance (Round 0, "AdvertiseKeys": :func:`~bench.defense.secagg.keys.session_keys`);
  before that (Round 1, "ShareKeys") it Shamir-shares ``b_u`` and its key-agreement secret
  ``s_u^SK`` among ``M`` with threshold ``t`` (:mod:`bench.defense.secagg.shamir`).
* **Unmasking** (Round 4). The server receives ``y_u`` from the survivors ``U ⊆ M``; the
  dropped users are ``D = M \\ U``. With ``|U| < t`` it stops: :class:`SecAggFailure` — no partial
  or wrong sum is ever returned. Otherwise, from ``t`` survivors' shares it reconstructs ``b_u`` for
  every ``u ∈ U`` and ``s_v^SK`` for every ``v ∈ D`` (never both for one user), recomputes
  ``s_{u,v} = KA.agree(s_v^SK, s_u^PK)`` and outputs

      z = Σ_{u∈U} y_u − Σ_{u∈U} PRG(b_u) − Σ_{u∈U, v∈D} Δ_{u,v} PRG(s_{u,v}) = Σ_{u∈U} x_u   mod 2^k

  (``Δ_{u,v} = +1`` for ``u < v``, ``−1`` otherwise): the pairwise masks between survivors cancel
  in the sum.

Simulation shortcuts, each giving bit-identical messages: every pairwise mask is expanded once
and added to both users with opposite signs (each real user expands its own ``m − 1`` masks); the
users' secrets live in this process (a real user holds its own). Shares are not encrypted for
their holders (the paper's Round 1 encrypts them with the ``c``-keys): the server here never looks
at them except to unmask. The adversary's view is unaffected: it records only the ``y_u``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from bench.defense.secagg.fixed_point import SecAggError, ring_mask, ring_sub
from bench.defense.secagg.keys import agree, random_bytes, session_keys
from bench.defense.secagg.prg import PAIR, SELF, expand_many, instance_nonce
from bench.defense.secagg.shamir import bytes_to_field, field_to_bytes, reconstruct, share


class SecAggFailure(SecAggError):
    """Fewer survivors than the threshold: the sum cannot be unmasked."""


def threshold(m: int, fraction: float) -> int:
    """``t = min(m, ⌊τ·m⌋ + 1)``: strictly more than a fraction ``τ`` of the group."""
    return min(m, math.floor(fraction * m) + 1)


@dataclass
class Instance:
    """What one aggregation leaves for its unmasking: the group, its threshold, the Shamir shares
    of every member's ``b_u`` and ``s_u^SK`` (each ``[m secrets, m holders, L]``) and the public
    keys."""

    members: list[int]
    t: int
    nonce_pair: bytes
    nonce_self: bytes
    self_shares: torch.Tensor
    key_shares: torch.Tensor
    public: list[bytes]


def ring_index_add(acc: torch.Tensor, index: torch.Tensor, values: torch.Tensor, k: int) -> torch.Tensor:
    """``acc[index[i]] += values[i] mod 2^k`` for ring elements, in chunks of rows short enough
    that no row's partial sum can overflow ``int64`` (one chunk unless ``k > 62 − log2(rows)``)."""
    chunk = max(1, 1 << max(0, 62 - k))
    for start in range(0, len(index), chunk):
        acc.index_add_(0, index[start : start + chunk], values[start : start + chunk])
        acc &= ring_mask(k)
    return acc


class SecureAggregator:
    """Runs the aggregation instances of one run, many groups at once.

    Parameters
    ----------
    n_nodes:
        Nodes of the run (ids ``0 … n − 1``).
    k:
        Ring exponent (``Z_{2^k}``).
    fraction:
        Threshold fraction ``τ`` (:func:`threshold`).
    generator:
        The defense's seeded stream (session keys, self-mask seeds, share polynomials).
    prg:
        ``"aes"`` (AES-256-CTR) or ``"chacha20"``.
    chunk:
        Masks expanded at once (bounds memory at ``chunk × P`` ring elements).
    """

    def __init__(
        self, n_nodes: int, k: int, fraction: float, generator: torch.Generator, prg: str, chunk: int = 256
    ) -> None:
        self.k, self.fraction, self.prg, self.chunk = k, fraction, prg, chunk
        self._gen = generator
        self.n_nodes = n_nodes
        self.expanded = 0  # PRG vectors expanded (cost accounting)
        self.agreements = 0  # pairwise key agreements (cost accounting)

    def _signed_masks(
        self, seeds: list[bytes], nonces: list[bytes], plus: list[int], minus: list[int], rows: int, p: int
    ) -> torch.Tensor:
        """``[rows, P]``: ``+PRG(seeds[i])`` added to row ``plus[i]`` and ``−PRG(seeds[i])`` to row
        ``minus[i]`` (``−1``: none), every mask expanded once, ``chunk`` at a time."""
        # row ``rows`` is a sink for "none", so no entry needs to be filtered out (no copies)
        add = torch.zeros(rows + 1, p, dtype=torch.int64)
        sub = torch.zeros(rows + 1, p, dtype=torch.int64)
        plus_t = torch.tensor(plus, dtype=torch.long).where(torch.tensor(plus) >= 0, rows)
        minus_t = torch.tensor(minus, dtype=torch.long).where(torch.tensor(minus) >= 0, rows)
        self.expanded += len(seeds)
        for start in range(0, len(seeds), self.chunk):
            sl = slice(start, start + self.chunk)
            masks = expand_many(seeds[sl], nonces[sl], p, self.k, self.prg)
            ring_index_add(add, plus_t[sl], masks, self.k)
            ring_index_add(sub, minus_t[sl], masks, self.k)
        return ring_sub(add[:rows], sub[:rows], self.k)

    # ------------------------------------------------------------------------------ masking
    def mask_many(
        self, groups: list[tuple[list[int], int]], inputs: torch.Tensor, round_: int, step: int
    ) -> tuple[torch.Tensor, list[Instance]]:
        """Mask the encoded ``inputs [R, P]`` of every group at once.

        ``groups``: ``(members, group id)`` with sorted, distinct member ids; the rows of
        ``inputs`` are the groups' members in that order (``R = Σ m``). Returns ``y [R, P]`` and
        one :class:`Instance` per group."""
        seeds, nonces, plus, minus, instances = [], [], [], [], []
        offset = 0
        for members, group in groups:  # bookkeeping per group; the masks are expanded in bulk below
            m = len(members)
            if list(members) != sorted(members) or len(set(members)) != m:
                raise ValueError("members must be distinct and sorted")
            nonce_pair = instance_nonce(round_, step, group, PAIR)
            nonce_self = instance_nonce(round_, step, group, SELF)
            secret, public = session_keys(m, self._gen)  # this instance's keys (Round 0)
            self.agreements += m * (m - 1) // 2
            for i in range(m):  # Δ_{u,v} = +1 for the first of a pair, −1 for the second
                for j in range(i + 1, m):
                    seeds.append(agree(secret[i], public[j]))
                    nonces.append(nonce_pair)
                    plus.append(offset + i)
                    minus.append(offset + j)
            self_seeds = [random_bytes(self._gen) for _ in range(m)]
            seeds += self_seeds
            nonces += [nonce_self] * m
            plus += list(range(offset, offset + m))
            minus += [-1] * m
            t = threshold(m, self.fraction)
            instances.append(
                Instance(
                    members=list(members),
                    t=t,
                    nonce_pair=nonce_pair,
                    nonce_self=nonce_self,
                    self_shares=share(bytes_to_field(self_seeds), m, t, self._gen),
                    key_shares=share(bytes_to_field(secret), m, t, self._gen),
                    public=public,
                )
            )
            offset += m
        if offset != inputs.shape[0]:
            raise ValueError(f"{inputs.shape[0]} input rows for groups of {offset} members")
        masks = self._signed_masks(seeds, nonces, plus, minus, offset, inputs.shape[1])
        return (inputs + masks) & ring_mask(self.k), instances

    def mask(
        self, members: list[int], inputs: torch.Tensor, round_: int, step: int, group: int
    ) -> tuple[torch.Tensor, Instance]:
        """``y [m, P]`` for the encoded ``inputs [m, P]`` of one group (sorted ids ``members``)."""
        y, (inst,) = self.mask_many([(list(members), group)], inputs, round_, step)
        return y, inst

    # ---------------------------------------------------------------------------- unmasking
    def unmask_many(
        self, instances: list[Instance], survivors: list[list[int]], y: torch.Tensor, rows: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[SecAggFailure | None]]:
        """``[G, P]``: for every instance ``g``, ``Σ_{u∈U_g} x_u mod 2^k`` from the masked inputs
        ``y[rows[g]]`` of its survivors ``survivors[g]`` (same order), and per instance its
        failure (``None``: unmasked; a failed instance's row is zero)."""
        p = y.shape[1]
        z = torch.zeros(len(instances), p, dtype=torch.int64)
        group_of = torch.cat([torch.full((len(r),), g, dtype=torch.long) for g, r in enumerate(rows)])
        ring_index_add(z, group_of, y[torch.cat(rows)] if rows else y[:0], self.k)
        seeds, nonces, plus, minus = [], [], [], []
        failures: list[SecAggFailure | None] = []
        for g, (inst, alive_ids) in enumerate(zip(instances, survivors, strict=True)):
            pos = {u: i for i, u in enumerate(inst.members)}
            if any(u not in pos for u in alive_ids) or len(set(alive_ids)) != len(alive_ids):
                raise SecAggError("a delivered masked input does not belong to this aggregation's group")
            if len(alive_ids) < inst.t:
                failures.append(
                    SecAggFailure(
                        f"secure aggregation failed: {len(alive_ids)} of {len(inst.members)} users survived, "
                        f"fewer than the threshold t = {inst.t}; the dropped users' masks cannot be removed, "
                        f"so no sum is output"
                    )
                )
                z[g] = 0
                continue
            failures.append(None)
            alive = sorted(pos[u] for u in alive_ids)
            dropped = [i for i in range(len(inst.members)) if i not in set(alive)]
            holders = torch.tensor(alive[: inst.t])
            # the survivors' self masks: b_u from t shares, expanded again and subtracted
            b = field_to_bytes(reconstruct(inst.self_shares[alive][:, holders], holders + 1, inst.t))
            seeds += b
            nonces += [inst.nonce_self] * len(b)
            plus += [-1] * len(b)
            minus += [g] * len(b)
            if dropped:  # pairwise masks shared with dropped users: s_v^SK revealed, |D|·|U| agreements
                keys = field_to_bytes(reconstruct(inst.key_shares[dropped][:, holders], holders + 1, inst.t))
                for v, sk in zip(dropped, keys, strict=True):
                    for u in alive:  # survivor u added Δ_{u,v} PRG(s_{u,v}): remove it
                        seeds.append(agree(sk, inst.public[u]))
                        nonces.append(inst.nonce_pair)
                        plus.append(-1 if u < v else g)
                        minus.append(g if u < v else -1)
        correction = self._signed_masks(seeds, nonces, plus, minus, len(instances), p)
        return (z + correction) & ring_mask(self.k), failures

    def unmask(self, inst: Instance, survivors: list[int], y: torch.Tensor) -> torch.Tensor:
        """``Σ_{u∈U} x_u mod 2^k`` from one instance's survivors' masked inputs ``y [|U|, P]``.

        Raises
        ------
        SecAggFailure
            With fewer than ``t`` survivors.
        """
        z, (failure,) = self.unmask_many([inst], [list(survivors)], y, [torch.arange(len(survivors))])
        if failure is not None:
            raise failure
        return z[0]

    def revealed(self, inst: Instance, survivors: list[int]) -> list[int]:
        """The members whose secret keys an unmasking of ``inst`` with ``survivors`` revealed."""
        alive = set(survivors)
        return [u for u in inst.members if u not in alive]
