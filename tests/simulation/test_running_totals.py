"""Running totals in the transcript: PDMM attacks on a long run record a few early rounds plus the
per-edge sum of every Δz, and get the same observables as from the whole transcript."""

import pytest
import torch

from bench.attacks import build_attack
from bench.attacks.observe.pdmm_observables import PDMMObservables, honest_nodes
from bench.defense.loading import build_defense
from bench.simulation import Simulation
from bench.simulation.messages import MessageBatch
from bench.simulation.transcript import RunningTotal, Transcript
from bench.spec.catalog import bench_root
from bench.threats import build_threat

ROUNDS = 30
EARLY = 5


def pdmm_run(record, totals=(), theta=1.0, hooks=None, model="mlp", coalition=(0, 4)):
    cfg = {
        "dataset": "digits",
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 2},
        "model": model,
        "model_params": {"hidden": [16]} if model == "mlp" else {},
        "nodes": 8,
        "topology": "ring",
        "dtype": "float64",
        "protocol": "pdmm",
        "protocol_params": {"solver": "gradient_step", "mu": 0.05, "z0_variance": 1.0, "theta": theta},
        "seed": 3,
    }
    sim = Simulation(
        cfg,
        hooks=hooks,
        threats={"eve": build_threat("eavesdropper", coalition=list(coalition))},
        record_rounds=record,
        record_kinds=["z0", "delta_z"],
        record_totals=totals,
    )
    sim.run(ROUNDS)
    return sim


@pytest.mark.parametrize("theta", [1.0, 0.5])
def test_early_rounds_plus_running_totals_give_the_whole_transcripts_observables(theta):
    full = PDMMObservables(pdmm_run("all", theta=theta).view("eve"))
    short_sim = pdmm_run(range(EARLY), ["delta_z"], theta=theta)
    view = short_sim.view("eve")
    assert {m.round for m in view.messages} == set(range(EARLY))  # 5 of 30 rounds explicit
    assert sorted(view.own_states) == [*range(EARLY), ROUNDS]  # plus the final anchor state
    run = view.totals["delta_z"]
    assert (run.rounds, run.last_round) == (ROUNDS, ROUNDS - 1)
    short = PDMMObservables(view)
    assert (short.T, short.T_run, full.T, full.T_run) == (EARLY, ROUNDS, ROUNDS, ROUNDS)
    # the weights of the early rounds, through the telescoped tail, equal the round-by-round walk
    for anchor in ("coalition", "zeros"):
        w_full, w_short = full.weights(anchor)[:EARLY], short.weights(anchor)
        assert (w_full - w_short).abs().max() < 1e-10 * w_full.abs().max()
    g_full, _ = full.noisy_gradients()
    g_short, _ = short.noisy_gradients()
    k = g_short.shape[0]
    assert torch.allclose(g_full[:k], g_short, rtol=0, atol=1e-9)
    honest = honest_nodes(view)
    s_full, s_short = full.component_sums(honest), short.component_sums(honest)
    assert s_full.keys() == s_short.keys()
    for c in s_full:
        assert torch.allclose(s_full[c][:k], s_short[c], rtol=0, atol=1e-9)
    # memory: 5 rounds + one total + the last round instead of 30 rounds
    assert short_sim.transcript.payload_bytes() < 0.35 * pdmm_run("all").transcript.payload_bytes()


def test_running_totals_sum_what_the_observer_received_under_a_defense():
    """Quantized Δz: the totals sum the *delivered* (quantized) payloads, edge by edge."""
    quant = build_defense("quantization", {"delta": 1e-2}, bench_root())
    sim = pdmm_run("all", ["delta_z"], hooks=quant)
    view = sim.view("eve")
    run = view.totals["delta_z"]
    obs = PDMMObservables(view)  # every round explicit: D holds what was delivered
    keys = obs.e.src * sim.n_nodes + obs.e.dst
    pos = torch.searchsorted(keys, run.senders * sim.n_nodes + run.receivers)
    assert torch.equal(keys[pos], run.senders * sim.n_nodes + run.receivers)
    assert torch.allclose(run.total, obs.D.sum(0)[pos], rtol=0, atol=1e-12)
    frac = (run.total / 1e-2) - (run.total / 1e-2).round()  # sums of multiples of Δ
    assert frac.abs().max() < 1e-6


def test_running_total_merges_new_pairs_and_the_server():
    t = Transcript({}, totals=frozenset({"g"}))
    assert t.running == {}
    first = MessageBatch.to_one(0, 0, "g", torch.tensor([2, 0]), torch.tensor([[1.0], [2.0]]), receiver=-1)
    run = RunningTotal.start(first)
    second = MessageBatch.from_one(1, 0, "g", -1, torch.tensor([5.0]), torch.tensor([2, 1]))
    run.add(second)
    run.add(MessageBatch.to_one(1, 0, "g", torch.tensor([2]), torch.tensor([[10.0]]), receiver=-1))
    pairs = list(zip(run.senders.tolist(), run.receivers.tolist(), strict=True))
    assert pairs == [(-1, 1), (-1, 2), (0, -1), (2, -1)]
    assert run.total.reshape(-1).tolist() == [5.0, 5.0, 2.0, 11.0]
    assert (run.rounds, run.last_round, len(run.last)) == (2, 1, 3)  # round 1's two batches


def test_pdmm_inversion_attacks_record_a_bounded_transcript_in_the_harness():
    """The inversion attacks declare the rounds they attack plus running totals, not every round."""
    attack = build_attack("pdmm_difference_inversion", rounds=[0, 2], lag=2)
    req = attack.requirements()
    assert not req.all_rounds and req.totals == ("delta_z",)
    assert max(req.rounds) == 2 + 2 + 1  # the last difference uses rounds k + lag + 1 (one-step solvers)
    assert build_attack("pdmm_sum_inversion", rounds=[3]).requirements().rounds == tuple(range(5))
