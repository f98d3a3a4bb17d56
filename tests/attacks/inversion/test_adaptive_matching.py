"""The adaptive variants of the gradient-matching attacks: kept-coordinate matching against
sparsification, direction matching against clipping (bench/attacks/inversion/adaptive.py)."""

from __future__ import annotations

import torch
from torch import nn

from bench.attacks import build_attack
from bench.attacks.inversion.matching import matching_fn
from bench.defense.rowwise import top_k_rows
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LOSSES


def _problem(seed: int = 0):
    torch.manual_seed(seed)
    model = FlatModel(nn.Sequential(nn.Flatten(), nn.Linear(16, 6), nn.Sigmoid(), nn.Linear(6, 3)).double())
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(1, model.n_params, generator=g, dtype=torch.float64)
    x = torch.randn(1, 1, 1, 4, 4, generator=g, dtype=torch.float64)
    y = torch.tensor([[1]])
    loss_fn = LOSSES.get("cross_entropy")
    true = torch.func.grad(lambda th: loss_fn(model.forward(th, x[0]), y[0]).mean())(theta[0])
    return model, loss_fn, x, y, theta, true[None]


def test_kept_coordinate_matching_is_exact_at_the_truth_where_plain_matching_is_not():
    model, loss_fn, x, y, theta, true = _problem()
    sparse = top_k_rows(true, max(1, true.shape[1] // 10))
    assert int((sparse != 0).sum()) < true.shape[1]
    kept, _ = matching_fn(model, loss_fn, y, theta, sparse, "l2", kept_only=True)(x, None)
    plain, _ = matching_fn(model, loss_fn, y, theta, sparse, "l2")(x, None)
    assert float(kept[0]) < 1e-20
    assert float(plain[0]) > 1e-6  # the dropped coordinates pull the truth away from the optimum


def test_direction_matching_is_blind_to_clipping_and_l2_is_not():
    model, loss_fn, x, y, theta, true = _problem(1)
    clipped = true * 0.1 / true.norm()
    cos, _ = matching_fn(model, loss_fn, y, theta, clipped, "cosine")(x, None)
    l2, _ = matching_fn(model, loss_fn, y, theta, clipped, "l2")(x, None)
    assert abs(float(cos[0])) < 1e-12 < 1e-3 < float(l2[0])


def test_matching_attacks_adapt_to_sparsification_and_clipping_only():
    dlg = build_attack("dlg_batched", rounds=[0])
    ig = build_attack("inverting_gradients", rounds=[0])
    top_k = {"k": None, "fraction": 0.1, "sparsified": True}
    assert dlg.adapt("top_k", top_k) == {"match": "kept"}
    assert ig.adapt("top_k", top_k) == {"match": "kept"}
    assert dlg.adapt("gradient_clipping", {"max_norm": 1.0}) == {"objective": "cosine"}
    assert dlg.adapt("dp_sgd", {"clip_norm": 1.0, "noise_multiplier": 1.0}) == {"objective": "cosine"}
    assert ig.adapt("gradient_clipping", {"max_norm": 1.0}) is None  # already a direction match
    assert dlg.adapt("gaussian_noise", {"sigma": 0.1}) is None
    assert ig.adapt("quantization", {"delta": 0.01}) is None
