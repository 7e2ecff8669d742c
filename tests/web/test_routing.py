"""Routing, one segment at a time, in the three trees (the Terraform lane,
the native API, the control API): which path names what, the path rules
checked wherever a bad segment stands, and the JSON 405 with its Allow
header (HEAD included) on every tree."""

from __future__ import annotations

import pytest

from tests.support.hosted_support import HostedStub
from tests.support.stub_client import Reply, StubClient, lock_body, state_body

#: (method, path) -> (status, error code or None, Allow or None)
STATE_LANE = [
    ("GET", "/", 404, "not_found", None),
    ("GET", "/v1", 404, "not_found", None),
    ("GET", "/v1/states", 404, "not_found", None),
    ("BREW", "/v1/states", 404, "not_found", None),
    ("GET", "/v1/states/", 400, "empty_segment", None),
    ("GET", "/v1/states/app", 200, None, None),
    ("get", "/v1/states/app", 200, None, None),  # methods match whatever their case
    ("HEAD", "/v1/states/app", 200, None, None),
    ("GET", "/v1/states/lock", 200, None, None),  # a one-segment state may be named lock
    ("GET", "/v1/states/app/lock", 405, "method_not_allowed", b"DELETE, POST"),
    ("HEAD", "/v1/states/app/lock", 405, "method_not_allowed", b"DELETE, POST"),
    ("GET", "/v1/states/lock/lock", 405, "method_not_allowed", b"DELETE, POST"),
    ("GET", "/v1/states/a/b", 404, "not_found", None),
    ("GET", "/v1/states/a/b/c", 200, None, None),
    ("GET", "/v1/states/a/lock/c", 200, None, None),  # three segments are a name of their own
    ("GET", "/v1/states/a/b/lock", 404, None, None),  # ... even ending in lock: no such state
    ("GET", "/v1/states/a/b/c/lock", 405, "method_not_allowed", b"DELETE, POST"),
    ("GET", "/v1/states/a/lock/c/lock", 405, "method_not_allowed", b"DELETE, POST"),
    ("GET", "/v1/states/a/b/c/d", 404, "not_found", None),
    ("GET", "/v1/states/a/b/c/lock/x", 404, "not_found", None),
    ("GET", "/v1/states/a/b/c/d/%2F", 400, "encoded_slash", None),  # a bad segment past a 404
    ("GET", "/v1/states/a/b/c/lock/..", 400, "dot_segment", None),
    ("GET", "/v1/states/a/b/%2F/lock", 400, "encoded_slash", None),
    ("GET", "/v1/state-unlock", 404, "not_found", None),
    ("GET", "/v1/state-unlock/app", 405, "method_not_allowed", b"POST"),
    ("HEAD", "/v1/state-unlock/app", 405, "method_not_allowed", b"POST"),
    ("BREW", "/v1/state-unlock/app", 405, "method_not_allowed", b"POST"),
    ("POST", "/v1/state-unlock/app/lock", 404, "not_found", None),  # no lock alias there
    ("POST", "/v1/state-unlock/a/b/c/d", 404, "not_found", None),
    ("POST", "/v1/state-unlock/a/..", 400, "dot_segment", None),
    ("GET", "/healthz", 200, None, None),
    ("GET", "/healthz/x", 404, "not_found", None),
    ("POST", "/healthz", 405, "method_not_allowed", b"GET, HEAD"),
    ("GET", "/nope/x", 404, "not_found", None),
    ("GET", "/v1/%2F", 404, "not_found", None),  # fixed segments read no names
]

NATIVE = [
    ("GET", "/v1/native", 200, None, None),
    ("GET", "/v1/native/", 200, None, None),
    ("GET", "/v1/native//", 404, "not_found", None),
    ("BREW", "/v1/native", 405, "method_not_allowed", b"GET, HEAD"),
    ("GET", "/v1/native/states/", 200, None, None),
    ("GET", "/v1/native/states//x", 400, "empty_segment", None),
    ("POST", "/v1/native/states/app", 405, "method_not_allowed", b"GET, HEAD"),
    ("GET", "/v1/native/states/a/b", 404, "not_found", None),
    ("GET", "/v1/native/states/a/b/-", 404, "state_not_found", None),  # '-' third is a name
    ("GET", "/v1/native/states/a/b/c/-/versions", 200, None, None),
    ("GET", "/v1/native/states/app/-", 404, "not_found", None),
    ("GET", "/v1/native/states/app/-/versions/0", 404, "not_found", None),
    ("GET", "/v1/native/states/app/-/versions/1", 200, None, None),
    ("GET", "/v1/native/states/app/-/versions/1/%2F", 400, "encoded_slash", None),
    ("GET", "/v1/native/states/app/-/rollback", 405, "method_not_allowed", b"POST"),
    ("HEAD", "/v1/native/states/app/-/rollback", 405, "method_not_allowed", b"POST"),
    ("PATCH", "/v1/native/states/app/-/lock", 405, "method_not_allowed", b"GET, HEAD"),
    ("GET", "/v1/native/resources/", 200, None, None),
    ("GET", "/v1/native/resources/%2F", 404, "not_found", None),  # a fixed route reads no name
    ("GET", "/v1/native/events/verify", 200, None, None),
    ("GET", "/v1/native/events/verify/", 404, "not_found", None),
    ("POST", "/v1/native/events", 405, "method_not_allowed", b"GET, HEAD"),
]

