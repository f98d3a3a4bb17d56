"""Small runs shared by several test files: FedSGD on digits observed by the server and the scores
of its reconstructions (the attack tests), the 12-node digits MLP of the PDMM tests, and the run of
the quick membership-inference tasks.
"""

from __future__ import annotations

from bench.metrics import DataInfo, Truth, build_metric
from bench.simulation import Simulation
from bench.threats import build_threat

#: FedSGD on digits, one sample per node and round: what the server inverts
DIGITS_FEDSGD = {
    "dataset": "digits",
    "model": "mlp",
    "model_params": {"hidden": [100]},
    "nodes": 10,
    "protocol": "fedsgd",
    "protocol_params": {"batch_size": 1, "lr": 0.1},
}


def server_sim(cfg, rounds=(0,), run=1):
    """``cfg`` run for ``run`` rounds, the server recording ``rounds``."""
    sim = Simulation(cfg, threats={"s": build_threat("server")}, record_rounds=list(rounds))
    sim.run(run)
    return sim


def truths_of(sim, recs):
    """Ground truth of each reconstruction from the round's batch (one local step)."""
    out = []
    for r in recs:
        b = sim.batch(r.round)
        mask = b.mask[r.node, 0]
        out.append(Truth(r.node, r.round, b.x[r.node, 0][mask], b.y[r.node, 0][mask]))
    return out


def data_info(sim):
    """What the metrics know of the run's dataset."""
    ds = sim.train_set
    return DataInfo(ds.mean, ds.std, ds.n_classes, ds.x.mean(0).to(sim.dtype), is_image=ds.x.dim() == 4)


def scores(sim, recs, names):
    """Each metric of ``names`` on the reconstructions ``recs``, with its leakage."""
    truths, info = truths_of(sim, recs), data_info(sim)
    out = {}
    for name in names:
        metric = build_metric(name)
        values = metric.compute(recs, truths, info)
        out[name] = {**values, "leakage": metric.leakage(values)}
    return out


#: the 12-node digits MLP of the PDMM tests (float64, two samples per node)
PDMM_MLP = {
    "dataset": "digits",
    "partition": "fixed_size",
    "partition_params": {"n_per_node": 2},
    "model": "mlp",
    "model_params": {"hidden": [6]},
    "nodes": 12,
    "topology": "random_geometric",
    "protocol": "pdmm",
    "dtype": "float64",
    "seed": 2,
}


def mia_config(protocol: str, seed: int) -> dict:
    """The run of the quick MIA tasks: 16 digits nodes, FedSGD full batch or D-PSGD on a torus."""
    cfg = {
        "dataset": "digits",
        "partition": "fixed_size",
        "partition_params": {"n_per_node": 16},
        "model": "mlp",
        "model_params": {"hidden": [100]},
        "nodes": 16,
        "protocol": protocol,
        "seed": seed,
    }
    if protocol == "fedsgd":
        cfg["protocol_params"] = {"lr": 0.5, "batch_size": None}
    else:
        cfg.update(topology="torus", mixing="uniform", protocol_params={"lr": 0.5, "batch_size": 16})
    return cfg
