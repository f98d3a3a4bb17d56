"""Hand-made job results shared by the scoring, page and store tests (known leakages and utilities)."""

from __future__ import annotations

from bench.results.record import AttackOutcome, JobResult


def job(
    task: str,
    threat: str,
    defense: str,
    seed: int,
    leakages: dict[str, float | None],
    utility: float,
    floor: float | None,
    *,
    failed: bool = False,
    runtime: float = 1.0,
    accounting: dict | None = None,
) -> JobResult:
    """A job whose attacks have the given leakages (``None`` = the attack failed); an ``epsilon``
    in ``accounting`` is a harness mechanism's (``verified``) unless it says otherwise."""
    if accounting and "epsilon" in accounting:
        accounting = {"verified": True, **accounting}
    attacks = [
        AttackOutcome(threat, name, "ok", {"m.v": v}, v, None, 0.1)
        if v is not None
        else AttackOutcome(threat, name, "failed", {}, None, "attack crashed", 0.1)
        for name, v in leakages.items()
    ]
    ok = [v for v in leakages.values() if v is not None]
    return JobResult(
        key=f"{task}-{defense}-{seed}-{'f' if failed else 'o'}",
        task=task,
        defense=defense,
        defense_name=defense.split("(")[0],
        defense_params={},
        seed=seed,
        status="failed" if failed else "ok",
        reason="diverged" if failed else None,
        utility=None if failed else utility,
        utility_floor=floor,
        attacks=[] if failed else attacks,
        privacy={} if failed or not ok else {threat: 1 - max(ok)},
        runtime_s=runtime,
        accounting=accounting or {},
    )


def sample_results() -> list[JobResult]:
    rs: list[JobResult] = []
    img = ("img", "server")
    # none: privacy 0.1, 0.2, 0.3 -> mean 0.2, std 0.1; utility 0.95
    for s, (inv, mia) in enumerate([(0.9, 0.5), (0.8, 0.5), (0.7, 0.5)]):
        rs.append(job(*img, "none", s, {"inv": inv, "mia": mia}, 0.95, 0.7, runtime=2.0 + s))
    # dp: worst leakage 0.4, 0.6, 0.5 -> privacy 0.6, 0.4, 0.5: mean 0.5, std 0.1; utility 0.82 ± 0.02;
    # its accounting reports ε = 0.9, 1.0, 1.1 at δ = 1e-5 (mean 1.0)
    for s, (inv, mia, u) in enumerate([(0.3, 0.4, 0.80), (0.4, 0.6, 0.82), (0.5, 0.2, 0.84)]):
        eps = {
            "epsilon": 0.9 + 0.1 * s,
            "delta": 1e-5,
            "accountant": "rdp",
            "relation": "add/remove one sample",
            "sampling_scheme": "full batch",
            "sampling_accounted": "poisson",
        }
        rs.append(job(*img, "dp(eps=1)", s, {"inv": inv, "mia": mia}, u, 0.7, accounting=eps))
    # noise: privacy 0.5 every seed (ties dp) but more utility -> ranked above dp.
    # mia fails on seed 0 (ignored, not counted as 0), one extra failed job.
    # its accounting says it has no guarantee (ε None, as gaussian_noise reports)
    for s, mia in enumerate([None, 0.1, 0.2]):
        rs.append(job(*img, "noise", s, {"inv": 0.5, "mia": mia}, 0.9, 0.7, accounting={"epsilon": None}))
    rs.append(job(*img, "noise", 3, {}, 0.0, 0.7, failed=True))
    # prune: very private but below the floor 0.7 -> listed, unranked
    for s in range(3):
        rs.append(job(*img, "prune", s, {"inv": 0.1, "mia": 0.05}, 0.5, 0.7))

    tab = ("tab", "fl_user")
    for s in range(3):
        # no floor on this task
        rs.append(job(*tab, "a", s, {"mia": 0.2, "lira": 0.1 * s}, 0.6, None))  # privacy 0.8
        rs.append(job(*tab, "b", s, {"mia": 0.4, "lira": None}, 0.7, None))  # lira fails everywhere
        rs.append(job(*tab, "c", s, {"mia": 0.1 + 0.1 * s, "lira": 0.0}, 0.5, None))  # 0.9, 0.8, 0.7
        rs.append(job(*tab, "broken", s, {}, 0.0, None, failed=True))
    return rs


def make_result(key: str, *, task: str = "t1", seed: int = 0, failed: bool = False) -> JobResult:
    """A job with every field of a result set (the store's round trip), or a failed one with its reason."""
    attacks = [
        AttackOutcome("server", "inversion", "ok", {"psnr.mean": 12.5, "ssim.mean": 0.25}, 0.4, None, 1.5),
        AttackOutcome("server", "mia", "failed", {}, None, "diverged: NaN loss", 0.1),
        AttackOutcome("neighbors", "mia", "ok", {"auc.value": 0.61}, 0.22, None, 0.3),
    ]
    if failed:
        return JobResult(
            key=key,
            task=task,
            defense="gaussian_noise(sigma=1.0)",
            defense_name="gaussian_noise",
            defense_params={"sigma": 1.0},
            seed=seed,
            status="failed",
            reason="training diverged to NaN at round 3",
            utility_floor=0.5,
            runtime_s=0.75,
            provenance={"commit": "abc", "packages": {"torch": "2.x"}},
        )
    return JobResult(
        key=key,
        task=task,
        defense="none",
        defense_name="none",
        defense_params={"nested": {"a": [1, 2.5, None], "b": "x"}},
        seed=seed,
        status="ok",
        utility_metric="val_acc",
        utility=0.9123456789,
        utility_floor=0.5,
        metrics={"val_loss": 0.31, "rounds": 10.0},
        attacks=attacks,
        privacy={"server": 0.6, "neighbors": 0.78},
        runtime_s=3.25,
        provenance={"commit": "abc", "dirty": False, "seed": seed},
        accounting={"epsilon": 2.0, "delta": 1e-5, "accountant": "rdp", "verified": True},
    )
