"""scikit-learn's digits: real 8×8 grey-scale images shipped inside scikit-learn (no download).

1,797 images of the digits 0–9 with 17 grey levels (0..16). Pixels are scaled to ``[0, 1]``
(``raw = pixel / 16``) and then normalized with the dataset's mean and standard deviation,
which are recorded so that image metrics can de-normalize to ``[0, 1]``.
"""

from __future__ import annotations

import torch

from bench.core.errors import require
from bench.data.dataset import DATASETS, ArrayDataset, TrainTest

# Mean and std of the [0, 1]-scaled pixels over all 1,797 images (computed once, fixed so that
# every split normalizes the same way).
DIGITS_MEAN = 0.30526
DIGITS_STD = 0.37605


@DATASETS.register("digits", "scikit-learn digits: 1,797 real 8x8 images, 10 classes (offline)")
def digits(test_fraction: float = 0.25, seed: int = 0, flatten: bool = False) -> TrainTest:
    """Load the digits, shuffle with ``seed`` and split off ``test_fraction`` for utility."""
    from sklearn.datasets import load_digits

    require(0 < test_fraction < 1, "dataset.test_fraction", test_fraction, "must be in (0, 1)")
    bunch = load_digits()
    raw = torch.tensor(bunch.images, dtype=torch.float64) / 16.0
    x = ((raw - DIGITS_MEAN) / DIGITS_STD).unsqueeze(1)  # [n, 1, 8, 8]
    if flatten:
        x = x.flatten(1)
    y = torch.tensor(bunch.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(int(seed)))
    n_test = round(test_fraction * len(y))
    ds = ArrayDataset("digits", x, y, n_classes=10, mean=(DIGITS_MEAN,), std=(DIGITS_STD,))
    return TrainTest(ds.subset(perm[n_test:]), ds.subset(perm[:n_test]))
