"""What one receiver holds about a single sender's masked message is uniform given the sum
(``bench/defense/mechanisms/secure_aggregation.py``): the claim behind secure aggregation's
receivers decoding no single message, so that an insider's View holds the masked messages and the
aggregates only.

One FedSGD-like aggregation of ``N`` clients at the server, run through the harness's mechanism
(``stacked(defense("secure_aggregation"), …)``: its ``outgoing`` masks, its wrapped aggregation
unmasks), with two plaintexts that differ in sender ``U``'s message (and in another sender's, so
that the sums agree). The server holds, of ``U``, its masked ``y_U`` and — from the unmasking
round — enough shares to rebuild ``U``'s self-mask seed ``b_U``; what is left of ``y_U`` once the
self mask is removed is ``enc(m_U)`` plus the pairwise masks, which only the sum cancels. Checked:

* the unmasked sums of the two plaintexts are equal (same seed), and equal to the plain sum;
* ``y_U`` and ``y_U − PRG(b_U)`` are uniform on ``Z_2^k`` over the mechanism's randomness
  (chi-square on the high and low bits, Kolmogorov–Smirnov on ``y / 2^k``), for either plaintext;
* their distribution does not depend on ``m_U`` (two-sample tests between the plaintexts);
* the same tests reject the unmasked encodings ``enc(m_U)`` (so they can fail).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from bench.defense.hooks import RoundContext
from bench.defense.secagg import encode
from bench.defense.secagg.fixed_point import ring_mask, ring_sub
from bench.defense.secagg.prg import expand
from bench.defense.secagg.shamir import field_to_bytes, reconstruct
from bench.simulation.messages import SERVER, MessageBatch
from tests.defenses.defense_runs import defense, run_info, stacked

N, P, U, OTHER = 5, 4096, 2, 4  # U is a middle member: it has pairwise masks of both signs
K, SCALE = 32, 2.0**16
SEEDS = range(4)
#: p-value below which a test rejects (each test here is deterministic: the seeds are fixed)
ALPHA = 1e-3


def _plaintexts() -> tuple[torch.Tensor, torch.Tensor]:
    """Two uploads ``[N, P]`` on the fixed-point grid (so that sums are exact) with the same sum:
    ``m'_U = m_U + δ`` and ``m'_OTHER = m_OTHER − δ``."""
    gen = torch.Generator().manual_seed(11)
    m = torch.randint(-2000, 2000, (N, P), generator=gen).double() / 2**8
    delta = torch.randint(-40000, 40000, (P,), generator=gen).double() / 2**6
    other = m.clone()
    other[U] += delta
    other[OTHER] -= delta
    assert torch.equal(m.sum(0), other.sum(0)) and not torch.equal(m[U], other[U])
    return m, other


def _aggregate(m: torch.Tensor, seed: int) -> tuple[MessageBatch, torch.Tensor]:
    """The masked uploads as the server receives them and the mean it unmasks from them."""
    h = stacked(defense("secure_aggregation", k=K, scale=SCALE), run_info(N, P, protocol="fedsgd"), seed)
    clients = torch.arange(N)
    edges = torch.stack([clients, torch.full_like(clients, SERVER)], dim=1)
    masked = h.outgoing(MessageBatch(0, 1, "gradient", m, clients, edges), RoundContext(0, 1, clients))
    plaintext_rule_calls = []

    def mean(own: torch.Tensor, delivered: MessageBatch) -> torch.Tensor:
        plaintext_rule_calls.append(delivered)
        return delivered.payload.mean(0)

    own = torch.zeros(N, P, dtype=torch.float64)  # what the clients received (not read by the sum)
    total = h.wrap_aggregation(mean, RoundContext(0, 1, clients))(own, masked)
    assert not plaintext_rule_calls  # the masked ring elements never reach a plaintext rule
    return masked, total


def _held(masked: MessageBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """What the server holds of ``U``: its masked ``y_U`` and ``y_U − PRG(b_U)``, the self mask
    removed with the seed it rebuilds from the survivors' shares of the unmasking round."""
    (group,) = masked.extra["secagg"]
    row = int((masked.senders == U).nonzero())
    y = masked.payload[row]
    i, t = group["members"].index(U), int(group["t"])
    holders = (group["self_shares"][i].abs().sum(-1) > 0).nonzero().squeeze(1)
    assert len(holders) >= t  # the server can rebuild b_U (it must, to unmask the sum)
    b = field_to_bytes(reconstruct(group["self_shares"][[i]][:, holders], holders + 1, t))[0]
    return y, ring_sub(y, expand(b, bytes(group["nonce_self"].tolist()), P, K), K)


