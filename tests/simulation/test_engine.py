"""Engine pieces: gossip convergence, consensus distance, mixing operator, sampling, dtypes."""

import math

import numpy as np
import pytest
import torch

from bench.data.dataset import ArrayDataset
from bench.data.stacked import NodeData
from bench.simulation import MessageBatch, Simulation
from bench.simulation.metrics import consensus_distance
from bench.simulation.mixing_op import GossipMixer, column_chunk
from bench.topology import Topology


@pytest.mark.parametrize(("topology", "params"), [("ring", {}), ("random_geometric", {}), ("torus", {})])
def test_gossip_averaging_converges_at_spectral_gap_rate(topology, params):
    """Boyd et al.: for symmetric doubly-stochastic W, ‖X^k − x̄‖ ≤ (1 − γ)^k ‖X^0 − x̄‖, and the
    asymptotic per-step contraction of a generic start equals 1 − γ."""
    n = 16
    sim = Simulation(
        {
            "dataset": "two_gaussians",
            "protocol": "gossip_averaging",
            "topology": topology,
            "topology_params": params,
            "mixing": "metropolis_hastings",
            "nodes": n,
            "dtype": "float64",
            "seed": 2,
        }
    )
    rho = 1 - sim.topology.spectral_gap
    mean = sim.state["private"].mean(0)
    err0 = (sim.theta - mean).norm().item()
    errs = [err0]
    while errs[-1] > 1e-9 * err0:  # stop well above float64 round-off
        sim.run(1)
        errs.append((sim.theta - mean).norm().item())
    for k, e in enumerate(errs):
        assert e <= rho**k * err0 * (1 + 1e-9)
    # the empirical contraction over the second half of the run matches 1 − γ
    k1, k2 = len(errs) // 2, len(errs) - 1
    rate = (errs[k2] / errs[k1]) ** (1 / (k2 - k1))
    assert k2 - k1 >= 10
    assert rate == pytest.approx(rho, abs=0.02 * (1 - rho) + 1e-3)
    # the mean is preserved exactly (doubly stochastic)
    assert torch.allclose(sim.theta.mean(0), mean, atol=1e-12)


def test_consensus_distance_matches_pairwise_definition():
    theta = torch.randn(7, 5, dtype=torch.float64)
    n = theta.shape[0]
    naive = sum(((theta[v] - theta[u]) ** 2).sum() for v in range(n) for u in range(n) if u != v) / (
        n * n - n
    )
    assert consensus_distance(theta).item() == pytest.approx(naive.item(), rel=1e-12)
    assert consensus_distance(theta[:1]).item() == 0.0


@pytest.mark.parametrize(
    ("name", "n", "mixing"),
    [("torus", 25, "uniform"), ("star", 9, "metropolis_hastings"), ("random_geometric", 30, "uniform")],
)
def test_mixer_sparse_dense_and_per_edge_layouts_agree(name, n, mixing):
    topo = Topology.build(name, n=n, mixing=mixing)
    W = torch.from_numpy(topo.mixing)
    edges = torch.from_numpy(topo.directed_edges())
    x = torch.randn(n, 11, dtype=torch.float64)
    gather = GossipMixer(W, sparse_below=2.0, gather_from=4)  # width 11 ≥ 4: gather (embedding_bag) kernel
    csr = GossipMixer(W, sparse_below=2.0, gather_from=64)  # width 11 < 64: CSR kernel
    dense = GossipMixer(W, sparse_below=0.0)
    assert gather.sparse and csr.sparse and not dense.sparse
    msgs = MessageBatch.broadcast(0, 0, "model", x, edges)
    ref = W @ x
    noisy = msgs.with_payload(x + 1.0)
    for mixer in (gather, csr, dense):
        assert torch.allclose(mixer.mix(x, msgs), ref, atol=1e-14)
        assert torch.allclose(mixer.mix(x, msgs.per_edge()), ref, atol=1e-14)
        # a transformed payload: own value stays, neighbours' messages are the transformed ones
        expect = ref + (W - torch.diag(torch.diagonal(W))) @ torch.ones_like(x)
        assert torch.allclose(mixer.mix(x, noisy), expect, atol=1e-14)
        assert torch.allclose(mixer.mix(x, noisy.per_edge()), expect, atol=1e-14)


