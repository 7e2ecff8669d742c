"""Tests for L{kilolock.core.json_fast}: msgspec's decode is used only where it
answers exactly as C{json} does.

Two levels: the decoder (whatever it decodes, C{json} decodes to an
identical document -- same types, same key order, same float bits -- and
whatever C{json} refuses, it leaves UNDECIDED), and the callers
(L{kilolock.tfstate.parse.parse_state} and L{kilolock.core.text.load_json} give
the same result or the same error, code and message included, with the fast
path and without it).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kilolock.core import text
from kilolock.core.json_fast import UNDECIDED, fast_decode
from kilolock.core.text import load_json
from kilolock.tfstate import parse
from kilolock.tfstate.parse import parse_state
from tests.support.hostile_support import deep_text, json_text, lock_infos, state_texts
from tests.support.json_identity import same_document as _same
from tests.support.state_strategies import histories


def _stdlib(raw: bytes) -> Any:
    """What C{json} answers: the document, or the exception's type."""
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as error:
        return type(error)


#: JSON-ish junk: the characters JSON's grammar turns on, and some it refuses
#: (form feed, NUL, a non-breaking space, a byte order mark).
_JUNK = st.text(st.sampled_from(list(' \t\n\r\x0c\x00{}[]:,"\\/0123456789.eE+-truefalsnNI'
                                     "\u00a0\ufeffuUdD8c")), max_size=40)

#: UTF-8 bodies: generated and hostile documents, junk, any text.
_BODIES = st.one_of(
    json_text.map(str.encode), deep_text.map(str.encode), lock_infos(), state_texts(),
    _JUNK.map(str.encode), st.text(st.characters(codec="utf-8")).map(str.encode),
    histories().map(lambda pair: pair[0]),
)

_HOSTILE_EXAMPLES = [
    b"123456789012345678901234567890", b"-98765432109876543210987654321",
    b"18446744073709551616", b"-9223372036854775809", b"1" * 4300, b"1" * 4301,
    b"[1e400,-1e400,1e-400,-0.0,-0,0.1,5e-324,1.7976931348623157e308]",
    b'{"a":1,"b":2,"a":3}', b'"\\ud800"', b'{"\\udc00":1}', b'"\\ud83d\\ude00"',
    b'"\\u0000"', b'"a\x01b"', b"NaN", b"[Infinity]", b"-Infinity", b"01", b"1.", b".5",
    b"+1", b"[1,]", b'{"a":1,}', b"\x0c1", b"\xc2\xa01", b"\xef\xbb\xbf{}", b"[1] 2",
    b"1 ", b" ", b"", b"[" * 100_000 + b"]" * 100_000, b"[" * 600 + b"]" * 600,
    b'"\\x"', b'"\\/"', b"tru", b'"\x7f"', b"1E400", b"0.1e1",
]


@given(_BODIES)
@example(b"")
def test_whatever_it_decodes_json_decodes_identically(raw: bytes) -> None:
    """fast_decode is UNDECIDED, or json accepts the body and builds an
    identical document."""
    fast = fast_decode(raw)
    if fast is not UNDECIDED:
        assert _same(fast, _stdlib(raw))


@pytest.mark.parametrize("raw", _HOSTILE_EXAMPLES)
def test_hostile_bodies(raw: bytes) -> None:
    """Each hostile body: decoded identically, or UNDECIDED; what json
    refuses is always UNDECIDED."""
    fast = fast_decode(raw)
    expected = _stdlib(raw)
    if isinstance(expected, type):
        assert fast is UNDECIDED
    elif fast is not UNDECIDED:
        assert _same(fast, expected)


def test_what_it_decides() -> None:
    """The values a state may hold beyond 64 bits and a double's range are
    decoded by the fast path itself, exactly; lone surrogates are left to
    json, which accepts them."""
    huge = fast_decode(b"[123456789012345678901234567890,1e400,-0.0,0.1]")
    assert _same(huge, [123456789012345678901234567890, math.inf, -0.0, 0.1])
    assert fast_decode(b'{"a":1,"b":2,"a":3}') == {"a": 3, "b": 2}
    assert list(fast_decode(b'{"a":1,"b":2,"a":3}')) == ["a", "b"]
    assert fast_decode(b"1" * sys.get_int_max_str_digits()) == int("1" * 4300)
    assert fast_decode(b"1" * (sys.get_int_max_str_digits() + 1)) is UNDECIDED
    assert fast_decode(b'"\\ud800"') is UNDECIDED
    assert fast_decode(b"NaN") is UNDECIDED
    assert repr(UNDECIDED) == "UNDECIDED"


def _outcome(function: Callable[[bytes], Any], raw: bytes) -> Any:
    """What C{function(raw)} answers: its result, or its error's type,
    message, code, field and pointer."""
    try:
        return function(raw)
    except Exception as error:
        return (type(error), str(error), *(getattr(error, name, None)
                                           for name in ("code", "field", "pointer")))


def _stdlib_only(raw: bytes) -> bytes | Any:
    return UNDECIDED


_PARSERS = {"parse_state": (parse, parse_state),
            "load_json": (text, lambda raw: load_json(raw, "the body", "f"))}


#: What the callers are given: _BODIES but the deepest (hypothesis's own
#: frames leave no room for json's recursion on 100,000 levels: the hostile
#: examples, which hold them, run without hypothesis).
_CALLER_BODIES = st.one_of(
    json_text.map(str.encode), lock_infos(), state_texts(), _JUNK.map(str.encode),
    st.text(st.characters(codec="utf-8")).map(str.encode), histories().map(lambda p: p[0]),
    st.binary(max_size=40))


@given(_CALLER_BODIES)
def test_the_callers_answer_alike_with_and_without_it(raw: bytes) -> None:
    """parse_state and load_json give the same document or the same error
    (type, message, code, field, pointer) whether the fast decoder ran or not."""
    for parser in _PARSERS:
        _answer_alike(parser, raw)


@pytest.mark.parametrize("parser", sorted(_PARSERS))
@pytest.mark.parametrize("raw", _HOSTILE_EXAMPLES)
def test_the_callers_answer_hostile_bodies_alike(parser: str, raw: bytes) -> None:
    """The same for each hostile body."""
    _answer_alike(parser, raw)


def _answer_alike(parser: str, raw: bytes) -> None:
    module, function = _PARSERS[parser]
    fast = _outcome(function, raw)
    with mock.patch.object(module, "fast_decode", _stdlib_only):
        slow = _outcome(function, raw)
    if parser == "load_json" and not isinstance(fast, tuple):
        assert _same(fast, slow)  # a document: its float bits and key order too
    else:
        assert fast == slow  # a ParsedState, or an error
