"""Scoring: privacy score, aggregation over seeds, ranking, Pareto front, text table."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from bench.leaderboard.ranking import entry_table, pareto_front, privacy_score, tables_by_track
from bench.leaderboard.site.text import format_epsilon, format_table
from bench.results.record import AttackOutcome
from tests.support.result_samples import job, sample_results

APPROX = {"abs": 1e-12}


@pytest.fixture
def table() -> pd.DataFrame:
    return entry_table(sample_results())


def row(df: pd.DataFrame, track: str, defense: str) -> pd.Series:
    sub = df[(df["track"] == track) & (df["defense"] == defense)]
    assert len(sub) == 1
    return sub.iloc[0]


def test_privacy_score_ignores_failed_attacks() -> None:
    outs = [
        AttackOutcome("server", "a", "ok", leakage=0.3),
        AttackOutcome("server", "b", "failed", reason="crash"),
        AttackOutcome("server", "c", "ok", leakage=0.6),
        AttackOutcome("other", "d", "ok", leakage=0.9),
    ]
    assert privacy_score(outs, "server") == pytest.approx(0.4, **APPROX)
    assert privacy_score(outs) == pytest.approx(0.1, **APPROX)
    assert privacy_score(outs[1:2]) is None
    assert privacy_score([]) is None
    assert privacy_score([AttackOutcome("s", "a", "ok", leakage=0.0)]) == 1.0


def test_columns_and_shape(table: pd.DataFrame) -> None:
    assert len(table) == 4 + 4
    for col in (
        "track",
        "task",
        "threat",
        "defense",
        "privacy_mean",
        "privacy_std",
        "utility_mean",
        "utility_std",
        "utility_floor",
        "utility_metric",
        "epsilon_mean",
        "epsilon_delta",
        "seeds",
        "failed",
        "runtime_mean",
        "leakage:inv",
        "leakage:mia",
        "leakage:lira",
        "above_floor",
        "rank",
    ):
        assert col in table.columns, col
    assert str(table["rank"].dtype) == "Int64"
    assert set(table["track"]) == {"img/server", "tab/fl_user"}


def test_means_and_stds(table: pd.DataFrame) -> None:
    none = row(table, "img/server", "none")
    assert none["privacy_mean"] == pytest.approx(0.2, **APPROX)
    assert none["privacy_std"] == pytest.approx(0.1, **APPROX)  # sample std, ddof=1
    assert none["utility_mean"] == pytest.approx(0.95, **APPROX)
    assert none["utility_std"] == pytest.approx(0.0, **APPROX)
    assert none["leakage:inv"] == pytest.approx(0.8, **APPROX)
    assert none["leakage:mia"] == pytest.approx(0.5, **APPROX)
    assert none["runtime_mean"] == pytest.approx(3.0, **APPROX)
    assert none["utility_metric"] == "val_acc" and none["utility_floor"] == 0.7

    dp = row(table, "img/server", "dp(eps=1)")
    assert dp["privacy_mean"] == pytest.approx(0.5, **APPROX)
    assert dp["privacy_std"] == pytest.approx(0.1, **APPROX)
    assert dp["utility_mean"] == pytest.approx(0.82, **APPROX)
    assert dp["utility_std"] == pytest.approx(0.02, **APPROX)
    assert dp["leakage:mia"] == pytest.approx(0.4, **APPROX)


def test_failed_jobs_and_attacks(table: pd.DataFrame) -> None:
    noise = row(table, "img/server", "noise")
    assert noise["seeds"] == 3 and noise["failed"] == 1
    assert noise["privacy_mean"] == pytest.approx(0.5, **APPROX)
    assert noise["privacy_std"] == pytest.approx(0.0, **APPROX)
    assert noise["utility_mean"] == pytest.approx(0.9, **APPROX)  # the failed job's 0.0 is excluded
    assert noise["leakage:mia"] == pytest.approx(0.15, **APPROX)  # failed attack excluded, not zero

    b = row(table, "tab/fl_user", "b")
    assert math.isnan(b["leakage:lira"])  # failed everywhere
    assert b["privacy_mean"] == pytest.approx(0.6, **APPROX)

    broken = row(table, "tab/fl_user", "broken")
    assert broken["seeds"] == 0 and broken["failed"] == 3
    assert math.isnan(broken["privacy_mean"]) and math.isnan(broken["utility_mean"])
    assert pd.isna(broken["rank"])


def test_single_seed_std_is_nan() -> None:
    df = entry_table([job("t", "s", "d", 0, {"a": 0.25}, 0.5, None)])
    assert df["privacy_mean"].iloc[0] == pytest.approx(0.75, **APPROX)
    assert math.isnan(df["privacy_std"].iloc[0]) and math.isnan(df["utility_std"].iloc[0])
    assert df["rank"].iloc[0] == 1


def test_ranks(table: pd.DataFrame) -> None:
    img = {d: row(table, "img/server", d)["rank"] for d in ("none", "dp(eps=1)", "noise", "prune")}
    # noise and dp tie on privacy 0.5; noise has more utility
    assert img["noise"] == 1 and img["dp(eps=1)"] == 2 and img["none"] == 3
    assert pd.isna(img["prune"])  # most private, but below the utility floor
    assert not row(table, "img/server", "prune")["above_floor"]
    assert row(table, "img/server", "none")["above_floor"]

    tab = {d: row(table, "tab/fl_user", d)["rank"] for d in ("a", "b", "c", "broken")}
    # no floor: a 0.8 (lira 0.0/0.1/0.2 ≤ mia 0.2), c 0.8 (0.9, 0.8, 0.7) but less utility, b 0.6
    assert tab["a"] == 1 and tab["c"] == 2 and tab["b"] == 3 and pd.isna(tab["broken"])
    assert row(table, "tab/fl_user", "a")["above_floor"]


def test_tables_by_track_order_and_columns(table: pd.DataFrame) -> None:
    tables = tables_by_track(table)
    assert list(tables) == ["img/server", "tab/fl_user"]
    img = tables["img/server"]
    assert list(img["defense"]) == ["noise", "dp(eps=1)", "none", "prune"]
    assert "leakage:lira" not in img.columns and "leakage:inv" in img.columns
    tab = tables["tab/fl_user"]
    assert list(tab["defense"]) == ["a", "c", "b", "broken"]
    assert {"leakage:mia", "leakage:lira"} <= set(tab.columns) and "leakage:inv" not in tab.columns


def test_pareto_front(table: pd.DataFrame) -> None:
    tables = tables_by_track(table)
    # dp (0.5, 0.82) is dominated by noise (0.5, 0.9); prune is on the front despite the floor
    assert pareto_front(tables["img/server"]) == ["prune", "noise", "none"]
    # a (0.8, 0.6) dominates c (0.8, 0.5); b (0.6, 0.7); broken has no values
    assert pareto_front(tables["tab/fl_user"]) == ["a", "b"]


def test_record_disagreeing_with_attacks_is_rejected() -> None:
    bad = job("t", "s", "d", 0, {"a": 0.25}, 0.5, None)
    bad.privacy = {"s": 0.9}
    with pytest.raises(ValueError, match="stored privacy"):
        entry_table([bad])


def test_failed_job_without_attacks_counts_in_every_track() -> None:
    rs = [
        job("t", "server", "d", 0, {"a": 0.2}, 0.5, None),
        job("t", "eaves", "d", 0, {"b": 0.3}, 0.5, None),
        job("t", "server", "d", 1, {}, 0.0, None, failed=True),
    ]
    rs[1].key = "other"
    df = entry_table(rs)
    assert sorted(df["track"]) == ["t/eaves", "t/server"]
    assert list(df["failed"]) == [1, 1]


def test_epsilon_is_the_mean_of_the_reported_guarantees(table: pd.DataFrame) -> None:
    dp = row(table, "img/server", "dp(eps=1)")
    assert dp["epsilon_mean"] == pytest.approx(1.0, **APPROX) and dp["epsilon_delta"] == 1e-5
    for defense in ("none", "noise", "prune"):  # no accounting, or ε None: no guarantee
        assert math.isnan(row(table, "img/server", defense)["epsilon_mean"])


def test_an_infinite_epsilon_is_kept_and_shown_as_such() -> None:
    r = job(
        "t",
        "server",
        "dp_sgd(noise_multiplier=0)",
        0,
        {"a": 0.5},
        0.9,
        None,
        accounting={"epsilon": math.inf},
    )
    (eps,) = entry_table([r])["epsilon_mean"]
    assert eps == math.inf
    assert format_epsilon(eps) == "∞" and format_epsilon(math.nan) == "—" and format_epsilon(7.8312) == "7.83"


@pytest.mark.parametrize(
    ("scheme", "assumed", "label"),
    [
        ("poisson", "poisson", "Poisson"),
        ("fixed-size without replacement", "without replacement", "fixed-size"),
        ("full batch", "none", "full batch"),
        ("shuffled epochs", "none", "epochs"),
        ("every client", "none", "no subsampling"),
        ("every node in every round", "none (q = 1)", "no subsampling"),
    ],
)
def test_the_page_says_which_subsampling_each_epsilon_rests_on(scheme: str, assumed: str, label: str) -> None:
    """The ε's basis in a word beside it: Poisson (Opacus's analysis) against the looser bound of
    fixed-size minibatches and the cases without amplification by sampling."""
    from bench.leaderboard.site.cells import rows

    accounting = {"epsilon": 3.0, "delta": 1e-5, "accountant": "rdp", "relation": "add/remove one sample"}
    accounting |= {"sampling_scheme": scheme, "sampling_accounted": assumed}
    r = job("t", "server", "dp_sgd(noise_multiplier=1)", 0, {"a": 0.5}, 0.9, None, accounting=accounting)
    df = entry_table([r])
    assert list(df["epsilon_sampling"]) == [label]
    (cells,) = rows(df, ["a"], set())
    assert cells["epsilon_sampling"] == label and cells["epsilon"] == format_epsilon(3.0)
    r = job("t", "server", "noise", 0, {"a": 0.5}, 0.9, None)
    assert list(entry_table([r])["epsilon_sampling"]) == [""]


def test_format_table(table: pd.DataFrame) -> None:
    text = format_table(tables_by_track(table)["img/server"])
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100  # wider tables continue in blocks below
    assert sum("noise" in line for line in lines) >= 1 and lines[1].split() == ["rank", "defense"]
    assert "0.500 ± 0.100" in text and "0.820 ± 0.020" in text
    prune = next(line for line in lines if "prune" in line)
    assert prune.split()[0] == "—"
    assert "noise *" in text and "dp(eps=1) *" not in text
    assert "inv" in lines[0] and "mia" in lines[0] and "val_acc" in lines[0] and "ε" in lines[0]
    for defense, eps in (("dp(eps=1)", "1"), ("noise", "—")):  # ε follows the floor 0.700
        tokens = next(line for line in lines if defense in line).split()
        assert tokens[tokens.index("0.700") + 1] == eps


def test_empty() -> None:
    df = entry_table([])
    assert len(df) == 0 and "rank" in df.columns
    assert tables_by_track(df) == {}


def test_baseline_utility_is_the_undefended_entry(table: pd.DataFrame) -> None:
    img = table[table["track"] == "img/server"]
    assert img["baseline_utility"].tolist() == pytest.approx([0.95] * 4)  # the "none" entry's utility
    tab = table[table["track"] == "tab/fl_user"]
    assert tab["baseline_utility"].isna().all()  # that track has no undefended entry


def test_last_failure_is_the_most_recent_reason() -> None:
    jobs = [job("t", "server", "d", s, {}, 0.0, None, failed=True) for s in range(3)]
    reasons = [("loss is NaN", "2025-01-02"), ("worker\n  crashed", "2025-01-03"), ("timeout", "2025-01-01")]
    for j, (reason, stamp) in zip(jobs, reasons, strict=True):
        j.reason, j.provenance = reason, {"timestamp": stamp}
    jobs.append(job("t", "server", "ok", 0, {"a": 0.5}, 0.9, None))
    df = entry_table(jobs).set_index("defense")
    assert df.loc["d", "last_failure"] == "worker crashed"  # latest timestamp, one line
    assert df.loc["ok", "last_failure"] == ""
    jobs[2].provenance = {"timestamp": "2025-01-03"}  # a tie: the later job wins
    assert entry_table(jobs).set_index("defense").loc["d", "last_failure"] == "timeout"


def test_format_table_shows_the_failure_reason_when_a_job_failed(table: pd.DataFrame) -> None:
    tables = tables_by_track(table)
    img = format_table(tables["img/server"])
    assert any("last failure" in line for line in img.splitlines())
    assert any(" noise " in f" {line} " and "diverged" in line for line in img.splitlines())
    long = job("x", "server", "d", 0, {}, 0.0, None, failed=True)
    long.reason = "RuntimeError: " + "very long explanation " * 10
    text = format_table(tables_by_track(entry_table([long]))["x/n/a"])
    cell = next(line for line in text.splitlines() if "RuntimeError" in line)
    assert "RuntimeError: very long" in cell and "…" in cell and "explanation explanation" not in cell[-60:]
    clean = [job("c", "server", "d", 0, {"a": 0.5}, 0.9, None)]
    assert "last failure" not in format_table(tables_by_track(entry_table(clean))["c/server"])


def test_the_empirical_epsilon_lower_bound_is_reported_and_flagged_above_the_claimed_epsilon() -> None:
    """Per job the largest bound over the track's membership attacks, mean over seeds; an entry
    whose bound exceeds its accountant's ε is flagged in the table and on the page."""
    from bench.leaderboard.ranking import EPSILON_LB_METRIC
    from bench.leaderboard.site.render import render_index

    def mia(defense: str, seed: int, lbs: list[float], eps: float | None) -> object:
        r = job("m", "user", defense, seed, {f"a{i}": 0.2 for i in range(len(lbs))}, 0.9, None,
                accounting={"epsilon": eps} if eps is not None else None)  # fmt: skip
        for outcome, lb in zip(r.attacks, lbs, strict=True):
            outcome.metrics[EPSILON_LB_METRIC] = lb
        return r

    results = [
        mia("dp(eps=0.5)", 0, [0.4, 1.0], 0.5),
        mia("dp(eps=0.5)", 1, [0.6, 0.2], 0.5),
        mia("dp(eps=8)", 0, [1.0, 0.9], 8.0),
        mia("none", 0, [2.0, 0.1], None),
    ]
    df = entry_table(results)
    assert row(df, "m/user", "dp(eps=0.5)")["epsilon_lb"] == pytest.approx(0.8, **APPROX)
    assert bool(row(df, "m/user", "dp(eps=0.5)")["epsilon_exceeded"])
    assert not bool(row(df, "m/user", "dp(eps=8)")["epsilon_exceeded"])
    assert not bool(row(df, "m/user", "none")["epsilon_exceeded"])  # no claim, nothing to refute
    text = format_table(tables_by_track(df)["m/user"])
    assert "ε lb" in text.splitlines()[0] and "0.800 !" in text and "1.000 !" not in text
    html = render_index(tables_by_track(df), {})
    assert "ε lower bound" in html and html.count(" ⚠</td>") == 1
    plain = entry_table(sample_results())  # no membership attack: the column stays out
    assert plain["epsilon_lb"].isna().all()
    assert "ε lb" not in format_table(tables_by_track(plain)["img/server"])
    assert "ε lower bound" not in render_index(tables_by_track(plain), {})


