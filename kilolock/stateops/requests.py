"""The body of C{POST /v1/native/operations}, parsed.  Pure: no Twisted.

A JSON object with C{kind} and the state it works on (C{state}: C{NAME} or
C{WORKSPACE_ID/ENV_PUBLIC_ID/NAME}), and per kind::

    {"kind": "rm", "state": S, "addresses": [ADDRESS, ...]}
    {"kind": "mv", "state": S, "from": ADDRESS, "to": ADDRESS, "toState": S2}
    {"kind": "split", "state": S, "parts": [{"module": MODULE, "state": S2,
                                             "to": MODULE or ""}, ...]}
    {"kind": "import", "state": S, "stateFile": TEXT, "force": false}
    {"kind": "import", "state": S, "upload": UPLOAD_ID, "force": false}

(C{toState} is optional: without it, or naming the state itself however
spelt, a move stays in its state -- decided where the names are resolved,
L{kilolock.web.native.operations}; a part's C{to} defaults to its
C{module}, C{""} being the root module.)  The body
is read under the text rules of every JSON body (L{kilolock.core.text}).
Addresses are Terraform's (L{kilolock.tfstate.address}); moves are checked by
L{kilolock.stateops.moves.check_move}.  Every problem is a 400 naming the field;
unknown fields are refused too (a misspelt field never silently does
nothing).  Messages never quote the body.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen

from kilolock.core.errors import InvalidField
from kilolock.core.text import NotJSON, load_json
from kilolock.stateops.moves import InvalidMove, check_move
from kilolock.tfstate.address import InvalidAddress, Target, parse_address

__all__ = ["ImportRequest", "MoveRequest", "OperationRequest", "RemoveRequest", "SplitPart",
           "SplitRequest", "parse_operation"]

#: At most this many addresses in one C{rm}, parts in one C{split}.
MAX_ADDRESSES = 1000
MAX_PARTS = 100
#: The longest state name accepted in a body (three segments of 255 bytes).
_MAX_STATE_NAME = 3 * 256


@frozen
class RemoveRequest:
    state: str
    addresses: tuple[Target, ...]
    kind = "rm"

    @property
    def states(self) -> tuple[str, ...]:
        return (self.state,)


@frozen
class MoveRequest:
    state: str
    from_: Target
    to: Target
    to_state: str | None = None
    kind = "mv"

    @property
    def states(self) -> tuple[str, ...]:
        return (self.state,) if self.to_state is None else (self.state, self.to_state)


@frozen
class SplitPart:
    module: Target
    state: str
    to: Target


@frozen
class SplitRequest:
    state: str
    parts: tuple[SplitPart, ...]
    kind = "split"

    @property
    def states(self) -> tuple[str, ...]:
        return (self.state, *dict.fromkeys(part.state for part in self.parts))


@frozen
class ImportRequest:
    state: str
    state_file: bytes | None
    upload: str | None
    force: bool = False
    kind = "import"

    @property
    def states(self) -> tuple[str, ...]:
        return (self.state,)


OperationRequest = RemoveRequest | MoveRequest | SplitRequest | ImportRequest

_FIELDS = {
    "rm": {"kind", "state", "addresses"},
    "mv": {"kind", "state", "from", "to", "toState"},
    "split": {"kind", "state", "parts"},
    "import": {"kind", "state", "stateFile", "upload", "force"},
}


def parse_operation(body: bytes) -> OperationRequest:
    """Parse and check an operation request (see the module's docstring).

    @raise InvalidText: (400) the body breaks a text rule of every JSON body
        (L{kilolock.core.text}: C{nul_character}, C{too_deep}, ...), naming
        the member at fault.
    @raise InvalidField: (400) naming the field at fault.
    """
    try:
        document = load_json(body, "the operation body", "body")
    except NotJSON:
        raise InvalidField("body", "the body must be a JSON object describing the operation"
                           ' ({"kind": "mv", "state": ..., "from": ..., "to": ...})') from None
    if not isinstance(document, dict):
        raise InvalidField("body", "the body must be a JSON object")
    kind = document.get("kind")
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise InvalidField("kind", "kind must be one of " + ", ".join(sorted(_FIELDS)))
    unknown = sorted(set(document) - _FIELDS[kind])
    if unknown:
        # The field names the member (its first 64 characters); a member
        # named "" cannot be named, the body is.
        raise InvalidField(unknown[0][:64] or "body",
                           f"unknown field for a {kind} operation; expected: "
                           + ", ".join(sorted(_FIELDS[kind])))
    state = _state(document, "state")
    if kind == "rm":
        return RemoveRequest(state, _addresses(document))
    if kind == "mv":
        from_, to = _address(document, "from"), _address(document, "to")
        _check(from_, to, "to")
        to_state = _state(document, "toState") if document.get("toState") is not None else None
        return MoveRequest(state, from_, to, to_state)
    if kind == "split":
        return SplitRequest(state, _parts(document, state))
    return _import(document, state)


def _state(document: dict[str, Any], field: str) -> str:
    value = document.get(field)
    if not isinstance(value, str) or not value or len(value) > _MAX_STATE_NAME:
        raise InvalidField(field, f"{field} must be a state name: NAME or"
                           " WORKSPACE_ID/ENV_PUBLIC_ID/NAME")
    return value


def _address(document: dict[str, Any], field: str) -> Target:
    value = document.get(field)
    if not isinstance(value, str):
        raise InvalidField(field, f"{field} must be a Terraform address (a string)")
    try:
        return parse_address(value)
    except InvalidAddress as error:
        raise InvalidField(field, f"{field}: {error.message}") from None


def _check(from_: Target, to: Target, field: str, root: bool = False) -> None:
    try:
        check_move(from_, to, root)
    except InvalidMove as error:
        raise InvalidField(field, error.message) from None


def _addresses(document: dict[str, Any]) -> tuple[Target, ...]:
    values = document.get("addresses")
    if not isinstance(values, list) or not values or len(values) > MAX_ADDRESSES:
        raise InvalidField("addresses", "addresses must be a list of 1 to"
                           f" {MAX_ADDRESSES} Terraform addresses")
    found = []
    for position, value in enumerate(values):
        if not isinstance(value, str):
            raise InvalidField(f"addresses[{position}]", "an address must be a string")
        try:
            found.append(parse_address(value))
        except InvalidAddress as error:
            raise InvalidField(f"addresses[{position}]", error.message) from None
    return tuple(dict.fromkeys(found))


def _parts(document: dict[str, Any], state: str) -> tuple[SplitPart, ...]:
    values = document.get("parts")
    if not isinstance(values, list) or not values or len(values) > MAX_PARTS:
        raise InvalidField("parts", f"parts must be a list of 1 to {MAX_PARTS} parts"
                           ' ({"module": "module.net", "state": "network"})')
    parts: list[SplitPart] = []
    for position, value in enumerate(values):
        field = f"parts[{position}]"
        if not isinstance(value, dict) or set(value) - {"module", "state", "to"}:
            raise InvalidField(field, 'a part is {"module": ..., "state": ..., "to": ...}')
        module = _address(value, "module")
        if not module.is_module:
            raise InvalidField(f"{field}.module", "a part names a module (module.NAME, with"
                               " everything below it); a resource goes to another state"
                               " with mv and toState")
        target = _state(value, "state")
        if target == state:
            raise InvalidField(f"{field}.state", "a part goes to another state")
        to_text = value.get("to", value.get("module"))
        to = Target() if to_text == "" else _address({"to": to_text}, "to")
        _check(module, to, f"{field}.to", root=True)
        if any(module.module_contains(p.module.module) or p.module.module_contains(
                module.module) for p in parts):
            raise InvalidField(f"{field}.module", "parts must name distinct modules, none"
                               " inside another")
        parts.append(SplitPart(module, target, to))
    return tuple(parts)


def _import(document: dict[str, Any], state: str) -> ImportRequest:
    force = document.get("force", False)
    if not isinstance(force, bool):
        raise InvalidField("force", "force must be true or false")
    text, upload = document.get("stateFile"), document.get("upload")
    if (text is None) == (upload is None):
        raise InvalidField("stateFile", "give the state file as stateFile (its text) or as"
                           " upload (the id of a complete upload session), not both")
    if upload is not None:
        if not isinstance(upload, str) or not upload or len(upload) > 64:
            raise InvalidField("upload", "upload must be an upload session id")
        return ImportRequest(state, None, upload, force)
    if not isinstance(text, str) or not text:
        raise InvalidField("stateFile", "stateFile must be the state file's text")
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidField("stateFile", "stateFile must be valid Unicode text") from None
    return ImportRequest(state, raw, None, force)
