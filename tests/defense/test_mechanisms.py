"""The harness's mechanisms (bench.defense.mechanisms): only their accounting gives an ε, and each
checks the noise it added against the scale it declares."""

from __future__ import annotations

import pytest
import torch

from bench.defense.hooks import RunInfo
from bench.defense.mechanisms.base import MechanismHooks, merged_accounting, noise_check
from bench.defense.mechanisms.per_sample import PerSampleGaussian
from tests.support.bench_root import REPO


def _dp_run(sigma: float = 1.0):
    from bench.defense.loading import build_defense
    from bench.simulation import Simulation

    cfg = {
        "dataset": "digits", "model": "mlp", "model_params": {"hidden": [8]}, "nodes": 4,
        "protocol": "fedsgd", "protocol_params": {"lr": 0.1, "batch_size": 2}, "rounds": 6,
        "dtype": "float64",
    }  # fmt: skip
    sim = Simulation(cfg, hooks=build_defense("dp_sgd", {"noise_multiplier": sigma, "clip_norm": 1.0}, REPO))
    sim.run(6)
    return sim


def test_dp_sgds_epsilon_is_verified_and_its_noise_measured_at_the_declared_scale():
    acc = _dp_run(1.0).hooks.accounting()
    assert acc["verified"] is True and acc["epsilon"] > 0 and acc["mechanism"] == "harness: PerSampleGaussian"
    # σ C per coordinate of the clipped sum (the division by the batch comes after)
    assert acc["noise_std_declared"] == pytest.approx(1.0)
    assert acc["noise_std_measured"] == pytest.approx(1.0, rel=0.05) and acc["noise_scale_ok"] is True


def test_noise_check_flags_a_scale_other_than_the_declared_one():
    assert noise_check(100 * 4.0, 100 * 4.0, 100)["noise_scale_ok"] is True
    assert noise_check(100 * 1.0, 100 * 4.0, 100)["noise_scale_ok"] is False  # half the std
    assert noise_check(0.0, 0.0, 10)["noise_scale_ok"] is True  # σ = 0: nothing added, nothing declared


class _Claims(MechanismHooks):
    """A mechanism whose accounting is given (to test how the runner merges it)."""

    def __init__(self, acc: dict) -> None:
        self.acc = acc

    def accounting(self) -> dict:
        return dict(self.acc)


def test_an_epsilon_is_shown_only_when_the_mechanism_verified_it():
    spec = PerSampleGaussian(noise_multiplier=1.0)
    good = merged_accounting([spec], [_Claims({"epsilon": 2.0, "noise_scale_ok": True})], frozenset(), {})
    assert good["epsilon"] == 2.0 and good["verified"] is True
    off = merged_accounting([spec], [_Claims({"epsilon": 2.0, "noise_scale_ok": False})], frozenset(), {})
    assert off["epsilon"] is None and off["claimed_epsilon"] == 2.0 and off["verified"] is False
    own = merged_accounting([], [], frozenset({"outgoing"}), {"epsilon": 0.5, "note": "trust me"})
    assert (
        own["epsilon"] is None
        and own["claimed_epsilon"] == 0.5
        and own["defense_notes"] == {"note": "trust me"}
    )


def test_a_hook_between_clipping_and_noise_voids_dp_fedavgs_epsilon():
    from bench.defense.mechanisms.central import CentralGaussian

    spec = CentralGaussian(clip_norm=1.0, noise_multiplier=1.0)
    acc = merged_accounting([spec], [_Claims({"epsilon": 3.0})], frozenset({"outgoing"}), {})
    assert acc["epsilon"] is None and "outgoing" in acc["note"]
    kept = merged_accounting([spec], [_Claims({"epsilon": 3.0})], frozenset({"local_gradients"}), {})
    assert kept["epsilon"] == 3.0  # before the clipping: post-processing cannot hurt


def test_a_mechanism_record_validates_its_parameters_naming_the_field():
    from bench.core.errors import BenchInputError

    with pytest.raises(BenchInputError, match=r"defense\.clip_norm"):
        PerSampleGaussian(clip_norm=-1.0, noise_multiplier=1.0)
    with pytest.raises(BenchInputError, match=r"defense\.noise_multiplier"):
        PerSampleGaussian(clip_norm=1.0)


def test_the_mechanisms_random_streams_are_unknown_to_the_plugin():
    """The plugin is bound without the seed; the mechanism's generator is seeded from it: two runs
    of different seeds draw different noise while the plugin sees the same facts."""
    info = RunInfo(
        2, 3, "fedsgd", ("gradient",), 1, None, 1, None, (1, 1), torch.float64, torch.device("cpu")
    )
    assert "seed" not in RunInfo.__dataclass_fields__
    a, b = (
        PerSampleGaussian(noise_multiplier=1.0).build(info, 0),
        PerSampleGaussian(noise_multiplier=1.0).build(info, 1),
    )
    total, mask = torch.zeros(2, 3, dtype=torch.float64), torch.ones(2, 1, dtype=torch.bool)
    from bench.defense.hooks import RoundContext

    assert not torch.equal(
        a.sample_sum(total, mask, RoundContext(0)), b.sample_sum(total, mask, RoundContext(0))
    )
