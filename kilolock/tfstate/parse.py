"""Read a state body: validate it and project it into resources, dependencies
and outputs.  Pure functions, no Twisted: the web tree runs L{parse_state} in a
thread because a state can be 100+ MB.

Accepted bodies (UTF-8 JSON, no byte order mark):

  1. a Terraform state version 4 object (C{"version": 4}, a non-negative
     integer C{serial}, a string C{lineage}, a C{resources} list and an
     C{outputs} object; either of the last two may be absent or null, which
     means empty);
  2. an OpenTofu client-side-encrypted envelope (C{serial}, C{lineage},
     C{encrypted_data}, C{encryption_version}, C{meta}): only the serial and
     lineage are readable, so it is not projected (C{projection} is None).
     A body with an C{encrypted_data} or C{encryption_version} key is treated
     as an envelope.

Anything else raises L{InvalidState}; a body nested deeper than
L{kilolock.core.text.MAX_JSON_DEPTH} raises L{InvalidText} (C{too_deep}):
the one text rule a state is held to (its bytes are stored as they are).
Error messages name what is wrong by position
(C{resources[2].instances[0].index_key}) and JSON type, never by content: no
value, name or key from the body is ever echoed.

The projection of a v4 state is L{kilolock.tfstate.projection.project_state}'s
(re-exported here with L{REDACTED}).  Text taken from the body into fields is
made safe for any database text column: unpaired surrogates (from C{\\ud800}
escapes) and NUL characters become U+FFFD.  A number too large for a double is
projected as the string C{"Infinity"} or C{"-Infinity"}.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kilolock.core.errors import InvalidState, InvalidText
from kilolock.core.json_fast import UNDECIDED, fast_decode
from kilolock.core.model import ParsedState
from kilolock.core.text import (
    MAX_JSON_DEPTH,
    TOO_DEEP,
    check_depth,
    check_depth_bounded,
    skip_json_whitespace,
)
from kilolock.tfstate.json_runs import ElementRuns, FloatWatch
from kilolock.tfstate.projection import StreamedResources, project_state
from kilolock.tfstate.redaction import REDACTED
from kilolock.tfstate.values import clean_text, is_json_integer, json_kind

__all__ = ["JSON_DECODER", "PIECEWISE_THRESHOLD", "REDACTED",
           "SUPPORTED_VERSION", "is_envelope", "parse_state", "project_state"]

SUPPORTED_VERSION = 4
MAX_SERIAL = 2**63 - 1  # what a signed 64-bit database column holds

_ENVELOPE_KEYS = ("encrypted_data", "encryption_version")


def is_envelope(doc: dict[str, Any]) -> bool:
    """Whether a decoded body is an OpenTofu encrypted envelope (it has an
    C{encrypted_data} or C{encryption_version} key)."""
    return any(key in doc for key in _ENVELOPE_KEYS)


# ---------------------------------------------------------------------------
# parse_state


def parse_state(raw: bytes, streamed: StreamedResources | None = None) -> ParsedState:
    """Validate a state body and read its serial, lineage and projection.

    With C{streamed}, the resource rows of a large state are projected into
    it as they are decoded (another thread may read them meanwhile: see
    L{kilolock.store.upload_feed}).

    @raise InvalidState: the body is not a v4 state nor an encrypted envelope.
    """
    if streamed is None:
        streamed = StreamedResources()
    doc = _load(raw, streamed)
    if not isinstance(doc, dict):
        raise InvalidState(f"the body must be a JSON object, not {json_kind(doc)}")
    if is_envelope(doc):
        return _parse_envelope(doc)
    _check_version(doc)
    serial, lineage = _serial_and_lineage(doc, "state")
    version = doc.get("terraform_version")
    parsed = ParsedState(
        serial=serial,
        lineage=lineage,
        projection=project_state(doc, streamed),
        terraform_version=clean_text(version) if isinstance(version, str) else None,
    )
    if len(raw) >= PIECEWISE_THRESHOLD:
        _dismantle(doc)
    return parsed


def _dismantle(doc: dict[str, Any]) -> None:
    """Free a large document's top-level arrays one element at a time.

    Dropping the last reference to a 100 MB document frees millions of
    objects in one C-level cascade with the GIL held; popping the big arrays
    element by element lets other threads run in between.
    """
    for value in doc.values():
        if isinstance(value, list):
            while value:
                value.pop()


def _load(raw: bytes, streamed: StreamedResources | None = None) -> Any:
    if not raw or raw.isspace():
        raise InvalidState("the body is empty; send the state as JSON")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidState("the body is not valid UTF-8") from None
    if text.startswith("\ufeff"):
        raise InvalidState("the body starts with a byte order mark; send plain UTF-8 JSON")
    try:
        if len(text) >= PIECEWISE_THRESHOLD:
            return _decode_piecewise(text, streamed)
        doc = fast_decode(raw)
        if doc is UNDECIDED:
            doc = JSON_DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise InvalidState(
            f"the body is not valid JSON (error at line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise InvalidText(TOO_DEEP, f"{_WHAT} nests deeper than {MAX_JSON_DEPTH} levels"
                          ) from None
    except ValueError:  # _reject_constant, or an integer with too many digits
        raise InvalidState("the body is not valid JSON") from None
    check_depth(text, 0, len(text), doc, 0, _WHAT)
    return doc


#: How depth errors name a state body.
_WHAT = "the state"


def _reject_constant(name: str) -> Any:
    raise ValueError("NaN and Infinity are not JSON")


JSON_DECODER = json.JSONDecoder(parse_constant=_reject_constant)

#: Bodies at least this long (in characters) are decoded piece by piece.
PIECEWISE_THRESHOLD = 1 << 20


_skip = skip_json_whitespace


def _decode_piecewise(text: str, streamed: StreamedResources | None = None) -> Any:
    """Decode like C{json.loads}, but parse the arrays held by a top-level
    object one element at a time.

    The C decoder holds the GIL for a whole call: one C{json.loads} of a
    100 MB state stalls every other thread (the reactor's included) for most
    of a second.  Decoding the big arrays element by element gives the GIL
    back between elements, so a large state parsed in a thread no longer
    stops the server from answering other requests.  The result, duplicate
    keys included (the last wins), is what C{json.loads} returns -- except
    that with C{streamed}, a C{resources} array that follows C{"version": 4}
    (Terraform writes the version first) is projected element by element
    into C{streamed} and the document holds C{streamed.marker} instead.
    """
    position = _skip(text, 0)
    if text[position:position + 1] != "{":
        other = JSON_DECODER.decode(text)
        check_depth(text, 0, len(text), other, 0, _WHAT)
        return other
    doc: dict[str, Any] = {}
    position = _skip(text, position + 1)
    if text[position:position + 1] == "}":
        position += 1
    else:
        while True:
            if text[position:position + 1] != '"':
                raise json.JSONDecodeError(
                    "Expecting property name enclosed in double quotes", text, position)
            key, position = JSON_DECODER.raw_decode(text, position)
            position = _skip(text, position)
            if text[position:position + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, position)
            position = _skip(text, position + 1)
            if text[position:position + 1] == "[":
                if key == "resources" and streamed is not None and _streams_resources(doc):
                    position = _decode_resources_into(text, position, streamed.restart())
                    doc[key] = streamed.marker
                else:
                    doc[key], position = _decode_array(text, position)
            else:
                start = position
                doc[key], position = JSON_DECODER.raw_decode(text, position)
                check_depth(text, start, position, doc[key], 1, _WHAT)
            position = _skip(text, position)
            delimiter = text[position:position + 1]
            position = _skip(text, position + 1)
            if delimiter == "}":
                break
            if delimiter != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, position)
    if _skip(text, position) != len(text):
        raise json.JSONDecodeError("Extra data", text, position)
    return doc


def _streams_resources(doc: dict[str, Any]) -> bool:
    """Whether the document decoded so far is a v4 state, not an envelope."""
    version = doc.get("version")
    return (is_json_integer(version) and version == SUPPORTED_VERSION
            and not is_envelope(doc))


def _decode_array(text: str, position: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    return items, _decode_array_into(text, position, _one_element(text, items.append))


#: A step of an array's decode: given where an element starts, decode it (or
#: more) and hand each on; @return: the position after what it decoded.
_Step = Callable[[int], int]


def _one_element(text: str, consume: Callable[[Any], None],
                 decoder: json.JSONDecoder = JSON_DECODER) -> _Step:
    """The step that decodes one element with C{decoder} and hands it to
    C{consume}."""
    def step(start: int) -> int:
        item, end = decoder.raw_decode(text, start)
        check_depth(text, start, end, item, 2, _WHAT)
        consume(item)
        return end
    return step


def _decode_resources_into(text: str, position: int, streamed: StreamedResources) -> int:
    """Decode the C{resources} array at C{position} into C{streamed}, each
    resource with whether it held a float (the projection encodes a
    resource without one faster: L{StreamedResources.add}): runs of
    resources at once where msgspec decodes them as C{json} would
    (L{kilolock.tfstate.json_runs}), one by one with C{json} elsewhere.
    @return: the position after the array."""
    floats = FloatWatch()
    decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_float=floats.parse)
    one = _one_element(
        text, lambda resource: streamed.add(resource, without_floats=not floats.take()),
        decoder)
    runs = ElementRuns(text)

    def step(start: int) -> int:
        run = runs.take(start)
        if run is None:
            return one(start)
        for resource, held_float in run:
            check_depth_bounded(run.opens, resource, 2, _WHAT)
            streamed.add(resource, without_floats=not held_float)
        return run.end
    return _decode_array_into(text, position, step)


def _decode_array_into(text: str, position: int, step: _Step) -> int:
    """Decode the array at C{position} by C{step}s; @return: the position
    after it."""
    position = _skip(text, position + 1)
    if text[position:position + 1] == "]":
        return position + 1
    while True:
        position = _skip(text, step(position))
        delimiter = text[position:position + 1]
        if delimiter == "]":
            return position + 1
        if delimiter != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, position)
        position = _skip(text, position + 1)


def _check_version(doc: dict[str, Any]) -> None:
    if "version" not in doc:
        raise InvalidState(
            "the body has no state version; Kilolock accepts Terraform state version 4"
            " or an OpenTofu encrypted state"
        )
    version = doc["version"]
    if not is_json_integer(version):
        raise InvalidState(
            f"the state version must be the integer 4, not {json_kind(version)}"
        )
    if version != SUPPORTED_VERSION:
        shown = str(version) if -(10**6) < version < 10**6 else "(out of range)"
        raise InvalidState(
            f"state version {shown} is not supported;"
            " Kilolock accepts Terraform state version 4"
        )


def _serial_and_lineage(doc: dict[str, Any], what: str) -> tuple[int, str]:
    if "serial" not in doc:
        raise InvalidState(f"the {what} has no integer serial")
    serial = doc["serial"]
    if not is_json_integer(serial):
        raise InvalidState(f"the {what} has no integer serial (serial is {json_kind(serial)})")
    if serial < 0:
        raise InvalidState("serial must not be negative")
    if serial > MAX_SERIAL:
        raise InvalidState(f"serial is too large (at most {MAX_SERIAL})")
    if "lineage" not in doc:
        raise InvalidState(f"the {what} has no lineage")
    lineage = doc["lineage"]
    if not isinstance(lineage, str):
        raise InvalidState(f"lineage must be a string, not {json_kind(lineage)}")
    return serial, clean_text(lineage)


def _parse_envelope(doc: dict[str, Any]) -> ParsedState:
    serial, lineage = _serial_and_lineage(doc, "encrypted state")
    data = doc.get("encrypted_data")
    if not isinstance(data, str):
        raise InvalidState(
            f"encrypted_data of an encrypted state must be a string, not {json_kind(data)}"
        )
    version = doc.get("encryption_version")
    if not isinstance(version, str) or not version:
        raise InvalidState("encryption_version of an encrypted state must be a non-empty string")
    if "meta" not in doc:
        raise InvalidState("the encrypted state has no meta object")
    meta = doc["meta"]
    if meta is not None and not isinstance(meta, dict):
        raise InvalidState(
            f"meta of an encrypted state must be a JSON object, not {json_kind(meta)}")
    return ParsedState(serial=serial, lineage=lineage, projection=None)
