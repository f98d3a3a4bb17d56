"""The harness side of a defense: per-node plugin hooks run over every node at once.

A plugin (:class:`bench.defense.plugin.Defense`) writes each hook for one node. The protocols
call stacked hooks (:class:`bench.defense.hooks.DefenseHooks`); :class:`NodeRunner` implements
them, for every call:

1. the plugin's hook on every row with ``torch.func.vmap`` (``randomness="different"``): node
   ``v``'s output is computed from ``v``'s row, ``v``'s state (:meth:`Defense.init_state`, held
   here as ``[N + 1, …]`` tensors — the last row is the server's — and written back from what the
   hook returns), the delivered message and the run's public facts, and nothing else reaches it:
   the call cannot read another row, by construction;
2. the harness's mechanisms at the same point (:mod:`bench.defense.mechanisms`), after the
   plugin: DP clipping and noise, message noise, secure aggregation's masks — trusted code with
   random streams of the run's seed, which the plugin never sees.

Randomness the plugin draws (``torch.randn`` in a hook) comes from PyTorch's global generator,
seeded here before each call from a secret of the runner (the run's seed, or the defense
oracle's own) and restored after it: each node draws its own numbers, the run is reproducible,
and no call can tell by its seed whether it is the run, a test or the oracle — the plugin is
bound with the same :class:`~bench.defense.hooks.RunInfo` everywhere, which holds no seed.

Before each call the plugin's instance gets fresh copies of its tensors
(:class:`~bench.defense.frozen.Snapshot`); tensors cannot be turned into text inside a hook (a
vmapped tensor's text would show every row). Each output is checked before it is used
(:mod:`bench.defense.contract`): a hook that returns the wrong shape, dtype or device, or
non-finite values from finite inputs, fails its job with a reason naming the hook.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import torch
from torch.func import vmap

from bench.core.errors import BenchInputError
from bench.data.stacked import derive_seed
from bench.defense.contract import HookContractError, check_tensor
from bench.defense.frozen import Snapshot
from bench.defense.hooks import Aggregator, DefenseHooks, RoundContext, RunInfo
from bench.defense.mechanisms.base import Mechanism, MechanismHooks, merged_accounting
from bench.defense.mechanisms.secure_aggregation import SecureAggregation
from bench.defense.node import BROADCAST, MessageContext, NodeContext
from bench.defense.node_hooks import NODE_HOOKS
from bench.defense.plugin import Defense, acting_points, used_node_hooks
from bench.defense.receive import ReceiveSide
from bench.simulation.messages import SERVER, MessageBatch

#: the per-node hooks that may return ``(output, new_state)``
STATE_HOOKS = frozenset({"per_sample_gradients", "sample_sum", "local_gradients", "local_update"})


class DefenseCodeError(RuntimeError):
    """The plugin's code did something the per-node contract does not allow (fails its job)."""


def as_hooks(defense: Defense | DefenseHooks | None) -> DefenseHooks:
    """The stacked hooks of ``defense``: a plugin wrapped in a :class:`NodeRunner`; bench's own
    hooks (``None``: the identities) as they are."""
    if defense is None:
        return DefenseHooks()
    if isinstance(defense, Defense):
        return NodeRunner(defense)
    return defense


@contextlib.contextmanager
def no_tensor_text() -> Iterator[None]:
    """Inside, a tensor cannot be turned into text (``str``, ``repr``, f-strings): the text of a
    vmapped tensor is every row's values."""
    saved = torch.Tensor.__repr__, torch.Tensor.__str__, torch.Tensor.__format__

    def refuse(self: torch.Tensor, *args: Any) -> str:
        raise DefenseCodeError("a defense hook cannot turn a tensor into text")

    torch.Tensor.__repr__ = torch.Tensor.__str__ = torch.Tensor.__format__ = refuse  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.Tensor.__repr__, torch.Tensor.__str__, torch.Tensor.__format__ = saved  # type: ignore[method-assign]


