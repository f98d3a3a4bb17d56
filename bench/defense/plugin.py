"""The defense plugin interface and discovery.

A defense is a module ``defenses/<name>.py`` in the benchmark root that registers one
:class:`Defense` subclass with ``@DEFENSES.register("<name>", "one-line description")``.
Defenses are hooks, not forks of protocols (``docs/architecture.md``): each hook is written for
**one node** (its gradient, its update, one message it sends or receives) and the harness runs it
over all nodes with ``torch.func.vmap`` (:mod:`bench.defense.runner`); differential privacy and
secure aggregation are the harness's own mechanisms, of which a defense chooses the parameters
(:mod:`bench.defense.mechanisms`). A defense changes a protocol's own parameters only through
:meth:`Defense.protocol_overrides`, declares the protocols it applies to, and states what an
adaptive attacker knows.

Defense code is untrusted (it arrives in pull requests): the harness imports it only in the
sandboxed processes that run it, never in the process that scores (``bench.evaluation``), and
only after its source has passed the plugin rules (:mod:`bench.defense.source_policy`).
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, ClassVar

from bench.core.registry import Registry
from bench.defense.hooks import RunInfo
from bench.defense.mechanisms.base import Mechanism
from bench.defense.node_hooks import NODE_HOOKS, NodeHooks

if TYPE_CHECKING:
    from bench.protocols import Protocol

DEFENSES: Registry = Registry("defense")


#: the honest-but-curious threat models (every registered one but ``active``)
PASSIVE_THREATS: tuple[str, ...] = ("server", "fl_user", "neighbors", "eavesdropper")
#: every threat model, for defenses whose guarantee does not depend on the adversary following
#: the protocol (differential privacy of what an honest node sends; robust aggregation)
ALL_THREATS: tuple[str, ...] = (*PASSIVE_THREATS, "active")


@functools.lru_cache(maxsize=256)
def _init_signature(init: Any) -> inspect.Signature:
    """The signature of a defense's ``__init__`` (cached: one per plugin class)."""
    return inspect.signature(init)


class DefenseFrozen(AttributeError):
    """A defense instance was changed after :meth:`Defense.bind`: per-node state belongs in
    :meth:`Defense.init_state`, which the harness holds (``docs/scoring.md``, "By construction")."""


