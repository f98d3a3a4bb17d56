"""What a gradient-matching attack changes when it knows the defense (its adaptive variant).

Two facts of a defense's declared knowledge (:meth:`bench.defense.plugin.Defense.adaptive_knowledge`)
change the matching objective ``D(∇_θ L(θ; x, y), g)`` of DLG and Inverting Gradients:

* **sparsification** (``sparsified: true``, the top-k defense): the observed ``g`` is zero off
  the kept coordinates, so the adaptive variant matches ``m ⊙ ∇_θ L`` with ``m = [g ≠ 0]``
  (``match="kept"``) instead of pulling the dummy gradient to zero where the defense removed
  it;
* **clipping** (``max_norm`` of gradient clipping, ``clip_norm`` of DP-SGD and DP-FedAvg): the
  observed ``g`` is ``∇_θ L · min(1, C / ‖∇_θ L‖)`` for one sample — the true gradient rescaled —
  so the adaptive variant matches directions (``objective="cosine"``, Geiping et al. 2020,
  Eq. 4), which is invariant to that factor, instead of magnitudes.

Gaussian message noise changes nothing here: for one observation its likelihood under the
known ``σ`` is the L2 objective DLG already minimizes.
"""

from __future__ import annotations

from typing import Any

CLIP_KEYS = ("max_norm", "clip_norm")


def matching_adaptation(knowledge: dict[str, Any], objective: str) -> dict[str, Any] | None:
    """The parameter overrides of a gradient-matching attack's adaptive variant (``None`` when
    the knowledge changes nothing); ``objective`` is the attack's own distance."""
    out: dict[str, Any] = {}
    if knowledge.get("sparsified"):
        out["match"] = "kept"
    if objective != "cosine" and any(knowledge.get(k) is not None for k in CLIP_KEYS):
        out["objective"] = "cosine"
    return out or None
