"""Tests for L{kilolock.tfstate.values}: the projection's JSON text.

L{compact_json} runs CPython's private C encoder (C{json.encoder.c_make_encoder})
built once, because the public C{json.JSONEncoder.encode} builds one per call
and that costs the projection measurably.  These tests pin what that relies on:
the C encoder exists in this Python, and its text is C{json.dumps}' text.
"""

from __future__ import annotations

import json
import json.encoder
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kilolock.tfstate.values import (
    clean_text,
    compact_json,
    compact_json_without_floats,
    is_json_integer,
    json_kind,
)
from tests.support.paths import SAMPLE_STATES

STATES = SAMPLE_STATES


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _fixture_values() -> list[Any]:
    """Every attributes object and output of the real Terraform fixtures."""
    values: list[Any] = []
    for path in sorted(STATES.glob("*.tfstate")):
        doc = json.loads(path.read_bytes())
        for resource in doc.get("resources") or []:
            values.extend(instance.get("attributes") for instance in resource["instances"])
        for output in (doc.get("outputs") or {}).values():
            values.extend((output.get("value"), output.get("type")))
    return values


def test_the_c_encoder_exists_in_this_python() -> None:
    """compact_json depends on the C accelerator of the json module."""
    assert json.encoder.c_make_encoder is not None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "value",
    [
        None, True, False, 0, -1, 2**63 - 1, 10**30, 1.5, -0.0, 1e-7, 1.7976931348623157e308,
        "", "plain", 'quote " and \\ backslash', "tab\tnew\nline\x00nul\x1f",
        "non-ascii é 日本 \U0001f600", "\ud800 lone surrogate",
        [], {}, [1, "a", None, [2, [3]]],
        {"b": 1, "a": {"d": [], "c": {}}, "é": "x", "": 0},
        {"tags": {"Name": "x"}, "list": [{"z": 1, "y": 2}], "n": None},
        *_fixture_values(),
    ],
)
def test_compact_json_is_json_dumps_compact_and_sorted(value: Any) -> None:
    """For every finite JSON value the text is json.dumps(sort_keys=True,
    separators=(",", ":")), ASCII-escaped."""
    assert compact_json(value) == _dumps(value)


def test_the_fixtures_give_values_to_compare() -> None:
    """The comparison above covers the fixtures' attributes (not an empty list)."""
    assert len([value for value in _fixture_values() if isinstance(value, dict)]) >= 10


def test_infinities_and_nan_become_text() -> None:
    """A number beyond a double's range is projected as the string
    "Infinity"/"-Infinity", a NaN (only a caller's document holds one) as
    "NaN": the text is always JSON; strings that spell them are untouched."""
    value = {"big": float("inf"), "small": [float("-inf")], "nan": float("nan"), "n": 1,
             "text": 'Infinity "NaN" \\ -Infinity'}
    assert compact_json(value) == ('{"big":"Infinity","n":1,"nan":"NaN","small":["-Infinity"],'
                                   '"text":"Infinity \\"NaN\\" \\\\ -Infinity"}')
    assert json.loads(compact_json(value))["text"] == value["text"]
    assert compact_json(float("nan")) == '"NaN"'
    assert compact_json(json.loads("1e999")) == '"Infinity"'


def test_compact_json_takes_any_nesting_the_encoder_takes() -> None:
    """No recursion in Python: 900 levels around an infinity are encoded."""
    deep: object = float("inf")
    for _ in range(900):
        deep = [deep]
    assert compact_json(deep) == "[" * 900 + '"Infinity"' + "]" * 900


def test_a_value_that_is_not_json_is_a_type_error() -> None:
    """Like json.dumps, a Python value with no JSON form raises TypeError."""
    with pytest.raises(TypeError, match="set is not JSON"):
        compact_json({"a": {1, 2}})
    with pytest.raises(TypeError):
        _dumps({"a": {1, 2}})


def test_clean_text_replaces_nul_and_lone_surrogates() -> None:
    """What a database text column refuses becomes U+FFFD; the rest is kept."""
    assert clean_text("a\x00b\ud800c\udfff") == "a\ufffdb\ufffdc\ufffd"
    assert clean_text("é 日本 \U0001f600") == "é 日本 \U0001f600"


@pytest.mark.parametrize(
    ("value", "kind", "integer"),
    [(None, "null", False), (True, "a boolean", False), (3, "an integer", True),
     (1.0, "a number with a fraction or exponent", False), ("4", "a string", False),
     ([], "an array", False), ({}, "a JSON object", False)],
)
def test_json_kind_and_integer(value: Any, kind: str, integer: bool) -> None:
    """Error messages name the JSON type; a boolean is not an integer."""
    assert json_kind(value) == kind
    assert is_json_integer(value) is integer


#: Text as states hold it: mostly ASCII (msgspec's text is kept), any code
#: point, and the spellings that need escapes or are refused.
_TEXT = st.one_of(
    st.text(st.characters(max_codepoint=127)),
    st.text(),
    st.sampled_from(["\ud800", "a\udfffb", "\x00", "\x1f\x7f", "/\\\"", "\u2028\u2029",
                     "\U0001f600", "(sensitive)"]),
)
#: Decoded JSON without floats, as a state's attributes are.
_FLOATLESS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=2**63, max_value=10**400)
    | _TEXT,
    lambda children: st.lists(children, max_size=6)
    | st.dictionaries(_TEXT, children, max_size=6),
    max_leaves=40,
)


@given(_FLOATLESS)
def test_without_floats_the_fast_encoder_writes_compact_json_text(value: Any) -> None:
    """For any value without a float, compact_json_without_floats gives
    exactly compact_json's text (msgspec's where it is ASCII, else the
    fallback's)."""
    assert compact_json_without_floats(value) == compact_json(value)


def _holds_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_holds_float(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_float(item) for item in value)
    return False


def test_the_fast_encoder_writes_the_fixtures_attributes_as_compact_json() -> None:
    """The real Terraform fixtures' values without floats, each encoded by
    msgspec (all ASCII), give compact_json's text."""
    values = [value for value in _fixture_values() if not _holds_float(value)]
    assert len(values) >= 10
    for value in values:
        assert compact_json_without_floats(value) == compact_json(value)


def test_the_fast_encoder_falls_back_where_msgspec_would_differ() -> None:
    """Non-ASCII text (compact_json escapes it) and unpaired surrogates
    (msgspec refuses them) get compact_json's text; any nesting works."""
    for value in ({"name": "café"}, ["\ud800"], {"k\udfff": 1}):
        assert compact_json_without_floats(value) == compact_json(value)
    deep: object = "x"
    for _ in range(600):
        deep = [deep]
    assert compact_json_without_floats(deep) == compact_json(deep)
