"""The candidate pool a membership attack scores, and who owns each candidate.

Pasquini et al. (2023, §2.2.1, Eq. 2) evaluate a victim ``v`` on its training set ``X_v`` against
an equal-size set ``O`` of non-members disjoint from all training data, and average over the
victims. The harness gives every membership attack of a job **one** pool, built by the scorer
from the task spec and the seed alone: every node's training samples and the test split (never
used for training), shuffled. The attack sees the pool's inputs and labels in that order — not
who owns them — and answers one score per candidate; the scorer then evaluates victim ``v`` on
its own samples (members) against the non-members, leaving the other nodes' samples out.
Choices (documented, as parameters would be): ``O`` is the whole test split, or as many of its
samples as there are training samples if it is larger, so ``|O|`` is the same for every
victim; the AUC and the balanced accuracy do not depend on the ratio of the two sets.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.data.stacked import derive_seed
from bench.simulation.run_data import RunData

#: the owner of a non-member candidate
NON_MEMBER = -1


@dataclass(frozen=True)
class CandidatePool:
    """``x [C, ...]``, ``y [C]`` in the run's dtype and the owner of each candidate (a node id, or
    :data:`NON_MEMBER`). Only ``x`` and ``y`` leave the scorer."""

    x: torch.Tensor
    y: torch.Tensor
    owner: torch.Tensor

    def members_of(self, node: int) -> torch.Tensor:
        """``[C]`` int8: 1 for ``node``'s samples, 0 for non-members, −1 for other nodes'."""
        out = torch.full(self.owner.shape, -1, dtype=torch.int8)
        out[self.owner == node] = 1
        out[self.owner == NON_MEMBER] = 0
        return out


def candidate_pool(data: RunData, seed: int) -> CandidatePool:
    """The pool of a run (module docstring): every node's training samples and up to as many
    test samples, in an order drawn from ``seed``. A training sample held by several nodes (an
    overlapping partition) is owned by the first."""
    nd = data.node_data
    index, counts = nd.index, nd.counts
    valid = torch.arange(index.shape[1])[None, :] < counts[:, None]
    nodes = torch.arange(index.shape[0])[:, None].expand_as(index)
    train_idx, owners = index[valid], nodes[valid]
    _, inverse = torch.unique(train_idx, return_inverse=True)
    seen = torch.full((int(inverse.max()) + 1 if len(inverse) else 0,), len(inverse), dtype=torch.long)
    seen.scatter_reduce_(0, inverse, torch.arange(len(inverse)), reduce="amin")
    first = seen[inverse] == torch.arange(len(inverse))
    train_idx, owners = train_idx[first], owners[first]
    test = data.test_set
    n_out = min(len(test), len(train_idx))
    dtype = nd.x.dtype
    x = torch.cat([data.train_set.x[train_idx].to(dtype), test.x[:n_out].to(dtype)])
    y = torch.cat([data.train_set.y[train_idx], test.y[:n_out].to(data.train_set.y.dtype)])
    owner = torch.cat([owners, torch.full((n_out,), NON_MEMBER, dtype=torch.long)])
    gen = torch.Generator().manual_seed(derive_seed(seed, "membership_pool"))
    order = torch.randperm(len(owner), generator=gen)
    return CandidatePool(x[order], y[order], owner[order])


def population(data: RunData) -> tuple[torch.Tensor, torch.Tensor]:
    """The attacker's auxiliary population data: the training split's samples that no node
    holds, ``x [Q, ...]``, ``y [Q]`` in the run's dtype, in the split's order. Disjoint from every
    node's training set and from the pool's non-members (drawn from the test split), so a
    reference model trained on it never trains on a candidate (offline LiRA and RMIA:
    Carlini et al. 2022 §IV-C; Zarifzadeh et al. 2024 §3)."""
    nd = data.node_data
    held = torch.zeros(len(data.train_set), dtype=torch.bool)
    held[nd.index[nd.index >= 0]] = True
    free = (~held).nonzero().squeeze(1)
    return data.train_set.x[free].to(nd.x.dtype), data.train_set.y[free]
