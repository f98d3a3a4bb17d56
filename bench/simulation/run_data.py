"""The data of one run, derived from its configuration and seed alone.

:class:`RunData` loads the dataset, partitions the training split over the nodes and stacks the
local sets (:class:`~bench.data.stacked.NodeData`); :meth:`RunData.batch` gives the minibatches
of every node in any round from counter-based keys. Nothing here depends on a simulation having
run, which is what lets the harness derive the ground truth of a reconstruction (which samples
node ``v`` used in round ``t``, step ``s``) itself, from the task spec and the seed, without
trusting the process where defense code ran (``docs/architecture.md``, "trust boundary").
"""

from __future__ import annotations

import torch

from bench.core.params import check_params
from bench.data import load_dataset
from bench.data.partition import PARTITIONS, partition_summary
from bench.data.stacked import NodeBatch, NodeData, derive_seed
from bench.protocols.base import BatchPlan
from bench.simulation.config import DTYPES, SimulationConfig


class RunData:
    """Train/test split, partition and stacked node data of a run.

    Parameters
    ----------
    config:
        The run's configuration (dataset, partition, nodes, seed, dtype are used).

    Attributes
    ----------
    train_set, test_set:
        The dataset's splits.
    node_data:
        The stacked local sets (inputs in the run's dtype; regression targets too).
    partition_info:
        Sizes and label histograms of the partition, for provenance.
    """

    def __init__(self, config: SimulationConfig) -> None:
        cfg = config
        self.seed = cfg.seed
        self.dtype = DTYPES[cfg.dtype]
        data = load_dataset(cfg.dataset, seed=derive_seed(cfg.seed, "dataset"), **cfg.dataset_params)
        train = data.train
        partition = PARTITIONS.get(cfg.partition, field="partition.name")
        check_params(
            partition,
            cfg.partition_params,
            "partition",
            reserved=("n_samples", "n_nodes", "seed", "labels", "attributes"),
        )
        part_seed = derive_seed(cfg.seed, "partition")
        labels = train.y if train.n_classes > 0 else None
        parts = partition(
            n_samples=len(train),
            n_nodes=cfg.nodes,
            seed=part_seed,
            labels=labels,
            attributes=getattr(train, "attributes", None),
            **cfg.partition_params,
        )
        self.partition_info = partition_summary(cfg.partition, cfg.partition_params, part_seed, parts, labels)
        self.train_set = train
        self.test_set = data.test
        self.node_data = NodeData.from_partition(train, parts)
        self.node_data.x = self.node_data.x.to(self.dtype)
        if train.n_classes == 0:
            self.node_data.y = self.node_data.y.to(self.dtype)

    def is_full_batch(self, plan: BatchPlan) -> bool:
        """Whether every round uses every local sample (then batches do not depend on ``t``)."""
        return plan.batch_size is None or plan.batch_size >= self.node_data.max_local

    def full_batch(self, plan: BatchPlan) -> NodeBatch:
        steps = plan.local_steps if plan.local_epochs is None else plan.local_epochs
        return self.node_data.full_batch(steps)

    def batch(self, t: int | torch.Tensor, plan: BatchPlan) -> NodeBatch:
        """The minibatches ``[N, S, B, …]`` of every node in round ``t`` under ``plan``; for a
        1-D tensor of ``k`` rounds, theirs stacked ``[k, N, S, B, …]`` and sampled in one pass
        (the same as ``k`` calls). Full-batch plans give the whole local sets
        (:meth:`~bench.data.stacked.NodeData.round_batch`)."""
        return self.node_data.round_batch(
            derive_seed(self.seed, "batches"), t, plan.batch_size, plan.local_steps, plan.local_epochs
        )

    def ground_truth(
        self, node: int, round_: int, step: int, plan: BatchPlan | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The samples ``(x, y)`` node ``node`` used in round ``round_``, local step ``step``
        (``plan=None``: a protocol that does not train on minibatches; the whole local set)."""
        if plan is None:
            n = int(self.node_data.counts[node])
            return self.node_data.x[node, :n], self.node_data.y[node, :n]
        batch = self.batch(round_, plan)
        mask = batch.mask[node, step]
        return batch.x[node, step][mask], batch.y[node, step][mask]
