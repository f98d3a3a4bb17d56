"""Where each registered attack applies, and the attacks declared once per model family.

A track (a task's threat model) runs the attacks its task lists *and* every attack declared for
its model family that applies to it (:data:`FAMILY_ATTACKS`, added by
:func:`bench.evaluation.planning.build_attacks`), so that an attack that reads what every track of a
family exposes — the first-layer ratio of any model with a biased first layer — is not left to
each task file to remember. Whether an attack applies is read from what its class declares
(:class:`~bench.attacks.base.Attack`: ``threats``, ``protocols``, ``models``, ``first_layer``,
``one_sample``, ``family``) by :func:`applies`, which gives the reason when it does not.
:data:`NOT_RUN` gives the reason for every attack that applies to a quick track by those rules
and is still not run there (``tests/attacks/test_applicability.py`` keeps the list honest: an
applicable attack that is neither run nor listed fails it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.attacks.base import Attack

if TYPE_CHECKING:
    from bench.spec.schema import TaskSpec

#: what a track measures, by the attack families that measure it
KINDS = {
    "gradient inversion": "reconstruction",
    "linear-algebra reconstruction": "reconstruction",
    "membership inference": "membership",
}

#: registered models whose first layer is a ``Linear`` with bias on the flattened input
BIASED_FIRST_LAYER = ("mlp", "purchase_fc", "logreg", "linear")


@dataclass(frozen=True)
class FamilyAttack:
    """An attack run on every track of a model family where it applies (:func:`applies`)
    and which does not list it already, with these parameters."""

    name: str
    models: tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)


#: attacks declared once per model family (not copied into task files)
FAMILY_ATTACKS: tuple[FamilyAttack, ...] = (
    # scored as images (SSIM): declared for the MLPs of the image tasks; on logistic regression
    # analytic_logreg is the same ratio, scored on tabular inputs
    FamilyAttack("first_layer_inversion", ("mlp",), {"rounds": [0]}),
)

#: ``(attack, task) -> why`` for an attack that applies to a quick track by :func:`applies` but
#: is not run there
NOT_RUN: dict[tuple[str, str], str] = {
    ("dlg", "gaussians_logreg_fedsgd"): "analytic_logreg recovers the one-sample gradients exactly",
    ("dlg_batched", "gaussians_logreg_fedsgd"): "analytic_logreg(_aggregate) are exact on this model",
    ("inverting_gradients", "gaussians_logreg_fedsgd"): "analytic_logreg recovers the input exactly",
    ("dlg_batched", "digits_mlp_dpsgd_sybil"): "the Sybil difference is one victim's update; "
    "inverting_gradients attacks it with the track's Sybil source",
    ("dlg", "digits_mlp_dpsgd_sybil"): "inverting_gradients attacks the Sybil difference on this track",
    ("dgd_knowledge_matrix", "digits_mlp_dpsgd_torus16"): "the knowledge-matrix attack assumes D-GD "
    "with tiny steps, gradients that barely change over its rounds (El Mrini et al. 2024, §4); lr 0.1 "
    "on an MLP breaks it, and the neighbours' own gradients are read exactly by neighbor_recovery",
    ("dgd_knowledge_matrix", "digits_mlp_dpsgd_sybil"): "as on digits_mlp_dpsgd_torus16 (lr 0.1)",
    ("dlg", "digits_logreg_dgd_florentine"): "the neighbours see gossiped models of many samples; "
    "the track measures the knowledge-matrix reconstruction of the paper",
    ("dlg_batched", "digits_logreg_dgd_florentine"): "as dlg: the track measures the paper's attack",
    ("inverting_gradients", "digits_logreg_dgd_florentine"): "as dlg: the track measures the paper's attack",
    ("first_layer_inversion", "gaussians_logreg_fedsgd"): "analytic_logreg is the same ratio on "
    "logistic regression's single layer, scored on the track's 2-D inputs (input MSE) where this "
    "attack scores images",
    ("analytic_logreg", "digits_logreg_dgd_florentine"): "an attack-only reproduction of the D-GD "
    "knowledge-matrix attack; inversion of a neighbour's round-0 gradient is measured on the ranked "
    "D-PSGD tracks",
    ("analytic_logreg_aggregate", "digits_logreg_dgd_florentine"): "as analytic_logreg",
    ("first_layer_inversion", "digits_logreg_dgd_florentine"): "as analytic_logreg",
    ("pdmm_analytic_first_layer", "gaussians_logreg_pdmm"): "pdmm_analytic_logreg is the same ratio "
    "on this model's single layer, and the track runs it",
    ("pdmm_difference_inversion", "gaussians_logreg_pdmm"): "pdmm_analytic_logreg recovers the input "
    "of logistic regression in closed form from the same differences; the optimization inversions "
    "are for models without one",
    ("pdmm_noisy_gradient_inversion", "gaussians_logreg_pdmm"): "as pdmm_difference_inversion",
    ("pdmm_sum_inversion", "gaussians_logreg_pdmm"): "as pdmm_difference_inversion",
    ("fedavg_update_inversion", "fedavg_linear_xu"): "scores images (SSIM) with class labels; this "
    "track is linear regression on tabular data, attacked by local_model_reconstruction",
    ("membership_lira", "digits_mlp_dpsgd_echo"): "its reference worlds are honest runs: they do not "
    "model the echo adversary's deviation, so its calibration would not be the attacked run's",
    ("membership_rmia", "digits_mlp_dpsgd_echo"): "as membership_lira",
}


def track_kinds(task: TaskSpec, threat: str) -> set[str]:
    """What the track measures: the kinds of the attacks its task lists for ``threat``."""
    from bench.attacks import ATTACKS

    names = [a.name for th in task.threats if th.name == threat for a in th.attacks]
    return {KINDS.get(ATTACKS.get(n).family, "reconstruction") for n in names if n in ATTACKS}


def one_sample(task: TaskSpec) -> bool:
    """Each observed gradient is of one sample: ``batch_size = 1``, or one sample per node."""
    sim = task.simulation
    return sim.protocol_params.get("batch_size") == 1 or sim.partition_params.get("n_per_node") == 1


def applies(attack: type[Attack], task: TaskSpec, threat: str) -> str | None:
    """``None`` when ``attack`` applies to the track ``(task, threat)``, else why not."""
    sim = task.simulation
    if attack.threats and threat not in attack.threats:
        return f"observes {', '.join(attack.threats)}, not {threat}"
    if attack.protocols and sim.protocol not in attack.protocols:
        return f"reads {', '.join(attack.protocols)} transcripts, not {sim.protocol}"
    if attack.models and sim.model not in attack.models:
        return f"needs a {' or '.join(attack.models)} model, not {sim.model}"
    if attack.first_layer and sim.model not in BIASED_FIRST_LAYER:
        return f"needs a biased first Linear layer ({', '.join(BIASED_FIRST_LAYER)}), not {sim.model}"
    if attack.one_sample and not one_sample(task):
        return "needs one sample per gradient (batch_size = 1 or one sample per node)"
    kinds = track_kinds(task, threat)
    kind = KINDS.get(attack.family, "reconstruction")
    if kinds and kind not in kinds:
        return f"a {kind} attack on a track that measures {', '.join(sorted(kinds))}"
    return None


def family_attacks(task: TaskSpec, threat: str, listed: set[str]) -> list[FamilyAttack]:
    """The family attacks of ``task``'s model that apply to ``threat`` and are not ``listed``."""
    from bench.attacks import ATTACKS

    return [
        f
        for f in FAMILY_ATTACKS
        if task.simulation.model in f.models
        and f.name not in listed
        and applies(ATTACKS.get(f.name), task, threat) is None
    ]
