"""`load_json` and `load_yaml`: what they read, and the bound they name for what they refuse."""

from __future__ import annotations

import json

import pytest
import yaml

from sandbox_runner.bounded import LimitExceeded, json_depth, load_json, load_yaml


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}], "c": {}}', 4),
        ('["[[[[", "]]", "{"]', 1),  # brackets in strings do not nest
        ('["\\"[[[", "\\\\", "[\\\\"]', 1),  # nor after escaped quotes and backslashes
        ('["\\\\\\"[", "]\\\\"]', 1),
        ('{"ü€": ["𝄞[["]}', 2),
    ],
)
def test_depth_counts_only_brackets_outside_strings(text: str, depth: int) -> None:
    assert json_depth(text) == depth
    assert json_depth(text.encode()) == depth


def test_within_the_bounds_it_is_json_loads() -> None:
    text = '{"a":' * 50 + "[" * 50 + "1" + "]" * 50 + "}" * 50  # 100 levels: the most read
    assert load_json(text, max_bytes=len(text)) == json.loads(text)
    assert load_json(text.encode(), max_bytes=len(text)) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[" * 101 + "]" * 101, "nested deeper than 100 levels"),
        ('{"a":' * 50_000 + "1" + "}" * 50_000, "nested deeper than 100 levels"),
        ("[" * 50_000, "nested deeper than 100 levels"),  # not JSON either: refused first
        ("[" + "1," * 600 + "1]", "over 1000 bytes"),
    ],
)
def test_past_a_bound_is_one_named_error(text: str, why: str) -> None:
    with pytest.raises(LimitExceeded) as caught:
        load_json(text, max_bytes=1000 if "over" in why else len(text))
    assert str(caught.value) == why
    assert isinstance(caught.value, ValueError)


def test_brackets_in_an_unclosed_string_are_no_nesting() -> None:
    with pytest.raises(json.JSONDecodeError, match="Unterminated string"):
        load_json('"' + "[" * 50_000, max_bytes=50_001)


def test_options_reach_json_loads() -> None:
    assert load_json('{"a": 1.5}', max_bytes=100, parse_float=str) == {"a": "1.5"}


def test_yaml_within_the_bounds() -> None:
    text = "a: &x [1, 2]\nb: *x\n" + "c: " + "[" * 99 + "]" * 99 + "\n"
    data = load_yaml(text, max_bytes=1000)
    assert data["a"] == data["b"] == [1, 2]
    assert load_yaml(b"k: v\n", max_bytes=10) == {"k": "v"}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[" * 101 + "]" * 101, "nested deeper than 100 levels"),
        ("- " * 101 + "x", "nested deeper than 100 levels"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
                for p, n in zip("ab", "bc", strict=True)
            ),
            "over 1000 values (an alias counts what it repeats)",
        ),
        ("&a [*a]", "an alias refers to a value that holds it"),
        ("k: " + "v" * 2000, "over 1000 bytes"),
    ],
)
def test_yaml_past_a_bound_is_one_named_error(text: str, why: str) -> None:
    with pytest.raises(LimitExceeded) as caught:
        load_yaml(text, max_bytes=1000 if "bytes" in why else len(text), max_nodes=1000)
    assert str(caught.value) == why


def test_yaml_that_is_not_yaml_is_a_yaml_error() -> None:
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: [", max_bytes=100)
