"""The defense oracle (bench.evaluation.oracle) and the generic defense-aware variants (``+oracle``).

The oracle answers ``F = dist(D(G), g)`` and ``∂F/∂G`` for attacker-chosen per-sample gradients
``G``, where ``D`` is the victim's send pipeline through the defense's hooks; the ``+oracle``
variants of DLG, batched DLG and Inverting Gradients put it into their objective. Checked here:
the answers equal the closed forms (float64), BPDA and EOT where ``D`` is not differentiable or
random, and — end to end — a defense no attack knows by name (a fixed random orthogonal rotation
the server undoes) is broken by the generic variant while the standard attack fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.attacks.inversion.distance import gradient_distance
from bench.core.params import call_with_params
from bench.core.wire import blob
from bench.defense.rowwise import clip_rows
from bench.evaluation import oracle
from bench.evaluation.adaptive import ORACLE_SUFFIX, with_adaptive
from bench.evaluation.oracle_autodiff import round_groups
from bench.evaluation.planning import build_attacks
from bench.protocols import PROTOCOLS
from bench.spec.schema import parse_task
from tests.support.bench_root import REPO
from tests.support.one_task import evaluate, make_root, outcomes, tiny_task

#: a fixed pseudo-random orthogonal map R(g) = H (s ⊙ g[π]) (a permutation π, signs s and a
#: Householder reflection H): every upload is rotated, and the server decodes each upload before
#: it averages — no attack knows it by name. Fixed: computed from the coordinates' indices (a
#: hash of each), so the run and the oracle's instances (bound with seeds of their own) rotate
#: alike; drawn from the generator the harness seeds in ``bind``, it would be a random defense
ROTATION = """
import torch
from bench.defense.base import DEFENSES, Defense


@DEFENSES.register("rotation", "a fixed random orthogonal rotation of each upload, undone by the server")
class Rotation(Defense):
    protocols = ("fedsgd", "fedavg")

    def bind(self, run):
        super().bind(run)
        i = torch.arange(run.n_params, dtype=torch.float64)
        self.perm = torch.argsort(torch.frac(torch.sin(i * 12.9898 + 1.0) * 43758.5453))
        self.inv = torch.argsort(self.perm)
        self.signs = torch.where(torch.frac(torch.sin(i * 78.233 + 2.0) * 43758.5453) < 0.5, -1.0, 1.0)
        v = torch.sin(i * 3.7 + 0.3)
        self.v = v / torch.linalg.vector_norm(v)

    def reflect(self, x):
        v = self.v.to(x.dtype)
        return x - 2.0 * (x @ v) * v

    def outgoing(self, payload, msg):
        return self.reflect(payload[self.perm] * self.signs.to(payload.dtype))

    def decode(self, payload, msg):
        return (self.reflect(payload) * self.signs.to(payload.dtype))[self.inv]
