"""Batch label-count inference from the last layer's gradient (B > 1): exact algebra where the
mean softmax is known, accuracy on FedSGD digits gradients, and its use in ``dlg_batched``."""

import pytest
import torch
from torch.func import grad

from bench.attacks import AttackError
from bench.attacks.inversion.dlg_batched import BatchedDLG
from bench.attacks.inversion.label_counts import (
    infer_label_counts,
    label_count_estimates,
    largest_remainder,
    last_layer,
)
from bench.attacks.inversion.problems import label_hypotheses
from bench.attacks.observe.gradients import server_targets
from bench.core.errors import BenchInputError
from bench.data import load_dataset
from bench.models import build_model
from bench.simulation.flat import FlatModel
from bench.simulation.objective import LOSSES
from tests.support.runs import DIGITS_FEDSGD, scores, server_sim

SHAPE = (1, 8, 8)


def digits_mlp(seed=0, zero=("3.weight",), hidden=100):
    """The digits MLP ``Flatten → Linear (1.*) → ReLU → Linear (3.*)`` in float64 with the named
    parameters set to zero."""
    model = FlatModel(build_model("mlp", SHAPE, 10, hidden=[hidden]).double())
    theta = model.initial(seed, torch.float64)
    views = model.unflatten(theta)
    for name in zero:
        views[name].zero_()
    return model, theta


def batch_gradient(model, theta, x, y, loss="cross_entropy", reduction="mean"):
    loss_fn = LOSSES.get(loss)

    def total(th):
        per = loss_fn(model.forward(th, x), y)
        return per.mean() if reduction == "mean" else per.sum()

    return grad(total)(theta)


def order_free_accuracy(guess, truth, classes=10):
    hit = torch.minimum(torch.bincount(guess, minlength=classes), torch.bincount(truth, minlength=classes))
    return int(hit.sum()) / truth.numel()


def test_last_layer_slots_of_the_digits_mlp():
    model, _ = digits_mlp()
    weight, bias = last_layer(model)
    names = [s.name for s in model.slots]
    assert names[-2:] == [weight.name, bias.name] and weight.shape == (10, 100) and bias.shape == (10,)


@pytest.mark.parametrize("batch_size", [2, 4, 8])
def test_bias_rule_is_exact_where_the_softmax_does_not_depend_on_the_input(batch_size):
    """Zero last-layer weights: p_b = softmax(b) for every input, so the probes give the batch's
    p̄ exactly and n_c = B (p̄_c − ∂L/∂b_c) is the exact label count (real digits, random
    batches with repeated labels, a non-uniform bias)."""
    ds = load_dataset("digits").train
    model, theta = digits_mlp(seed=batch_size)
    g = torch.Generator().manual_seed(batch_size)
    model.unflatten(theta)["3.bias"].copy_(torch.randn(10, generator=g, dtype=torch.float64))
    for trial in range(20):
        idx = torch.randint(0, len(ds.y), (batch_size,), generator=g)
        x = ds.x[idx].double()
        y = ds.y[idx] if trial % 2 else torch.randint(0, 3, (batch_size,), generator=g)  # duplicates
        gr = batch_gradient(model, theta, x, y)
        est = label_count_estimates(model, gr, theta, "cross_entropy", batch_size, SHAPE)
        assert torch.allclose(est, torch.bincount(y, minlength=10).double(), atol=1e-10)
        labels = infer_label_counts(model, gr, theta, "cross_entropy", batch_size, SHAPE)
        assert labels.dtype == torch.long and labels.tolist() == sorted(y.tolist())
        # a sum-reduced loss scales the gradient by B
        gs = batch_gradient(model, theta, x, y, reduction="sum")
        summed = infer_label_counts(model, gs, theta, "cross_entropy", batch_size, SHAPE, reduction="sum")
        assert summed.tolist() == sorted(y.tolist())


def test_weight_rule_and_binary_analogue_are_exact_for_input_independent_models():
    """Zero weights in both layers: the penultimate activations relu(b₁) and the softmax are the
    same for every input, so the weight rule's impact s̄ and p̃ are exact as well; the binary
    one-logit analogue n_1 = B (σ̄ − ∂L/∂b) is exact for the same reason."""
    ds = load_dataset("digits").train
    model, theta = digits_mlp(seed=3, zero=("1.weight", "3.weight"))
    views = model.unflatten(theta)
    views["1.bias"].abs_()  # positive hidden units, so every row of ∂L/∂W carries the counts
    g = torch.Generator().manual_seed(0)
    for _ in range(10):
        idx = torch.randint(0, len(ds.y), (8,), generator=g)
        y = ds.y[idx]
        gr = batch_gradient(model, theta, ds.x[idx].double(), y)
        for rule in ("weight", "bias", "auto"):
            est = label_count_estimates(model, gr, theta, "cross_entropy", 8, SHAPE, rule=rule)
            assert torch.allclose(est, torch.bincount(y, minlength=10).double(), atol=1e-10), rule
    binary = FlatModel(build_model("mlp", SHAPE, 1, hidden=[16]).double())
    th = binary.initial(0, torch.float64)
    binary.unflatten(th)["3.weight"].zero_()
    binary.unflatten(th)["3.bias"].fill_(0.7)
    for _ in range(10):
        idx = torch.randint(0, len(ds.y), (6,), generator=g)
        y = torch.randint(0, 2, (6,), generator=g)
        gr = batch_gradient(binary, th, ds.x[idx].double(), y, loss="binary_cross_entropy")
        labels = infer_label_counts(binary, gr, th, "binary_cross_entropy", 6, SHAPE)
        assert labels.tolist() == sorted(y.tolist())


