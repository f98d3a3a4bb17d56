"""What the engine's batch plan means for sample-level DP accounting.

The engine gives node ``v`` in every local step the minibatch of its protocol's batch plan
(``bench.data.stacked.NodeData.round_batch``): the whole local set (``batch_size=None``, or a
batch size ≥ every ``n_v``), or ``B`` of its ``n_v`` samples drawn *without replacement*
(steps mode: independently per step; epochs mode: a fresh permutation per epoch, cut into
``⌈n_v / B⌉`` batches). So a node's minibatch has ``B_v = min(B, n_v)`` samples, and a given
sample is in a given step's minibatch with probability ``B_v / n_v``.

What that means for accounting (``bench.defense.privacy.accounting``):

* **Full batch** (``B_v = n_v``): no subsampling, ``q_v = 1``, one mechanism per step; the
  relation is add/remove one sample (the clipped sum moves by at most ``C``). Exact.
* **Fixed-size minibatches** (``B_v < n_v`` for some node), ``sampling="fixed"``: a differing
  sample displaces another, so the relation is **replace one** (the clipped sum moves by up to
  ``2C``) — for every node of the run, so one relation covers the entry. In steps mode each step
  is a sample of ``B_v`` of ``n_v`` without replacement: ``q_v = B_v / n_v``, accounted by the
  bound for sampling without replacement (Wang et al. 2019, ``"rdp_wor"``), not by the Poisson
  analysis, which is no bound here. In epochs mode a sample is in exactly one step of each
  epoch (the permutation does not depend on the data): per sample, one unamplified mechanism per
  epoch (``q_v = 1``, ``T_v`` = epochs).
* ``sampling="poisson"`` keeps each sample of the minibatch independently with probability
  ``r`` (Opacus's ``UniformWithReplacementSampler``) and divides the clipped sum by the
  expected size ``r B_v``: Poisson subsampling of the local set at ``q_v = r``, add/remove
  relation — exact on full-batch tasks only, and refused on others (the minibatch is itself a
  fixed-size sample).
"""

from __future__ import annotations

import math

import torch

from bench.core.errors import BenchInputError
from bench.defense.hooks import RunInfo

SAMPLINGS = ("fixed", "poisson")


def minibatch_sizes(run: RunInfo) -> torch.Tensor:
    """``B_v`` ``[N]`` (float64): samples in node ``v``'s minibatch of a step."""
    counts = torch.tensor(run.counts, dtype=torch.float64)
    if run.batch_size is None or run.batch_size >= max(run.counts):
        return counts
    return counts.clamp(max=float(run.batch_size))


def minibatched(run: RunInfo) -> bool:
    """Whether some node's minibatch is a proper subset of its local set (``B < n_v``)."""
    return run.batch_size is not None and run.batch_size < max(run.counts)


def relation(run: RunInfo, sampling: str) -> str:
    """The neighbouring relation of sample-level DP on this run: ``"replace_one"`` with
    fixed-size minibatches, else ``"add_remove"``; ``sampling="poisson"`` on minibatches is an
    input error naming ``defense.sampling``."""
    if not minibatched(run):
        return "add_remove"
    if sampling == "poisson":
        raise BenchInputError(
            "defense.sampling",
            sampling,
            reason=f"Poisson sampling needs a full-batch task (batch_size {run.batch_size} < the local "
            "sets): the minibatch is already a fixed-size sample; use sampling='fixed' (accounted as "
            "sampling without replacement, replace-one relation)",
        )
    return "replace_one"


def sample_rates(run: RunInfo, sampling: str, rate: float) -> torch.Tensor:
    """``q_v`` ``[N]`` of one accounted step of node ``v``: ``r`` under Poisson sampling,
    ``B_v / n_v`` for steps drawn without replacement, ``1`` in epochs mode (a sample is in one
    step per epoch) and for full batches."""
    counts = torch.tensor(run.counts, dtype=torch.float64).clamp_min(1.0)
    if sampling == "poisson":
        return torch.full_like(counts, float(rate))
    if run.local_epochs is not None:
        return torch.ones_like(counts)
    return minibatch_sizes(run) / counts


def steps_per_accounted(run: RunInfo) -> torch.Tensor:
    """Gradient steps ``[N]`` (int64) of node ``v`` per accounted mechanism: ``⌈n_v / B⌉`` in
    epochs mode with minibatches (an epoch's steps see each sample once), else 1."""
    n = len(run.counts)
    if run.local_epochs is None or not minibatched(run):
        return torch.ones(n, dtype=torch.int64)
    return torch.tensor([max(1, math.ceil(c / run.batch_size)) for c in run.counts], dtype=torch.int64)


def accounted_steps(run: RunInfo, steps: torch.Tensor) -> torch.Tensor:
    """The mechanisms ``T_v`` ``[N]`` a node's ``steps`` gradient steps compose (epochs begun)."""
    per = steps_per_accounted(run)
    return (steps.cpu().to(torch.int64) + per - 1) // per


def sampling_scheme(run: RunInfo, sampling: str) -> str:
    """How the engine actually drew the samples of a step, in words (what an entry records next
    to what the accountant assumed): ``"full batch"``, ``"fixed-size without replacement"``
    (steps mode), ``"shuffled epochs"`` (epochs mode), or ``"poisson"``."""
    if sampling == "poisson":
        return "poisson"
    if not minibatched(run):
        return "full batch"
    return "fixed-size without replacement" if run.local_epochs is None else "shuffled epochs"


def sampling_accounted(run: RunInfo, sampling: str) -> str:
    """What the accountant assumed: ``"poisson"``, ``"without replacement"`` or ``"none"``
    (``q = 1``: full batches, epochs)."""
    if sampling == "poisson":
        return "poisson"
    if minibatched(run) and run.local_epochs is None:
        return "without replacement"
    return "none"


def steps_per_round(run: RunInfo) -> torch.Tensor:
    """Local steps ``[N]`` (int64) in which node ``v`` computes a gradient in one round it
    takes part in: ``local_steps``, or ``local_epochs · ⌈n_v / B⌉`` in epochs mode (steps of an
    epoch beyond a node's own samples are empty and skipped by the protocol)."""
    n = len(run.counts)
    if run.local_epochs is None:
        return torch.full((n,), int(run.local_steps), dtype=torch.int64)
    if run.batch_size is None or run.batch_size >= max(run.counts):
        return torch.full((n,), int(run.local_epochs), dtype=torch.int64)
    per_epoch = [max(1, math.ceil(c / run.batch_size)) for c in run.counts]
    return torch.tensor(per_epoch, dtype=torch.int64) * int(run.local_epochs)


def planned_steps(run: RunInfo) -> torch.Tensor:
    """Accounted mechanisms ``T_v`` ``[N]`` of each node over the whole run if it takes part in
    every round (an upper bound under client sampling: a client's steps are counted as they
    happen): gradient steps, or epochs in epochs mode (:func:`accounted_steps`)."""
    return accounted_steps(run, steps_per_round(run) * int(run.rounds))


def groups(rates: torch.Tensor, steps: torch.Tensor) -> list[tuple[float, int]]:
    """The distinct ``(q_v, T_v)`` pairs over nodes (one accountant call each)."""
    return sorted({(float(q), int(t)) for q, t in zip(rates.tolist(), steps.tolist(), strict=True)})