"""


def _task(
    defense: str, params: dict, source: bytes, dtype: str = "float64", root: Path = REPO
) -> oracle.DefenseOracle:
    spec = tiny_task([{"name": "dlg", "params": {"rounds": [0]}}])
    spec["simulation"]["dtype"] = dtype
    task = parse_task(spec, "tiny")
    oracle.setup(
        {
            "task": task.model_dump_json(),
            "seed": 7,
            "defense": {"name": defense, "params": params, "source": blob(source), "root": str(root)},
        }
    )
    return oracle._ORACLE[0]


def _query(o: oracle.DefenseOracle, k: int, b: int, objective: str = "l2", seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    p = o._info.n_params
    return {
        "op": "evaluate",
        "grads": torch.randn(k, b, p, generator=gen, dtype=torch.float64),
        "theta": torch.randn(k, p, generator=gen, dtype=torch.float64),
        "target": torch.randn(k, p, generator=gen, dtype=torch.float64),
        "objective": objective,
        "nodes": torch.arange(k) % 4,
        "rounds": torch.zeros(k, dtype=torch.long),
        "receiver": -1,
    }


@pytest.mark.parametrize("objective", ["l2", "cosine"])
def test_the_oracle_answers_the_closed_form_of_clipping(objective):
    source = (REPO / "defenses" / "gradient_clipping.py").read_bytes()
    o = _task("gradient_clipping", {"max_norm": 0.5}, source)
    q = _query(o, 6, 3, objective)
    got = o.handle(q)
    g = q["grads"].clone().requires_grad_(True)
    want = gradient_distance(clip_rows(g.mean(1), 0.5), q["target"], objective)
    (dg,) = torch.autograd.grad(want.sum(), g)
    torch.testing.assert_close(got["values"], want.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got["grads"], dg, rtol=1e-10, atol=1e-12)
    assert o.info(-1) == {"per_sample": False, "random": False, "draws": 1}


def test_per_sample_clipping_is_answered_per_sample():
    source = (REPO / "defenses" / "gradient_clipping.py").read_bytes()
    o = _task("gradient_clipping", {"max_norm": 0.5, "per_sample": True}, source)
    q = _query(o, 4, 3)
    got = o.handle(q)
    g = q["grads"].clone().requires_grad_(True)
    want = gradient_distance(clip_rows(g, 0.5).mean(1), q["target"], "l2")
    (dg,) = torch.autograd.grad(want.sum(), g)
    torch.testing.assert_close(got["values"], want.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got["grads"], dg, rtol=1e-10, atol=1e-12)
    assert o.info(-1)["per_sample"] is True


def test_rounding_is_pulled_back_straight_through():
    """Quantization has a zero derivative almost everywhere: BPDA uses the batch mean's."""
    source = (REPO / "defenses" / "quantization.py").read_bytes()
    o = _task("quantization", {"delta": 0.1}, source)
    q = _query(o, 4, 2)
    got = o.handle(q)
    quantized = torch.round(q["grads"].mean(1) / 0.1) * 0.1
    u = 2.0 * (quantized - q["target"])
    torch.testing.assert_close(got["values"], (quantized - q["target"]).pow(2).sum(1), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(got["grads"], u.unsqueeze(1).expand(-1, 2, -1) / 2, rtol=1e-9, atol=1e-9)


def test_a_random_defense_is_averaged_over_fixed_draws():
    """EOT: two draws with seeds of the oracle's own; the same query gets the same answer (a
    deterministic objective), and the value differs from the noiseless one."""
    source = (REPO / "defenses" / "gaussian_noise.py").read_bytes()
    o = _task("gaussian_noise", {"sigma": 1.0}, source)
    assert o.info(-1) == {"per_sample": False, "random": True, "draws": oracle.EOT_DRAWS}
    q = _query(o, 3, 1)
    a, b = o.handle(q), o.handle(q)
    torch.testing.assert_close(a["values"], b["values"], rtol=0, atol=0)
    clean = (q["grads"].mean(1) - q["target"]).pow(2).sum(1)
    assert not torch.allclose(a["values"], clean)
    # additive noise: the derivative of ‖mean_m(G + n_m) − g‖² is 2 (D̄ − g), the identity's
    noisy = a["values"]
    assert torch.isfinite(noisy).all()


def test_a_nodes_several_problems_share_one_call_as_if_each_were_alone():
    """Restarts and label hypotheses of one victim are rows of one hook call (the send-side
    hooks are row-local): each problem's answer equals the answer to it alone, rounds apart."""
    source = (REPO / "defenses" / "top_k.py").read_bytes()
    o = _task("top_k", {"fraction": 0.3}, source)
    q = _query(o, 6, 2)
    q["nodes"] = torch.tensor([3, 1, 3, 0, 1, 3])
    q["rounds"] = torch.tensor([0, 0, 0, 1, 1, 0])
    together = o.handle(q)
    fields = ("grads", "theta", "target", "nodes", "rounds")
    for k in range(6):
        alone = o.handle({**q, **{f: q[f][k : k + 1] for f in fields}})
        torch.testing.assert_close(together["values"][k : k + 1], alone["values"], rtol=1e-12, atol=0)
        torch.testing.assert_close(together["grads"][k : k + 1], alone["grads"], rtol=1e-12, atol=0)
    assert len(round_groups(q["rounds"])) == 2
    assert round_groups(torch.zeros(4, dtype=torch.long)) == [slice(None)]


@pytest.mark.parametrize(
    ("defense", "params"),
    [
        ("gradient_clipping", {"max_norm": 0.5}),  # D reads the batch's mean gradient
        ("gradient_clipping", {"max_norm": 0.5, "per_sample": True}),  # D reads per-sample gradients
        ("quantization", {"delta": 0.05}),  # D has no useful derivative: BPDA
    ],
)
def test_an_input_query_answers_what_the_gradient_query_does(defense, params):
    """An input query (``x̂`` and labels; the oracle forms ``G``) gives the objective and
    ``∂F/∂x̂`` of the gradient query whose ``G`` the attack side formed, to 1e-10 in float64;
    and the attack sends ``x̂`` only when the task's loss has a name."""
    from bench.attacks.inversion.autograd_matching import AutogradMatching
    from bench.attacks.inversion.oracle_transform import DefenseTransform
    from bench.attacks.oracle import OracleClient
    from bench.simulation.objective import LOSSES

    o = _task(defense, params, (REPO / "defenses" / f"{defense}.py").read_bytes())
    ops: list[str] = []

    def ask(q: dict) -> dict:
        ops.append(q["op"])
        return o.handle(q)

    client = OracleClient(ask, receiver=-1)
    gen = torch.Generator().manual_seed(3)
    k, b, p = 5, 3, o._info.n_params
    x = torch.randn(k, b, p - 1, generator=gen, dtype=torch.float64)  # logreg: d inputs, 1 bias
    y = torch.randint(0, 2, (k, b), generator=gen).to(torch.float64)
    theta = 0.5 * torch.randn(k, p, generator=gen, dtype=torch.float64)
    target = torch.randn(k, p, generator=gen, dtype=torch.float64)
    nodes, rounds = torch.arange(k) % 4, torch.zeros(k, dtype=torch.long)
    answers = {}
    for loss in (o.sim.loss_name, ""):
        transform = DefenseTransform(client, nodes, rounds, "cosine", loss)
        loss_fn = LOSSES.get(o.sim.loss_name, field="loss")
        fn = AutogradMatching(o.sim.flat, loss_fn, y, theta, target, "cosine", 1e-3, transform=transform)
        answers[loss] = fn(x)
    assert ops.count("evaluate_inputs") == 1 and ops.count("evaluate") == 1
    (v_in, g_in), (v_g, g_g) = answers[o.sim.loss_name], answers[""]
    torch.testing.assert_close(v_in, v_g, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(g_in, g_g, rtol=1e-10, atol=1e-12)
    assert g_in.abs().sum() > 0


#: a fixed public vector added to every upload: additive and deterministic, but by the plugin's
#: own ``outgoing`` — not additive *by construction* (only the harness's message noise is)
SHIFT = """
import torch
from bench.defense.base import DEFENSES, Defense


@DEFENSES.register("public_shift", "adds one public vector to every upload")
class PublicShift(Defense):
    protocols = ("fedsgd",)

    def bind(self, run):
        super().bind(run)
        self.shift = torch.linspace(-1.0, 1.0, run.n_params, dtype=run.dtype)

    def outgoing(self, payload, msg):
        return payload + self.shift.to(payload.dtype)
"""


#: noise that scales with the message (``g ⊙ (1 + z/2)``): random and not separable
RELATIVE = """
import torch
from bench.defense.base import DEFENSES, Defense


@DEFENSES.register("relative_noise", "multiplies every upload by 1 + z/2, z standard normal")
class RelativeNoise(Defense):
    protocols = ("fedsgd",)

    def outgoing(self, payload, msg):
        return payload * (1.0 + 0.5 * torch.randn_like(payload))
"""


#: the plugins of these tests that are not committed defenses
PLUGINS = {"public_shift": SHIFT, "rotation": ROTATION, "relative_noise": RELATIVE}


def _oracle_of(defense: str, params: dict, tmp_path: Path) -> oracle.DefenseOracle:
    """The oracle of ``defense`` (a committed plugin, or one of :data:`PLUGINS` in a root of its own)."""
    if defense not in PLUGINS:
        return _task(defense, params, (REPO / "defenses" / f"{defense}.py").read_bytes())
    root = make_root(
        tmp_path, tiny_task([{"name": "dlg", "params": {"rounds": [0]}}]), {defense: PLUGINS[defense]}
    )
    return _task(defense, params, PLUGINS[defense].encode(), root=root)


@pytest.mark.parametrize("objective", ["l2", "cosine"])
def test_an_additive_defense_is_answered_by_its_offsets(objective, tmp_path):
    """``D_m(G) = mean_b G + c_m`` by construction (the harness's message noise, no hook of the
    plugin's on the way): one ``offsets`` query answers ``c̄ = mean_m c_m`` and the oracle's own
    objective is ``dist(mean_b G + c̄, g)`` for every ``G`` (float64, 1e-12)."""
    o = _oracle_of("gaussian_noise", {"sigma": 1.0}, tmp_path)
    assert o.additive_by_construction and o.separable_by_construction
    q = _query(o, 4, 2, objective)
    got = o.handle({**q, "op": "offsets", "batch": 2})
    assert got["additive"] is True and got["offsets"].shape == q["target"].shape
    assert got["offsets"].abs().amax() > 0  # the noise's mean over the draws
    for seed in (0, 1):  # other gradients, the same problems
        other = {**q, "grads": _query(o, 4, 2, objective, seed=seed + 10)["grads"]}
        want = gradient_distance(other["grads"].mean(1) + got["offsets"], q["target"], objective)
        torch.testing.assert_close(o.handle(other)["values"], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("objective", ["l2", "cosine"])
def test_a_plugins_own_additive_shift_is_evaluated_on_the_queries(objective, tmp_path):
    """A public shift in the plugin's own ``outgoing`` is additive, but not by construction: no
    ``offsets`` shortcut, and every query is answered through the hook — the closed form
    ``dist(mean_b G + shift, g)`` and its gradient (float64, 1e-12)."""
    o = _oracle_of("public_shift", {}, tmp_path)
    assert not o.additive_by_construction and not o.separable_by_construction
    q = _query(o, 4, 2, objective)
    assert o.handle({**q, "op": "offsets", "batch": 2}) == {"additive": False}
    shift = torch.linspace(-1.0, 1.0, o._info.n_params, dtype=torch.float64)
    g = q["grads"].clone().requires_grad_(True)
    want = gradient_distance(g.mean(1) + shift, q["target"], objective)
    (dg,) = torch.autograd.grad(want.sum(), g)
    got = o.handle(q)
    torch.testing.assert_close(got["values"], want.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got["grads"], dg, rtol=1e-10, atol=1e-12)
    assert o.info(-1)["random"] is False


@pytest.mark.parametrize(
    ("defense", "params"),
    [
        ("gradient_clipping", {"max_norm": 0.5}),
        ("gradient_clipping", {"max_norm": 0.5, "per_sample": True}),
        ("quantization", {"delta": 0.01}),
        ("top_k", {"fraction": 0.3}),
        ("dp_sgd", {"clip_norm": 1.0, "noise_multiplier": 0.5}),
        ("rotation", {}),
        ("relative_noise", {}),
    ],
)
def test_a_defense_that_is_not_additive_gets_no_shortcut(defense, params, tmp_path):
    """A clipping, a rounding, a sparsification, DP-SGD's per-sample clipping under its noise, a
    rotation, noise that scales with the message: none is additive by construction, and the
    attack keeps querying ``D``."""
    o = _oracle_of(defense, params, tmp_path)
    q = _query(o, 4, 2)
    assert o.handle({**q, "op": "offsets", "batch": 2}) == {"additive": False}


def _matching_problems(o: oracle.DefenseOracle, k: int, b: int) -> tuple:
    """``(y, θ, g, nodes, rounds, loss)`` of ``k`` random problems of ``b`` samples on the oracle's task."""
    from bench.simulation.objective import LOSSES

    gen = torch.Generator().manual_seed(5)
    p = o._info.n_params
    y = torch.randint(0, 2, (k, b), generator=gen).to(torch.float64)
    theta = 0.5 * torch.randn(k, p, generator=gen, dtype=torch.float64)
    target = torch.randn(k, p, generator=gen, dtype=torch.float64)
    nodes, rounds = torch.arange(k) % 4, torch.zeros(k, dtype=torch.long)
    return y, theta, target, nodes, rounds, LOSSES.get(o.sim.loss_name, field="loss")


@pytest.mark.parametrize("objective", ["cosine", "l2"])
def test_the_attack_evaluates_an_additive_defense_itself_with_the_same_objective(objective):
    """Through :func:`matching_fn`, a generic variant against additive noise asks one ``offsets``
    query and then evaluates ``dist(∇_θ L + c̄, g)`` itself: the objective and ``∂F/∂x̂`` the
    oracle answers per query, to 1e-10 in float64, at every point."""
    from bench.attacks.inversion.matching import matching_fn
    from bench.attacks.inversion.oracle_transform import DefenseTransform
    from bench.attacks.oracle import OracleClient

    o = _task("gaussian_noise", {"sigma": 0.5}, (REPO / "defenses" / "gaussian_noise.py").read_bytes())
    ops: list[str] = []

    def ask(q: dict) -> dict:
        ops.append(q["op"])
        return o.handle(q)

    k, b, p = 4, 2, o._info.n_params
    y, theta, target, nodes, rounds, loss_fn = _matching_problems(o, k, b)
    fns = {}
    for mode in ("shortcut", "queried"):
        transform = DefenseTransform(
            OracleClient(ask, receiver=-1), nodes, rounds, objective, o.sim.loss_name
        )
        if mode == "queried":
            transform.additive_offsets = lambda *a: None  # type: ignore[method-assign]
        fns[mode] = matching_fn(o.sim.flat, loss_fn, y, theta, target, objective, 1e-3, transform=transform)
    assert ops == ["offsets"]  # the shortcut's one query; the other asked nothing yet
    for seed in range(3):
        x = torch.randn(k, b, p - 1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        (v_s, g_s), (v_q, g_q) = fns["shortcut"](x), fns["queried"](x)
        torch.testing.assert_close(v_s, v_q, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(g_s, g_q, rtol=1e-10, atol=1e-12)
        idx = torch.tensor([2, 0])  # a subset of the problems, as L-BFGS's line search asks
        torch.testing.assert_close(fns["shortcut"](x[idx], idx)[0], v_s[idx], rtol=1e-12, atol=0)
    assert ops == ["offsets"] + ["evaluate_inputs"] * 3


@pytest.mark.parametrize("objective", ["l2", "cosine"])
@pytest.mark.parametrize(
    ("defense", "params", "b"),
    [
        ("dp_sgd", {"clip_norm": 0.5, "noise_multiplier": 0.7}, 3),  # per-sample clipping under noise
        ("gaussian_noise", {"sigma": 1.0}, 2),  # additive: separable too
    ],
)
def test_separable_noise_is_one_draw_and_a_shift(defense, params, b, objective, tmp_path):
    """``D_m(G) = f(G) + c_m``: the oracle finds ``c̄ − c_0`` once per problem set, then runs one
    draw per query, with the value and ``∂F/∂G`` of all :data:`EOT_DRAWS` draws (float64, 1e-10)."""
    o = _oracle_of(defense, params, tmp_path)
    q = {**_query(o, 4, b, objective), "problems": "separable"}
    calls: list[int] = []
    real = o._call

    def counted(m, *args):
        calls.append(m)
        return real(m, *args)

    o._call = counted  # type: ignore[method-assign]
    shift = o.noise_shift(q, b)
    assert shift is not None and shift.shape == q["target"].shape and shift.abs().amax() > 0
    for seed in (0, 1):  # other gradients, the same problems
        grads = _query(o, 4, b, objective, seed=seed + 10)["grads"]
        calls.clear()
        got = o.handle({**q, "grads": grads})
        assert calls == [0]  # one draw through the hooks
        where = q["nodes"], q["rounds"], -1
        want = o.evaluate(grads, q["theta"], q["target"], objective, *where)  # every draw
        torch.testing.assert_close(got["values"], want[0], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(got["grads"], want[1], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    ("defense", "params"),
    [
        ("relative_noise", {}),  # the noise scales with the message
        ("dp_sgd", {"clip_norm": 0.5, "noise_multiplier": 0.7}),  # separable, but no problem set named
        ("top_k", {"fraction": 0.3}),  # not random: one draw anyway
    ],
)
def test_noise_that_is_not_separable_keeps_every_draw(defense, params, tmp_path):
    """No shift where the noise depends on the gradients, where the query names no problem set
    (nothing to keep it under), or where ``D`` is not random."""
    o = _oracle_of(defense, params, tmp_path)
    q = _query(o, 4, 2)
    named = defense != "dp_sgd"
    assert o.noise_shift({**q, "problems": "p"} if named else q, 2) is None
    assert o.info(-1)["random"] is (defense != "top_k")


@pytest.mark.parametrize(
    ("defense", "params", "same_noise"),
    [
        ("dp_sgd", {"clip_norm": 0.5, "noise_multiplier": 0.7}, True),  # separable: the whole layout
        ("relative_noise", {}, False),  # not separable: the rows alone, draws of their own
        ("top_k", {"fraction": 0.3}, True),  # not random
    ],
)
def test_a_subset_of_a_problem_set_is_asked_by_its_rows(defense, params, same_noise, tmp_path):
    """A line search's subset goes as the whole set's token and its rows (no ``θ``, ``g``
    again): with separable noise each row's answer is the whole set's for that row, so every
    subset sees one objective (float64, 1e-12); otherwise the rows are answered alone."""
    from bench.attacks.inversion.matching import matching_fn
    from bench.attacks.inversion.oracle_transform import DefenseTransform
    from bench.attacks.oracle import OracleClient

    o = _oracle_of(defense, params, tmp_path)
    sent: list[dict] = []

    def ask(q: dict) -> dict:
        sent.append(q)
        return o.handle(q)

    k, b, p = 6, 2, o._info.n_params
    y, theta, target, nodes, rounds, loss_fn = _matching_problems(o, k, b)
    gen = torch.Generator().manual_seed(6)
    transform = DefenseTransform(OracleClient(ask, receiver=-1), nodes, rounds, "l2", o.sim.loss_name)
    transform.additive_offsets = lambda *a: None  # type: ignore[method-assign]
    fn = matching_fn(o.sim.flat, loss_fn, y, theta, target, "l2", 0.0, transform=transform)
    x = torch.randn(k, b, p - 1, generator=gen, dtype=torch.float64)
    v_all, g_all = fn(x)
    idx = torch.tensor([4, 1, 2])
    v_sub, g_sub = fn(x[idx], idx)
    last = sent[-1]
    assert "theta" not in last and torch.equal(last["rows"], idx) and last["problems"] == sent[-2]["problems"]
    if same_noise:
        torch.testing.assert_close(v_sub, v_all[idx], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(g_sub, g_all[idx], rtol=1e-12, atol=1e-12)
    else:
        alone = DefenseTransform(
            OracleClient(o.handle, receiver=-1), nodes[idx], rounds[idx], "l2", o.sim.loss_name
        )
        alone.additive_offsets = lambda *a: None  # type: ignore[method-assign]
        fa = matching_fn(o.sim.flat, loss_fn, y[idx], theta[idx], target[idx], "l2", 0.0, transform=alone)
        torch.testing.assert_close(v_sub, fa(x[idx])[0], rtol=1e-12, atol=1e-12)
        assert not torch.allclose(v_sub, v_all[idx])


def test_a_problem_set_is_sent_once_and_named_after():
    """``θ`` and ``g`` travel with the first query of a problem set only; later queries name its
    token, and a token the oracle does not keep is refused with the reason the client resends on."""
    from bench.attacks.oracle import UNKNOWN_PROBLEMS

    source = (REPO / "defenses" / "gradient_clipping.py").read_bytes()
    o = _task("gradient_clipping", {"max_norm": 0.5}, source)
    q = _query(o, 4, 2)
    first = o.handle({**q, "problems": "abc"})
    named = {k: v for k, v in q.items() if k not in ("theta", "target")}
    again = o.handle({**named, "problems": "abc"})
    torch.testing.assert_close(first["values"], again["values"], rtol=0, atol=0)
    with pytest.raises(oracle.OracleError, match=UNKNOWN_PROBLEMS):
        o.handle({**named, "problems": "never-sent"})


def test_generic_variants_are_planned_for_gradient_matching_on_node_gradients():
    task = parse_task(
        {
            **tiny_task(
                [
                    {"name": "dlg", "params": {"rounds": [0]}},
                    {"name": "dlg_batched", "params": {"rounds": [0], "source": "server_aggregate"}},
                    {"name": "analytic_logreg", "params": {"rounds": [0]}},
                ]
            )
        },
        "tiny",
    )
    fedsgd = call_with_params(PROTOCOLS, "fedsgd", "protocol", lr=0.5)
    sends = frozenset({"outgoing"})
    planned = with_adaptive(build_attacks(task), "quantization", {"delta": 0.1}, oracle=fedsgd, hooks=sends)
    labels = [p.label for p in planned["server"]]
    assert labels == ["dlg", "dlg" + ORACLE_SUFFIX, "dlg_batched", "analytic_logreg"]
    plain = ["dlg", "dlg_batched", "analytic_logreg"]
    undefended = with_adaptive(build_attacks(task), "none", {}, oracle=fedsgd, hooks=sends)
    assert [p.label for p in undefended["server"]] == plain
    fedavg = call_with_params(PROTOCOLS, "fedavg", "protocol", lr=0.5)  # no observed gradient
    planned = with_adaptive(build_attacks(task), "quantization", {"delta": 0.1}, oracle=fedavg, hooks=sends)
    assert [p.label for p in planned["server"]] == plain
    # a defense that acts on nothing between the gradients and the observer (early stopping):
    # its generic variant would repeat the standard attack
    stops = frozenset({"should_stop"})
    planned = with_adaptive(build_attacks(task), "early_stopping", {}, oracle=fedsgd, hooks=stops)
    assert [p.label for p in planned["server"]] == plain


def _digits_task(protocol: str, params: dict, attack: dict) -> dict:
    """A 4-node digits MLP (2 rounds) whose eavesdropper runs ``attack`` on round 0."""
    task = tiny_task([])
    task["simulation"] = {
        "dataset": "digits",
        "model": "mlp",
        "model_params": {"hidden": [16]},
        "nodes": 4,
        "protocol": protocol,
        "protocol_params": params,
        "rounds": 2,
        "eval_every": 2,
    }
    task["threats"] = [{"name": "eavesdropper", "attacks": [attack]}]
    return task


def test_a_rotation_no_attack_knows_is_broken_by_the_generic_variant(tmp_path):
    """An eavesdropper sees rotated uploads only (the server, an insider, would decode them):
    DLG learns nothing, DLG through the defense oracle reconstructs the data."""
    task = _digits_task("fedsgd", {"lr": 0.1, "batch_size": 1}, {"name": "dlg", "params": {"rounds": [0]}})
    root = make_root(tmp_path, task, {"rotation": ROTATION})
    store = evaluate(root, tmp_path)
    rotated = outcomes(store, "rotation")
    plain = outcomes(store, "none")
    assert plain["dlg"].leakage > 0.9
    assert rotated["dlg"].status == "ok" and rotated["dlg"].leakage < 0.5
    generic = rotated["dlg" + ORACLE_SUFFIX]
    assert generic.status == "ok" and generic.leakage > 0.9
    (result,) = [r for r in store.results() if r.defense == "rotation"]
    assert result.status == "ok"  # the server decodes each upload: within the per-node contract
    assert result.provenance["oracle"]["queries"] > 0
    assert result.provenance["oracle"]["sandbox"].startswith("landlock")  # as the simulation's


def test_a_rotation_of_fedavg_uploads_is_broken_by_generic_update_matching(tmp_path):
    """FedAvg: the eavesdropper sees rotated local models. Update matching learns nothing from
    them; through the oracle (``D(Δ') = R(θ + Δ') − θ``) it reconstructs the data."""
    attack = {"name": "fedavg_update_inversion", "params": {"rounds": [0], "iterations": 300}}
    task = _digits_task("fedavg", {"lr": 0.1, "batch_size": 1, "local_steps": 1}, attack)
    root = make_root(tmp_path, task, {"rotation": ROTATION})
    store = evaluate(root, tmp_path)
    rotated, plain = outcomes(store, "rotation"), outcomes(store, "none")
    label = "fedavg_update_inversion"
    assert plain[label].leakage > 0.9
    assert rotated[label].status == "ok" and rotated[label].leakage < 0.5
    generic = rotated[label + ORACLE_SUFFIX]
    assert generic.status == "ok", generic.reason
    assert generic.leakage > 0.9


def test_the_update_pipeline_is_answered_in_closed_form(tmp_path):
    """``D(Δ) = outgoing(local_update(θ + Δ, θ)) − θ`` for a defense that halves the message."""
    source = """
from bench.defense.base import DEFENSES, Defense


@DEFENSES.register("halve", "halve the uploads")
class Halve(Defense):
    protocols = ("fedavg",)

    def outgoing(self, payload, msg):
        return payload * 0.5
"""
    spec = tiny_task([])
    spec["simulation"]["protocol"] = "fedavg"
    spec["simulation"]["dtype"] = "float64"
    root = make_root(tmp_path, spec, {"halve": source})
    task = parse_task(spec, "tiny")
    defense = {"name": "halve", "params": {}, "source": blob(source.encode()), "root": str(root)}
    oracle.setup({"task": task.model_dump_json(), "seed": 7, "defense": defense})
    o = oracle._ORACLE[0]
    q = _query(o, 5, 1)
    got = o.handle(q)
    d = q["grads"][:, 0].clone().requires_grad_(True)
    want = gradient_distance(0.5 * (q["theta"] + d) - q["theta"], q["target"], "l2")
    (dd,) = torch.autograd.grad(want.sum(), d)
    torch.testing.assert_close(got["values"], want.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got["grads"][:, 0], dd, rtol=1e-10, atol=1e-12)
    with pytest.raises(oracle.OracleError, match="one update per problem"):
        o.handle(_query(o, 2, 3))


@pytest.mark.slow
def test_the_generic_variant_is_as_strong_as_the_name_keyed_one(tmp_path, monkeypatch):
    """On the quick track of gradient inversion under FedSGD, wherever a name-keyed ``+adaptive`` variant and
    the generic ``+oracle`` variant both run against top-k, quantization, message noise and
    clipping, the generic one leaks at least as much, to within 0.05."""
    from bench.evaluation import job

    monkeypatch.setattr(job, "ORACLE_SKIP_LEAKAGE", 2.0)  # run every generic variant
    defenses = ["top_k:fraction=0.1", "quantization:delta=0.01", "gaussian_noise:sigma=0.01"]
    defenses.append("gradient_clipping:max_norm=1.0")
    args = ["--task", "digits_mlp_fedsgd", "--seeds", "1", "--jobs", "2"]
    for d in defenses:
        args += ["--defense", d]
    store = evaluate(REPO, tmp_path, *args)
    pairs = 0
    for result in store.results():
        assert result.status == "ok", result.reason
        by_label = {a.attack: a for a in result.attacks}
        for label, outcome in by_label.items():
            if not label.endswith("+adaptive"):
                continue
            generic = by_label.get(label.replace("+adaptive", ORACLE_SUFFIX))
            if generic is None:
                continue
            pairs += 1
            assert generic.status == "ok", generic.reason
            assert generic.leakage >= outcome.leakage - 0.05, (result.defense, label)
        assert any(label.endswith(ORACLE_SUFFIX) for label in by_label), result.defense
    assert pairs >= 1  # inverting_gradients against top_k


def _worlds_query(o: oracle.DefenseOracle) -> dict:
    gen = torch.Generator().manual_seed(3)
    cfg = o.sim.config.model_copy(update={"seed": 0})
    return {
        "op": "reference_worlds",
        "cfg": cfg.model_dump_json(),
        "x": torch.randn(24, 2, generator=gen, dtype=torch.float64),
        "y": torch.randint(0, 2, (24,), generator=gen),
        "n_classes": 2,
        "counts": [1] * 8,
        "worlds": 2,
        "rounds": [1, 2],
        "source": "global_model",
        "seed": 11,
        "mixing": None,
        "online_candidates": 0,
    }


def test_reference_worlds_are_trained_under_the_defense_in_the_oracle():
    """The generic membership variants calibrate on worlds trained with the defense's hooks: a
    clipping norm no gradient reaches gives exactly the undefended worlds; a tight one moves them."""
    from bench.attacks.membership.reference_worlds import reference_worlds_at

    source = (REPO / "defenses" / "gradient_clipping.py").read_bytes()
    o = _task("gradient_clipping", {"max_norm": 1e6}, source)
    q = _worlds_query(o)
    got = o.handle(q)["worlds"]
    cfg = o.sim.config.model_copy(update={"seed": 0})
    plain = reference_worlds_at(cfg, q["x"], q["y"], 2, q["counts"], 2, [1, 2], "global_model", 11)
    for t in (1, 2):
        torch.testing.assert_close(got[str(t)]["theta"], plain[t].theta, rtol=1e-12, atol=1e-14)
        assert torch.equal(got[str(t)]["trained_on"], plain[t].trained_on)
    tight = _task("gradient_clipping", {"max_norm": 1e-3}, source)
    moved = tight.handle(_worlds_query(tight))["worlds"]
    assert not torch.allclose(moved["2"]["theta"], plain[2].theta)


def test_every_committed_defense_is_answered_on_fedsgd():
    """The oracle runs each committed defense's hooks on a few nodes' rows under autograd: every
    example answers finite values and gradients, or — secure aggregation's ring elements —
    refuses with a reason (the generic variant then fails, as the standard attacks do)."""
    from bench.defense.loading import discover_defenses, load_defense_module
    from bench.defense.plugin import DEFENSES

    for name in discover_defenses(REPO):
        load_defense_module(name, REPO)
        source = (REPO / "defenses" / f"{name}.py").read_bytes()
        for example in DEFENSES.get(name).examples:
            o = _task(name, dict(example), source)
            try:
                got = o.handle(_query(o, 5, 2))
            except oracle.OracleError as exc:
                assert name == "secure_aggregation" and "not real vectors" in str(exc)
                continue
            assert torch.isfinite(got["values"]).all() and torch.isfinite(got["grads"]).all(), name


def test_update_matching_has_a_generic_variant_only_without_per_step_hooks():
    """FedAvg update matching runs ``+oracle`` against a defense acting on the trained model or its
    message, not against one acting inside the local steps, and not on FedSGD."""
    from bench.attacks.inversion.local_updates import FedAvgUpdateInversion

    fedavg = call_with_params(PROTOCOLS, "fedavg", "protocol", lr=0.5)
    fedsgd = call_with_params(PROTOCOLS, "fedsgd", "protocol", lr=0.5)
    attack = FedAvgUpdateInversion()
    assert attack.uses_defense_oracle(fedavg, frozenset({"outgoing"}))
    assert attack.uses_defense_oracle(fedavg, frozenset({"local_update", "decode"}))
    assert not attack.uses_defense_oracle(fedavg, frozenset({"outgoing", "local_gradients"}))
    assert not attack.uses_defense_oracle(fedavg, frozenset({"decode"}))
    assert not attack.uses_defense_oracle(fedsgd, frozenset({"outgoing"}))