def test_uniform_complete_blocks_mix_as_block_means():
    """Disconnected complete graphs of equal size with uniform weights (reference worlds of a
    federated run) mix as each block's mean, equal to ``W @ x`` in float64; anything else keeps
    the general kernels."""
    import networkx as nx

    W = torch.block_diag(*[torch.full((5, 5), 0.2, dtype=torch.float64)] * 3)
    mixer = GossipMixer(W)
    assert mixer.block == 5
    x = torch.randn(15, 7, dtype=torch.float64)
    torch.testing.assert_close(mixer.apply(x), W @ x, rtol=0, atol=1e-15)
    edges = torch.tensor([(u, v) for u, v in nx.complete_graph(5).to_directed().edges], dtype=torch.long)
    edges = torch.cat([edges + 5 * k for k in range(3)])
    msgs = MessageBatch.broadcast(0, 0, "model", x, edges)
    torch.testing.assert_close(mixer.mix(x, msgs), W @ x, rtol=0, atol=1e-15)
    noisy = msgs.with_payload(x + 1.0)  # a transformed payload: the general kernel
    off = W - torch.diag(torch.diagonal(W))
    torch.testing.assert_close(mixer.mix(x, noisy), W @ x + off @ torch.ones_like(x), rtol=0, atol=1e-14)
    one = GossipMixer(torch.full((4, 4), 0.25, dtype=torch.float64))  # one block: a complete graph
    assert one.block == 4
    out = one.apply(x[:4])
    out[0] += 1.0  # the rows are rows of their own, as W @ x's (the engine updates in place)
    torch.testing.assert_close(out[1:], (one.W @ x[:4])[1:], rtol=0, atol=1e-15)
    torus = torch.from_numpy(Topology.build("torus", n=16, mixing="uniform").mixing)
    skewed = W.clone()
    skewed[0, :5] = torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1], dtype=torch.float64)
    assert GossipMixer(torus).block is None and GossipMixer(skewed).block is None
    assert GossipMixer(torch.eye(4, dtype=torch.float64)).block is None  # b = 1: nothing to average


def test_column_chunk_is_the_divisor_nearest_the_middle_of_the_range():
    assert column_chunk(79510, 256, 16384) == 7951  # the 784-100-10 MLP: 10 chunks
    assert column_chunk(80640, 256, 16384) == 2016  # nearest √(256·16384) = 2048 on a log scale
    assert column_chunk(61706, 256, 16384) == 61706  # LeNet-5: no divisor there, whole rows
    assert column_chunk(24, 4, 9) == 6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gather_over_column_chunks_is_bitwise_the_whole_row_gather(dtype):
    """Viewing ``[N, P]`` as ``[N·P/b, b]`` and splitting every bag into ``P/b`` chunk bags sums
    the same terms in the same order for every output element."""
    topo = Topology.build("torus", n=16, mixing="uniform")
    W = torch.from_numpy(topo.mixing).to(dtype)
    edges = torch.from_numpy(topo.directed_edges())
    whole = GossipMixer(W, sparse_below=2.0, gather_from=4, chunk=(100, 200))
    chunked = GossipMixer(W, sparse_below=2.0, gather_from=4, chunk=(4, 9))
    x = torch.randn(16, 24, dtype=dtype)
    strided = torch.randn(24, 16, dtype=dtype).t()  # not contiguous: no chunk view, whole rows
    for v in (x, strided):
        assert torch.equal(chunked.apply(v), whole.apply(v))
        torch.testing.assert_close(chunked.apply(v), W @ v)
        msgs = MessageBatch.broadcast(0, 0, "model", v, edges).with_payload(v + 1.0)
        assert torch.equal(chunked.mix(v, msgs), whole.mix(v, msgs))
    assert {key[1:] for key in chunked._bags} == {(24, dtype, True), (24, dtype, False)}
    assert all(b == 6 for *_, b in (chunked._bags[k] for k in chunked._bags if k[3]))


def _node_data(n_nodes, m=12):
    x = torch.arange(n_nodes * m, dtype=torch.float64)[:, None]
    ds = ArrayDataset("toy", x, torch.zeros(n_nodes * m, dtype=torch.long), n_classes=2)
    parts = [torch.arange(v * m, (v + 1) * m - (v % 3)) for v in range(n_nodes)]  # unequal sizes
    return NodeData.from_partition(ds, parts)


def test_minibatches_do_not_depend_on_the_number_of_nodes():
    small, large = _node_data(4), _node_data(9)
    for t in (0, 5):
        a = small.round_batch(seed=11, round_=t, batch_size=5, local_steps=2)
        b = large.round_batch(seed=11, round_=t, batch_size=5, local_steps=2)
        assert torch.equal(a.x, b.x[:4]) and torch.equal(a.mask, b.mask[:4])
    c = small.round_batch(seed=12, round_=0, batch_size=5)
    assert not torch.equal(c.x, small.round_batch(seed=11, round_=0, batch_size=5).x)


