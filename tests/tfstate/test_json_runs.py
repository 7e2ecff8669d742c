"""Tests for L{kilolock.tfstate.json_runs}: runs of a large state's resources decoded
by msgspec give exactly what C{json} gives element by element.

The runs are held to the decode without them (C{json} alone, the code
before them): the same elements (types, key order, float bits), the same
"held a float" for each, the same document around them, and the same error
where there is one -- on generated and hostile arrays (floats, +-1e400,
1e-400, huge integers, non-ASCII text, NUL, lone surrogates, duplicate keys,
escapes, nesting around the depth limit, broken separators), and through
L{kilolock.tfstate.parse.parse_state} on large states.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kilolock.core.errors import InvalidState, InvalidText
from kilolock.core.text import MAX_JSON_DEPTH, TOO_DEEP
from kilolock.tfstate import json_runs, parse
from kilolock.tfstate.json_runs import ElementRuns
from kilolock.tfstate.parse import parse_state, project_state
from kilolock.tfstate.projection import StreamedResources
from tests.support.hostile_support import json_text
from tests.support.json_identity import same_document
from tests.support.state_strategies import histories

#: The deepest a resource may nest: the document's limit, less the top-level
#: object and the resources array.
ROOM = MAX_JSON_DEPTH - 2


class Recording(StreamedResources):
    """What the decoder hands on: each resource, with whether it held no float."""

    def restart(self) -> Recording:
        super().restart()
        self.added: list[tuple[Any, bool]] = []
        return self

    def add(self, resource: Any, without_floats: bool = False) -> None:
        self.added.append((resource, without_floats))
        self.count += 1


class _NoRuns:
    """ElementRuns that never decodes a run: C{json} alone, as before runs."""

    def __init__(self, text: str) -> None:
        pass

    def take(self, position: int) -> None:
        return None


@pytest.fixture(autouse=True)
def short_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of a few elements, so that small arrays hold many of them."""
    monkeypatch.setattr(json_runs, "_SHORTEST", 1)
    monkeypatch.setattr(json_runs, "_LONGEST", 32)
    monkeypatch.setattr(json_runs, "_SEARCH", 256)
    monkeypatch.setattr(json_runs, "_REFUSALS_TOLERATED", 1000)


def _outcome(call: Any) -> Any:
    """What C{call()} answers, or its error (a too-deep element is refused
    alike whether msgspec or json ran out of recursion: parse_state answers
    both with the same InvalidText)."""
    try:
        return call()
    except RecursionError:
        return TOO_DEEP
    except InvalidText as error:
        return error.code if error.code == TOO_DEEP else (type(error), str(error))
    except Exception as error:
        return (type(error), str(error))


def _decoded(text: str, runs: bool) -> Any:
    """The piecewise decode of C{text}: the document and each resource
    handed on with its float note, or the error."""
    def decode() -> Any:
        streamed = Recording()
        document = parse._decode_piecewise(text, streamed)
        return document, streamed.added
    if runs:
        return _outcome(decode)
    with mock.patch.object(parse, "ElementRuns", _NoRuns):
        return _outcome(decode)


def assert_alike(text: str) -> Any:
    """The decode with runs is the decode without them; @return: it."""
    with_runs, without = _decoded(text, True), _decoded(text, False)
    if isinstance(without, tuple) and len(without) == 2 and isinstance(without[1], list):
        assert isinstance(with_runs, tuple), with_runs
        (document, added), (expected_document, expected) = with_runs, without
        assert same_document({k: v for k, v in document.items() if k != "resources"},
                             {k: v for k, v in expected_document.items() if k != "resources"})
        assert [flag for _, flag in added] == [flag for _, flag in expected]
        assert same_document([resource for resource, _ in added],
                             [resource for resource, _ in expected])
    else:
        assert with_runs == without
    return with_runs


def state(elements: list[str], separator: str = ",\n    ") -> str:
    """A v4 state text whose resources array holds C{elements} (JSON texts)."""
    return ('{"version": 4, "serial": 1, "lineage": "l", "resources": [\n    '
            + separator.join(elements) + '\n  ], "outputs": {}}')


def nested(depth: int, inner: str = "1") -> str:
    """A resource nested C{depth} levels (itself one of them)."""
    return '{"a":' + "[" * (depth - 1) + inner + "]" * (depth - 1) + "}"


