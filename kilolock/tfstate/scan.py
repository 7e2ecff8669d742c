"""Reading a stored state one resource at a time, from its bytes.  Pure: no
Twisted, no I/O.

L{scan_state} walks a v4 state's top-level object and hands each element of
its C{resources} array, decoded, to a visitor together with a way to get the
element's JSON text exactly as stored.  The bytes are decoded to text a
window at a time (L{WINDOW} characters, more for an element that does not
fit), and the text before the element being read is dropped: a 120 MB state
never exists as a whole document of Python objects, nor as a second whole
copy in text -- only its bytes, one window and what the visitor keeps.

The top-level members other than C{resources} (C{version}, C{serial},
C{lineage}, C{outputs}, C{check_results}, ...) come back decoded, each with
its text as stored (L{Member}).

Stored versions were checked when they were written (L{kilolock.tfstate.parse}),
so a failure here means bytes that are not a v4 state at all: an OpenTofu
encrypted envelope (L{EncryptedState}, nothing in it can be read) or, for
bytes of another origin, L{InvalidState} naming the position.
"""

from __future__ import annotations

import codecs
import functools
import json
from collections.abc import Callable
from typing import Any

from attrs import frozen

from kilolock.core.errors import EncryptedState, InvalidState
from kilolock.core.text import JSON_WHITESPACE
from kilolock.tfstate.parse import JSON_DECODER, SUPPORTED_VERSION, is_envelope

__all__ = ["WINDOW", "Member", "ResourceVisitor", "scan_state"]

#: Characters of text decoded at a time.
WINDOW = 1 << 20

#: Called with each resource's position in the array, the resource decoded,
#: and a function returning its text as stored (valid during the call only).
ResourceVisitor = Callable[[int, Any, Callable[[], str]], None]


@frozen
class Member:
    """A top-level member of a state: its value, and its JSON text as stored."""

    value: Any
    text: str


class _Reader:
    """The text of UTF-8 bytes, decoded a window at a time; C{pos} is an
    absolute character position, and text before it may be dropped."""

    def __init__(self, raw: bytes) -> None:
        self._raw = memoryview(raw)
        self._fed = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.base = 0
        self.pos = 0

    def _more(self, minimum: int = WINDOW) -> bool:
        """Decode at least C{minimum} more bytes (all that is left at most),
        dropping the text before C{pos}.  @return: False at the end."""
        if self._fed >= len(self._raw):
            return False
        chunk = self._raw[self._fed:self._fed + max(WINDOW, minimum)]
        self._fed += len(chunk)
        try:
            new = self._decoder.decode(chunk, final=self._fed >= len(self._raw))
        except UnicodeDecodeError:
            raise InvalidState("the state is not valid UTF-8") from None
        self.text = self.text[self.pos - self.base:] + new
        self.base = self.pos
        return True

    def peek(self) -> str:
        """The character at C{pos} (C{""} at the end)."""
        while self.pos - self.base >= len(self.text):
            if not self._more():
                return ""
        at = self.pos - self.base
        return self.text[at:at + 1]

    def skip(self) -> None:
        """Move C{pos} past whitespace."""
        while True:
            match = JSON_WHITESPACE.match(self.text, self.pos - self.base)
            assert match is not None
            self.pos = self.base + match.end()
            if match.end() < len(self.text) or not self._more():
                return

    def value(self) -> tuple[Any, int]:
        """Decode the JSON value at C{pos} and move past it.

        @return: the value and the position where it started."""
        while True:
            at = self.pos - self.base
            try:
                value, end = JSON_DECODER.raw_decode(self.text, at)
            except RecursionError:
                raise InvalidState("the state is nested too deeply") from None
            except ValueError as error:
                # The value may go on beyond the window: read more and retry.
                if self._more(2 * (len(self.text) - at)):
                    continue
                where = f" (character {error.pos + self.base})" if isinstance(
                    error, json.JSONDecodeError) else ""
                raise InvalidState(f"the state is not valid JSON{where}") from None
            # A number (or true, false, null) at the window's end may go on.
            if end == len(self.text) and self._more(2 * (end - at)):
                continue
            start = self.pos
            self.pos = self.base + end
            return value, start

    def since(self, start: int) -> str:
        """The text from C{start} (not yet dropped) to C{pos}."""
        return self.text[start - self.base:self.pos - self.base]

    def then(self, closing: str) -> bool:
        """After a member or an element: True at the C{closing} character,
        False after a comma (moving past either)."""
        self.skip()
        delimiter = self.peek()
        self.pos += 1
        if delimiter == closing:
            return True
        if delimiter != ",":
            raise InvalidState(f"the state is not valid JSON: expected ',' or {closing!r} at"
                               f" character {self.pos - 1}")
        self.skip()
        return False

    def expect(self, char: str, what: str) -> None:
        self.skip()
        if self.peek() != char:
            raise InvalidState(f"the state is not valid JSON: expected {what} at character"
                               f" {self.pos}")
        self.pos += 1


def scan_state(raw: bytes, visit: ResourceVisitor) -> dict[str, Member]:
    """Walk the v4 state C{raw}, calling C{visit} for each resource.

    @return: the top-level members other than C{resources}, by name (the
        last of a repeated name, as JSON decoders do).
    @raise EncryptedState: C{raw} is an OpenTofu encrypted envelope.
    @raise InvalidState: C{raw} is not a v4 state.
    """
    reader = _Reader(raw)
    members: dict[str, Member] = {}
    reader.expect("{", "a JSON object")
    reader.skip()
    if reader.peek() == "}":
        reader.pos += 1
    else:
        resources_seen = False
        while True:
            if reader.peek() != '"':
                raise InvalidState("the state is not valid JSON: expected a member name at"
                                   f" character {reader.pos}")
            name, _ = reader.value()
            reader.expect(":", "':'")
            reader.skip()
            if name == "resources" and reader.peek() == "[":
                if resources_seen:
                    raise InvalidState("the state has two resources arrays")
                resources_seen = True
                _walk_array(reader, visit)
            else:
                value, start = reader.value()
                members[name] = Member(value, reader.since(start))
            if reader.then("}"):
                break
    reader.skip()
    if reader.peek() != "":
        raise InvalidState("the state is not valid JSON: extra data after the object")
    _check_members({name: member.value for name, member in members.items()})
    return members


def _walk_array(reader: _Reader, visit: ResourceVisitor) -> None:
    reader.pos += 1
    reader.skip()
    if reader.peek() == "]":
        reader.pos += 1
        return
    index = 0
    while True:
        item, start = reader.value()
        visit(index, item, functools.partial(reader.since, start))
        del item
        index += 1
        if reader.then("]"):
            return


def _check_members(values: dict[str, Any]) -> None:
    if is_envelope(values):
        raise EncryptedState("this version is an OpenTofu encrypted state: the server cannot"
                             " read its resources")
    version = values.get("version")
    if version != SUPPORTED_VERSION or isinstance(version, bool):
        raise InvalidState("the stored bytes are not a Terraform state version 4")
