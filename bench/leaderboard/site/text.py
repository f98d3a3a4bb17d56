"""The ranked table of one track as plain text, for the terminal (``python -m bench evaluate``)."""

from __future__ import annotations

import math

import pandas as pd

from bench.leaderboard.ranking import LEAKAGE_PREFIX, pareto_front, track_attacks

__all__ = [
    "ATTACK_WIDTH",
    "DEFENSE_WIDTH",
    "REASON_WIDTH",
    "TABLE_WIDTH",
    "attack_keys",
    "format_epsilon",
    "format_table",
]

#: characters of a failure reason shown in the terminal table
REASON_WIDTH = 48
#: the widest line of a terminal table (wider tables continue in blocks below)
TABLE_WIDTH = 100
#: the longest attack label shown as a column header (longer ones as ``a1`` …, named below)
ATTACK_WIDTH = 24
#: the longest defense label shown in the table (longer ones cut with ``…``)
DEFENSE_WIDTH = 40


def format_epsilon(x: object) -> str:
    """A mean ε: 3 significant digits, ``∞`` without a bound, ``—`` without a guarantee."""
    v = float(x)  # type: ignore[arg-type]
    if math.isnan(v):
        return "—"
    return "∞" if math.isinf(v) else f"{v:.3g}"


def _pm(mean: object, std: object) -> str:
    m, s = float(mean), float(std)  # type: ignore[arg-type]
    if math.isnan(m):
        return "—"
    return f"{m:.3f}" if math.isnan(s) else f"{m:.3f} ± {s:.3f}"


def _cut(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters (``…`` marks a cut)."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _num(x: object) -> str:
    v = float(x)  # type: ignore[arg-type]
    return "—" if math.isnan(v) else f"{v:.3f}"


def attack_keys(attacks: list[str]) -> dict[str, str]:
    """Short column keys of a track's attacks: the label itself where it is at most
    :data:`ATTACK_WIDTH` characters, else ``a1``, ``a2`` … (explained under the table)."""
    out, n = {}, 0
    for attack in attacks:
        if len(attack) <= ATTACK_WIDTH:
            out[attack] = attack
        else:
            n += 1
            out[attack] = f"a{n}"
    return out


def format_table(df_track: pd.DataFrame, width: int = TABLE_WIDTH) -> str:
    """A plain-text table of one track for the terminal, at most ``width`` characters wide.

    Parameters
    ----------
    df_track:
        The rows of one track (from :func:`bench.leaderboard.ranking.tables_by_track`).
    width:
        The widest line: wider tables continue in blocks below, each repeating the rank and
        defense columns (pandas' ``line_width``); a defense label longer than
        :data:`DEFENSE_WIDTH` is cut (``…``).

    Returns
    -------
    str
        ``rank`` (``—`` when unranked, ``*`` marks the Pareto front), defense, privacy and
        utility as ``mean ± std`` (3 decimals), the utility floor, the mean ε of the defense's
        DP guarantee (:func:`format_epsilon`), in a track with membership attacks the empirical ε
        lower bound (``ε lb``, ``!`` where it exceeds the claimed ε), the attack that sets the
        privacy score (``worst``: standard, ``+adaptive`` or ``+oracle``), one column per attack
        (mean leakage; a label longer than :data:`ATTACK_WIDTH` shown as ``a1`` … and named under
        the table), seeds, failed jobs, the reason of the most recent failed job (``last
        failure``, cut to :data:`REASON_WIDTH` characters; only when a job of the track failed)
        and mean runtime.
    """
    front = set(pareto_front(df_track))
    attacks = track_attacks(df_track)
    keys = attack_keys(attacks)
    metric = str(df_track["utility_metric"].iloc[0]) if len(df_track) else "utility"
    labels = [_cut(f"{d} *" if d in front else str(d), DEFENSE_WIDTH) for d in df_track["defense"]]
    ranks = ["—" if pd.isna(r) else str(int(r)) for r in df_track["rank"]]
    index = pd.MultiIndex.from_arrays([ranks, labels], names=["rank", "defense"])
    worst = [str(w or "—") for w in df_track.get("worst_attack", [""] * len(df_track))]
    out = pd.DataFrame(
        {
            "privacy": [
                _pm(m, s) for m, s in zip(df_track["privacy_mean"], df_track["privacy_std"], strict=True)
            ],
            metric or "utility": [
                _pm(m, s) for m, s in zip(df_track["utility_mean"], df_track["utility_std"], strict=True)
            ],
            "floor": [_num(f) for f in df_track["utility_floor"]],
            "ε": [
                "not verified" if u and math.isnan(float(x)) else format_epsilon(x)
                for x, u in zip(
                    df_track.get("epsilon_mean", [math.nan] * len(df_track)),
                    df_track.get("epsilon_unverified", [False] * len(df_track)),
                    strict=True,
                )
            ],
            "worst": [keys.get(w, w) for w in worst],
        },
        index=index,
    )
    if "epsilon_lb" in df_track.columns and df_track["epsilon_lb"].notna().any():
        flags = df_track.get("epsilon_exceeded", pd.Series([False] * len(df_track), index=df_track.index))
        out.insert(
            4,
            "ε lb",
            [
                f"{_num(v)}{' !' if bool(f) else ''}"
                for v, f in zip(df_track["epsilon_lb"], flags, strict=True)
            ],
        )
    for attack in attacks:
        out[keys[attack]] = [_num(v) for v in df_track[LEAKAGE_PREFIX + attack]]
    out["seeds"] = [str(int(s)) for s in df_track["seeds"]]
    out["failed"] = [str(int(f)) for f in df_track["failed"]]
    if "last_failure" in df_track.columns and (df_track["failed"] > 0).any():
        out["last failure"] = [_cut(str(t or ""), REASON_WIDTH) or "—" for t in df_track["last_failure"]]
    out["runtime_s"] = [_num(t) for t in df_track["runtime_mean"]]
    text = out.to_string(line_width=width, sparsify=False)
    named = [f"  {key} = {attack}" for attack, key in keys.items() if key != attack]
    return text if not named else text + "\n" + "\n".join(named)
