"""A state's JSON text written as Terraform writes it.  Pure: no Twisted,
no I/O.

Terraform writes a state with Go's C{json.MarshalIndent(state, "", "  ")}
(statefile/version4.go, C{writeStateV4}): members in a fixed order, two
spaces a level, a final newline; Go escapes C{<}, C{>}, C{&}, U+2028 and
U+2029 in strings, and writes other text unescaped.  A merged state is
written in that layout, and every resource, instance object, output and
check result it takes from a stored state or a view's state is copied as
its text, byte for byte: text written by Terraform stays as Terraform wrote
it, so the next state Terraform sends repeats it exactly and the merge
finds it unchanged without decoding it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from kilolock.reservations.model import ResourceId
from kilolock.tfstate.address import Key

__all__ = ["FIRST_RESOURCE", "NEXT_RESOURCE", "go_string", "instance_order",
           "render_check_results", "render_output", "render_outputs", "render_resource",
           "render_value", "state_head", "state_tail"]

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b",
            "\f": "\\f", "<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
            "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _escape(char: str) -> str:
    known = _ESCAPES.get(char)
    if known is not None:
        return known
    point = ord(char)
    if point < 0x20 or 0xD800 <= point <= 0xDFFF:
        return f"\\u{point:04x}" if point < 0x20 else "\ufffd"
    return char


def go_string(text: str) -> bytes:
    """C{text} as a JSON string the way Go's encoder writes it (an
    unpaired surrogate, which Go's strings cannot hold, as U+FFFD)."""
    if text.isascii() and text.isprintable() and not any(char in text for char in '"\\<>&'):
        return f'"{text}"'.encode()
    return ('"' + "".join(_escape(char) for char in text) + '"').encode("utf-8")


def instance_order(key: Key, deposed: str) -> tuple[int, int, str, str]:
    """Terraform's order of a resource's instance objects
    (C{sortInstancesV4}): no key, then integer keys, then string keys;
    the current object before its deposed ones, which go by key."""
    if key is None:
        return (0, 0, "", deposed)
    if isinstance(key, int):
        return (1, key, "", deposed)
    return (2, 0, key, deposed)


def render_resource(resource: ResourceId, provider: str, each: str,
                    instances: Iterable[bytes]) -> bytes:
    """A resource at its place in the C{resources} array (two levels
    deep), its instance objects' texts (four levels deep, in order) as
    given."""
    module, mode, type_, name = resource
    members = []
    if module:
        members.append(b'"module": ' + go_string(module))
    members += [b'"mode": ' + go_string(mode), b'"type": ' + go_string(type_),
                b'"name": ' + go_string(name)]
    if each:
        members.append(b'"each": ' + go_string(each))
    members.append(b'"provider": ' + go_string(provider))
    texts = list(instances)
    if texts:
        members.append(b'"instances": [\n        ' + b",\n        ".join(texts)
                       + b"\n      ]")
    else:
        members.append(b'"instances": []')
    return b"{\n      " + b",\n      ".join(members) + b"\n    }"


_VALUE_ENCODER = msgspec.json.Encoder(decimal_format="number", order="sorted")


def render_value(value: Any, depth: int) -> bytes:
    """A decoded value (numbers as L{kilolock.reservations.index} decodes
    them) indented to sit C{depth} levels deep."""
    text = msgspec.json.format(_VALUE_ENCODER.encode(value), indent=2)
    return text.replace(b"\n", b"\n" + b"  " * depth)


def render_outputs(entries: dict[str, bytes]) -> bytes:
    """The C{outputs} member from each output's text (two levels deep),
    by name as Go orders a map's keys."""
    if not entries:
        return b"{}"
    return (b"{\n    " + b",\n    ".join(go_string(name) + b": " + entries[name]
                                       for name in sorted(entries)) + b"\n  }")


def render_output(value: Any, type_: Any, sensitive: bool) -> bytes:
    """One output's text (two levels deep)."""
    members = [b'"value": ' + render_value(value, 3), b'"type": ' + render_value(type_, 3)]
    if sensitive:
        members.append(b'"sensitive": true')
    return b"{\n      " + b",\n      ".join(members) + b"\n    }"


def render_check_results(entries: list[bytes]) -> bytes:
    """The C{check_results} member from each entry's text (two levels
    deep); none is C{null}, as Terraform writes it."""
    if not entries:
        return b"null"
    return b"[\n    " + b",\n    ".join(entries) + b"\n  ]"


#: What goes before the first resource's text, and between two.
FIRST_RESOURCE = b"\n    "
NEXT_RESOURCE = b",\n    "


def state_head(terraform_version: str | None, serial: int, lineage: str,
               outputs: bytes) -> bytes:
    """A v4 state's text up to its C{resources} array's opening bracket."""
    return (b'{\n  "version": 4,\n  "terraform_version": ' + go_string(terraform_version or "")
            + b',\n  "serial": ' + str(serial).encode() + b',\n  "lineage": '
            + go_string(lineage) + b',\n  "outputs": ' + outputs + b',\n  "resources": [')


def state_tail(check_results: bytes, resources: int) -> bytes:
    """A v4 state's text after its last resource (C{resources}: how many
    it has)."""
    return (b"\n  ]" if resources else b"]") + b',\n  "check_results": ' + check_results + b"\n}\n"