def test_a_defense_is_ranked_only_on_the_threat_models_it_claims() -> None:
    """An entry whose defense does not claim the track's threat model (``provenance["claims"]``,
    from :attr:`Defense.threats`) is shown but not ranked; a job without the record claims all."""
    jobs = [
        job("t", "active", "passive_only", 0, {"a": 0.1}, 0.9, None),
        job("t", "active", "robust", 0, {"a": 0.5}, 0.9, None),
        job("t", "active", "legacy", 0, {"a": 0.7}, 0.9, None),
    ]
    jobs[0].provenance = {"claims": ["server", "neighbors"]}
    jobs[1].provenance = {"claims": ["server", "neighbors", "active"]}
    df = entry_table(jobs).set_index("defense")
    assert not df.loc["passive_only", "claimed"] and pd.isna(df.loc["passive_only", "rank"])
    assert df.loc["robust", "claimed"] and df.loc["robust", "rank"] == 1  # the best privacy is unranked
    assert df.loc["legacy", "claimed"] and df.loc["legacy", "rank"] == 2
    front = pareto_front(entry_table(jobs)[lambda d: d["track"] == "t/active"])
    assert front == ["robust"]  # passive_only (privacy 0.9) would dominate it, but is not claimed


def test_an_epsilon_the_attacks_refute_is_a_false_claim_and_not_ranked() -> None:
    """Where the membership attacks' empirical lower bound exceeds the ε an entry shows, the entry
    is not ranked on that track; an ε the harness did not verify is not shown, only flagged."""
    from bench.leaderboard.ranking import EPSILON_LB_METRIC

    def mia(defense: str, lb: float, accounting: dict) -> object:
        r = job("m", "user", defense, 0, {"a": 0.2}, 0.9, None, accounting=accounting)
        r.attacks[0].metrics[EPSILON_LB_METRIC] = lb
        return r

    df = entry_table(
        [
            mia("refuted", 3.0, {"epsilon": 1.0, "delta": 1e-5}),
            mia("kept", 0.5, {"epsilon": 1.0, "delta": 1e-5}),
            mia("unverified", 3.0, {"epsilon": None, "claimed_epsilon": 0.1, "verified": False}),
        ]
    ).set_index("defense")
    assert bool(df.loc["refuted", "epsilon_exceeded"]) and pd.isna(df.loc["refuted", "rank"])
    assert df.loc["kept", "rank"] == 1
    assert math.isnan(df.loc["unverified", "epsilon_mean"]) and bool(
        df.loc["unverified", "epsilon_unverified"]
    )
    assert not bool(df.loc["unverified", "epsilon_exceeded"]) and df.loc["unverified", "rank"] == 2