@pytest.mark.parametrize(
    "plan", [{"batch_size": 5, "local_steps": 2}, {"batch_size": 4, "local_epochs": 2}, {"batch_size": None}]
)
def test_the_batches_of_several_rounds_are_their_batches_stacked(plan):
    """``round_`` as a tensor of ``k`` rounds (the data module's ``rounds_per_step``) draws the
    same batches as ``k`` calls, in one pass."""
    data = _node_data(5)
    rounds = torch.tensor([3, 4, 9])
    many = data.round_batch(seed=7, round_=rounds, **plan)
    assert many.x.shape[0] == 3
    for i, t in enumerate(rounds.tolist()):
        one = data.round_batch(seed=7, round_=t, **plan)
        for a, b in ((many.x[i], one.x), (many.y[i], one.y), (many.mask[i], one.mask)):
            assert torch.equal(a, b)


def test_minibatches_are_drawn_without_replacement_from_own_data():
    data = _node_data(5)
    batch = data.round_batch(seed=0, round_=3, batch_size=4, local_steps=3)
    for v in range(5):
        own = set(data.x[v, : int(data.counts[v]), 0].tolist())
        for s in range(3):
            vals = batch.x[v, s][batch.mask[v, s]][:, 0].tolist()
            assert len(vals) == 4 == len(set(vals)) and set(vals) <= own


def test_epoch_mode_visits_every_local_sample_once_per_epoch():
    data = _node_data(6)
    batch = data.round_batch(seed=0, round_=0, batch_size=5, local_epochs=2)
    n_batches = math.ceil(data.max_local / 5)
    assert batch.x.shape[1] == 2 * n_batches
    for v in range(6):
        n_v = int(data.counts[v])
        for e in range(2):
            steps = slice(e * n_batches, (e + 1) * n_batches)
            vals = batch.x[v, steps][batch.mask[v, steps]][:, 0]
            assert sorted(vals.tolist()) == sorted(data.x[v, :n_v, 0].tolist())
    full = data.round_batch(seed=0, round_=0, batch_size=None)
    assert torch.equal(full.mask[:, 0].sum(1), data.counts)


def test_float32_default_and_float64_on_request():
    cfg = {"dataset": "two_gaussians", "model": "logreg", "nodes": 4, "protocol": "fedsgd"}
    assert Simulation(cfg).theta.dtype == torch.float32
    sim64 = Simulation({**cfg, "dtype": "float64"})
    sim64.run(2)
    assert sim64.theta.dtype == torch.float64 and sim64.state["global"].dtype == torch.float64


def test_fedavg_client_sampling_uses_the_declared_fraction():
    from bench.threats import build_threat

    sim = Simulation(
        {
            "dataset": "two_gaussians",
            "model": "logreg",
            "nodes": 10,
            "protocol": "fedavg",
            "protocol_params": {"client_fraction": 0.3, "local_steps": 2, "batch_size": 8},
        },
        threats={"s": build_threat("server")},
        record_rounds="all",
    )
    sim.run(20)
    uploads = sim.view("s").select(kind="local_model")
    assert len(uploads) == 20 and all(len(m) == 3 for m in uploads)
    chosen = {tuple(sorted(m.senders.tolist())) for m in uploads}
    assert len(chosen) > 5  # different clients in different rounds


def test_dpsgd_momentum_matches_torch_sgd_on_a_single_node_graph_equivalent():
    """With the complete graph and common init all nodes stay equal; each then follows SGD with
    heavy-ball momentum on the average gradient — compare to torch.optim.SGD on that objective."""
    cfg = {
        "dataset": "two_gaussians",
        "model": "logreg",
        "nodes": 4,
        "protocol": "dpsgd",
        "topology": "complete",
        "protocol_params": {"lr": 0.3, "momentum": 0.9},
        "dtype": "float64",
    }
    sim = Simulation(cfg)
    theta = sim.theta[0].clone().requires_grad_(True)
    opt = torch.optim.SGD([theta], lr=0.3, momentum=0.9)
    for t in range(5):
        batch = sim.batch(t)
        opt.zero_grad()
        g, _ = sim.objective.node_grads(
            theta.detach().expand(4, -1), batch.x[:, 0], batch.y[:, 0], batch.mask[:, 0]
        )
        theta.grad = g.mean(0)
        opt.step()
        sim.run_round(batch)
    assert np.allclose(sim.theta.numpy(), theta.detach().numpy()[None], atol=1e-12)
