"""JSON values read from a state body: their kind for error messages, their
compact text for the projection, and text made safe for a database column
(L{clean_text}, decided in L{kilolock.core.text}).
Pure functions, no Twisted, no I/O."""

from __future__ import annotations

import re

# c_make_encoder is CPython's C encoder, private to the json module: the public
# json.JSONEncoder.encode builds one per call, and building it once instead
# makes parse_state of a 50-resource state 13% faster.  tests/tfstate/test_tfstate_json.py
# pins that it exists and that its output is json.dumps' output.
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

import msgspec

from kilolock.core.text import clean_text

__all__ = ["clean_text", "compact_json", "compact_json_without_floats", "is_json_integer",
           "json_kind"]


def _not_json(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


#: json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=...) as
#: the C encoder alone, without the reference-cycle check (a decoded document
#: has no cycles).
_ENCODE = c_make_encoder(None, _not_json, encode_basestring_ascii, None, ":", ",",
                         True, False, False)
_ENCODE_WITH_NAN = c_make_encoder(None, _not_json, encode_basestring_ascii, None, ":", ",",
                                  True, False, True)


def compact_json(value: Any) -> str:
    """C{value} as compact, key-sorted, ASCII JSON text.  A number beyond a
    double's range (decoded as infinity) is written as the string
    C{"Infinity"} or C{"-Infinity"}, a NaN (only a caller's document can
    hold one: the decoder refuses it) as C{"NaN"}.  No recursion in Python:
    any depth the C encoder takes is fine."""
    try:
        return "".join(_ENCODE(value, 0))
    except ValueError:  # an infinity or a NaN
        return _BARE_CONSTANT.sub(_quote_constant, "".join(_ENCODE_WITH_NAN(value, 0)))


#: msgspec's encoder, keys sorted: the same text as L{compact_json} for a
#: value without floats whose text is printable ASCII (tests/tfstate/test_tfstate_json.py
#: holds it to that), in about 40 % of the time.  One serves every thread:
#: msgspec keeps each call's state on the C stack (encoder_encode_common in
#: its _core.c), the encoder only its settings.
_SORTED_ENCODER = msgspec.json.Encoder(order="sorted")


def compact_json_without_floats(value: Any) -> str:
    """L{compact_json} of a decoded value the caller knows holds no float
    (no number with a fraction or an exponent: msgspec writes floats, and
    infinities, its own way), faster: msgspec's encoder, whose text is
    kept when it is printable ASCII; otherwise (non-ASCII text or DEL, which
    L{compact_json} escapes, or anything msgspec refuses, e.g. an unpaired
    surrogate) the answer is L{compact_json}'s."""
    try:
        encoded = _SORTED_ENCODER.encode(value)
    except (TypeError, ValueError, OverflowError, UnicodeError, RecursionError):
        return compact_json(value)
    if encoded.isascii() and b"\x7f" not in encoded:
        return encoded.decode("ascii")
    return compact_json(value)


#: A string of compact ASCII JSON (kept as it is), or a constant the encoder
#: wrote bare outside any string.
_BARE_CONSTANT = re.compile(r'"(?:[^"\\]|\\.)*"|-?Infinity|NaN')


def _quote_constant(match: re.Match[str]) -> str:
    token = match.group()
    return token if token.startswith('"') else f'"{token}"'


def is_json_integer(value: Any) -> bool:
    """Whether C{value} is a JSON integer (a Python C{int}, not a C{bool})."""
    return isinstance(value, int) and not isinstance(value, bool)


def json_kind(value: Any) -> str:
    """The JSON type of C{value}, for error messages (never the value)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction or exponent"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a JSON object"
    return type(value).__name__