def test_an_epsilon_counts_only_against_the_threat_models_the_defense_claims() -> None:
    """A DP guarantee that does not cover the track's adversary (DP-FedAvg's noise is added by
    the server, after it saw the updates) is not shown as one there, and no lower bound can
    refute it."""
    r = job("t", "server", "dp_fedavg", 0, {"a": 0.5}, 0.9, None, accounting={"epsilon": 2.0, "delta": 1e-5})
    r.provenance = {"claims": ["fl_user"]}
    (row_,) = entry_table([r]).to_dict("records")
    assert math.isnan(row_["epsilon_mean"]) and not row_["claimed"] and not row_["epsilon_exceeded"]
    r.provenance = {"claims": ["server", "fl_user"]}
    assert entry_table([r])["epsilon_mean"].tolist() == [2.0]


def test_pareto_front_reads_the_utility_direction() -> None:
    """A loss (lower is better): the entry with the same privacy and the lower loss dominates."""
    df = pd.DataFrame(
        {
            "defense": ["low_loss", "high_loss", "private"],
            "privacy_mean": [0.5, 0.5, 0.9],
            "utility_mean": [0.1, 5.7, 6.0],
            "claimed": [True, True, True],
            "higher_is_better": [False, False, False],
        }
    )
    assert pareto_front(df) == ["private", "low_loss"]
    assert pareto_front(df.assign(higher_is_better=True)) == ["private"]
    from bench.leaderboard.site.plots import privacy_utility_svg

    svg = privacy_utility_svg(df, "t/server", pareto_front(df), "val_loss")
    assert svg is not None and "val_loss, lower is better" in svg


