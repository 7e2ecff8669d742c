"""The token-scope rule (kilolock.rules.scope), cell by cell: which state a caller
addresses, and which requests are refused before any storage read."""

from __future__ import annotations

import pytest

from kilolock.core.errors import Forbidden
from kilolock.core.model import Principal, StateKey
from kilolock.rules.scope import check_caller, in_scope, scope_prefix, state_key

OPEN = Principal("default", "anonymous")
READER = Principal("default", "static", scope="read")
TOKEN = Principal("tn_1", "token:ci", workspace_id="ws_a", env_public_id="env_1")
BASIC = Principal("tn_1", "token:ci", workspace_id="ws_a", env_public_id="env_1",
                  basic_username="ws_a")
MISNAMED = Principal("tn_1", "token:ci", workspace_id="ws_a", env_public_id="env_1",
                     basic_username="ws_b")
SCOPED_READER = Principal("tn_1", "token:dash", scope="read", workspace_id="ws_a",
                          env_public_id="env_1")

USERNAME = "the Basic username must be the token's workspace_id"
OUTSIDE = "this token does not grant access to that workspace/environment"
READ_ONLY = "this token is read-only"

#: (principal, segments, write) -> the state path, or the 403 message.
STATE_KEY_CELLS = [
    (OPEN, ("prod",), False, "prod"),
    (OPEN, ("prod",), True, "prod"),
    (OPEN, ("a", "b", "c"), True, "a/b/c"),  # three segments are an ordinary name
    (READER, ("prod",), False, "prod"),
    (READER, ("prod",), True, READ_ONLY),
    (TOKEN, ("prod",), True, "ws_a/env_1/prod"),  # one name lands in the token's scope
    (TOKEN, ("ws_a", "env_1", "prod"), True, "ws_a/env_1/prod"),
    (TOKEN, ("ws_a", "env_2", "prod"), False, OUTSIDE),
    (TOKEN, ("ws_b", "env_1", "prod"), False, OUTSIDE),
    (BASIC, ("prod",), True, "ws_a/env_1/prod"),
    (BASIC, ("ws_a", "env_1", "prod"), False, "ws_a/env_1/prod"),
    (MISNAMED, ("prod",), False, USERNAME),
    (MISNAMED, ("ws_a", "env_1", "prod"), False, USERNAME),
    (MISNAMED, ("ws_b", "env_1", "prod"), True, USERNAME),  # the username is checked first
    (SCOPED_READER, ("prod",), False, "ws_a/env_1/prod"),
    (SCOPED_READER, ("prod",), True, READ_ONLY),
    (SCOPED_READER, ("ws_b", "env_1", "prod"), True, OUTSIDE),  # the address before the write
]


@pytest.mark.parametrize(("principal", "segments", "write", "expected"), STATE_KEY_CELLS)
def test_state_key(principal: Principal, segments: tuple[str, ...], write: bool,
                   expected: str) -> None:
    """Each cell maps to its state path in the principal's tenant, or to 403
    with the message of the first rule that refuses."""
    if expected in (USERNAME, OUTSIDE, READ_ONLY):
        with pytest.raises(Forbidden) as refused:
            state_key(principal, segments, write)
        assert refused.value.message == expected
    else:
        assert state_key(principal, segments, write) == StateKey(principal.tenant, expected)


@pytest.mark.parametrize(("principal", "write", "expected"), [
    (OPEN, True, None),
    (READER, False, None),
    (READER, True, READ_ONLY),
    (TOKEN, True, None),
    (MISNAMED, False, USERNAME),
    (SCOPED_READER, True, READ_ONLY),
])
def test_check_caller(principal: Principal, write: bool, expected: str | None) -> None:
    """A request that names no state: the username rule, then the write rule."""
    if expected is None:
        check_caller(principal, write)
    else:
        with pytest.raises(Forbidden) as refused:
            check_caller(principal, write)
        assert refused.value.message == expected


@pytest.mark.parametrize(("principal", "path", "prefix", "seen"), [
    (OPEN, "prod", None, True),
    (OPEN, None, None, True),
    (TOKEN, "ws_a/env_1/prod", "ws_a/env_1/", True),
    (TOKEN, "ws_a/env_2/prod", "ws_a/env_1/", False),
    (TOKEN, "prod", "ws_a/env_1/", False),
    (TOKEN, None, "ws_a/env_1/", False),
])
def test_what_a_listing_shows(principal: Principal, path: str | None, prefix: str | None,
                              seen: bool) -> None:
    """A scoped token lists only the states under its workspace/environment."""
    assert scope_prefix(principal) == prefix
    assert in_scope(principal, path) is seen
