"""Cost of secure aggregation (``bench/defense/secagg``, ``defenses/secure_aggregation.py``) against
plaintext aggregation, measured in the same run.

What is measured
----------------
1. **Masking and unmasking throughput** of one aggregation of ``n`` clients × ``P`` parameters
   (default 100 × 100 000; ``--quick`` 20 × 20 000): fixed-point encoding of the ``[n, P]``
   updates, the overflow check, all ``n(n−1)/2`` pairwise masks and ``n`` self masks (AES-256-CTR
   keystream into tensors), the session's key pairs and ``n(n−1)/2`` agreements (X25519 + HKDF,
   fresh per aggregation), Shamir sharing of the self-mask seeds and the session's secret keys
   (``masking``); then the sum, the Shamir reconstruction and re-expansion of the survivors' self
   masks and, with dropouts, the session secrets of the dropped clients and their pairwise masks
   (``unmasking``). The reference is plaintext aggregation: the float sum ``x.sum(0)`` of the same
   updates. The key agreement alone is printed too. Each timing is the fastest of ``--repeats``.
2. **Per-round time and bytes** of two quick-suite-sized runs with and without the defense
   (``Simulation.run_round`` on the run's own batches): FedSGD with 10 clients and D-PSGD on a 4×4
   torus, the 64-100-10 MLP on digits. Bytes on the wire per round: plaintext, each message is
   ``P`` float32 values (``4P`` bytes); secure aggregation, each masked input is ``P`` ring elements
   of ``k`` bits (``kP/8`` bytes) plus, per user and aggregation, its Shamir shares of ``b_u`` for
   the ``m − 1`` other members (Round 1; 16 field elements of 4 bytes each per share) and, in
   the unmasking round, at most one share per other member (Round 4); with session keys fresh
   per aggregation also its 32-byte public key (Round 0) and its shares of ``s_u^SK`` (Round 1).

Usage::

    PYTHONPATH=. python performance/secagg.py            # 100 clients × 100k parameters
    PYTHONPATH=. python performance/secagg.py --quick    # smoke test, well under a minute
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bench.defense.loading import build_defense
from bench.defense.secagg import SecureAggregator, check_sum_range, decode, encode
from bench.defense.secagg.keys import agree, session_keys
from bench.results.provenance import cpu_model
from bench.simulation import Simulation

ROOT = Path(__file__).resolve().parents[1]
SHARE_BYTES = 16 * 4  # one share of a 32-byte secret: 16 field elements of GF(2^31 − 1)


def best_of(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def throughput(n: int, p: int, k: int, scale: float, dropout: float, repeats: int) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, p, generator=gen) * 0.1
    agg = SecureAggregator(n, k, 0.5, torch.Generator().manual_seed(1), "aes")
    members = list(range(n))
    secret, public = session_keys(n, torch.Generator().manual_seed(2))
    start = time.perf_counter()
    [agree(secret[u], public[v]) for u in members for v in members if u < v]
    setup = time.perf_counter() - start
    state: dict[str, object] = {}

    def mask() -> None:
        enc = encode(x, scale, k)
        check_sum_range(enc, k)
        state["y"], state["inst"] = agg.mask(members, enc, 0, 0, -1)

    alive = torch.rand(n, generator=gen) >= dropout
    survivors = [u for u in members if alive[u]]

    def unmask() -> None:
        z = agg.unmask(state["inst"], survivors, state["y"][alive])  # type: ignore[index,arg-type]
        state["sum"] = decode(z, scale, k)

    plain = best_of(lambda: x[alive].sum(0), repeats)
    t_mask = best_of(mask, repeats)
    t_unmask = best_of(unmask, repeats)
    err = float((state["sum"] - x[alive].double().sum(0)).abs().max())  # type: ignore[operator]
    gb = n * p / 1e9
    t = state["inst"].t  # type: ignore[attr-defined]
    print(
        f"\n[1] one aggregation: {n} clients × {p:,} parameters, k = {k}, scale = {scale:g}, "
        f"dropout {dropout:.0%} ({n - len(survivors)} dropped, t = {t})"
    )
    print(f"    of which key agreement ({n * (n - 1) // 2:,} X25519 + HKDF)    {setup:8.3f} s")
    print(f"    plaintext aggregation (float sum)                {plain * 1e3:10.2f} ms")
    print(
        f"    masking (encode, check, {n * (n - 1) // 2:,} + {n} masks, Shamir) {t_mask * 1e3:10.1f} ms   "
        f"{gb / t_mask:6.3f} G client-params/s"
    )
    print(
        f"    unmasking (sum, reconstruct, re-expand)          {t_unmask * 1e3:10.1f} ms   "
        f"{gb / t_unmask:6.3f} G client-params/s"
    )
    print(
        f"    overhead vs plaintext: masking + unmasking = {(t_mask + t_unmask) / plain:,.0f}× "
        f"(per client: {(t_mask + t_unmask) / n * 1e3:.2f} ms for {p:,} parameters)"
    )
    print(f"    max |decoded sum − float64 sum| = {err:.2e} (bound m/(2·scale) = {n / (2 * scale):.2e})")


def _config(protocol: str) -> dict:
    base = {"dataset": "digits", "model": "mlp", "model_params": {"hidden": [100]}, "seed": 0}
    if protocol == "fedsgd":
        return {**base, "nodes": 10, "protocol": "fedsgd", "protocol_params": {"lr": 0.1, "batch_size": 1}}
    return {
        **base,
        "nodes": 16,
        "topology": "torus",
        "mixing": "uniform",
        "protocol": "dpsgd",
        "protocol_params": {"lr": 0.1, "batch_size": 1},
    }


def per_round(protocol: str, rounds: int, repeats: int) -> None:
    times = {}
    sims = {}
    for name in ("none", "secure_aggregation"):
        hooks = build_defense(name, {}, ROOT)
        sim = Simulation(_config(protocol), hooks=hooks)
        batches = [sim.batch(t) for t in range(rounds * repeats + 1)]
        sim.run_round(batches[0])  # warm-up (torch.func tracing, key agreement of every pair)

        def go(sim: Simulation = sim, batches: list = batches) -> None:
            for _ in range(rounds):
                sim.run_round(batches[sim.round_index])

        times[name] = best_of(go, repeats) / rounds
        sims[name] = sim
    d = sims["secure_aggregation"].hooks
    n_params = sims["none"].flat.n_params
    if protocol == "fedsgd":
        groups = [10]
    else:
        groups = [int(v) for v in (torch.as_tensor(sims["none"].mixer.W) != 0).sum(1) - 1]
    messages = sum(groups)
    plain_bytes = messages * 4 * n_params
    masked = messages * d.k * n_params // 8
    # Round 0 (public keys), Round 1 (shares of b_u and s_u^SK), Round 4 (one share per member)
    shares = sum(m * 32 + m * (m - 1) * SHARE_BYTES * 3 for m in groups)
    label = "FedSGD, 10 clients" if protocol == "fedsgd" else "D-PSGD, 4×4 torus (16 groups of 4)"
    print(f"\n[2] {label}, MLP 64-100-10 on digits ({n_params:,} parameters), {rounds} rounds")
    print(f"    plaintext           {times['none'] * 1e3:8.2f} ms/round   {plain_bytes / 1e3:9.1f} kB/round")
    print(
        f"    secure aggregation  {times['secure_aggregation'] * 1e3:8.2f} ms/round   "
        f"{(masked + shares) / 1e3:9.1f} kB/round "
        f"(masked inputs {masked / 1e3:.1f} kB + shares {shares / 1e3:.1f} kB)"
    )
    print(
        f"    ratio               {times['secure_aggregation'] / times['none']:8.1f}×            "
        f"{(masked + shares) / plain_bytes:9.2f}×"
    )
    print(f"    key agreements over the run: {d._agg.agreements} (fresh per aggregation session)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="20 clients × 20k parameters, few rounds")
    parser.add_argument("--repeats", type=int, default=2, help="timings are the fastest of this many runs")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: stable on a shared CPU)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    n, p = (20, 20_000) if args.quick else (100, 100_000)
    print(
        f"secure aggregation cost — {cpu_model()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s)"
    )
    throughput(n, p, 32, 2.0**16, 0.0, args.repeats)
    throughput(n, p, 32, 2.0**16, 0.1, args.repeats)
    rounds = 5 if args.quick else 30
    per_round("fedsgd", rounds, args.repeats)
    per_round("dpsgd", rounds, args.repeats)


if __name__ == "__main__":
    main()
