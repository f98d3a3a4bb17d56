"""LEAF-style synthetic federated data with clusters (Caldas et al. 2018, LEAF ``data/synthetic``).

The generative process is that of LEAF's ``data/synthetic/main.py`` (TalwalkarLab/leaf), as
summarized in Xu & Neglia (2021, §4.1), for ``d`` features, ``K`` classes and ``C`` clusters:

* shared: ``Q ~ N(0, 1)`` of shape ``(d+1, K, C)``; ``Σ = diag(j^-1.2), j = 1..d``; per cluster
  ``μ_c ~ N(m_c, 1)^C`` with ``m_c ~ N(0, 1)``;
* per client: a cluster ``c`` drawn with probabilities ``prob_clusters``; ``B ~ N(0, 1)``,
  ``loc ~ N(B, 1)^d``, ``x ~ N(loc, Σ)``; ``model_info ~ N(μ_c, 0.1²)``, ``w = Q · model_info``
  (``(d+1) × K``); ``y = argmax softmax([1, x] w + ε)``, ``ε ~ N(0, 0.1²)``; the bias column of
  ones is used for the labels only.

How this generator differs from LEAF's stock script:

1. **Client sizes** are given (default Xu & Neglia's Table 1: 280, 184, 1536, 256, 208 training
   samples for clients 0–4) instead of ``lognormal(3, 2) + 5`` capped at 1000.
2. **Clusters**: 5 with uniform probabilities by default (the paper's setting, its cluster
   probabilities being unstated) instead of the script's ``PROB_CLUSTERS = [1.0]``.
3. **Randomness**: a ``torch.Generator`` seeded with ``seed`` instead of numpy's global state
   seeded with 931231, so values differ from LEAF's files while the distribution is the same
   (``x`` is drawn as ``loc + sqrt(diag Σ) · z``, equivalent for a diagonal ``Σ``).
4. **Test data**: each client also draws ``round(n_c · f / (1 - f))`` test samples
   (``f = test_fraction``, LEAF's default split keeps 90 % for training), pooled into the test
   split, so that the training counts are exactly the given sizes.

The training split is ordered by client and carries the side attributes ``client`` and
``cluster`` (:class:`~bench.data.attributed.AttributedDataset`): partition it with
``attribute`` on ``column="client"`` (or ``sizes`` with ``shuffle: false``) to give each node
its own client's data.
"""

from __future__ import annotations

import torch

from bench.core.errors import BenchInputError, require, require_positive_int
from bench.data.attributed import AttributedDataset
from bench.data.dataset import DATASETS, TrainTest

XU_NEGLIA_SIZES = (280, 184, 1536, 256, 208)


@DATASETS.register(
    "leaf_synthetic", "LEAF-style synthetic clustered clients (sizes 280/184/1536/256/208, Xu & Neglia)"
)
def leaf_synthetic(
    seed: int = 0,
    sizes: list[int] | tuple[int, ...] = XU_NEGLIA_SIZES,
    n_clusters: int = 5,
    prob_clusters: list[float] | None = None,
    dim: int = 10,
    n_classes: int = 2,
    test_fraction: float = 0.1,
) -> TrainTest:
    """Generate LEAF-style synthetic clients (see the module docstring for the model).

    Parameters
    ----------
    sizes:
        Training samples per client (their number is the number of clients).
    n_clusters, prob_clusters:
        Number of clusters and the probability of each (default uniform).
    dim, n_classes:
        Features ``d`` and classes ``K`` (Xu & Neglia: 10 and 2).
    test_fraction:
        Share of each client's generated samples held out for the pooled test split.
    """
    counts = [require_positive_int(s, "dataset.sizes") for s in sizes]
    require(len(counts) > 0, "dataset.sizes", sizes, "needs at least one client")
    require_positive_int(n_clusters, "dataset.n_clusters")
    require_positive_int(dim, "dataset.dim")
    require(isinstance(n_classes, int) and n_classes >= 2, "dataset.n_classes", n_classes, "must be >= 2")
    require(0 <= test_fraction < 1, "dataset.test_fraction", test_fraction, "must be in [0, 1)")
    probs = torch.full((n_clusters,), 1.0 / n_clusters, dtype=torch.float64)
    if prob_clusters is not None:
        probs = torch.tensor(prob_clusters, dtype=torch.float64)
        if probs.shape != (n_clusters,) or (probs < 0).any() or abs(float(probs.sum()) - 1) > 1e-9:
            raise BenchInputError(
                "dataset.prob_clusters",
                prob_clusters,
                reason=f"needs {n_clusters} non-negative values summing to 1",
            )
    g = torch.Generator().manual_seed(int(seed))
    f64 = torch.float64
    q = torch.randn(dim + 1, n_classes, n_clusters, generator=g, dtype=f64)
    sigma_sqrt = torch.arange(1, dim + 1, dtype=f64).pow(-1.2).sqrt()
    centers = torch.randn(n_clusters, 1, generator=g, dtype=f64)
    means = centers + torch.randn(n_clusters, n_clusters, generator=g, dtype=f64)  # mu_c in R^C

    xs_tr, ys_tr, cl_tr, cu_tr, xs_te, ys_te, cl_te, cu_te = [], [], [], [], [], [], [], []
    for client, n_train in enumerate(counts):
        n_test = round(n_train * test_fraction / (1 - test_fraction))
        n = n_train + n_test
        cluster = int(torch.multinomial(probs, 1, generator=g))
        b = torch.randn((), generator=g, dtype=f64)
        loc = b + torch.randn(dim, generator=g, dtype=f64)
        x = loc + sigma_sqrt * torch.randn(n, dim, generator=g, dtype=f64)
        model_info = means[cluster] + 0.1 * torch.randn(n_clusters, generator=g, dtype=f64)
        w = q @ model_info  # (d+1, K)
        noise = 0.1 * torch.randn(n, n_classes, generator=g, dtype=f64)
        logits = torch.cat([torch.ones(n, 1, dtype=f64), x], 1) @ w + noise
        y = logits.argmax(1)
        for part, rows in ((0, slice(0, n_train)), (1, slice(n_train, n))):
            xs, ys, cl, cu = (xs_tr, ys_tr, cl_tr, cu_tr) if part == 0 else (xs_te, ys_te, cl_te, cu_te)
            xs.append(x[rows])
            ys.append(y[rows])
            m = len(y[rows])
            cl.append(torch.full((m,), client, dtype=torch.long))
            cu.append(torch.full((m,), cluster, dtype=torch.long))

    def build(xs: list, ys: list, cl: list, cu: list) -> AttributedDataset:
        return AttributedDataset(
            "leaf_synthetic",
            torch.cat(xs),
            torch.cat(ys),
            n_classes,
            attributes={"client": torch.cat(cl), "cluster": torch.cat(cu)},
        )

    return TrainTest(build(xs_tr, ys_tr, cl_tr, cu_tr), build(xs_te, ys_te, cl_te, cu_te))
