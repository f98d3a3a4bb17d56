"""The plugin rules (bench.defense.source_policy): what Python would still let a defense do
outside its per-node hooks is refused on the source, before any of it runs.

Each hostile source below is a side channel or an escape a contributor could try — state kept
where the next call or another node can read it (a module global, a class attribute, a default
argument, a file), the call stack or the garbage collector to the simulation, the functorch
internals that unwrap a vmapped row into every node's rows, the random state the harness seeds —
and each must be refused with the rule it breaks. Every committed plugin passes the rules.
"""

from __future__ import annotations

import glob
import textwrap
from pathlib import Path

import pytest

from bench.core.errors import BenchInputError
from bench.defense.source_policy import check_plugin_source, plugin_source_problems
from tests.support.bench_root import REPO

HEAD = """
from __future__ import annotations

import torch

from bench.defense.base import DEFENSES, Defense
"""


def _plugin(body: str, head: str = HEAD) -> str:
    return (
        head
        + textwrap.dedent(
            """
        @DEFENSES.register("hostile", "a hostile plugin")
        class Hostile(Defense):
        """
        )
        + textwrap.indent(textwrap.dedent(body), "    ")
    )


#: name -> (source, a phrase of the rule it must be refused by)
HOSTILE = {
    "module_global_stash": (
        HEAD + "STASH = {}\n" + _plugin("def outgoing(self, payload, msg):\n    return payload\n", ""),
        "a module-level value is a constant",
    ),
    "default_argument_stash": (
        _plugin("def outgoing(self, payload, msg, memo={}):\n    return payload\n"),
        "a default argument is a constant",
    ),
    "class_attribute_by_type": (
        _plugin("def outgoing(self, payload, msg):\n    type(self).kept = payload\n    return payload\n"),
        "'type'",
    ),
    "instance_dict": (
        _plugin("def outgoing(self, payload, msg):\n    self.__dict__['x'] = payload\n    return payload\n"),
        "dunder",
    ),
    "file_stash": (
        _plugin(
            "def outgoing(self, payload, msg):\n"
            "    torch.save(payload, '/tmp/stash.pt')\n"
            "    return payload\n"
        ),
        "torch.save",
    ),
    "open_file": (
        _plugin("def outgoing(self, payload, msg):\n    open('/tmp/x', 'w')\n    return payload\n"),
        "'open'",
    ),
    "import_os": (HEAD + "import os\n" + _plugin("pass\n", ""), "import os"),
    "import_gc": (HEAD + "import gc\n" + _plugin("pass\n", ""), "import gc"),
    "import_lightning": (
        HEAD + "from pytorch_lightning.callbacks import Callback\n" + _plugin("pass\n", ""),
        "pytorch_lightning",
    ),
    "engine_import": (
        HEAD + "from bench.simulation import engine\n" + _plugin("pass\n", ""),
        "bench.simulation",
    ),
    "unwrap_vmap": (
        _plugin(
            "def local_gradients(self, grad, node):\n"
            "    return torch._C._functorch.get_unwrapped(grad).mean(0)\n"
        ),
        "torch._C",
    ),
    "frame_walk": (
        _plugin(
            "def local_gradients(self, grad, node):\n"
            "    try:\n        raise ValueError()\n"
            "    except ValueError as e:\n        frame = e.__traceback__.tb_frame.f_back\n"
            "    return grad\n"
        ),
        "dunder",
    ),
    "generator_frame": (
        _plugin(
            "def local_gradients(self, grad, node):\n"
            "    g = (x for x in [1])\n    f = g.gi_frame\n    return grad\n"
        ),
        "gi_frame",
    ),
    "rng_state": (
        _plugin("def bind(self, run):\n    self.state = torch.get_rng_state()\n"),
        "torch.get_rng_state",
    ),
    "seed_the_rng": (_plugin("def bind(self, run):\n    torch.manual_seed(0)\n"), "torch.manual_seed"),
    "own_generator": (
        _plugin("def bind(self, run):\n    self.gen = torch.Generator()\n"),
        "torch.Generator",
    ),
    "uninitialized_memory": (
        _plugin("def local_gradients(self, grad, node):\n    return grad + torch.empty(grad.shape)\n"),
        "torch.empty",
    ),
    "getattr_escape": (
        _plugin("def local_gradients(self, grad, node):\n    return getattr(torch, '_C')\n"),
        "'getattr'",
    ),
    "registry_stash": (
        _plugin(
            "def outgoing(self, payload, msg):\n"
            "    DEFENSES.register('x', 'y')(payload)\n"
            "    return payload\n"
        ),
        "DEFENSES is used only as the class decorator",
    ),
    "module_alias": (
        _plugin("def local_gradients(self, grad, node):\n    t = torch\n    return grad\n"),
        "used only as torch.<function>",
    ),
    "submodule_alias": (
        _plugin("def local_gradients(self, grad, node):\n    la = torch.linalg\n    return grad\n"),
        "used only as torch.linalg.<function>",
    ),
    "attribute_on_another_object": (
        _plugin("def local_gradients(self, grad, node):\n    node.state.x = grad\n    return grad\n"),
        "assigned on another object than self",
    ),
    "global_statement": (
        _plugin("def local_gradients(self, grad, node):\n    global X\n    return grad\n"),
        "Global",
    ),
    "with_statement": (
        _plugin("def local_gradients(self, grad, node):\n    with torch.no_grad():\n        return grad\n"),
        "With",
    ),
    "private_attribute": (
        _plugin("def local_gradients(self, grad, node):\n    return grad._base\n"),
        "another object's private attribute",
    ),
    "metaclass": (HEAD + "class Meta(Defense, metaclass=type):\n    pass\n", "no metaclass"),
    "dunder_method": (_plugin("def __deepcopy__(self, memo):\n    return self\n"), "no dunder method"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_source_is_refused_naming_its_rule(name, tmp_path):
    source, rule = HOSTILE[name]
    problems = plugin_source_problems(source, Path(f"{name}.py"))
    assert problems, f"{name} was not refused"
    assert any(rule in text for _, text in problems), (name, problems)
    with pytest.raises(BenchInputError) as exc:
        check_plugin_source(source, Path(f"{name}.py"), "hostile")
    assert "breaks the plugin rules" in str(exc.value) and f"{name}.py:" in str(exc.value)


@pytest.mark.parametrize(
    "path", sorted(glob.glob(str(REPO / "defenses" / "*.py"))), ids=lambda p: Path(p).stem
)
def test_every_committed_plugin_keeps_the_rules(path):
    assert plugin_source_problems(Path(path).read_bytes(), Path(path)) == []


def test_a_plugin_that_breaks_the_rules_is_an_input_error_before_it_runs(tmp_path):
    """The loader checks the source before executing it: a plugin whose module level would write
    a file never writes it."""
    from bench.defense.loading import load_defense_module

    target = tmp_path / "written"
    (tmp_path / "defenses").mkdir()
    (tmp_path / "defenses" / "hostile.py").write_text(
        HEAD + f"open({str(target)!r}, 'w').write('x')\n" + _plugin("pass\n", "")
    )
    with pytest.raises(BenchInputError, match="breaks the plugin rules"):
        load_defense_module("hostile", tmp_path)
    assert not target.exists()


def test_ordinary_tensor_code_is_allowed():
    source = _plugin(
        """
        examples = ({"k": 2},)

        def __init__(self, k: int = 2) -> None:
            self.k = k

        def local_gradients(self, grad, node):
            keep = grad.abs().topk(self.k).indices
            scale = torch.linalg.vector_norm(grad).clamp_min(1e-12)
            noisy = grad + 0.1 * torch.randn_like(grad) / scale
            return torch.zeros_like(grad).scatter(0, keep, noisy.gather(0, keep))
        """
    )
    assert plugin_source_problems(source, Path("ok.py")) == []


def test_a_harness_mechanism_cannot_be_subclassed(tmp_path):
    """A plugin may configure DP-SGD's mechanism but never override how it clips or adds noise:
    subclassing the record fails the plugin's load, naming the reason."""
    from bench.defense.loading import load_defense_module

    (tmp_path / "defenses").mkdir()
    (tmp_path / "defenses" / "quiet_dp.py").write_text(
        HEAD.replace("Defense\n", "Defense, PerSampleGaussian\n")
        + "\n\nclass Quiet(PerSampleGaussian):\n    pass\n"
        + _plugin("def mechanisms(self):\n    return (Quiet(noise_multiplier=2.0),)\n", "").replace(
            "hostile", "quiet_dp"
        )
    )
    with pytest.raises(BenchInputError, match="cannot be subclassed outside bench"):
        load_defense_module("quiet_dp", tmp_path)
