"""The defense plugin interface and discovery.

A defense is a module ``defenses/<name>.py`` in the benchmark root that registers one
:class:`Defense` subclass with ``@DEFENSES.register("<name>", "one-line description")``.
Defenses are hooks, not forks of protocols (``docs/architecture.md``): they act on per-sample
and per-node gradients, local updates, outgoing messages, aggregation and stopping through the
hooks of :class:`~bench.defense.hooks.DefenseHooks`, which every protocol calls at the same
points; they change a protocol's own parameters only through
:meth:`~bench.defense.hooks.DefenseHooks.protocol_overrides`; they declare the protocols
they apply to, may report privacy accounting, and state what an adaptive attacker knows.

Defense code is untrusted (it arrives in pull requests): the harness imports it only in the
process that runs the simulation, never in the process that scores (``bench.evaluation``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from pytorch_lightning.callbacks import Callback

from bench.core.errors import BenchInputError, short_repr
from bench.core.registry import Registry
from bench.data.stacked import derive_seed
from bench.defense.hooks import DefenseHooks, RunInfo, overridden_hooks

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
    """The signature of a defense's ``__init__`` (cached: every copy of a defense — the defense
    oracle deep-copies its instances for each query — goes through :meth:`Defense.__new__`)."""
    return inspect.signature(init)


class Defense(DefenseHooks):
    """Base class of defense plugins.

    Class attributes
    ----------------
    protocols:
        Protocol names the defense applies to (``()``: every protocol that calls one of the
        hooks it overrides, see :meth:`applies_to`).
    examples:
        Typical parameter sets; the contract test runs each on every protocol the defense
        applies to and requires the run to differ from the undefended one.
    threats:
        The threat models the defense claims to address (:data:`PASSIVE_THREATS` by default:
        honest-but-curious servers, users, neighbours and eavesdroppers). On a track of another
        threat model (e.g. ``active``, a deviating coalition) it is still evaluated and shown,
        but not ranked: a defense is judged against the adversaries it claims to stop.
    source:
        Where the defense comes from: a key of ``bench.defense.sources.PAPERS`` (the paper it
        implements), or ``"original"`` for a defense new in this benchmark. The default,
        ``"undeclared"``, is refused by ``leaderboard export`` and ``leaderboard validate``.
    summary:
        What the defense does and against which adversary, in one to three plain-text sentences
        (no reST or Markdown markup): the description of its leaderboard entries.
    """

    protocols: ClassVar[tuple[str, ...]] = ()
    examples: ClassVar[tuple[dict[str, Any], ...]] = ({},)
    threats: ClassVar[tuple[str, ...]] = PASSIVE_THREATS
    #: a key of ``bench.defense.sources.PAPERS``, or ``"original"`` (``"undeclared"``: not declared)
    source: ClassVar[str] = "undeclared"
    #: plain-text summary, whole sentences (shown as the description of the defense's entries)
    summary: ClassVar[str] = ""

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
            self.init_params = None
            return self
        params: dict[str, Any] = {}
        for i, (key, value) in enumerate(bound.items()):
            kind = signature.parameters[key].kind
            if i == 0 or kind is inspect.Parameter.VAR_POSITIONAL:
                continue
            params.update(value if kind is inspect.Parameter.VAR_KEYWORD else {key: value})
        self.init_params = params
        return self

    def bind(self, run: RunInfo) -> None:
        """Keep the run's public facts as ``self.run`` (subclasses call ``super().bind(run)``).

        Called
        ------
        Once, when the simulation is built (its seed, sizes, device and dtype are known),
        before the first round.

        Returns
        -------
        Nothing.
        """
        self.run = run

    def generator(self, tag: str, device: torch.device | str) -> torch.Generator:
        """The stream ``tag`` of the defense's own randomness: made on the first call, seeded from
        the run's seed and ``tag`` (independent of every other stream of the run), and the *same*
        generator on every later call with that tag and device — so noise drawn as
        ``torch.randn(…, generator=self.generator("noise", dev))`` in every round is fresh in
        every round, and the same seed still gives the same run. (Until 2026-11 each call made a
        new generator at the tag's seed: the same noise every round, which cancels in any
        difference of two messages.) For a draw that must be a pure function of the seed and a
        key — e.g. the noise of round ``t``, which a fresh instance in the channel audit recomputes
        — use :meth:`generator_at` with the key in the tag."""
        streams: dict[tuple[str, str], torch.Generator] = self.__dict__.setdefault("_streams", {})
        key = (tag, str(torch.device(device)))
        if key not in streams:
            streams[key] = self.generator_at(tag, device)
        return streams[key]

    def generator_at(self, tag: str, device: torch.device | str) -> torch.Generator:
        """A new generator at the seed of ``tag`` (``derive_seed(run.seed, "defense:" + tag)``) on
        every call: the same numbers each time; keep it, or put what changes (the round) in the
        tag."""
        return torch.Generator(device=device).manual_seed(derive_seed(self.run.seed, f"defense:{tag}"))

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
        :attr:`protocols`; or no overridden hook that the protocol calls, no callback, and no
        protocol override that differs from the task's own parameters.
        """
        if self.protocols and name not in self.protocols:
            return f"applies to {', '.join(self.protocols)} only"
        if self.callbacks():
            return None
        hooks = overridden_hooks(self) & protocol.hook_points
        overrides = self.protocol_overrides(name)
        current = protocol.hyperparameters()
        changed = {k: v for k, v in overrides.items() if k not in current or current[k] != v}
        if hooks or changed:
            return None
        if overrides:
            same = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
            return f"the task's {name} protocol already has {same}: the defense would change nothing"
        used = ", ".join(sorted(overridden_hooks(self))) or "none"
        return f"{name} calls none of its hooks ({used})"

    def callbacks(self) -> list[Callback]:
        """Lightning callbacks the defense needs (e.g. ``EarlyStopping``).

        Called
        ------
        When the simulation process builds the Lightning trainer (and by :meth:`applies_to`).

        Returns
        -------
        A list of callbacks. Default: empty.
        """
        return []

    def accounting(self) -> dict[str, Any]:
        """Privacy accounting (ε, δ, accountant) where the defense defines it.

        Called
        ------
        After the run, in the simulation process; stored with the job, its mean ε shown in the
        tables and on the page.

        Returns
        -------
        At least ``epsilon`` and ``delta`` (``{"epsilon": None}``: no guarantee). Default: empty.
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
        Plain data. Default: the instance's public attributes (not ``run``).
        """
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "run"}


