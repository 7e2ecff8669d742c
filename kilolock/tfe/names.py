"""Public ids of the TFE lane, the naming rules of workspaces and tags, and
which Kilolock state a TFE workspace is.

Ids (C{[A-Za-z0-9]} after a prefix, as the TFE API's own):

  - C{ws-} and 16 random characters: a workspace (stored);
  - C{sv-WS-N}: version C{N} of the workspace whose id is C{ws-WS}
    (derived: every stored version has one, whichever lane wrote it);
  - C{sv-} and 24 random characters: a pending state version (stored);
  - C{wsout-WS-N-I}: output C{I} (from 0, in the state's order) of version
    C{N} of workspace C{ws-WS}.

A workspace named C{NAME} is the state the HTTP lane addresses as
C{/v1/states/NAME} with the same credentials: in the open and static auth
modes the state C{NAME}, for a hosted token the state
C{{workspace_id}/{env_public_id}/NAME} of the token's environment
(L{kilolock.rules.scope.state_key} decides).
"""

from __future__ import annotations

import re
import secrets
import string

from attrs import frozen

from kilolock.core.errors import InvalidPath
from kilolock.rules.paths import validate_segment

WORKSPACE_PREFIX = "ws-"
VERSION_PREFIX = "sv-"
OUTPUT_PREFIX = "wsout-"

_ALPHABET = string.ascii_letters + string.digits
_WORKSPACE_RANDOM = 16
_PENDING_RANDOM = 24
_WORKSPACE_ID = re.compile(r"^ws-([A-Za-z0-9]{16})$")
_VERSION_ID = re.compile(r"^sv-([A-Za-z0-9]{16})-([1-9][0-9]{0,8})$")
_PENDING_ID = re.compile(r"^sv-[A-Za-z0-9]{24}$")
_OUTPUT_ID = re.compile(r"^wsout-([A-Za-z0-9]{16})-([1-9][0-9]{0,8})-(0|[1-9][0-9]{0,5})$")
#: What the TFE client itself accepts as a workspace name.
_TFE_NAME = re.compile(r"^[^/\s]+$")
#: Tag keys and values: no whitespace or comma (commas separate tags in a
#: query), no control characters.
_TAG = re.compile(r"^[^\s,\x00-\x1f\x7f-\x9f]+$")

#: The workspace name Terraform keeps for itself (a cloud workspace may not
#: be called C{default}).
RESERVED_NAME = "default"
MAX_TAG_LENGTH = 255
MAX_TAGS = 100


class InvalidName(ValueError):
    """A workspace name or tag breaks a rule (the message says which)."""


def _random(length: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def new_workspace_id() -> str:
    return WORKSPACE_PREFIX + _random(_WORKSPACE_RANDOM)


def new_pending_id() -> str:
    return VERSION_PREFIX + _random(_PENDING_RANDOM)


def is_workspace_id(text: str) -> bool:
    return _WORKSPACE_ID.match(text) is not None


def is_pending_id(text: str) -> bool:
    return _PENDING_ID.match(text) is not None


@frozen
class VersionRef:
    """Version C{number} of workspace C{workspace_id}."""

    workspace_id: str
    number: int


@frozen
class OutputRef:
    """Output C{index} of version C{number} of workspace C{workspace_id}."""

    workspace_id: str
    number: int
    index: int


def version_id(workspace_id: str, number: int) -> str:
    return f"{VERSION_PREFIX}{workspace_id.removeprefix(WORKSPACE_PREFIX)}-{number}"


def parse_version_id(text: str) -> VersionRef | None:
    """The version a derived C{sv-} id names (None for anything else)."""
    match = _VERSION_ID.match(text)
    if match is None:
        return None
    return VersionRef(WORKSPACE_PREFIX + match.group(1), int(match.group(2)))


def output_id(workspace_id: str, number: int, index: int) -> str:
    return f"{OUTPUT_PREFIX}{workspace_id.removeprefix(WORKSPACE_PREFIX)}-{number}-{index}"


def parse_output_id(text: str) -> OutputRef | None:
    """The output a C{wsout-} id names (None for anything else)."""
    match = _OUTPUT_ID.match(text)
    if match is None:
        return None
    return OutputRef(WORKSPACE_PREFIX + match.group(1), int(match.group(2)),
                     int(match.group(3)))


def check_workspace_name(value: object) -> str:
    """A TFE workspace name: what Terraform accepts (C{^[^/\\s]+$}, not
    C{default}) and what a state name may be (one path segment).

    @raise InvalidName: naming the rule it breaks.
    """
    if not isinstance(value, str) or not value:
        raise InvalidName("a workspace name must be a non-empty string")
    if value == RESERVED_NAME:
        raise InvalidName("'default' is not a valid workspace name here (Terraform keeps"
                          " it for itself)")
    if not _TFE_NAME.match(value):
        raise InvalidName("a workspace name may not contain '/' or whitespace")
    try:
        validate_segment(value.encode("utf-8"))
    except (InvalidPath, UnicodeEncodeError) as error:
        message = error.message if isinstance(error, InvalidPath) else "it is not valid UTF-8"
        raise InvalidName(f"a workspace name is a state name: {message}") from None
    return value


def check_tag_text(value: object, what: str, empty: bool = False) -> str:
    """A tag key (or, with C{empty}, a tag value, which may be empty).

    @raise InvalidName: naming C{what} and the rule it breaks.
    """
    if not isinstance(value, str):
        raise InvalidName(f"a {what} must be a string")
    if value == "" and empty:
        return value
    if len(value) > MAX_TAG_LENGTH or not _TAG.match(value):
        raise InvalidName(f"a {what} must be 1-{MAX_TAG_LENGTH} characters without"
                          " whitespace, commas or control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidName(f"a {what} must be valid UTF-8") from None
    return value


def workspace_name_of(path: str, prefix: str | None) -> str | None:
    """The TFE name of the state at C{path}, seen by a caller whose states
    share C{prefix} (C{ws/env/}; None: one-segment paths of a whole tenant),
    or None when that caller cannot address it as a TFE workspace."""
    rest = path if prefix is None else path.removeprefix(prefix)
    if (prefix is not None and not path.startswith(prefix)) or "/" in rest:
        return None
    try:
        return check_workspace_name(rest)
    except InvalidName:
        return None
