"""Check a whole sweep before its first job starts, and report every problem found.

``python -m bench evaluate`` builds nothing it cannot finish: every task of the sweep is
checked (its dataset is available; its protocol, model, partition, topology, mixing, threat
models and their coalitions are built exactly as a job builds them; its utility metric exists
for its data and its floor is possible; every threat has attacks that apply to it and read
rounds the run has), every defense configuration is probed (:func:`bench.evaluation.grid.plan_jobs`),
and the output folders are writable. All problems are collected and reported together
(:class:`InputErrors`), each naming its field, value and valid choices.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from bench.core.errors import BenchInputError
from bench.spec.schema import TaskSpec

#: utility metrics every run reports; classification adds accuracies (see simulation/utility.py)
ALWAYS = ("val_loss", "consensus")
ACCURACIES = ("val_acc", "val_local_acc")


class InputErrors(BenchInputError):
    """Several input errors found together (one paragraph each)."""

    def __init__(self, errors: list[BenchInputError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(first.field, first.value, reason=first.reason)
        self.choices = first.choices

    @property
    def message(self) -> str:
        if len(self.errors) == 1:
            return self.errors[0].message
        lines = [f"{len(self.errors)} problems found before any job ran:"]
        lines += [f"  - {e.message}" for e in self.errors]
        return "\n".join(lines)


class Collector:
    """Runs checks and keeps the input errors they raise."""

    def __init__(self) -> None:
        self.errors: list[BenchInputError] = []

    def check(self, fn: Callable[[], object]) -> bool:
        try:
            fn()
        except InputErrors as exc:
            self.errors.extend(exc.errors)
            return False
        except BenchInputError as exc:
            self.errors.append(exc)
            return False
        return True

    def raise_if_any(self) -> None:
        if self.errors:
            unique = {e.message: e for e in self.errors}
            raise InputErrors(list(unique.values()))


def validate_task(task: TaskSpec) -> None:
    """Every problem of one task, raised together (:class:`InputErrors`)."""
    from bench.data.manage import require_available

    found = Collector()
    sim_spec = task.simulation
    where = f"task '{task.name}'"
    if not found.check(lambda: require_available(sim_spec.dataset, sim_spec.dataset_params.get("root"))):
        found.raise_if_any()  # nothing else can be checked without the data
    if not task.threats:
        found.errors.append(
            BenchInputError(f"{where}.threats", [], reason="a task needs at least one threat model")
        )
    sim = None

    def build() -> None:
        nonlocal sim
        sim = _build_simulation(task)

    found.check(build)
    if sim is not None:
        found.check(lambda: _check_utility(task, sim.train_set.n_classes > 0))
    for th in task.threats:
        found.check(lambda th=th: _check_threat(task, th, None if sim is None else sim.config.rounds))
    found.errors = [_in_task(task.name, e) for e in found.errors]
    found.raise_if_any()


def _in_task(name: str, exc: BenchInputError) -> BenchInputError:
    """``exc`` with its field placed in task ``name`` (``task 'x'.model.name``) unless it says so."""
    if str(exc.field).startswith("task '") or type(exc) is not BenchInputError:
        return exc
    out = BenchInputError(f"task '{name}'.{exc.field}", exc.value, reason=exc.reason)
    out.choices = exc.choices
    return out


def _build_simulation(task: TaskSpec) -> object:
    """The task's simulation, built as a job builds it (not run): protocol, data, partition,
    model, topology and mixing, threat models and their coalitions."""
    from bench.simulation import Simulation
    from bench.threats import build_threat
    from bench.threats.active.threat import adversary_of

    threats = {th.name: build_threat(th.name, **th.params) for th in task.threats}
    return Simulation(
        task.simulation.model_copy(update={"seed": 0}),
        threats=threats,
        adversary=adversary_of(threats),
        init_state=False,
    )


def _check_utility(task: TaskSpec, classification: bool) -> None:
    u = task.utility
    valid = [*ALWAYS, *(ACCURACIES if classification else ())]
    if u.metric == "val_local_acc" and not task.simulation.eval_local:
        valid.remove("val_local_acc")
    field = f"task '{task.name}'.utility.metric"
    if u.metric not in valid:
        kind = "classification" if classification else "regression"
        raise BenchInputError(field, u.metric, choices=valid, reason=f"not reported for this {kind} task")
    if u.floor is not None and u.metric in ACCURACIES and not 0 <= u.floor <= 1:
        raise BenchInputError(
            f"task '{task.name}'.utility.floor",
            u.floor,
            reason=f"{u.metric} lies in [0, 1]; no entry could keep it",
        )


def _check_threat(task: TaskSpec, th: object, rounds: int | None) -> None:
    from bench.evaluation.planning import build_attacks

    field = f"task '{task.name}'.threats.{th.name}"  # type: ignore[attr-defined]
    if not th.attacks:  # type: ignore[attr-defined]
        raise BenchInputError(f"{field}.attacks", [], reason="a threat model needs at least one attack")
    one = task.model_copy(update={"threats": [th]})
    for _, params, attack in build_attacks(one)[th.name]:  # type: ignore[attr-defined]
        req = attack.requirements()
        late = [r for r in req.rounds if rounds is not None and r >= rounds]
        if late:
            name = type(attack).__name__
            raise BenchInputError(
                f"{field}.attacks",
                {"params": params, "rounds": late},
                reason=f"{name} reads round(s) {late}, but the task runs {rounds} rounds (0 .. {rounds - 1})",
            )


def writable_folder(path: Path, field: str) -> None:
    """``path`` is (or can be created as) a writable folder; the error names ``field``."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise BenchInputError(field, str(path), reason=f"{probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise BenchInputError(field, str(path), reason=f"{probe} is not writable")


def missing_data(task: TaskSpec) -> BenchInputError | None:
    """Why ``task``'s real dataset cannot be had on this machine (``None`` when it can): the offline
    error of :func:`bench.data.manage.require_available`, after trying the packages that ship it."""
    from bench.data.manage import require_available

    params = task.simulation.dataset_params
    try:
        require_available(task.simulation.dataset, params.get("root"))
    except BenchInputError as exc:
        return exc
    return None


def validate_tasks(tasks: Iterable[TaskSpec], found: Collector) -> set[str]:
    """Validate each task, collecting its problems in ``found``; returns the names of the tasks
    without problems."""
    return {task.name for task in tasks if found.check(lambda task=task: validate_task(task))}
