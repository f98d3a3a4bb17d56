"""The project's YAML reader: numbers as people write them, no infinities or NaN, no duplicate
keys, and every unreadable file an error naming the file and the line."""

from __future__ import annotations

import pytest
import yaml

from bench.core.errors import REPR_LIMIT, BenchInputError, short_repr
from bench.core.yaml_io import load_yaml, read_yaml
from bench.spec.arguments import parse_value, split_items
from tests.support.bench_root import REPO


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1e6", 1e6),
        ("1e-3", 1e-3),
        ("-2E+4", -2e4),
        ("1.5e3", 1500.0),  # YAML 1.1 needs a signed exponent
        ("1e+06", 1e6),
        (".5", 0.5),
        ("+.5", 0.5),
        ("-.5e-3", -5e-4),
        ("1.", 1.0),
        ("0.1", 0.1),
        ("3.14_15", 3.1415),
        ("12", 12),
        ("-3", -3),
        ("010", 10),  # decimal, not YAML 1.1's octal 8
        ("08", 8),  # YAML 1.1: the string '08'
        ("0x1f", 31),
        ("0o17", 15),
        ("0b101", 5),
        ("1_000", 1000),
        ("1:30", "1:30"),  # not YAML 1.1's sexagesimal 90
        ("1e", "1e"),
        ("e5", "e5"),
        ("'1e6'", "1e6"),  # quoted: a string
        ("true", True),
        ("null", None),
        ("[1e3, 2]", [1000.0, 2]),
        ("{lr: 1e-2}", {"lr": 0.01}),
    ],
)
def test_numbers_are_read_the_way_they_are_written(text, expected):
    value = load_yaml(text)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("number", [".inf", "-.inf", ".Inf", ".nan", ".NaN", "1e999", "-1e999"])
def test_a_non_finite_number_in_a_file_names_the_file_and_the_line(tmp_path, number):
    path = tmp_path / "task.yaml"
    path.write_text(f"name: t\nsimulation:\n  protocol_params: {{lr: {number}}}\n")
    with pytest.raises(BenchInputError) as info:
        read_yaml(path)
    message = info.value.message
    assert info.value.field == str(path) and info.value.value == "task.yaml"
    assert f"line 3, column 25: 'lr': '{number}' is not a finite number" in message and "JSON" in message


def test_a_key_given_twice_names_both_lines(tmp_path):
    path = tmp_path / "task.yaml"
    path.write_text("name: t\nsimulation:\n  rounds: 3\n  nodes: 2\n  rounds: 4\n")
    with pytest.raises(BenchInputError) as info:
        read_yaml(path)
    assert "line 5, column 3: duplicate key 'rounds' (first at line 3)" in info.value.message
    with pytest.raises(yaml.YAMLError, match="duplicate key 'a'"):
        load_yaml("[{a: 1, b: 2, a: 3}]")


def test_merge_keys_may_be_overridden_without_a_duplicate_error():
    assert load_yaml("base: &b {lr: 1, mu: 2}\nrun:\n  <<: *b\n  lr: 3\n")["run"] == {"lr": 3, "mu": 2}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"name: t\nrounds: 3\ndescription: caf\xe9\n", "not UTF-8 text: byte 0xe9 at line 3"),
        (b"\xff\xfename: t\n", "not UTF-8 text: byte 0xff at line 1"),
        (b"name: t\nx: \x00\n", "line 2: character #x0000 is not allowed in YAML"),
        (b"a: [1, 2\n", "malformed YAML at line 2, column 1"),
        (b"a: !!int abc\n", "malformed YAML at line 1, column 4: 'abc' is not an integer"),
    ],
)
def test_an_unreadable_file_is_an_error_naming_it(tmp_path, content, expected):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(BenchInputError) as info:
        read_yaml(path, field="--config")
    assert info.value.field == "--config" and info.value.value == str(path)
    assert expected in info.value.message


