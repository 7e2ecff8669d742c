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

Anything else raises L{InvalidState}.  Error messages name what is wrong by
position (C{resources[2].instances[0].index_key}) and JSON type, never by
content: no value, name or key from the body is ever echoed.

The projection (L{project_state}):

  - one L{ResourceRow} per instance object in state order, deposed objects
    included (their C{deposed} is the deposed key; their address is the
    instance's address).  A resource with no instances (C{count = 0}, an empty
    C{for_each}, or everything destroyed) produces no row at all;
  - addresses are spelled as Terraform prints them (C{terraform state list}):
    the module path exactly as the state stores it, C{data.} for data
    sources, C{[0]} for integer keys and HCL-quoted string keys
    (C{["we\\"ird"]}, C{["$${x}"]}, non-printable characters as C{\\uXXXX},
    other non-ASCII characters as themselves);
  - C{attributes} is compact, key-sorted, ASCII JSON text of the instance's
    C{attributes} (else C{attributes_flat}, else C{{}}) in which every path in
    C{sensitive_attributes} is replaced by the string C{"(sensitive)"}.
    Terraform (1.15.5 and every v4 writer since 0.15) writes that as a list of
    paths, each a list of steps C{{"type": "get_attr", "value": "name"}} or
    C{{"type": "index", "value": {"value": 0, "type": "number"}}} (map keys
    have C{"type": "string"}; set elements are indexed by the element value).
    A value of a dynamically-typed attribute (e.g. C{terraform_data.input}) is
    stored wrapped as C{{"value": ..., "type": ...}}; paths do not mention that
    wrapper, so redaction looks through it.  When a path cannot be followed
    precisely (a set element, an unknown step kind, a type mismatch) the
    nearest enclosing value is redacted instead; a malformed
    C{sensitive_attributes} redacts every attribute.  A path to a value that
    is absent or null redacts nothing.  Only what Terraform marks is redacted:
    e.g. C{terraform_data.output} holds an unmarked copy of a sensitive
    C{input}, and Terraform itself shows it in clear;
  - one L{DependencyRow} per distinct (instance address, entry of the
    instance's C{dependencies});
  - one L{OutputRow} per root output; the value of a sensitive output is never
    projected.

Text taken from the body into row fields is made safe for any database text
column: unpaired surrogates (from C{\\ud800} escapes) and NUL characters become
U+FFFD.  A number too large for a double is projected as the string
C{"Infinity"} or C{"-Infinity"}.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from kilolock.errors import InvalidState
from kilolock.model import DependencyRow, OutputRow, ParsedState, Projection, ResourceRow

__all__ = ["REDACTED", "parse_state", "project_state"]

#: What a sensitive attribute value is replaced with.
REDACTED = "(sensitive)"

SUPPORTED_VERSION = 4
MAX_SERIAL = 2**63 - 1  # what a signed 64-bit database column holds

_ENVELOPE_KEYS = ("encrypted_data", "encryption_version")
_UNSAFE_TEXT = re.compile("[\x00\ud800-\udfff]")
_SURROGATES = re.compile("[\ud800-\udfff]")

# Path steps, parsed: (_ATTR, name), (_INDEX, int or str) or (_OPAQUE, None).
_ATTR = 0
_INDEX = 1
_OPAQUE = 2
_Step = tuple[int, Any]
_COLLECTION_KINDS = ("list", "set", "map", "tuple")


# ---------------------------------------------------------------------------
# parse_state


def parse_state(raw: bytes) -> ParsedState:
    """Validate a state body and read its serial, lineage and projection.

    @raise InvalidState: the body is not a v4 state nor an encrypted envelope.
    """
    streamed = _StreamedResources()
    doc = _load(raw, streamed)
    if not isinstance(doc, dict):
        raise InvalidState(f"the body must be a JSON object, not {_kind(doc)}")
    if any(key in doc for key in _ENVELOPE_KEYS):
        return _parse_envelope(doc)
    _check_version(doc)
    serial, lineage = _serial_and_lineage(doc, "state")
    version = doc.get("terraform_version")
    parsed = ParsedState(
        serial=serial,
        lineage=lineage,
        projection=project_state(doc, streamed),
        terraform_version=_clean(version) if isinstance(version, str) else None,
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


class _StreamedResources:
    """The projection of a large state's C{resources}, made while the array is
    decoded, one resource at a time (see L{_decode_piecewise}): the decoded
    resources are dropped as soon as they are projected, so a 100 MB state
    never exists as a whole document of Python objects (about 1.6 times its
    size) next to its projection.

    @ivar marker: what the document holds under C{resources} instead of the list.
    """

    def __init__(self) -> None:
        self.marker: list[Any] = []
        self.restart()

    def restart(self) -> _StreamedResources:
        """Start over (a repeated C{resources} key: the last one wins)."""
        self.rows: list[ResourceRow] = []
        self.dependencies: list[DependencyRow] = []
        self.seen: set[tuple[str, str]] = set()
        self.count = 0
        return self

    def add(self, resource: Any) -> None:
        _project_resource(self.count, resource, self.rows, self.dependencies, self.seen)
        self.count += 1


def _load(raw: bytes, streamed: _StreamedResources | None = None) -> Any:
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
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise InvalidState(
            f"the body is not valid JSON (error at line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise InvalidState("the body is not valid JSON (nested too deeply)") from None
    except ValueError:  # _reject_constant, or an integer with too many digits
        raise InvalidState("the body is not valid JSON") from None


def _reject_constant(name: str) -> Any:
    raise ValueError("NaN and Infinity are not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_WHITESPACE = re.compile(r"[ \t\n\r]*")

#: Bodies at least this long (in characters) are decoded piece by piece.
PIECEWISE_THRESHOLD = 1 << 20


def _skip(text: str, position: int) -> int:
    match = _WHITESPACE.match(text, position)
    assert match is not None
    return match.end()


def _decode_piecewise(text: str, streamed: _StreamedResources | None = None) -> Any:
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
        return _DECODER.decode(text)
    doc: dict[str, Any] = {}
    position = _skip(text, position + 1)
    if text[position:position + 1] == "}":
        position += 1
    else:
        while True:
            if text[position:position + 1] != '"':
                raise json.JSONDecodeError(
                    "Expecting property name enclosed in double quotes", text, position)
            key, position = _DECODER.raw_decode(text, position)
            position = _skip(text, position)
            if text[position:position + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, position)
            position = _skip(text, position + 1)
            if text[position:position + 1] == "[":
                if key == "resources" and streamed is not None and _streams_resources(doc):
                    position = _decode_array_into(text, position, streamed.restart().add)
                    doc[key] = streamed.marker
                else:
                    doc[key], position = _decode_array(text, position)
            else:
                doc[key], position = _DECODER.raw_decode(text, position)
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
    return (_is_int(version) and version == SUPPORTED_VERSION
            and not any(key in doc for key in _ENVELOPE_KEYS))


def _decode_array(text: str, position: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    return items, _decode_array_into(text, position, items.append)


def _decode_array_into(text: str, position: int, consume: Callable[[Any], None]) -> int:
    """Decode the array at C{position}, handing each element to C{consume};
    @return: the position after it."""
    position = _skip(text, position + 1)
    if text[position:position + 1] == "]":
        return position + 1
    while True:
        item, position = _DECODER.raw_decode(text, position)
        consume(item)
        del item
        position = _skip(text, position)
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
    if not _is_int(version):
        raise InvalidState(
            f"the state version must be the integer 4, not {_kind(version)}"
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
    if not _is_int(serial):
        raise InvalidState(f"the {what} has no integer serial (serial is {_kind(serial)})")
    if serial < 0:
        raise InvalidState("serial must not be negative")
    if serial > MAX_SERIAL:
        raise InvalidState(f"serial is too large (at most {MAX_SERIAL})")
    if "lineage" not in doc:
        raise InvalidState(f"the {what} has no lineage")
    lineage = doc["lineage"]
    if not isinstance(lineage, str):
        raise InvalidState(f"lineage must be a string, not {_kind(lineage)}")
    return serial, _clean(lineage)


def _parse_envelope(doc: dict[str, Any]) -> ParsedState:
    serial, lineage = _serial_and_lineage(doc, "encrypted state")
    data = doc.get("encrypted_data")
    if not isinstance(data, str):
        raise InvalidState(
            f"encrypted_data of an encrypted state must be a string, not {_kind(data)}"
        )
    version = doc.get("encryption_version")
    if not isinstance(version, str) or not version:
        raise InvalidState("encryption_version of an encrypted state must be a non-empty string")
    if "meta" not in doc:
        raise InvalidState("the encrypted state has no meta object")
    meta = doc["meta"]
    if meta is not None and not isinstance(meta, dict):
        raise InvalidState(f"meta of an encrypted state must be a JSON object, not {_kind(meta)}")
    return ParsedState(serial=serial, lineage=lineage, projection=None)


# ---------------------------------------------------------------------------
# project_state


def project_state(doc: dict[str, Any],
                  streamed: _StreamedResources | None = None) -> Projection:
    """Project a v4 state document into resource, dependency and output rows.

    C{doc} is not modified.  With C{streamed} (L{parse_state}'s), resources
    the decoder already projected are taken from it.

    @raise InvalidState: C{resources}, C{outputs} or an entry of them has the
        wrong shape.
    """
    if streamed is not None and doc.get("resources") is streamed.marker:
        return Projection(resources=tuple(streamed.rows),
                          dependencies=tuple(streamed.dependencies),
                          outputs=_project_outputs(doc.get("outputs")))
    resources: list[ResourceRow] = []
    dependencies: list[DependencyRow] = []
    seen: set[tuple[str, str]] = set()
    raw_resources = doc.get("resources")
    if raw_resources is None:
        raw_resources = []
    elif not isinstance(raw_resources, list):
        raise InvalidState(f"resources must be a list, not {_kind(raw_resources)}")
    for position, resource in enumerate(raw_resources):
        _project_resource(position, resource, resources, dependencies, seen)
    return Projection(
        resources=tuple(resources),
        dependencies=tuple(dependencies),
        outputs=_project_outputs(doc.get("outputs")),
    )


def _project_resource(
    position: int,
    resource: Any,
    rows: list[ResourceRow],
    dependencies: list[DependencyRow],
    seen: set[tuple[str, str]],
) -> None:
    """Project C{resources[position]}.  Where-strings for error messages are
    built only when an error is raised (this runs once per resource of every
    write)."""
    if not isinstance(resource, dict):
        raise InvalidState(f"{_where(position)} must be a JSON object, not {_kind(resource)}")
    mode = resource.get("mode")
    if mode != "managed" and mode != "data":
        raise InvalidState(f'{_where(position)}.mode must be "managed" or "data"')
    type_ = _required_text(resource, "type", position)
    name = _required_text(resource, "name", position)
    module = _optional_text(resource, "module", position) or ""
    provider = _clean(_optional_text(resource, "provider", position) or "")
    instances = resource.get("instances")
    if instances is None:
        return
    if not isinstance(instances, list):
        raise InvalidState(f"{_where(position)}.instances must be a list, not {_kind(instances)}")

    base = (f"{module}." if module else "") + ("data." if mode == "data" else "")
    base += f"{type_}.{name}"
    module, type_, name = _clean(module), _clean(type_), _clean(name)
    for index, instance in enumerate(instances):
        at = (position, index)
        if not isinstance(instance, dict):
            raise InvalidState(f"{_where(*at)} must be a JSON object, not {_kind(instance)}")
        key = _index_key(instance.get("index_key"), at)
        address = _clean(base + _key_suffix(key)) if key is not None else _clean(base)
        rows.append(
            ResourceRow(
                address=address,
                module=module,
                mode=mode,
                type=type_,
                name=name,
                provider=provider,
                index_key=None if key is None else json.dumps(key),
                deposed=_optional_text(instance, "deposed", at) or None,
                attributes=_attributes(instance, at),
            )
        )
        depends = instance.get("dependencies")
        if depends is not None:
            for depends_on in _dependencies(depends, at):
                pair = (address, _clean(depends_on))
                if pair not in seen:
                    seen.add(pair)
                    dependencies.append(DependencyRow(address=pair[0], depends_on=pair[1]))


def _where(position: int, instance: int | None = None) -> str:
    """Where an entry sits, for error messages: C{resources[2].instances[0]}."""
    where = f"resources[{position}]"
    return where if instance is None else f"{where}.instances[{instance}]"


#: A position for error messages: a resource's, or a resource's and an instance's.
_At = int | tuple[int, int]


def _describe(at: _At) -> str:
    return _where(at) if isinstance(at, int) else _where(*at)


def _project_outputs(outputs: Any) -> tuple[OutputRow, ...]:
    if outputs is None:
        return ()
    if not isinstance(outputs, dict):
        raise InvalidState(f"outputs must be a JSON object, not {_kind(outputs)}")
    rows = []
    for position, (name, output) in enumerate(outputs.items()):
        where = f"outputs entry {position} (counting from 0)"
        if not isinstance(output, dict):
            raise InvalidState(f"{where} must be a JSON object, not {_kind(output)}")
        sensitive = output.get("sensitive", False)
        if sensitive is None:
            sensitive = False
        if not isinstance(sensitive, bool):
            raise InvalidState(f"{where}: sensitive must be true or false, not {_kind(sensitive)}")
        rows.append(
            OutputRow(
                name=_clean(name),
                type=_dumps(output["type"]) if "type" in output else None,
                value=None if sensitive else _dumps(output.get("value")),
                sensitive=sensitive,
            )
        )
    return tuple(rows)


def _required_text(obj: dict[str, Any], key: str, at: _At) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise InvalidState(f"{_describe(at)} has no string {key}")
    return value


def _optional_text(obj: dict[str, Any], key: str, at: _At) -> str | None:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise InvalidState(f"{_describe(at)}.{key} must be a string, not {_kind(value)}")


def _index_key(key: Any, at: _At) -> int | str | None:
    if key is None or isinstance(key, str):
        return key
    if _is_int(key):
        return int(key)
    if isinstance(key, float) and key.is_integer():
        return int(key)  # Terraform reads the key as a float64 and truncates it
    raise InvalidState(
        f"{_describe(at)}.index_key must be an integer or a string, not {_kind(key)}")


def _key_suffix(key: int | str | None) -> str:
    if key is None:
        return ""
    if isinstance(key, int):
        return f"[{key}]"
    return "[" + _hcl_quote(_SURROGATES.sub("\ufffd", key)) + "]"


def _hcl_quote(text: str) -> str:
    """Quote C{text} like Terraform's C{addrs.StringKey.String}: HCL string
    syntax, template introducers doubled, non-printable runes escaped."""
    out = ['"']
    last = len(text) - 1
    for i, char in enumerate(text):
        if char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif char in "$%":
            out.append(char + char if i < last and text[i + 1] == "{" else char)
        elif char.isprintable():  # the same classes as Go's unicode.IsPrint
            out.append(char)
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def _dependencies(deps: Any, at: _At) -> list[str]:
    """An instance's C{dependencies} (not None), checked."""
    if not isinstance(deps, list) or not all(isinstance(dep, str) for dep in deps):
        raise InvalidState(f"{_describe(at)}.dependencies must be a list of strings")
    return deps


# ---------------------------------------------------------------------------
# attributes and redaction


def _attributes(instance: dict[str, Any], at: _At) -> str:
    sensitive = instance.get("sensitive_attributes")
    attrs = instance.get("attributes")
    if attrs is not None:
        if not isinstance(attrs, dict):
            raise InvalidState(
                f"{_describe(at)}.attributes must be a JSON object, not {_kind(attrs)}")
        if sensitive is None or sensitive == []:  # the usual case: nothing to redact
            return _dumps(attrs)
        return _dumps(_redact(attrs, _sensitive_paths(sensitive)))
    paths = _sensitive_paths(sensitive)
    flat = instance.get("attributes_flat")
    if flat is not None:
        if not isinstance(flat, dict):
            raise InvalidState(
                f"{_describe(at)}.attributes_flat must be a JSON object, not {_kind(flat)}"
            )
        return _dumps(_redact_flat(flat, paths))
    return "{}"


def _sensitive_paths(raw: Any) -> list[list[_Step]]:
    """Parse C{sensitive_attributes}; anything unreadable becomes a path that
    redacts from the point where it stops making sense."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        return [[(_OPAQUE, None)]]
    return [_path(steps) for steps in raw]


def _path(steps: Any) -> list[_Step]:
    if not isinstance(steps, list):
        return [(_OPAQUE, None)]
    path: list[_Step] = []
    for step in steps:
        parsed = _step(step)
        path.append(parsed)
        if parsed[0] == _OPAQUE:
            break
    return path


def _step(step: Any) -> _Step:
    if not isinstance(step, dict):
        return (_OPAQUE, None)
    kind = step.get("type")
    value = step.get("value")
    if kind == "get_attr" and isinstance(value, str):
        return (_ATTR, value)
    if kind == "index" and isinstance(value, dict):
        key, key_type = value.get("value"), value.get("type")
        if key_type == "number" and _is_int(key):
            return (_INDEX, key)
        if key_type == "number" and isinstance(key, float) and key.is_integer():
            return (_INDEX, int(key))
        if key_type == "string" and isinstance(key, str):
            return (_INDEX, key)
    return (_OPAQUE, None)  # a set element, or a step kind we do not know


def _redact(attrs: dict[str, Any], paths: list[list[_Step]]) -> dict[str, Any]:
    """Return C{attrs} with each path's value replaced by L{REDACTED}, copying
    only the containers along the redacted paths."""
    result: dict[str, Any] = attrs
    for path in paths:
        redacted = _redact_path(result, path)
        if not isinstance(redacted, dict):  # the whole object was sensitive
            return {key: REDACTED for key in attrs}
        result = redacted
    return result


def _redact_path(root: Any, path: list[_Step]) -> Any:
    trail: list[tuple[Any, Any]] = []  # (container, key) pairs walked through
    node = root
    i = 0
    while i < len(path):
        kind, key = path[i]
        if _is_wrapper_for(node, kind, key):
            trail.append((node, "value"))
            node = node["value"]
            continue
        if node is None:
            return root  # nothing stored below a null
        if isinstance(node, dict) and kind in (_ATTR, _INDEX) and isinstance(key, str):
            if key not in node:
                return root
        elif isinstance(node, list) and kind == _INDEX and isinstance(key, int):
            if not 0 <= key < len(node):
                return root
        else:
            break  # cannot follow precisely: redact this whole value
        trail.append((node, key))
        node = node[key]
        i += 1
    replacement: Any = REDACTED
    for container, key in reversed(trail):
        copy = dict(container) if isinstance(container, dict) else list(container)
        copy[key] = replacement
        replacement = copy
    return replacement


def _is_wrapper_for(node: Any, kind: int, key: Any) -> bool:
    """Is C{node} the C{{"value", "type"}} encoding of a dynamically-typed value
    that the step C{(kind, key)} reaches into?"""
    if not isinstance(node, dict) or len(node) != 2 or "value" not in node:
        return False
    type_ = node.get("type")
    if not isinstance(type_, list) or len(type_) < 2 or not isinstance(type_[0], str):
        return False
    if kind == _ATTR:
        return type_[0] == "object" and isinstance(type_[1], dict) and key in type_[1]
    return type_[0] in _COLLECTION_KINDS


def _redact_flat(flat: dict[str, Any], paths: list[list[_Step]]) -> dict[str, Any]:
    """Redact a legacy flatmap (C{"tags.%"}, C{"tags.name"}, C{"list.0"})."""
    prefixes = []
    for path in paths:
        parts = []
        for kind, key in path:
            if kind == _OPAQUE:
                break
            parts.append(str(key))
        prefixes.append(".".join(parts))
    if not prefixes:
        return flat
    if "" in prefixes:
        return {key: REDACTED for key in flat}
    return {
        key: REDACTED
        if any(key == prefix or key.startswith(prefix + ".") for prefix in prefixes)
        else value
        for key, value in flat.items()
    }


# ---------------------------------------------------------------------------
# helpers


def _not_json(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


#: json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=...) as
#: CPython's C encoder alone: built once (JSONEncoder.encode builds one per
#: call), without the reference-cycle check (a decoded document has no cycles).
_ENCODE = c_make_encoder(None, _not_json, encode_basestring_ascii, None, ":", ",",
                         True, False, False)
_ENCODE_WITH_NAN = c_make_encoder(None, _not_json, encode_basestring_ascii, None, ":", ",",
                                  True, False, True)


def _dumps(value: Any) -> str:
    try:
        return "".join(_ENCODE(value, 0))
    except ValueError:  # a number beyond a double's range was read as infinity
        return "".join(_ENCODE_WITH_NAN(_infinities_as_text(value), 0))


def _infinities_as_text(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {key: _infinities_as_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_infinities_as_text(item) for item in value]
    return value


def _clean(text: str) -> str:
    """Replace what a database text column refuses (NUL, lone surrogates)."""
    if "\x00" not in text and (text.isascii() or not _SURROGATES.search(text)):
        return text
    return _UNSAFE_TEXT.sub("\ufffd", text)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
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
