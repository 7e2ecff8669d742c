"""A state's text split into its top-level members and its resources'
texts, without decoding the resources.  Pure: no Twisted, no I/O.

msgspec splits the C{resources} array into each element's text without
building the elements, and checks the whole text is JSON; text msgspec
refuses (what only C{json} accepts: an escaped lone surrogate, a top-level
member Terraform does not write) is read by L{kilolock.tfstate.scan}
instead, which is slower but reads anything L{kilolock.tfstate.parse}
accepts.  Where each resource's text starts is found from the lengths
msgspec gives (L{resource_offsets}): only the whitespace and commas between
them are read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import msgspec
from attrs import frozen

from kilolock.core.errors import EncryptedState, InvalidState
from kilolock.core.json_fast import REFUSALS
from kilolock.tfstate.parse import SUPPORTED_VERSION
from kilolock.tfstate.scan import Member, scan_state
from kilolock.tfstate.values import is_json_integer

__all__ = ["Piece", "SplitState", "read_top", "resource_offsets", "split_state"]

class _Top(msgspec.Struct, forbid_unknown_fields=True):
    """The members Terraform writes, each as its text; the C{resources}
    array as the text of each element."""

    version: msgspec.Raw = msgspec.Raw()
    terraform_version: msgspec.Raw = msgspec.Raw()
    serial: msgspec.Raw = msgspec.Raw()
    lineage: msgspec.Raw = msgspec.Raw()
    outputs: msgspec.Raw = msgspec.Raw()
    resources: list[msgspec.Raw] | None = None
    check_results: msgspec.Raw = msgspec.Raw()
    encrypted_data: msgspec.Raw = msgspec.Raw()
    encryption_version: msgspec.Raw = msgspec.Raw()
    meta: msgspec.Raw = msgspec.Raw()


_TOP_DECODER = msgspec.json.Decoder(_Top)
_MEMBERS = tuple(name for name in _Top.__struct_fields__ if name != "resources")

#: A resource's text: msgspec's view of the bytes, bytes, or a view of them.
Piece = msgspec.Raw | bytes | memoryview


@frozen
class SplitState:
    """A state's bytes split: each top-level member's text (members the
    state has), and each resource's text in the state's order."""

    members: dict[str, bytes]
    pieces: list[Piece]

    def member(self, name: str) -> Any:
        """A member decoded (None when absent)."""
        text = self.members.get(name)
        return None if text is None else json.loads(text)

    @property
    def encrypted(self) -> bool:
        return "encrypted_data" in self.members or "encryption_version" in self.members


def split_state(raw: bytes) -> SplitState:
    """Split C{raw}, a v4 state or an OpenTofu envelope (see the module's
    docstring).  Nothing below the top level is checked but that the text
    is JSON.

    @raise InvalidState: C{raw} is not a JSON object.
    """
    if not raw or raw.isspace():
        raise InvalidState("the body is empty; send the state as JSON")
    if raw.startswith(b"\xef\xbb\xbf"):
        raise InvalidState("the body starts with a byte order mark; send plain UTF-8 JSON")
    try:
        top = _TOP_DECODER.decode(raw)
    except REFUSALS:
        return _split_slowly(raw)
    members = {name: bytes(text) for name in _MEMBERS
               if len(text := getattr(top, name))}
    return SplitState(members, list(top.resources or ()))


def _split_slowly(raw: bytes) -> SplitState:
    """L{split_state} by L{scan_state}: anything C{json} reads."""
    pieces: list[Piece] = []

    def visit(index: int, resource: Any, text_of: Callable[[], str]) -> None:
        pieces.append(text_of().encode("utf-8"))

    try:
        found: dict[str, Member] = scan_state(raw, visit)
    except EncryptedState:
        found = {}
        for name, member in _envelope_members(raw).items():
            found[name] = member
    return SplitState({name: member.text.encode("utf-8") for name, member in found.items()},
                      pieces)


def _envelope_members(raw: bytes) -> dict[str, Member]:
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidState("the body is not valid JSON") from None
    if not isinstance(document, dict):
        raise InvalidState("the body must be a JSON object")
    return {name: Member(value, json.dumps(value)) for name, value in document.items()}


_WHITESPACE = rb"[ \t\n\r]*"
_OPENING = re.compile(_WHITESPACE + rb"\{")
_MEMBER_NAME = re.compile(_WHITESPACE + rb'(,' + _WHITESPACE + rb')?"([a-z_]+)"'
                          + _WHITESPACE + rb":" + _WHITESPACE)
_FIRST_ELEMENT = re.compile(rb"\[" + _WHITESPACE)
_SEPARATOR = re.compile(_WHITESPACE + rb"," + _WHITESPACE)
_CLOSING = re.compile(_WHITESPACE + rb"\]")


def resource_offsets(raw: bytes, split: SplitState) -> list[int] | None:
    """Where each resource's text starts in C{raw} (split by
    L{split_state}), or None when the top level is not plain enough to
    tell without reading the text again (a member name with an escape, a
    member repeated).  msgspec checked the text is JSON, and gave the
    length of every member and resource: only the whitespace and commas
    between them are read here."""
    opening = _OPENING.match(raw)
    if opening is None:
        return None
    position = opening.end()
    seen: set[str] = set()
    while True:
        match = _MEMBER_NAME.match(raw, position)
        if match is None or (match.group(1) is None) != (not seen):
            return None
        name = match.group(2).decode()
        if name in seen or (name != "resources" and name not in split.members):
            return None
        seen.add(name)
        position = match.end()
        if name == "resources":
            break
        position += len(split.members[name])
    first = _FIRST_ELEMENT.match(raw, position)
    if first is None:
        return None
    position = first.end()
    offsets: list[int] = []
    for index, piece in enumerate(split.pieces):
        if index:
            separator = _SEPARATOR.match(raw, position)
            if separator is None:
                return None
            position = separator.end()
        offsets.append(position)
        position += len(piece)
    if _CLOSING.match(raw, position) is None:
        return None
    return offsets


def read_top(split: SplitState) -> tuple[str, int, str | None]:
    """The lineage, serial and Terraform version of a split v4 state.

    @raise EncryptedState: it is an OpenTofu encrypted envelope.
    @raise InvalidState: it is not a v4 state.
    """
    if split.encrypted:
        raise EncryptedState("this version is an OpenTofu encrypted state: the server cannot"
                             " read its resources")
    version = split.member("version")
    if not is_json_integer(version) or version != SUPPORTED_VERSION:
        raise InvalidState("the bytes are not a Terraform state version 4")
    serial, lineage = split.member("serial"), split.member("lineage")
    if not is_json_integer(serial) or serial < 0 or not isinstance(lineage, str):
        raise InvalidState("the state has no integer serial and string lineage")
    terraform_version = split.member("terraform_version")
    return lineage, serial, terraform_version if isinstance(terraform_version, str) else None