class Defense(NodeHooks):
    """Base class of defense plugins: **hooks written for one node**, run by the harness over
    every node at once.

    Each hook receives one node's row — its gradient ``[P]``, its per-sample gradients
    ``[B, P]``, one message ``[P]`` — and a :class:`~bench.defense.node.NodeContext` or
    :class:`~bench.defense.node.MessageContext` with the round, the node's id and its state, and
    returns that row's output. The harness calls it under ``torch.func.vmap`` over the nodes of the
    call (:mod:`bench.defense.runner`), so what node ``v`` computes is a function of ``v``'s row,
    ``v``'s state and randomness, the run's public facts and what was delivered to ``v``: by
    construction, not by a check. Randomness is PyTorch's (``torch.randn``, ``torch.rand_like``
    …): under the vmapped call every node draws its own numbers from a stream the harness seeds
    (never from a seed the defense can see). State a node keeps from call to call (a residual, a
    key drawn once) is declared by :meth:`init_state` and returned by the hook that changes it,
    ``(output, new_state)``; the harness holds it. After :meth:`bind` the instance is frozen:
    assigning an attribute raises :class:`DefenseFrozen`.

    Hooks (each an identity by default; ``docs/hooks.md`` has when each is called):
    :meth:`per_sample_gradients` (or its two parts :meth:`sample_weights` and :meth:`sample_sum`),
    :meth:`local_gradients`, :meth:`local_update`, :meth:`outgoing`, the receive side
    :meth:`decode` (one delivered message at a time, at its receiver; with
    :meth:`receive_statistic`, a summary of all of a receiver's deliveries) and
    :meth:`should_stop` (a rule on the public validation metrics). Differential privacy and
    secure aggregation are not hooks but the harness's own mechanisms (:meth:`mechanisms`,
    :mod:`bench.defense.mechanisms`): a defense chooses their parameters, the harness adds the
    noise, masks the messages and accounts the ε it shows.

    Class attributes
    ----------------
    protocols:
        Protocol names the defense applies to (``()``: every protocol that calls one of the
        hooks it overrides, see :meth:`applies_to`).
    examples:
        Typical parameter sets; the contract test runs each on every protocol the defense
        applies to and requires the run to differ from the undefended one.
    threats:
        The threat models the defense claims to address (:data:`PASSIVE_THREATS` by default).
        On a track of another threat model it is evaluated and shown, but not ranked.
    source:
        A key of ``bench.defense.sources.PAPERS`` (the paper it implements), or ``"original"``.
    summary:
        What the defense does and against which adversary, one to three plain-text sentences.
    per_sample:
        Ask protocols for per-sample gradients (:meth:`per_sample_gradients`).
    weighted_per_sample:
        The per-sample reduction is ``sample_sum(Σ_j w_j g_j)`` with
        ``w = sample_weights(‖g_j‖)``: the engine may then never form the per-sample gradients.
    per_delivery:
        :meth:`outgoing` runs once per delivery (a broadcast row is copied for each receiver, so
        each may get its own message); default once per payload row.
    """

    protocols: ClassVar[tuple[str, ...]] = ()
    examples: ClassVar[tuple[dict[str, Any], ...]] = ({},)
    threats: ClassVar[tuple[str, ...]] = PASSIVE_THREATS
    #: a key of ``bench.defense.sources.PAPERS``, or ``"original"`` (``"undeclared"``: not declared)
    source: ClassVar[str] = "undeclared"
    #: plain-text summary, whole sentences (shown as the description of the defense's entries)
    summary: ClassVar[str] = ""
    per_sample: ClassVar[bool] = False
    weighted_per_sample: ClassVar[bool] = False
    per_delivery: ClassVar[bool] = False

    run: RunInfo
    #: the constructor's arguments as given, by name (what :func:`bench.evaluate_defense` runs again
    #: in the simulation process); ``None`` when they do not bind to the signature
    init_params: dict[str, Any] | None

    def __new__(cls, *args: Any, **kwargs: Any) -> Defense:
        self = super().__new__(cls)
        signature = _init_signature(cls.__init__)
        try:
            bound = signature.bind(self, *args, **kwargs).arguments
        except TypeError:
            object.__setattr__(self, "init_params", None)
            return self
        params: dict[str, Any] = {}
        for i, (key, value) in enumerate(bound.items()):
            kind = signature.parameters[key].kind
            if i == 0 or kind is inspect.Parameter.VAR_POSITIONAL:
                continue
            params.update(value if kind is inspect.Parameter.VAR_KEYWORD else {key: value})
        object.__setattr__(self, "init_params", params)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_frozen_"):
            raise DefenseFrozen(
                f"the defense set {name!r} after bind: an instance is frozen once bound; keep a "
                "node's state in init_state and return it from the hook that changes it"
            )
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if self.__dict__.get("_frozen_"):
            raise DefenseFrozen(f"the defense deleted {name!r} after bind: an instance is frozen once bound")
        object.__delattr__(self, name)

    # ------------------------------------------------------------------------------ set-up
    def protocol_overrides(self, protocol: str) -> dict[str, Any]:
        """Protocol parameters the defense sets (e.g. PDMM's ``solver``/``k_max``), merged into
        the task's ``protocol_params`` before the protocol is built, so the protocol's own
        validation applies. Never assign a protocol's attributes directly.

        Called
        ------
        With the protocol's registered name: by the probe and by the simulation before it
        builds the protocol.

        Returns
        -------
        ``{parameter: value}``; default: empty.
        """
        return {}

    def bind(self, run: RunInfo) -> None:
        """Told the run's public facts (:class:`RunInfo`: sizes, protocol, message kinds, batch
        plan, local set sizes, graph and mixing matrix, hyperparameters), to plan; the instance
        is frozen when it returns (subclasses call ``super().bind(run)``).

        Called
        ------
        Once, when the simulation (or the defense oracle, or a reference world) is built, before
        the first round.

        Returns
        -------
        Nothing (the run is kept as ``self.run``).
        """
        self.run = run

    def mechanisms(self) -> tuple[Any, ...]:
        """The harness mechanisms the defense uses (:mod:`bench.defense.mechanisms`: DP-SGD's
        clipping and noise, DP-FedAvg's, Muffliato's, message noise, secure aggregation), each a
        frozen record of its parameters. The harness runs them in its own code, after the
        defense's hook at the same point, and only their accounting gives an ε on the board.

        Called
        ------
        After :meth:`bind` (once), and by the probe.

        Returns
        -------
        A tuple of mechanism records; default: none.
        """
        return ()

    def hooks_used(self) -> frozenset[str]:
        """The per-node hooks this configuration uses, among those the class overrides (e.g. a
        row-wise defense uses only the hook of its ``on``); the harness calls no other. Default:
        every overridden hook.

        Called
        ------
        When the defense is built for a run, and by the probe.

        Returns
        -------
        Hook names of :data:`NODE_HOOKS`.
        """
        return overridden_node_hooks(self)

    def applies_to(self, name: str, protocol: Protocol) -> str | None:
        """Whether the defense acts on runs of protocol ``name`` (``protocol``: an instance
        built with the task's parameters).

        Called
        ------
        By the probe, for each protocol configuration of the jobs to run; the harness skips,
        and says so, the pairs it does not apply to.

        Returns
        -------
        ``None`` when it applies, else the reason it does not. Default: a name outside
        :attr:`protocols`; a mechanism that does not apply; or no overridden hook or mechanism
        point that the protocol calls and no protocol override that differs from the task's.
        """
        if self.protocols and name not in self.protocols:
            return f"applies to {', '.join(self.protocols)} only"
        for mechanism in self.mechanisms():
            reason = mechanism.applies_to(name, protocol)
            if reason is not None:
                return reason
        points = acting_points(self) & protocol.hook_points
        overrides = self.protocol_overrides(name)
        current = protocol.hyperparameters()
        changed = {k: v for k, v in overrides.items() if k not in current or current[k] != v}
        if points or changed:
            return None
        if overrides:
            same = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
            return f"the task's {name} protocol already has {same}: the defense would change nothing"
        used = ", ".join(sorted(acting_points(self))) or "none"
        return f"{name} calls none of its hooks ({used})"

    def accounting(self) -> dict[str, Any]:
        """Notes on the defense's privacy (e.g. "no clipping: no DP guarantee"). An ``epsilon``
        given here is the plugin's own word: it is recorded as claimed and shown as "ε not
        verified", never in the ε column — ε comes from the harness's mechanisms
        (:meth:`mechanisms`).

        Called
        ------
        After the run, in the simulation process.

        Returns
        -------
        Plain data. Default: empty.
        """
        return {}

    def adaptive_knowledge(self) -> dict[str, Any]:
        """What an adaptive attacker is told about the defense (its public parameters).

        Called
        ------
        By the probe; each attack of the track turns it into its ``<name>+adaptive`` variant
        (``Attack.adapt(defense, knowledge)``).

        Returns
        -------
        Plain data. Default: the instance's public attributes (not ``run``) and the mechanisms'
        parameters.
        """
        out = {
            k: v for k, v in vars(self).items() if not k.startswith("_") and k not in ("run", "init_params")
        }
        for mechanism in self.mechanisms():
            out.update(mechanism.knowledge())
        return {k: v for k, v in out.items() if not isinstance(v, Mechanism)}


def overridden_node_hooks(defense: Defense | type[Defense]) -> frozenset[str]:
    """The per-node hooks (:data:`NODE_HOOKS`) whose code is the plugin's own; the per-sample
    hooks only where it asks for per-sample gradients."""
    cls = defense if isinstance(defense, type) else type(defense)
    out = {n for n in NODE_HOOKS if getattr(cls, n) is not getattr(Defense, n)}
    if not defense.per_sample:
        out -= {"per_sample_gradients", "sample_weights", "sample_sum"}
    return frozenset(out)


def used_node_hooks(defense: Defense) -> frozenset[str]:
    """The per-node hooks the harness calls: overridden by the class and used by this
    configuration (:meth:`Defense.hooks_used`)."""
    return overridden_node_hooks(defense) & frozenset(defense.hooks_used())


def acting_points(defense: Defense) -> frozenset[str]:
    """The protocols' hook points (:data:`bench.defense.hooks.HOOK_NAMES`) where the defense
    acts: those of the hooks it uses and those of its mechanisms."""
    points = {NODE_HOOKS[n] for n in used_node_hooks(defense)}
    for mechanism in defense.mechanisms():
        points |= set(mechanism.points)
    return frozenset(points)
