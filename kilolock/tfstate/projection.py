"""Project a v4 state document into resource, dependency and output rows.
Pure functions, no Twisted, no I/O.

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
    C{sensitive_attributes} is replaced by the string C{"(sensitive)"} (see
    L{kilolock.tfstate.redaction});
  - one L{DependencyRow} per distinct (instance address, entry of the
    instance's C{dependencies});
  - one L{OutputRow} per root output; the value of a sensitive output is never
    projected.

Errors name what is wrong by position (C{resources[2].instances[0].index_key})
and JSON type, never by content.  Text taken from the body into row fields is
made safe for any database text column (L{clean_text}), and the JSON text of
attributes, index keys and outputs for jsonb (L{clean_json_text}): NUL and
unpaired surrogates become U+FFFD, in every store alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from kilolock.core.errors import InvalidState
from kilolock.core.model import DependencyRow, OutputRow, Projection, ResourceRow
from kilolock.core.text import clean_json_text
from kilolock.tfstate.redaction import redact, redact_flat, sensitive_paths
from kilolock.tfstate.values import (
    clean_text,
    compact_json,
    compact_json_without_floats,
    is_json_integer,
    json_kind,
)

__all__ = ["StreamedResources", "hcl_quote", "project_resource", "project_state"]

_SURROGATES = re.compile("[\ud800-\udfff]")


class StreamedResources:
    """The resource and dependency rows of a state, projected one resource at
    a time.  L{kilolock.tfstate.parse} feeds it while a large state's C{resources}
    array is decoded, so that the decoded resources are dropped as soon as
    they are projected: a 100 MB state never exists as a whole document of
    Python objects (about 1.6 times its size) next to its projection.

    @ivar marker: what the document holds under C{resources} instead of the list.
    """

    def __init__(self) -> None:
        self.marker: list[Any] = []
        self.restart()

    def restart(self) -> StreamedResources:
        """Start over (a repeated C{resources} key: the last one wins)."""
        self.rows: list[ResourceRow] = []
        self.dependencies: list[DependencyRow] = []
        self.seen: set[tuple[str, str]] = set()
        self.count = 0
        return self

    def add(self, resource: Any, without_floats: bool = False) -> None:
        """Project C{resources[self.count]}; C{without_floats}: the decoder
        saw no float in it, so its attributes are encoded by the faster
        L{compact_json_without_floats} (the same text)."""
        _project_resource(self.count, resource, self.rows, self.dependencies, self.seen,
                          compact_json_without_floats if without_floats else compact_json)
        self.count += 1


def project_state(doc: dict[str, Any],
                  streamed: StreamedResources | None = None) -> Projection:
    """Project a v4 state document into resource, dependency and output rows.

    C{doc} is not modified.  With C{streamed} (L{kilolock.tfstate.parse.parse_state}'s),
    resources the decoder already projected are taken from it.

    @raise InvalidState: C{resources}, C{outputs} or an entry of them has the
        wrong shape.
    """
    if streamed is None or doc.get("resources") is not streamed.marker:
        raw_resources = doc.get("resources")
        if raw_resources is None:
            raw_resources = []
        elif not isinstance(raw_resources, list):
            raise InvalidState(f"resources must be a list, not {json_kind(raw_resources)}")
        streamed = StreamedResources()
        for resource in raw_resources:
            streamed.add(resource)
    return Projection(
        resources=tuple(streamed.rows),
        dependencies=tuple(streamed.dependencies),
        outputs=_project_outputs(doc.get("outputs")),
    )


def project_resource(position: int,
                     resource: Any) -> tuple[list[ResourceRow], list[DependencyRow]]:
    """The rows of one resource, C{resources[position]} of its state (the
    position names it in errors).

    @raise InvalidState: it has the wrong shape.
    """
    rows: list[ResourceRow] = []
    dependencies: list[DependencyRow] = []
    _project_resource(position, resource, rows, dependencies, set())
    return rows, dependencies


def _project_resource(
    position: int,
    resource: Any,
    rows: list[ResourceRow],
    dependencies: list[DependencyRow],
    seen: set[tuple[str, str]],
    encode: Callable[[Any], str] = compact_json,
) -> None:
    """Project C{resources[position]}.  Where-strings for error messages are
    built only when an error is raised (this runs once per resource of every
    write)."""
    if not isinstance(resource, dict):
        raise InvalidState(
            f"{_where(position)} must be a JSON object, not {json_kind(resource)}")
    mode = resource.get("mode")
    if mode != "managed" and mode != "data":
        raise InvalidState(f'{_where(position)}.mode must be "managed" or "data"')
    type_ = _required_text(resource, "type", position)
    name = _required_text(resource, "name", position)
    module = _optional_text(resource, "module", position) or ""
    provider = clean_text(_optional_text(resource, "provider", position) or "")
    instances = resource.get("instances")
    if instances is None:
        return
    if not isinstance(instances, list):
        raise InvalidState(
            f"{_where(position)}.instances must be a list, not {json_kind(instances)}")

    base = (f"{module}." if module else "") + ("data." if mode == "data" else "")
    base += f"{type_}.{name}"
    module, type_, name = clean_text(module), clean_text(type_), clean_text(name)
    for index, instance in enumerate(instances):
        at = (position, index)
        if not isinstance(instance, dict):
            raise InvalidState(
                f"{_where(*at)} must be a JSON object, not {json_kind(instance)}")
        key = _index_key(instance.get("index_key"), at)
        address = clean_text(base + _key_suffix(key)) if key is not None else clean_text(base)
        rows.append(
            ResourceRow(
                address=address,
                module=module,
                mode=mode,
                type=type_,
                name=name,
                provider=provider,
                index_key=None if key is None else clean_json_text(json.dumps(key)),
                deposed=clean_text(_optional_text(instance, "deposed", at) or "") or None,
                attributes=_attributes(instance, at, encode),
            )
        )
        depends = instance.get("dependencies")
        if depends is not None:
            for depends_on in _dependencies(depends, at):
                pair = (address, clean_text(depends_on))
                if pair not in seen:
                    seen.add(pair)
                    dependencies.append(DependencyRow(address=pair[0], depends_on=pair[1]))


def resource_base(resource: dict[str, Any]) -> str:
    """The address of a resource of a stored state, before any instance key
    (C{module.net.aws_subnet.this}).

    @raise ValueError: the resource is not of a state's shape.
    """
    mode, type_, name = resource.get("mode"), resource.get("type"), resource.get("name")
    module = resource.get("module") or ""
    if mode not in ("managed", "data") or not all(isinstance(text, str)
                                                  for text in (type_, name, module)):
        raise ValueError("not a resource of a state")
    base = (f"{module}." if module else "") + ("data." if mode == "data" else "")
    return f"{base}{type_}.{name}"


def keyed_address(base: str, instance: dict[str, Any]) -> str:
    """The address of an instance of the resource at C{base}
    (L{resource_base}), as its projected row names it.

    @raise ValueError: the instance key is neither a string nor a whole number.
    """
    try:
        key = _index_key(instance.get("index_key"), (0, 0))
    except InvalidState:
        raise ValueError("not an instance key") from None
    return clean_text(base + _key_suffix(key)) if key is not None else clean_text(base)


def instance_address(resource: dict[str, Any], instance: dict[str, Any]) -> str:
    """The address of an instance of a resource of a stored state, as its
    projected row names it (C{module.net.aws_subnet.this["a"]}).

    @raise ValueError: the resource or instance is not of a state's shape.
    """
    return keyed_address(resource_base(resource), instance)


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
        raise InvalidState(f"outputs must be a JSON object, not {json_kind(outputs)}")
    rows = []
    for position, (name, output) in enumerate(outputs.items()):
        where = f"outputs entry {position} (counting from 0)"
        if not isinstance(output, dict):
            raise InvalidState(f"{where} must be a JSON object, not {json_kind(output)}")
        sensitive = output.get("sensitive", False)
        if sensitive is None:
            sensitive = False
        if not isinstance(sensitive, bool):
            raise InvalidState(
                f"{where}: sensitive must be true or false, not {json_kind(sensitive)}")
        rows.append(
            OutputRow(
                name=clean_text(name),
                type=clean_json_text(compact_json(output["type"])) if "type" in output else None,
                value=None if sensitive else clean_json_text(compact_json(output.get("value"))),
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
    raise InvalidState(f"{_describe(at)}.{key} must be a string, not {json_kind(value)}")


def _index_key(key: Any, at: _At) -> int | str | None:
    if key is None or isinstance(key, str):
        return key
    if is_json_integer(key):
        return int(key)
    if isinstance(key, float) and key.is_integer():
        return int(key)  # Terraform reads the key as a float64 and truncates it
    raise InvalidState(
        f"{_describe(at)}.index_key must be an integer or a string, not {json_kind(key)}")


def _key_suffix(key: int | str | None) -> str:
    if key is None:
        return ""
    if isinstance(key, int):
        return f"[{key}]"
    return "[" + hcl_quote(_SURROGATES.sub("\ufffd", key)) + "]"


def hcl_quote(text: str) -> str:
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


def _attributes(instance: dict[str, Any], at: _At,
                encode: Callable[[Any], str] = compact_json) -> str:
    """The instance's C{attributes} column: compact JSON (C{encode}'s),
    sensitive paths redacted."""
    sensitive = instance.get("sensitive_attributes")
    attrs = instance.get("attributes")
    if attrs is not None:
        if not isinstance(attrs, dict):
            raise InvalidState(
                f"{_describe(at)}.attributes must be a JSON object, not {json_kind(attrs)}")
        if sensitive is None or sensitive == []:  # the usual case: nothing to redact
            return clean_json_text(encode(attrs))
        return clean_json_text(encode(redact(attrs, sensitive_paths(sensitive))))
    paths = sensitive_paths(sensitive)
    flat = instance.get("attributes_flat")
    if flat is not None:
        if not isinstance(flat, dict):
            raise InvalidState(
                f"{_describe(at)}.attributes_flat must be a JSON object, not {json_kind(flat)}"
            )
        return clean_json_text(encode(redact_flat(flat, paths)))
    return "{}"