def check_kinds(kinds: Any, field: str) -> list[str] | None:
    """A list of message kinds (``None`` = every kind); each must be a kind some registered
    protocol sends (:attr:`bench.protocols.Protocol.MESSAGE_KINDS`)."""
    if kinds is None:
        return None
    from bench.protocols import PROTOCOLS

    valid = sorted({k for _, cls in PROTOCOLS.items() for k in cls.MESSAGE_KINDS})
    if isinstance(kinds, str) or not isinstance(kinds, (list, tuple)):
        raise BenchInputError(field, kinds, choices=valid, reason="must be a list of message kinds")
    for kind in kinds:
        if kind not in valid:
            raise BenchInputError(field, kind, choices=valid, reason="unknown message kind")
    return list(kinds)


def kinds_reason(kinds: list[str] | None, protocol: Protocol) -> str | None:
    """Why a defense acting only on messages of ``kinds`` does nothing under ``protocol``."""
    if kinds is None:
        return None
    sent = protocol.message_kinds()
    if not set(kinds) & set(sent):
        return f"it acts on {', '.join(kinds)} messages; the protocol's nodes send {', '.join(sent)}"
    return None


# ------------------------------------------------------------------------------ discovery
def defenses_dir(root: Path) -> Path:
    return root / "defenses"


def discover_defenses(root: Path) -> list[str]:
    """Names of the defense plugins under ``root/defenses`` (one module each)."""
    folder = defenses_dir(root)
    return (
        sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")) if folder.is_dir() else []
    )


def defense_path(name: str, root: Path) -> Path:
    """The plugin file of defense ``name`` (an input error listing the plugins if absent)."""
    available = discover_defenses(root)
    if name not in available:
        raise BenchInputError(
            "defense", name, choices=available or ["(no defenses/ folder under " + str(root) + ")"]
        )
    return defenses_dir(root) / f"{name}.py"


def source_digest(source: bytes) -> str:
    """SHA-256 (first 16 hex digits) of a plugin's source: part of every job's key."""
    return hashlib.sha256(source).hexdigest()[:16]


def load_defense_module(name: str, root: Path, source: bytes | None = None) -> None:
    """Import the plugin ``root/defenses/<name>.py`` (which registers the defense), once per
    process. With ``source``, execute exactly those bytes (the ones the harness hashed).

    A plugin that cannot be read or executed (syntax error, non-UTF-8 bytes, an exception or a
    ``sys.exit()`` at import), that registers a name another plugin has, or that does not
    register ``name``, is an input error naming the file; whatever it registered is removed
    again."""
    if name in DEFENSES:
        return
    path = defense_path(name, root)
    module_name = f"bench_defense_plugins.{name}"
    before = set(DEFENSES.names())
    try:
        code = path.read_bytes() if source is None else source
        spec = importlib.util.spec_from_loader(module_name, loader=None, origin=str(path))
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        module.__file__ = str(path)
        sys.modules[module_name] = module
        exec(compile(code, str(path), "exec"), module.__dict__)
    except BenchInputError:
        _unregister(set(DEFENSES.names()) - before, module_name)
        raise
    except SystemExit as exc:  # sys.exit() in the plugin would otherwise end bench silently
        _unregister(set(DEFENSES.names()) - before, module_name)
        code = short_repr(exc.code)
        reason = f"the plugin {path} does not load: it called sys.exit({code}) at import"
        raise BenchInputError("defense", name, reason=reason) from None
    except Exception as exc:  # any failure of the plugin's own code: one line naming the file
        _unregister(set(DEFENSES.names()) - before, module_name)
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        raise BenchInputError("defense", name, reason=f"the plugin {path} does not load: {text}") from None
    added = set(DEFENSES.names()) - before
    if added != {name}:
        _unregister(added, module_name)
        found = f"registers {', '.join(sorted(added))}" if added else "registers no defense"
        raise BenchInputError("defense", name, reason=f"{path} {found}; it must register exactly '{name}'")


def _unregister(names: set[str], module_name: str) -> None:
    for n in names:
        DEFENSES.remove(n)
    sys.modules.pop(module_name, None)


def load_all_defenses(root: Path) -> list[BenchInputError]:
    """Load every plugin under ``root/defenses``; returns the problems of those that do not
    load (each names its file), having loaded the others."""
    problems = []
    for name in discover_defenses(root):
        try:
            load_defense_module(name, root)
        except BenchInputError as exc:
            problems.append(exc)
    return problems


def build_defense(name: str, params: dict[str, Any], root: Path, source: bytes | None = None) -> Defense:
    """Instantiate the defense plugin ``name`` with ``params``."""
    from bench.core.params import call_with_params

    load_defense_module(name, root, source)
    return call_with_params(DEFENSES, name, "defense", **params)