@pytest.fixture(scope="module")
def views() -> dict[str, dict[str, np.ndarray]]:
    """Per plaintext, over the seeds: ``y_U``, ``y_U − PRG(b_U)``, and the checks of each run."""
    out: dict[str, dict[str, list]] = {}
    for name, m in zip(("m", "m'"), _plaintexts(), strict=True):
        rows: dict[str, list] = {"y": [], "unselfed": [], "sum": []}
        for seed in SEEDS:
            masked, total = _aggregate(m, seed)
            assert masked.payload.dtype == torch.int64 and int(masked.payload.max()) <= ring_mask(K)
            y, unselfed = _held(masked)
            rows["y"].append(y.numpy())
            rows["unselfed"].append(unselfed.numpy())
            rows["sum"].append(total)
        out[name] = {k: np.concatenate(v) if k != "sum" else v for k, v in rows.items()}
    return out


def _uniform_p(values: np.ndarray) -> float:
    """The smallest p-value of the uniformity tests of ring elements on ``Z_2^k``: chi-square of
    the top and the bottom 8 bits (256 cells each), and Kolmogorov–Smirnov of ``y / 2^k``."""
    top = np.bincount((values >> (K - 8)).astype(np.int64), minlength=256)
    low = np.bincount((values & 255).astype(np.int64), minlength=256)
    return min(
        stats.chisquare(top).pvalue,
        stats.chisquare(low).pvalue,
        stats.kstest(values / 2.0**K, "uniform").pvalue,
    )


def _same_p(a: np.ndarray, b: np.ndarray) -> float:
    """The smallest p-value of the two-sample tests: Kolmogorov–Smirnov of ``y / 2^k`` and the
    chi-square test of homogeneity of the top 8 bits."""
    table = np.stack([np.bincount((x >> (K - 8)).astype(np.int64), minlength=256) for x in (a, b)])
    table = table[:, table.sum(0) > 0]  # cells neither sample reaches carry no information
    return min(stats.ks_2samp(a / 2.0**K, b / 2.0**K).pvalue, stats.chi2_contingency(table).pvalue)


def test_the_unmasked_sums_of_the_two_plaintexts_are_equal(views):
    m, _ = _plaintexts()
    for a, b in zip(views["m"]["sum"], views["m'"]["sum"], strict=True):
        assert torch.equal(a, b)  # the same seed: what the server learns is the same
        assert torch.equal(a, m.mean(0))  # … and it is the mean (exact on the grid)


@pytest.mark.parametrize("held", ["y", "unselfed"])
def test_what_the_server_holds_of_one_sender_is_uniform(views, held):
    for name in ("m", "m'"):
        assert len(views[name][held]) == P * len(SEEDS)
        assert _uniform_p(views[name][held]) > ALPHA, f"{held} of {name} is not uniform"


@pytest.mark.parametrize("held", ["y", "unselfed"])
def test_it_does_not_depend_on_the_senders_message(views, held):
    # seeds 0, 1 of one plaintext against seeds 2, 3 of the other: independent samples
    half = P * len(SEEDS) // 2
    assert _same_p(views["m"][held][:half], views["m'"][held][half:]) > ALPHA
    assert _same_p(views["m'"][held][:half], views["m"][held][half:]) > ALPHA


def test_the_tests_reject_the_unmasked_encodings():
    """The same statistics see the plaintext: its encodings are neither uniform nor alike."""
    m, other = _plaintexts()
    a, b = (encode(x[U : U + 1], SCALE, K)[0].numpy() for x in (m, other))
    assert _uniform_p(a) < 1e-9 and _uniform_p(b) < 1e-9
    assert _same_p(a, b) < 1e-9