def test_format_table_fits_100_columns_and_names_long_attack_labels() -> None:
    """Issue 38 item 6: long attack labels become ``a1`` … named under the table, and a wide
    table continues in blocks that repeat rank and defense, no line over 100 characters."""
    long = "membership_threshold(calibrate=True,rounds=[10, 25, 50, 100, 150, 'last'],signal=mentr)"
    labels = [long, "dlg", *(f"attack_number_{i}_with_a_long_name" for i in range(6))]
    results = [
        job("t", "server", d, s, {a: 0.1 * (i + 1) / 9 for i, a in enumerate(labels)}, 0.9, None)
        for d in ("none", "a_defense_with_a_rather_long_label(strength=0.123456789)")
        for s in range(2)
    ]
    text = format_table(tables_by_track(entry_table(results))["t/server"])
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    named = [line for line in lines if line.startswith("  a") and " = " in line]
    assert len(named) == 7 and any(line.endswith(f" = {long}") for line in named)
    assert "dlg" in text and long not in "\n".join(lines[: -len(named)])  # named only below
    blocks = [i for i, line in enumerate(lines) if line.split() == ["rank", "defense"]]
    assert len(blocks) >= 2  # continued below, rank and defense repeated
    assert sum("a_defense_with_a_rather_long_label" in line for line in lines) == len(blocks)
