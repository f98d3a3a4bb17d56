"""The claims of the papers' claims tables that ``reproduce`` does not check, each with the reason.

Three kinds of reason: the claim needs something this benchmark cannot have on a CPU-only machine
without downloads (a dataset, a GPU-scale run); the paper gives only a figure or a qualitative
statement, with nothing to compare against; or the claim is checked by the test named, at small
scale, and has not yet been moved into a named check (tests and checks must share one
implementation, so until it moves it is listed here, not counted as checked).
"""

from __future__ import annotations

from bench.claims.base import unchecked

TESTS_ONLY = "checked at small scale by {}; not yet moved into a named check"
GPU = "needs the paper's {} (GPU-scale training), not run on this CPU-only machine"
FIGURE = "the paper reports a figure only ({}); no number to compare against"

# --- Pasquini, Raynal & Troncoso (S&P 2023) ---
unchecked(
    "pasquini2023:C10",
    "Passive MIA on D-PSGD received updates beats FL at matched g_err.",
    GPU.format("torus-36/social-32 ResNet20 on CIFAR-10/100 over 16 runs")
    + "; a small-scale ordering is "
    + TESTS_ONLY.format("tests/attacks/membership/test_membership_harness.py"),
)
unchecked(
    "pasquini2023:C11",
    "Marginalized MIA beats raw MIA only at low but nonzero consensus distance.",
    GPU.format("CIFAR ResNet20 runs binned by C(t)")
    + "; the marginalization formulas are "
    + TESTS_ONLY.format("tests/threats/active/test_membership_marginalization.py"),
)
unchecked(
    "pasquini2023:C13",
    "More users at fixed degree raise vulnerability (torus-36 → 128, expander-128).",
    GPU.format("128-node CIFAR runs"),
)
unchecked(
    "pasquini2023:C18",
    "Echo with the marginalized model is comparable to echo with the raw model.",
    FIGURE.format("Fig. 8, 'comparable'"),
)
unchecked(
    "pasquini2023:C20", "A shallow CNN shows lower but same-shaped risk.", GPU.format("CIFAR-10 CNN runs")
)
unchecked(
    "pasquini2023:C21",
    "IMDB shows consistent trends.",
    "needs IMDB, absent here (no download); " + FIGURE.format("trends only"),
)

# --- Yu et al. (TIFS 2025) ---
unchecked("yu2025:C4", "CFL and DFL converge similarly.", FIGURE.format("overlapping curves, no numbers"))
unchecked(
    "yu2025:C6",
    "CFL SSIM exceeds DFL gradient-difference SSIM at every t.",
    "not checked as stated (MLP inversion SSIM over t = 1 … 900 is beyond the quick scale); its "
    "analytic form — the decentralized error falls with t_max, the centralized one is flat and "
    "lower — is the check yu2023:C6",
)
unchecked(
    "yu2025:C9",
    "Combining difference and sum gives no improvement.",
    "measured once, not asserted: the combined objective exists (pdmm_sum_inversion with each node's "
    "difference; its SSIM is in docs/catalogue.md), but its margin over the better single "
    "observable is too small at CPU scale for an ordering over seeds",
)
unchecked(
    "yu2025:C10",
    "The CFL–DFL gap closes as the corrupt fraction grows.",
    "not implemented: no sweep over the corrupt fraction exists yet",
)
unchecked(
    "yu2025:C11",
    "CFL MIA success exceeds DFL (gradient sum) on Purchase-100.",
    "needs the Purchase-100 dataset, absent here (no download)",
)
unchecked(
    "yu2025:C12",
    "The iDLG label rule works on CFL gradients and fails on DFL gradient differences.",
    "the same claim as yu2023:C10, checked there",
)
unchecked(
    "yu2025:C13",
    "The effect generalizes across attacks and architectures.",
    "qualitative only (images), and needs Tiny ImageNet, absent here",
)

# --- Yu (MSc thesis 2023) ---
unchecked(
    "yu2023:C1",
    "Differential PDMM's Δz identity on every edge and round.",
    "the same identity as yu2025:C1, checked there",
)
unchecked(
    "yu2023:C2",
    "With exact local solves, the gradient-difference identity over two rounds (Eq. 4.3, 4.22).",
    TESTS_ONLY.format("tests/protocols/test_pdmm.py::test_observables_equal_ground_truth"),
)
unchecked(
    "yu2023:C4",
    "The ratio formula recovers x exactly for logistic regression with n_i = 1.",
    "the same claim as yu2025:C3, checked there",
)
unchecked(
    "yu2023:C5",
    "Reconstruction from gradient differences is harder than from gradients.",
    "the same claim as yu2025:C7, checked there",
)
unchecked(
    "yu2023:C9",
    "Larger n_i worsens reconstruction; duplicate labels break the differential attack.",
    "the n_i ordering is part of yu2025:C7; duplicate labels breaking the attack are not checked "
    "(the label enumeration covers multisets, so the benchmark's attack is not broken by them)",
)
unchecked(
    "yu2023:C11", "PDMM converges slightly faster than FedAvg/FedSGD.", FIGURE.format("convergence curves")
)
unchecked(
    "yu2023:C12",
    "Inexact PDMM with k_max ≥ 10 converges about as fast as larger k_max.",
    FIGURE.format("convergence curves"),
)
unchecked(
    "yu2023:C13",
    "Random z⁽⁰⁾, quantization and inexact updates do not hurt accuracy or consensus.",
    "stated, never measured in the thesis; the leaderboard reports each defense's utility instead",
)
unchecked(
    "yu2023:C14",
    "I(X; A_c) ≥ I(X; A_d).",
    "information-theoretic; only proxied by attack success (yu2025:C7)",
)

# --- Xu & Neglia (2021) ---
unchecked(
    "xu2021:eta-E",
    "The exact decoder is invariant to η and E.",
    "covered by xu2021:obs1, which runs three (E, η)",
)
unchecked(
    "xu2021:fig1b",
    "The mapping loss falls as the FL batch size grows (Adult).",
    "not checked yet: the Adult data are available (`python -m bench data get adult`; task "
    "adult_logreg_fedavg has the paper's PhD-by-age clients), but no check sweeps the FL batch "
    "size; the paper gives the values only as a plot",
)
unchecked(
    "xu2021:fig1c",
    "The decoded model beats the last returned model on the PhD clients (Adult).",
    "not checked yet: the Adult data are available (`python -m bench data get adult`; task "
    "adult_logreg_fedavg has the paper's PhD-by-age clients), but the paper does not say on which "
    "test data it measures, and no check is written; the paper gives the values only as a plot",
)
unchecked("xu2021:fig1a", "Reconstruction gains are largest on outlying clients.", FIGURE.format("Fig. 1a"))
unchecked(
    "xu2021:defenses",
    "Secure aggregation prevents per-client decoding; more randomness raises the mapping loss.",
    "qualitative; secure aggregation's effect is checked by the leaderboard's tracks",
)

# --- Bellet et al. (slides) / El Mrini et al. / Cyffers et al. (Muffliato) ---
unchecked(
    "bellet2024:fig1-3",
    "Attackers reconstruct distant non-neighbour nodes in D-SGD.",
    FIGURE.format("Figs. 1–3, graphs coloured by reconstructed node") + "; the page draws the same figure",
)