def test_every_file_of_the_repository_reads_as_with_pyyaml():
    """The new rules change no value of the project's own YAML files (none writes 1e6 unquoted)."""
    files = sorted(REPO.glob("tasks/*.yaml"))
    assert files
    for path in files:
        assert load_yaml(path.read_text()) == yaml.safe_load(path.read_text()), path


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1e6", 1e6), ("0.5", 0.5), ("[z0, delta_z]", ["z0", "delta_z"]), ("@x", "@x"), ("a b", "a b")],
)
def test_a_command_line_value_is_read_like_a_file(text, expected):
    assert parse_value(text, "defense.sigma", f"sigma={text}") == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty value in 'x:sigma=': write key=VALUE"),
        ("  ", "empty value"),
        (".inf", "not a finite number"),
        ("1e999", "not a finite number"),
        ("[1, .nan]", "not a finite number"),
        ("{a: 1, a: 2}", "duplicate key 'a'"),
        ("[1, 2", "malformed YAML list or mapping"),
    ],
)
def test_a_bad_command_line_value_names_the_field_and_the_value(text, reason):
    with pytest.raises(BenchInputError) as info:
        parse_value(text, "defense.sigma", "x:sigma=" + text)
    assert info.value.field == "defense.sigma" and info.value.value == text
    assert reason in info.value.message


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("sigma=0.5,kinds=[z0, delta_z]", ["sigma=0.5", "kinds=[z0, delta_z]"]),
        ("a={b: 1, c: 2},d=3,", ["a={b: 1, c: 2}", "d=3"]),
        ("a='x,y',b=\"u,v\"", ["a='x,y'", 'b="u,v"']),
        ("a=it's,b=2", ["a=it's", "b=2"]),
        ("", []),
    ],
)
def test_items_split_at_commas_outside_brackets_and_quotes(text, items):
    assert split_items(text) == items


def alias_bomb(levels: int, key: str = "a") -> str:
    """A "billion laughs" document: each level lists the one below nine times (9**levels values)."""
    lines = [f"{key}0: &{key}0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{key}{i}: &{key}{i} [{', '.join([f'*{key}{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "task.yaml"
    path.write_text("name: t\n" + alias_bomb(9))  # 1 kB standing for 387 420 489 values
    with pytest.raises(BenchInputError) as info:
        read_yaml(path)
    message = info.value.message
    assert "line 7, column 5: its aliases expand this value to more than 100,000 values" in message
    assert len(message) < 500
    with pytest.raises(BenchInputError, match="aliases expand to over 100,000 values"):
        parse_value("[" + ", ".join(["&a0 [x, x, x, x, x, x, x, x, x]"] + ["*a0"] * 20_000) + "]", "p.x", "x")


@pytest.mark.parametrize("text", ["a: &a [1, *a]\n", "a: &a {b: *a}\n", "&x [1, [2, *x]]\n"])
def test_a_recursive_alias_is_refused(text):
    with pytest.raises(yaml.YAMLError, match="refers to a value that contains it"):
        load_yaml(text)


def test_aliases_below_the_bound_are_read():
    data = load_yaml(alias_bomb(4) + "base: &b {lr: 1, mu: 2}\nrun: {<<: *b, lr: 3}\n")
    assert len(data["a3"]) == 9 and data["a3"][8][8][8] == ["x"] * 9
    assert data["run"] == {"lr": 3, "mu": 2}


@pytest.mark.parametrize(
    "value",
    [1, "a", [1, (2,), {"a": (1, 2)}], {}, (), [None, True, 1.5], {"x": [[]]}],
)
def test_short_repr_is_repr_for_short_values(value):
    assert short_repr(value) == repr(value)


def test_short_repr_cuts_long_shared_and_recursive_values():
    shared = [["x"] * 9] * 9
    for _ in range(8):
        shared = [shared] * 9  # 9**10 values, never built as text
    loop: list = []
    loop.append(loop)
    for value in (shared, loop, list(range(10**6)), "y" * 10**6):
        text = short_repr(value)
        assert len(text) == REPR_LIMIT + 1 and text.endswith("…")
    assert short_repr(shared).startswith("[" * 10 + "'x', 'x'") and short_repr(loop) == "[" * REPR_LIMIT + "…"
    assert short_repr(list(range(10**6)))[:-1] == repr(list(range(1000)))[:REPR_LIMIT]