@pytest.fixture
def runs_taken() -> Iterator[list[int]]:
    """The number of elements of each run decoded."""
    taken: list[int] = []
    original = ElementRuns.take

    def take(self: ElementRuns, position: int) -> Any:
        run = original(self, position)
        if run is not None:
            taken.append(len(list(run)))
        return run
    with mock.patch.object(ElementRuns, "take", take):
        yield taken


# -- generated and hostile arrays ------------------------------------------------

#: Values as JSON text: hostile (1e400, NaN, lone surrogates, NUL, huge
#: integers, escapes) and friendly (any floats, any text, nesting), text
#: escaped to ASCII as Terraform writes it or not.
_FRIENDLY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=8)
_VALUE_TEXT = st.one_of(json_text, _FRIENDLY.map(json.dumps), _FRIENDLY.map(json.dumps),
                        _FRIENDLY.map(lambda value: json.dumps(value, ensure_ascii=False)))

#: An element of the array: mostly an object (as resources are), some
#: arrays and scalars, some nested around the depth limit, some repeating a key.
_OBJECT = st.lists(st.tuples(st.sampled_from(["a", "b", "\\u00e9", "\\ud800", "id"]),
                             _VALUE_TEXT), max_size=4).map(
    lambda members: "{" + ",".join(f'"{k}":{v}' for k, v in members) + "}")
_ELEMENT = st.one_of(
    _OBJECT, _OBJECT, _OBJECT,
    st.lists(_VALUE_TEXT, max_size=3).map(lambda items: "[" + ", ".join(items) + "]"),
    _VALUE_TEXT,
    st.sampled_from([ROOM - 1, ROOM, ROOM + 1, 600]).map(nested),
)

#: What stands between elements: as Terraform writes it, compact, odd, or broken.
_SEPARATOR = st.sampled_from([",\n    ", ", ", ",", " ,\t", ",\r\n", ",\n    ", ",\n    "])
_BROKEN = st.sampled_from(["", ",,", " ", ",]", "\x0c,", ",\u00a0"])


@st.composite
def arrays(draw: st.DrawFn, element: st.SearchStrategy[str] = _ELEMENT,
           least: int = 1) -> str:
    """A state text with a resources array of at least C{least} generated
    elements, its separators regular, varied, or once broken."""
    elements = draw(st.lists(element, min_size=least, max_size=30))
    separator = draw(_SEPARATOR)
    text = separator.join(elements)
    if draw(st.integers(0, 9)) == 0 and len(elements) > 1:
        first = len(elements[0])
        text = elements[0] + draw(_BROKEN) + text[first + len(separator):]
    return state([text], separator)


@settings(max_examples=400, deadline=None)
@given(arrays())
@example(state(['{"f": 1.5}', '{"i": 1}', '{"e": 1e5, "z": -0.0}', '{"n": null}']))
@example(state(['{"big": 1e400, "small": -1e400}', '{"tiny": 1e-400}', '{"x": 1}']))
@example(state(['{"int": 123456789012345678901234567890}', '{"x": 1}', '{"y": 2}']))
@example(state(['{"d": "%s"}' % ("9" * 5000), '{"x": 1}', '{"y": 2}']))
@example(state(['{"k": 1, "k": 2.5}', '{"k": 2.5, "k": 1}', '{"k": [1], "k": {}}']))
@example(state(['{"lone": "\\ud800"}', '{"pair": "\\ud83d\\ude00"}', '{"nul": "a\\u0000"}']))
@example(state(['{"caf\\u00e9": "\u00fc", "raw": "\u65e5\u672c"}', '{"a": 1}', '{"b": 2}']))
@example(state(['{"esc": "\\"\\\\\\/\\b\\f\\n\\r\\t\\u001f\\u007f"}', '{"a": 1}', '{"a": 2}']))
@example(state(['{"a": NaN}', '{"a": 1}', '{"a": Infinity}']))
@example(state([nested(ROOM), nested(ROOM), nested(ROOM + 1), nested(ROOM)]))
@example(state(['{"a": 1}', '{"a": 2}', '{"a": [1 2]}', '{"a": 3}']))
@example(state(['{"a": 1}', '{"a": 2}', '{"a": 3}'], ",\n    ") + "x")
def test_runs_decode_what_json_decodes(text: str) -> None:
    """Any array: the same resources (types, key order, float bits), the same
    float notes, the same document, or the same error."""
    assert_alike(text)


@settings(max_examples=400, deadline=None)
@given(arrays(_OBJECT, least=6))
def test_runs_of_objects_decode_what_json_decodes(text: str) -> None:
    """The same for arrays of objects only (as resources are), where most
    elements are in runs."""
    assert_alike(text)