#: The control API (with the control token unless the path says "no token").
CONTROL = [
    ("GET", "/v1", 404, "not_found", None),
    ("GET", "/v1/x", 404, "not_found", None),
    ("GET", "/v1/api", 404, "not_found", None),
    ("GET", "/v1/api/", 400, "empty_segment", None),
    ("GET", "/v1/api/tenants/acme", 200, None, None),
    ("HEAD", "/v1/api/tenants", 405, "method_not_allowed", b"GET, POST"),  # no HEAD here
    ("BREW", "/v1/api/tenants/acme", 405, "method_not_allowed", b"DELETE, GET"),
    ("POST", "/v1/api/tenants/acme/events/verify", 405, "method_not_allowed", b"GET"),
    ("GET", "/v1/api/tenants/acme/elsewhere", 404, "not_found", None),
    ("GET", "/v1/api/tenants/acme/elsewhere/%2F", 400, "encoded_slash", None),
    ("GET", "/v1/api/tenants/acme/tokens/tok_000000000000/x", 404, "not_found", None),
]

NO_TOKEN = [
    ("GET", "/v1/api", 401, "unauthorized", None),
    ("GET", "/v1/api/%2F", 401, "unauthorized", None),  # before any path rule
    ("BREW", "/v1/api/tenants", 401, "unauthorized", None),
    ("GET", "/healthz", 200, None, None),
]


def _check(method: str, reply: Reply, status: int, code: str | None,
           allow: bytes | None) -> None:
    assert reply.status == status
    if code is not None:
        assert reply.header(b"content-type") == b"application/json"
        if method == "HEAD":
            assert reply.body == b""  # the headers of the JSON error, without it
        else:
            assert reply.error_code == code
    assert reply.header(b"allow") == allow


@pytest.fixture(scope="module")
def seeded() -> StubClient:
    client = StubClient()
    for name in ("app", "lock", "a/b/c", "a/lock/c"):
        assert client.post(f"/v1/states/{name}", state_body(1)).status == 200
    return client


@pytest.mark.parametrize(("method", "path", "status", "code", "allow"), STATE_LANE + NATIVE)
def test_state_and_native_routes(seeded: StubClient, method: str, path: str, status: int,
                                 code: str | None, allow: bytes | None) -> None:
    """Each path names what its segments say, one at a time; a refused method
    is a JSON 405 naming the allowed ones."""
    body = state_body(2) if method == "POST" and "state-unlock" not in path else None
    _check(method, seeded.request(method, path, body=body), status, code, allow)


@pytest.fixture(scope="module")
def hosted() -> HostedStub:
    stub = HostedStub()
    stub.control.ok("POST", "/tenants", {"slug": "acme", "name": "Acme"}, 201)
    return stub


@pytest.mark.parametrize(("method", "path", "status", "code", "allow"), CONTROL)
def test_control_routes(hosted: HostedStub, method: str, path: str, status: int,
                        code: str | None, allow: bytes | None) -> None:
    """The control API's routes, with the control token."""
    reply = hosted.control_client.request(
        method, path, headers={"Authorization": "Bearer control-token-for-tests-0123456789"})
    _check(method, reply, status, code, allow)


@pytest.mark.parametrize(("method", "path", "status", "code", "allow"), NO_TOKEN)
def test_control_routes_without_the_token(hosted: HostedStub, method: str, path: str,
                                          status: int, code: str | None,
                                          allow: bytes | None) -> None:
    """Without the control token, everything below /v1/api is 401, whatever the path."""
    _check(method, hosted.control_client.request(method, path), status, code, allow)


def test_lock_alias_below_a_state_named_lock(seeded: StubClient) -> None:
    """/v1/states/lock/lock is the lock alias of the state named lock."""
    assert seeded.request("POST", "/v1/states/lock/lock", body=lock_body("L"),
                          headers={"Content-Type": "application/json"}).status == 200
    assert seeded.lock("/v1/states/lock", lock_body("other")).status == 423
    assert seeded.request("DELETE", "/v1/states/lock/lock", body=lock_body("L")).status == 200