def test_largest_remainder_rounding():
    assert largest_remainder(torch.tensor([2.6, 1.3, 0.1, -0.4, 0.4]), 4).tolist() == [3, 1, 0, 0, 0]
    assert largest_remainder(torch.tensor([0.9, 2.2, 0.45, 0.45]), 4).tolist() == [1, 2, 1, 0]  # tie
    # clipping made the floors exceed B: the largest estimates get the units
    assert largest_remainder(torch.tensor([1.0, 1.2, 1.1, -1.3]), 2).tolist() == [0, 1, 1, 0]
    assert int(largest_remainder(torch.tensor([0.2, 0.3, 0.5]), 7).sum()) == 7
    with pytest.raises(AttackError, match="no positive"):
        largest_remainder(torch.tensor([-1.0, -2.0]), 3)


@pytest.mark.parametrize("batch_size", [4, 8])
def test_counts_on_round_zero_fedsgd_digits_gradients(batch_size):
    """The estimate of p̄ from N(0, 1) probes is only approximate on real digits, yet at round 0
    (softmax near uniform for any input) the multisets come out right: measured accuracy 1.0
    for B = 4 and 8 on seeds 0–2 (30 gradients each), max |n̂_c − n_c| ≤ 0.37."""
    hits, base, total = 0, 0, 0
    for seed in range(3):
        cfg = {**DIGITS_FEDSGD, "seed": seed, "protocol_params": {"batch_size": batch_size, "lr": 0.1}}
        sim = server_sim(cfg)
        batch = sim.batch(0)
        for target in server_targets(sim.view("s"), 0):
            truth = batch.y[target.node, 0][batch.mask[target.node, 0]]
            assert truth.numel() == batch_size
            guess = infer_label_counts(
                sim.flat, target.grad, target.theta, "cross_entropy", batch_size, SHAPE
            )
            hits += order_free_accuracy(guess, truth) * batch_size
            # label-free baseline, even with an oracle: the batch's most frequent class B times
            base += int(torch.bincount(truth).max())
            total += batch_size
    acc, baseline = hits / total, base / total
    assert total == 30 * batch_size
    assert acc >= 0.95, acc
    assert acc >= baseline + 0.4, (acc, baseline)


def test_dlg_batched_auto_uses_the_label_counts_for_batches():
    sim = server_sim({**DIGITS_FEDSGD, "nodes": 4, "protocol_params": {"batch_size": 4, "lr": 0.1}})
    attack = BatchedDLG(batch_size=4, labels="auto", iterations=5)  # labels do not need the optimization
    recs = attack.run(sim.view("s"))
    assert len(recs) == 4
    for r in recs:
        assert r.extra["hypotheses"] == 1 and r.extra["label_inferred"] == 1.0
        assert r.x.shape == (4, *SHAPE) and r.y.shape == (4,)
    assert scores(sim, recs, ["label_accuracy"])["label_accuracy"]["headline"] >= 0.9
    # label_hypotheses: counts by name, and auto without theta falls back to enumeration
    target = server_targets(sim.view("s"), 0)[0]
    hyps, inferred = label_hypotheses(
        sim.flat, target.grad, "cross_entropy", 4, "counts", theta=target.theta, input_shape=SHAPE
    )
    assert hyps.shape == (1, 4) and inferred
    hyps, inferred = label_hypotheses(sim.flat, target.grad, "cross_entropy", 2, "auto")
    assert hyps.shape == (55, 2) and not inferred
    with pytest.raises(AttackError, match="theta"):
        label_hypotheses(sim.flat, target.grad, "cross_entropy", 4, "counts")


def test_bad_inputs():
    model, theta = digits_mlp()
    gr = torch.zeros(model.n_params, dtype=torch.float64)
    with pytest.raises(BenchInputError):
        infer_label_counts(model, gr, theta, "cross_entropy", 4, SHAPE, rule="median")
    with pytest.raises(BenchInputError):
        infer_label_counts(model, gr, theta, "cross_entropy", 4, SHAPE, reduction="max")
    with pytest.raises(AttackError, match="classification loss"):
        infer_label_counts(model, gr, theta, "squared", 4, SHAPE)
    with pytest.raises(AttackError, match="one logit"):
        infer_label_counts(model, gr, theta, "binary_cross_entropy", 4, SHAPE)
    # a last layer without bias whose inputs are negative (Linear with bias −1, no ReLU)
    module = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(64, 5), torch.nn.Linear(5, 10, bias=False)
    )
    no_bias = FlatModel(module.double())
    th = torch.zeros(no_bias.n_params, dtype=torch.float64)
    no_bias.unflatten(th)["1.bias"].fill_(-1.0)
    zeros = torch.zeros(no_bias.n_params, dtype=torch.float64)
    assert last_layer(no_bias)[1] is None
    with pytest.raises(AttackError, match="no bias"):
        infer_label_counts(no_bias, zeros, th, "cross_entropy", 4, SHAPE)
    with pytest.raises(AttackError, match="non-negative"):
        infer_label_counts(no_bias, zeros, th, "cross_entropy", 4, SHAPE, rule="weight")
