"""The notebook API: ``bench.evaluate_defense`` on a plugin name, a repository plugin's object and a
defense in a module of the user's own, and ``bench.load_leaderboard`` on the committed entries."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pytest

import bench
from bench.core.errors import BenchInputError
from bench.defense.base import DEFENSES, Defense
from bench.defense.loading import load_defense_module
from bench.leaderboard.ranking import tables_by_track

ROOT = Path(__file__).resolve().parents[1]
TASK = "gaussians_logreg_fedsgd"

MODULE = '''
"""A defense outside the repository: Gaussian noise of scale s on every message."""

import torch

from bench.defense.base import DEFENSES, Defense


@DEFENSES.register("api_test_noise", "Gaussian noise on messages (API test)")
class ApiTestNoise(Defense):
    """m + s·ξ on every message."""

    def __init__(self, scale: float = 0.1) -> None:
        self.scale = float(scale)

    def outgoing(self, payload, msg):
        return payload + self.scale * torch.randn_like(payload)
'''


@pytest.fixture
def own_module(tmp_path: Path):
    path = tmp_path / "api_test_noise.py"
    path.write_text(MODULE)
    spec = importlib.util.spec_from_file_location("api_test_noise", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["api_test_noise"] = module
    spec.loader.exec_module(module)
    yield module
    DEFENSES.remove("api_test_noise")
    sys.modules.pop("api_test_noise", None)


def test_constructor_arguments_are_recorded() -> None:
    load_defense_module("gaussian_noise", ROOT)
    cls = DEFENSES.get("gaussian_noise")
    assert cls(0.5).init_params == {"sigma": 0.5}
    assert cls(sigma=0.5, kinds=["model"]).init_params == {"sigma": 0.5, "kinds": ["model"]}
    assert cls().init_params == {}


def test_a_plugin_by_name_and_by_object_give_the_same_row(tmp_path: Path) -> None:
    load_defense_module("gaussian_noise", ROOT)
    by_name = bench.evaluate_defense("gaussian_noise", params={"sigma": 0.1}, tasks=[TASK], seeds=1)
    obj = DEFENSES.get("gaussian_noise")(sigma=0.1)
    by_object = bench.evaluate_defense(obj, tasks=[TASK], seeds=1, out=tmp_path)
    assert list(by_name["defense"]) == ["gaussian_noise(sigma=0.1)"]
    assert by_name["seeds"].tolist() == [1] and by_name["failed"].tolist() == [0]
    cols = ["track", "privacy_mean", "utility_mean"]
    pd.testing.assert_frame_equal(by_name[cols], by_object[cols])
    assert (tmp_path / "results.sqlite").is_file() and (tmp_path / "site" / "index.html").is_file()


def test_a_defense_in_the_users_own_module_runs(own_module, tmp_path: Path) -> None:
    weak = bench.evaluate_defense(own_module.ApiTestNoise(scale=1e-6), tasks=[TASK], seeds=1, out=tmp_path)
    strong = bench.evaluate_defense(own_module.ApiTestNoise(scale=10.0), tasks=[TASK], seeds=1, out=tmp_path)
    assert weak["defense"].tolist() == ["api_test_noise(scale=1e-06)"]
    assert strong["defense"].tolist() == ["api_test_noise(scale=10.0)"]
    assert strong["failed"].tolist() == [0] and weak["failed"].tolist() == [0]
    # the code ran: ten units of noise on every upload hide more than a millionth of one
    assert strong["privacy_mean"].iloc[0] > weak["privacy_mean"].iloc[0]
    assert not (ROOT / "defenses" / "api_test_noise.py").exists()  # the repository is untouched


def test_classes_without_a_source_file_or_registration_are_refused() -> None:
    namespace: dict = {"Defense": Defense, "__name__": "notebook_cell"}
    exec("class Cell(Defense):\n    pass\n", namespace)
    DEFENSES.register("api_cell_defense")(namespace["Cell"])
    try:
        with pytest.raises(BenchInputError, match="source file is unknown"):
            bench.evaluate_defense(namespace["Cell"](), tasks=[TASK], seeds=1)
    finally:
        DEFENSES.remove("api_cell_defense")
    with pytest.raises(BenchInputError, match="not registered"):
        bench.evaluate_defense(namespace["Cell"](), tasks=[TASK], seeds=1)
    with pytest.raises(BenchInputError, match="expected a plugin name"):
        bench.evaluate_defense(3.0)
    with pytest.raises(BenchInputError, match="no_such_defense"):
        bench.evaluate_defense("no_such_defense", tasks=[TASK], seeds=1)


def test_load_leaderboard_is_the_pages_tables() -> None:
    board = bench.load_leaderboard()
    assert set(board["suite"]) == {"quick", "real"}
    assert set(board["verification"]) <= {"unverified", "verified", "mismatch"}
    entries = sorted((ROOT / "leaderboard" / "entries" / "quick").glob("*.json"))
    assert board["defense"].nunique() == len(entries)
    for track, table in tables_by_track(board).items():
        ranked = table.dropna(subset=["rank"])
        assert list(ranked["rank"]) == sorted(ranked["rank"]), track
    with pytest.raises(BenchInputError, match="no such folder"):
        bench.load_leaderboard(suite="no_such_suite")


def test_a_leaky_defense_is_ranked_against_the_committed_entries(own_module, tmp_path: Path) -> None:
    """A defense that hides nothing is not "rank 1" because the store holds only itself: by
    default it is ranked against the committed entries and the undefended run (issue 38 item 7)."""
    leaky = own_module.ApiTestNoise(scale=1e-6)
    row = bench.evaluate_defense(leaky, tasks=[TASK], seeds=1, out=tmp_path)
    assert len(row) == 1 and row["track_status"].iloc[0] == "ranked"
    assert int(row["rank"].iloc[0]) > 1  # committed defenses that hide something rank above it
    alone = bench.evaluate_defense(leaky, tasks=[TASK], seeds=1, out=tmp_path, against=None)
    assert alone["track_status"].iloc[0] == "no reference run"
    with pytest.raises(BenchInputError, match="against"):
        bench.evaluate_defense(leaky, tasks=[TASK], seeds=1, out=tmp_path, against=tmp_path / "none")


def test_a_class_whose_source_lookup_raises_oserror_is_refused_as_documented(monkeypatch) -> None:
    """Issue 39 item 9: where ``inspect`` raises ``OSError`` for a notebook cell's class, the
    refusal is the documented input error, not the ``OSError``."""
    import inspect

    namespace: dict = {"Defense": Defense, "__name__": "notebook_cell"}
    exec("class Cell(Defense):\n    pass\n", namespace)
    DEFENSES.register("api_cell_oserror")(namespace["Cell"])

    def no_source(obj):
        raise OSError("could not find class definition")

    monkeypatch.setattr(inspect, "getsourcefile", no_source)
    try:
        with pytest.raises(BenchInputError, match="source file is unknown"):
            bench.evaluate_defense(namespace["Cell"](), tasks=[TASK], seeds=1)
    finally:
        DEFENSES.remove("api_cell_oserror")