@pytest.mark.parametrize("depth", [ROOM - 1, ROOM, ROOM + 1, 600, 2000, 100_000])
def test_depth_is_decided_as_before(depth: int) -> None:
    """A resource nested up to the limit is decoded; one level more is
    too_deep; far more, deeper than either decoder recurses, too -- with runs
    as without, wherever the deep resource stands in its run."""
    for place in range(4):
        elements = ['{"a": [1]}'] * 4
        elements[place] = nested(depth)
        outcome = assert_alike(state(elements))
        assert (outcome == TOO_DEEP) is (depth > ROOM)


def test_a_run_with_floats_notes_them_resource_by_resource(runs_taken: list[int]) -> None:
    """In a run that holds floats, only the resources that hold one are
    noted (the others keep the faster encoder)."""
    elements = ['{"a": %s}' % ("1.5" if index % 3 == 0 else str(index)) for index in range(30)]
    _, added = assert_alike(state(elements))
    assert [flag for _, flag in added] == [index % 3 != 0 for index in range(30)]
    assert sum(runs_taken) > 20


def test_errors_come_in_the_order_of_the_resources(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resource that projects badly before one too deep (in the same run)
    is the error; and the other way round."""
    monkeypatch.setattr(parse, "PIECEWISE_THRESHOLD", 0)
    good = json.dumps({"mode": "managed", "type": "t", "name": "n", "instances": []})
    bad = json.dumps({"mode": "managed", "type": 3})
    deep = nested(ROOM + 1)
    bodies = [state([good, good, bad, good, deep, good]).encode(),
              state([good, good, deep, good, bad, good]).encode()]
    for body, error in zip(bodies, [InvalidState, InvalidText], strict=True):
        with pytest.raises(error) as caught:
            parse_state(body)
        with mock.patch.object(parse, "ElementRuns", _NoRuns), pytest.raises(error) as before:
            parse_state(body)
        assert str(caught.value) == str(before.value)


# -- where runs are taken ----------------------------------------------------------


def test_indented_resources_are_decoded_in_runs(runs_taken: list[int]) -> None:
    """Terraform's layout: every resource but the first few is in a run."""
    elements = [json.dumps({"i": index, "tags": {"a": [index]}}, indent=2).replace("\n", "\n    ")
                for index in range(200)]
    assert_alike(state(elements))
    assert sum(runs_taken) >= 195


def test_runs_stop_where_guesses_keep_failing(runs_taken: list[int],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Compact resources whose inner lists repeat the separator: guesses fail,
    and after a few the runs stop (json decodes the rest, alike)."""
    monkeypatch.setattr(json_runs, "_REFUSALS_TOLERATED", 2)
    element = '{"l":[{"a":1},{"b":2},{"c":3}]}'
    calls = []
    original = ElementRuns._decode

    def decode(self: ElementRuns, start: int, end: int) -> Any:
        calls.append(start)
        return original(self, start, end)
    with mock.patch.object(ElementRuns, "_decode", decode):
        assert_alike(state([element] * 200, ","))
    assert len(calls) - len(runs_taken) == 3
    assert len(calls) < 10


def test_text_that_is_not_ascii_is_left_to_json(runs_taken: list[int]) -> None:
    """msgspec reads UTF-8: a run of text that is not ASCII is decoded by json."""
    assert_alike(state(['{"name": "caf\u00e9 \u65e5\u672c"}'] * 50))
    assert runs_taken == []


def test_a_run_is_at_most_a_bounded_stretch(monkeypatch: pytest.MonkeyPatch) -> None:
    """However few brackets the resources hold, a run (one msgspec call
    holding the GIL) is at most the longest stretch plus the search."""
    monkeypatch.setattr(json_runs, "_LONGEST", 2000)
    monkeypatch.setattr(json_runs, "_SEARCH", 500)
    lengths = []
    original = ElementRuns._decode

    def decode(self: ElementRuns, start: int, end: int) -> Any:
        lengths.append(end - start)
        return original(self, start, end)
    with mock.patch.object(ElementRuns, "_decode", decode):
        assert_alike(state(['{"id": "%s"}' % ("x" * 80)] * 2000))
    assert 2000 < max(lengths) <= 2500


# -- through parse_state -----------------------------------------------------------


def _resource(index: int, attributes: dict[str, Any]) -> dict[str, Any]:
    return {"module": f"module.m{index % 7}", "mode": "managed", "type": "t",
            "name": f"r{index}", "provider": "p",
            "instances": [{"schema_version": 0, "attributes": attributes,
                           "sensitive_attributes": [[{"type": "get_attr", "value": "pw"}]]
                           if index % 5 == 0 else [],
                           "dependencies": [f"t.r{index - 1}"] if index else []}]}


_HAZARDS = [
    {"f": 1.5, "e": 1e300, "z": -0.0}, {"big": 123456789012345678901234567890},
    {"pw": "secret", "n": 1}, {"u": "caf\u00e9"}, {"nul": "a\x00b"}, {"lone": "\ud800"},
    {"k": [1, {"x": None}]}, {"ctl": "\x1f\x7f\u2028"},
]


def test_a_large_state_parses_as_before() -> None:
    """A large state (over the piecewise threshold, so decoded piecewise with
    runs of the real length) with every hazard in some resources: the same
    ParsedState as without runs, and the whole document's projection."""
    resources = [_resource(index, dict(_HAZARDS[index % len(_HAZARDS)], pad="p" * 200))
                 if index % 3 == 0 else _resource(index, {"id": str(index), "pad": "p" * 200})
                 for index in range(5000)]
    text = json.dumps({"version": 4, "serial": 9, "lineage": "l", "resources": resources,
                       "outputs": {"o": {"value": 1.5, "type": "number"}}}, indent=2)
    text = text.replace('"e": 1e+300', '"e": 1e400').replace('"big"', '"big2": 1e-400, "big"')
    body = text.encode()
    assert len(body) > parse.PIECEWISE_THRESHOLD
    parsed = parse_state(body)
    with mock.patch.object(parse, "ElementRuns", _NoRuns):
        assert parse_state(body) == parsed
    assert parsed.projection == project_state(json.loads(text))


_RESOURCE = """{
      "mode": "managed",
      "type": "t",
      "name": %s,
      "provider": "p",
      "instances": [
        {
          "attributes": {"a": %s, "id": "x"},
          "sensitive_attributes": %s,
          "dependencies": ["t.x"]
        }
      ]
    }"""


@st.composite
def hostile_states(draw: st.DrawFn) -> bytes:
    """v4 states of a few resources laid out as Terraform writes them, with
    any value as an attribute, and names and sensitive paths of any shape."""
    resources = [_RESOURCE % (
        draw(st.sampled_from(['"r"', "3", "null", '"\\ud800"', '"caf\\u00e9"', '"a\\u0000"'])),
        draw(_VALUE_TEXT),
        draw(st.sampled_from(["[]", '[[{"type": "get_attr", "value": "a"}]]', "null", "3"])))
        for _ in range(draw(st.integers(2, 12)))]
    return state(resources).encode()


@settings(max_examples=300, deadline=None)
@given(st.one_of(hostile_states(), histories().map(lambda pair: pair[0])))
def test_parse_state_answers_alike_with_and_without_runs(body: bytes) -> None:
    """Any state decoded piecewise: the same ParsedState, or the same error
    (its message included), with runs and without."""
    with mock.patch.object(parse, "PIECEWISE_THRESHOLD", 0):
        outcome = _outcome(lambda: parse_state(body))
        with mock.patch.object(parse, "ElementRuns", _NoRuns):
            assert _outcome(lambda: parse_state(body)) == outcome


@pytest.mark.parametrize("damage", [
    ("\"r2500\"", "\"r2500\" 1"), ("\"r2500\"", "\"\\ud800\\u0041\\x\""),
    ("\"r2500\"", "NaN"), ("\"id\": \"2500\"", "\"id\": " + "[" * (ROOM - 4) + "]" * (ROOM - 4)),
    ("\"id\": \"2500\"", "\"id\": " + "[" * (ROOM - 3) + "]" * (ROOM - 3)),
    ("\"id\": \"2500\"", "\"id\": " + "9" * 5000),
])
def test_bad_input_in_a_large_state_is_refused_as_before(damage: tuple[str, str]) -> None:
    """A large state broken in the middle: the same InvalidState (its
    position included) or InvalidText, or the same ParsedState, as without
    runs."""
    resources = [_resource(index, {"id": str(index), "pad": "p" * 200}) for index in range(5000)]
    text = json.dumps({"version": 4, "serial": 9, "lineage": "l", "resources": resources},
                      indent=2)
    body = text.replace(*damage).encode()
    assert len(body) > parse.PIECEWISE_THRESHOLD and body != text.encode()
    outcome = _outcome(lambda: parse_state(body))
    with mock.patch.object(parse, "ElementRuns", _NoRuns):
        assert _outcome(lambda: parse_state(body)) == outcome
