"""The cryptographic pieces of secure aggregation (``bench/defense/secagg``): fixed point, PRG, key
agreement, Shamir sharing and one masking/unmasking instance (Bonawitz et al., CCS 2017)."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from bench.defense.secagg import (
    SecAggFailure,
    SecAggOverflow,
    SecureAggregator,
    check_sum_range,
    decode,
    encode,
)
from bench.defense.secagg.fixed_point import centred, ring_mask, ring_sum
from bench.defense.secagg.keys import agree, session_keys
from bench.defense.secagg.prg import PAIR, SELF, expand, expand_many, instance_nonce
from bench.defense.secagg.shamir import PRIME, ShamirError, bytes_to_field, field_to_bytes, reconstruct, share

K, SCALE = 32, 2.0**16


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------ fixed point
def test_encoding_round_trips_within_half_a_step_and_sums_within_the_rounding_bound():
    x = torch.randn(7, 500, generator=gen(), dtype=torch.float64) * 3
    enc = encode(x, SCALE, K)
    assert int(enc.min()) >= 0 and int(enc.max()) < 2**K
    assert float((decode(enc, SCALE, K) - x).abs().max()) <= 0.5 / SCALE
    total = decode(ring_sum(enc, K), SCALE, K)
    assert float((total - x.sum(0)).abs().max()) <= 7 * 0.5 / SCALE  # m / (2 · scale)


def test_partial_sums_may_wrap_but_a_sum_in_range_decodes_exactly():
    half = 2.0 ** (K - 1) / SCALE
    x = torch.tensor([[0.9 * half], [0.9 * half], [-0.9 * half]], dtype=torch.float64)
    enc = encode(x, SCALE, K)
    check_sum_range(enc, K)  # 0.9 · 2^31 in range although the first two wrap
    assert float((decode(ring_sum(enc, K), SCALE, K) - x.sum(0)).abs().max()) <= 3 * 0.5 / SCALE


def test_overflow_is_an_error_never_a_wrong_sum():
    half = 2.0 ** (K - 1) / SCALE
    x = torch.tensor([[0.6 * half], [0.6 * half]], dtype=torch.float64)
    enc = encode(x, SCALE, K)
    wrapped = decode(ring_sum(enc, K), SCALE, K)
    assert float(wrapped) < 0  # what an unchecked sum would decode to: wrong sign
    with pytest.raises(SecAggOverflow, match="wrap around"):
        check_sum_range(enc, K)
    with pytest.raises(SecAggOverflow, match="not encodable"):
        encode(torch.tensor([[1.5 * half]]), SCALE, K)
    with pytest.raises(SecAggOverflow, match="not encodable"):
        encode(torch.tensor([[float("nan")]]), SCALE, K)


def test_large_rings_check_sums_in_chunks():
    k = 62
    x = torch.full((9, 3), 2.0**58, dtype=torch.float64)  # 9 · 2^58 > 2^61: out of range
    with pytest.raises(SecAggOverflow):
        check_sum_range(encode(x, 1.0, k), k)
    check_sum_range(encode(x[:7], 1.0, k), k)  # 7 · 2^58 < 2^61
    assert torch.equal(centred(ring_sum(encode(x[:7], 1.0, k), k), k), torch.full((3,), 7 * 2**58))


# ------------------------------------------------------------------------------------ PRG
def test_prg_streams_are_deterministic_and_separated_by_seed_nonce_and_cipher():
    seed = bytes(range(32))
    a = expand(seed, instance_nonce(3, 0, -1, PAIR), 1000, K)
    assert torch.equal(a, expand(seed, instance_nonce(3, 0, -1, PAIR), 1000, K))
    others = [
        expand(seed, instance_nonce(4, 0, -1, PAIR), 1000, K),
        expand(seed, instance_nonce(3, 1, -1, PAIR), 1000, K),
        expand(seed, instance_nonce(3, 0, 5, PAIR), 1000, K),
        expand(seed, instance_nonce(3, 0, -1, SELF), 1000, K),
        expand(bytes(32), instance_nonce(3, 0, -1, PAIR), 1000, K),
        expand(seed, instance_nonce(3, 0, -1, PAIR), 1000, K, "chacha20"),
    ]
    for b in others:
        assert float((a == b).double().mean()) < 0.01
    wide = expand_many([seed, bytes(32)], [instance_nonce(0, 0, -1, PAIR)] * 2, 4000, 48)
    assert int(wide.min()) >= 0 and int(wide.max()) < 2**48 and int(wide.max()) > 2**47


# -------------------------------------------------------------------------- key agreement
def test_key_agreement_is_symmetric_and_every_session_has_fresh_keys():
    g = gen()
    secret, public = session_keys(4, g)
    assert agree(secret[0], public[2]) == agree(secret[2], public[0])
    again, public_again = session_keys(4, g)  # the next session: new pairs, new seeds
    assert not set(public) & set(public_again) and not set(secret) & set(again)
    assert agree(again[0], public_again[2]) != agree(secret[0], public[2])


def test_every_instance_agrees_its_own_keys():
    """Two instances of the same group (say two receivers' aggregations in one gossip step) share
    no public key: a secret key one unmasking reveals belongs to that instance alone."""
    agg = SecureAggregator(3, K, 0.5, gen(), "aes")
    x = encode(torch.zeros(3, 10, dtype=torch.float64), SCALE, K)
    _, (a, b) = agg.mask_many([([0, 1, 2], 5), ([0, 1, 2], 6)], torch.cat([x, x]), 0, 0)
    assert not set(a.public) & set(b.public) and agg.agreements == 6


# --------------------------------------------------------------------------------- Shamir
def test_any_t_shares_reconstruct_and_t_minus_one_do_not():
    secrets = [bytes(torch.randint(0, 256, (32,), generator=gen(s)).tolist()) for s in range(5)]
    field = bytes_to_field(secrets)
    assert field_to_bytes(field) == secrets
    shares = share(field, n=7, t=4, generator=gen(1))
    assert int(shares.max()) < PRIME
    for holders in ([0, 1, 2, 3], [6, 4, 2, 0], [1, 3, 5, 6]):
        idx = torch.tensor(holders)
        assert field_to_bytes(reconstruct(shares[:, idx], idx + 1, 4)) == secrets
    with pytest.raises(ShamirError, match="cannot reconstruct"):
        reconstruct(shares[:, :3], torch.arange(1, 4), 4)
    # interpolating t − 1 shares as if the threshold were t − 1 gives garbage, not the secret
    wrong = reconstruct(shares[:, :3], torch.arange(1, 4), 3)
    assert not torch.equal(wrong, field)


# ------------------------------------------------------------------------------- protocol
def instance(m: int = 6, p: int = 300, fraction: float = 0.5, seed: int = 0):
    agg = SecureAggregator(10, K, fraction, gen(seed), "aes")
    x = torch.randn(m, p, generator=gen(seed + 1), dtype=torch.float64)
    enc = encode(x, SCALE, K)
    members = [0, 2, 3, 5, 7, 9][:m]
    y, inst = agg.mask(members, enc, 0, 0, -1)
    return agg, members, x, enc, y, inst


def test_masks_cancel_exactly_in_the_sum():
    agg, members, x, enc, y, inst = instance()
    z = agg.unmask(inst, members, y)
    assert torch.equal(z, ring_sum(enc, K))  # exact in the ring
    assert float((decode(z, SCALE, K) - x.sum(0)).abs().max()) <= len(members) * 0.5 / SCALE
    assert not torch.equal(ring_sum(y, K), ring_sum(enc, K))  # the self masks are still in Σ y


def test_up_to_m_minus_t_dropouts_give_the_survivors_sum():
    agg, members, _, enc, y, inst = instance()
    assert inst.t == 4
    for alive in ([0, 1, 2, 3, 4], [1, 2, 4, 5], [0, 3, 4, 5]):
        survivors = [members[i] for i in alive]
        z = agg.unmask(inst, survivors, y[alive])
        assert torch.equal(z, ring_sum(enc[alive], K))
        assert agg.revealed(inst, survivors) == [u for u in members if u not in survivors]


def test_fewer_than_t_survivors_fail_clearly():
    agg, members, _, _, y, inst = instance()
    with pytest.raises(SecAggFailure, match="fewer than the threshold t = 4"):
        agg.unmask(inst, members[:3], y[:3])


def _chi2_pvalue(values: torch.Tensor, k: int, bins: int = 64) -> float:
    """p-value of a chi-square test that ``values`` (ring elements) are uniform on Z_2^k, on the
    top ``log2(bins)`` bits."""
    top = (values >> (k - bins.bit_length() + 1)).reshape(-1)
    counts = torch.bincount(top, minlength=bins).double()
    return float(chisquare(counts.numpy()).pvalue)


def test_a_masked_message_is_uniform_on_the_ring_and_the_test_detects_bad_masks():
    """One user's masked message for a fixed input, over 50 rounds × 400 coordinates: the top
    6 bits are uniform (chi-square). The same test rejects the plaintext encoding and a mask
    drawn from too few bits (k − 8), whose top bits are the input's."""
    agg = SecureAggregator(3, K, 0.5, gen(2), "aes")
    x = torch.linspace(-1, 1, 400, dtype=torch.float64).expand(3, -1)
    enc = encode(x, SCALE, K)
    masked = torch.stack([agg.mask([0, 1, 2], enc, t, 0, -1)[0][0] for t in range(50)])
    assert _chi2_pvalue(masked, K) > 1e-3
    plain = enc[0].expand(50, -1)
    assert _chi2_pvalue(plain, K) < 1e-12
    short = expand_many(
        [bytes([t]) * 32 for t in range(50)], [instance_nonce(0, 0, -1, SELF)] * 50, 400, K - 8
    )
    badly = (plain + short) & ring_mask(K)
    assert _chi2_pvalue(badly, K) < 1e-12