class NodeRunner(ReceiveSide, DefenseHooks):
    """Stacked hooks from a plugin's per-node hooks and its mechanisms (module docstring).

    Parameters
    ----------
    plugin:
        The defense, constructed, not yet bound.
    secret:
        The seed of the randomness the plugin draws; default derived from the run's seed at
        :meth:`bind`.
    """

    def __init__(self, plugin: Defense, secret: int | None = None) -> None:
        self.plugin = plugin
        self.node_hooks = used_node_hooks(plugin)
        self.specs: tuple[Mechanism, ...] = tuple(plugin.mechanisms())
        for spec in self.specs:
            if not isinstance(spec, Mechanism) or not type(spec).__module__.startswith("bench."):
                raise DefenseCodeError(
                    f"mechanisms() returned {type(spec).__name__}, not a harness mechanism"
                )
        per_sample_specs = [m for m in self.specs if m.per_sample]
        if per_sample_specs and self.node_hooks & {"per_sample_gradients", "sample_weights", "sample_sum"}:
            raise DefenseCodeError(
                "the defense both reduces per-sample gradients itself and uses a per-sample mechanism"
            )
        if len(per_sample_specs) > 1:
            raise DefenseCodeError("the defense uses more than one per-sample mechanism")
        if any(isinstance(m, SecureAggregation) for m in self.specs) and self.decodes:
            raise DefenseCodeError(
                "secure aggregation's receivers unmask only the sum: "
                "a defense using it decodes no single message"
            )
        self.per_sample = bool(plugin.per_sample or per_sample_specs)  # type: ignore[misc]
        self.weighted_per_sample = bool(per_sample_specs) or bool(  # type: ignore[misc]
            plugin.per_sample and plugin.weighted_per_sample
        )
        self._secret = secret
        self.mechanisms: list[MechanismHooks] = []
        self.state: dict[str, torch.Tensor] = {}
        self.calls = 0
        self.snapshot: Snapshot | None = None
        self.run: RunInfo | None = None

    # ---------------------------------------------------------------------------- set-up
    def protocol_overrides(self, protocol: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for spec in self.specs:
            out.update(spec.protocol_overrides(protocol))
        out.update(self.plugin.protocol_overrides(protocol))
        return out

    def bind(self, run: RunInfo, seed: int = 0) -> None:
        """Bind the plugin with the run's public facts (fresh tensors, no seed), freeze it, draw
        every node's initial state, and build the mechanisms with the run's seed."""
        self.run = run
        secret = self._secret if self._secret is not None else derive_seed(int(seed), "defense-plugin")
        self._secret = secret
        public = _fresh_run(run)
        with self._randomness("bind", 0, 0):
            try:
                self.plugin.bind(public)
            except BenchInputError:
                raise
            except Exception as exc:
                text = f"{type(exc).__name__}: {exc}".splitlines()[0][:240]
                raise DefenseCodeError(f"the defense's bind failed ({text})") from None
        self.snapshot = Snapshot(self.plugin)
        self.mechanisms = [spec.build(run, int(seed)) for spec in self.specs]
        self.state = self._initial_state(run)

    def _initial_state(self, run: RunInfo) -> dict[str, torch.Tensor]:
        if "init_state" not in _overrides(self.plugin, ("init_state",)):
            return {}
        ids = torch.cat([torch.arange(run.n_nodes), torch.tensor([SERVER])]).to(run.device)

        def one(node: torch.Tensor) -> dict[str, torch.Tensor]:
            return self.plugin.init_state(NodeContext(0, 0, node, MappingProxyType({})))

        out = self._vmapped("init_state", one, (ids,), 0, 0)
        if not isinstance(out, dict) or not all(isinstance(v, torch.Tensor) for v in out.values()):
            raise HookContractError("the defense's init_state hook returned no mapping of names to tensors")
        return {str(k): v.detach() for k, v in out.items()}

    def active_hooks(self) -> frozenset[str]:
        points = {NODE_HOOKS[n] for n in self.node_hooks}
        for spec in self.specs:
            points |= set(spec.points)
        if not self.per_sample:
            points.discard("per_sample_gradients")
        return frozenset(points)

    def acting_points(self) -> frozenset[str]:
        return acting_points(self.plugin)

    @property
    def decodes(self) -> bool:
        """Whether the plugin decodes delivered messages itself (its ``decode`` or
        ``receive_statistic``)."""
        return bool(self.node_hooks & {"decode", "receive_statistic"})

    def __deepcopy__(self, memo: dict[int, Any]) -> NodeRunner:
        """A copy for one query of the defense oracle: the same frozen plugin (nothing of it can
        change), copies of the state, the mechanisms and the call counter."""
        other = copy.copy(self)
        other.state = {k: v.clone() for k, v in self.state.items()}
        other.mechanisms = [copy.deepcopy(m, memo) for m in self.mechanisms]
        return other

    # -------------------------------------------------------------------------- calling
    @contextlib.contextmanager
    def _randomness(self, hook: str, round_: int, step: int) -> Iterator[None]:
        """PyTorch's global generators seeded for one call from the runner's secret, the hook,
        the round and step and the call count, and restored after it (the generators' own
        ``manual_seed``: ``torch.manual_seed`` costs a traceback per call)."""
        assert self._secret is not None
        seed = derive_seed(self._secret, f"{hook}:{round_}:{step}:{self.calls}")
        self.calls += 1
        generators = [torch.default_generator]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            generators += list(torch.cuda.default_generators)
        saved = [g.get_state() for g in generators]
        for g in generators:
            g.manual_seed(seed)
        try:
            yield
        finally:
            for g, state in zip(generators, saved, strict=True):
                g.set_state(state)

    def _vmapped(
        self, hook: str, fn: Callable[..., Any], args: tuple[Any, ...], round_: int, step: int
    ) -> Any:
        if self.snapshot is not None:
            self.snapshot.refresh()
        with self._randomness(hook, round_, step), no_tensor_text():
            try:
                return vmap(fn, randomness="different")(*args)
            except (HookContractError, DefenseCodeError):
                raise
            except Exception as exc:
                text = f"{type(exc).__name__}: {exc}".splitlines()[0][:240]
                raise DefenseCodeError(
                    f"the defense's {hook} hook failed on one node's row ({text})"
                ) from None

    def _state_rows(self, ids: torch.Tensor) -> tuple[tuple[str, ...], tuple[torch.Tensor, ...]]:
        """The state's names and the rows of nodes ``ids`` (``-1``, the server: the last row)."""
        keys = tuple(self.state)
        return keys, tuple(self.state[k].index_select(0, _rows_of(ids, self.state[k])) for k in keys)

    def _node_call(
        self, hook: str, data: tuple[torch.Tensor, ...], ctx: RoundContext, like: torch.Tensor
    ) -> torch.Tensor:
        """The plugin's ``hook`` on every row of ``data`` (first dimension: the nodes of
        ``ctx.nodes``), its state rows gathered and, where it returns new ones, written back."""
        n = data[0].shape[0]
        ids = ctx.nodes if ctx.nodes is not None else torch.arange(n, device=data[0].device)
        ids = ids.to(data[0].device)
        keys, rows = self._state_rows(ids)
        method = getattr(self.plugin, hook)
        count = len(data)

        def one(*args: torch.Tensor) -> Any:
            state = MappingProxyType(dict(zip(keys, args[count + 1 :], strict=True)))
            return method(*args[:count], NodeContext(ctx.round, ctx.step, args[count], state))

        out = self._vmapped(hook, one, (*data, ids, *rows), ctx.round, ctx.step)
        if isinstance(out, tuple) and hook in STATE_HOOKS:
            out, new = self._split_state(hook, out)
            if len(torch.unique(ids)) == len(ids):  # the run's calls (an oracle query may repeat a node)
                for k in keys:
                    value = new[k].detach().to(self.state[k])
                    self.state[k] = self.state[k].index_copy(0, _rows_of(ids, self.state[k]), value)
        check_tensor(f"the defense's {hook} hook", out, like, tuple(like.shape))
        return out

    def _split_state(self, hook: str, out: tuple[Any, ...]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if len(out) != 2 or not isinstance(out[1], Mapping):
            raise HookContractError(
                f"the defense's {hook} hook returned a tuple that is not (output, new_state)"
            )
        new = dict(out[1])
        if set(new) != set(self.state):
            raise HookContractError(
                f"the defense's {hook} hook returned state {sorted(new)}; "
                f"init_state declares {sorted(self.state)}"
            )
        for k, v in new.items():
            if not isinstance(v, torch.Tensor) or tuple(v.shape[1:]) != tuple(self.state[k].shape[1:]):
                raise HookContractError(f"the defense's {hook} hook returned state {k!r} of another shape")
        return out[0], new

    # ----------------------------------------------------------------------- gradients
    def _per_sample_mechanism(self) -> MechanismHooks | None:
        return next((m for m in self.mechanisms if type(m).per_sample), None)

    def per_sample_gradients(
        self, grads: torch.Tensor, mask: torch.Tensor, ctx: RoundContext
    ) -> torch.Tensor:
        mech = self._per_sample_mechanism()
        if mech is not None:
            return mech.per_sample_gradients(grads, mask, ctx)
        if self.weighted_per_sample:
            return super().per_sample_gradients(grads, mask, ctx)
        if "per_sample_gradients" not in self.node_hooks:
            return super().per_sample_gradients(grads, mask, ctx)
        like = grads[:, 0]
        return self._node_call("per_sample_gradients", (grads, mask), ctx, like)

    def sample_weights(self, norms: torch.Tensor, mask: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        mech = self._per_sample_mechanism()
        if mech is not None:
            return mech.sample_weights(norms, mask, ctx)
        if "sample_weights" not in self.node_hooks:
            return super().sample_weights(norms, mask, ctx)
        return self._node_call("sample_weights", (norms, mask), ctx, norms)

    def sample_sum(self, total: torch.Tensor, mask: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        mech = self._per_sample_mechanism()
        if mech is not None:
            return mech.sample_sum(total, mask, ctx)
        if "sample_sum" not in self.node_hooks:
            return total
        return self._node_call("sample_sum", (total, mask), ctx, total)

    def local_gradients(self, grads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        if "local_gradients" in self.node_hooks:
            grads = self._node_call("local_gradients", (grads,), ctx, grads)
        for m in self.mechanisms:
            grads = m.local_gradients(grads, ctx)
        return grads

    def local_update(self, new: torch.Tensor, old: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        if "local_update" in self.node_hooks:
            new = self._node_call("local_update", (new, old), ctx, new)
        for m in self.mechanisms:
            new = m.local_update(new, old, ctx)
        return new

    # ------------------------------------------------------------------------ messages
    def outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        if "outgoing" in self.node_hooks:
            msgs = self._outgoing(msgs.per_edge() if self.plugin.per_delivery else msgs, ctx)
        for m in self.mechanisms:
            msgs = m.outgoing(msgs, ctx)
        return msgs

    def _outgoing(self, msgs: MessageBatch, ctx: RoundContext) -> MessageBatch:
        payload = msgs.payload
        rows = msgs.edges[:, 0]
        fanout = torch.bincount(rows, minlength=payload.shape[0])
        receiver = torch.full((payload.shape[0],), BROADCAST, dtype=torch.long, device=rows.device)
        single = fanout[rows] == 1
        receiver[rows[single]] = msgs.edges[single, 1]
        senders = msgs.senders.to(torch.long)
        keys, states = self._state_rows(senders)
        plugin = self.plugin

        def one(
            row: torch.Tensor, sender: torch.Tensor, to: torch.Tensor, *svals: torch.Tensor
        ) -> torch.Tensor:
            state = MappingProxyType(dict(zip(keys, svals, strict=True)))
            return plugin.outgoing(row, MessageContext(msgs.round, msgs.step, msgs.kind, sender, to, state))

        out = self._vmapped("outgoing", one, (payload, senders, receiver, *states), msgs.round, msgs.step)
        if not isinstance(out, torch.Tensor) or not out.is_floating_point():
            raise HookContractError("the defense's outgoing hook returned no real-valued payload")
        check_tensor("the defense's outgoing hook", out, payload, tuple(payload.shape))
        return msgs.with_payload(out)

    def wrap_aggregation(self, aggregate: Aggregator, ctx: RoundContext) -> Aggregator:
        for m in self.mechanisms:
            aggregate = m.wrap_aggregation(aggregate, ctx)
        return aggregate

    def should_stop(self, ctx: RoundContext, history: Mapping[str, tuple[float, ...]]) -> bool:
        if "should_stop" not in self.node_hooks:
            return False
        plain = MappingProxyType({str(k): tuple(float(v) for v in vals) for k, vals in history.items()})
        if self.snapshot is not None:
            self.snapshot.refresh()
        out = self.plugin.should_stop(int(ctx.round), plain)
        if not isinstance(out, bool):
            raise HookContractError(
                f"the defense's should_stop hook returned {type(out).__name__}, not a bool"
            )
        return out

    # ----------------------------------------------------------------------- reporting
    def accounting(self) -> dict[str, Any]:
        """The run's privacy accounting: the mechanisms' (the only source of an ε on the board),
        with the plugin's own notes beside it (:func:`~bench.defense.mechanisms.base.merged_accounting`)."""
        notes = _plain(self.plugin.accounting()) if self.snapshot is not None else {}
        return merged_accounting(self.specs, self.mechanisms, self.node_hooks, notes)


def _rows_of(ids: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """The state rows of node ids ``ids`` (the server, ``-1``, is the last row)."""
    return ids.to(state.device).remainder(len(state))


def _overrides(plugin: Defense, names: tuple[str, ...]) -> set[str]:
    return {n for n in names if getattr(type(plugin), n) is not getattr(Defense, n)}


def _fresh_run(run: RunInfo) -> RunInfo:
    """The run's facts as the plugin gets them: its own copies of the tensors (a write to them
    never reaches the simulation) and read-only hyperparameters."""
    return replace(
        run,
        edges=None if run.edges is None else run.edges.detach().clone(),
        mixing=None if run.mixing is None else run.mixing.detach().clone(),
        hyperparameters=dict(run.hyperparameters),
    )


def _plain(value: Any) -> Any:
    """Plain data of the plugin's notes (containers copied, tensors as lists)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    return value
