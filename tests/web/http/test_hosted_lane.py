"""The state lane in hosted mode (KL_AUTH_MODE=database), in memory: which
credentials get in (401), what a token may address (403, decided before any
storage read), read-only tokens, the single-segment form, and what the audit
trail records.  The same rules on both stores through real servers:
test_cross_tenant.py."""

from __future__ import annotations

from typing import Any

import pytest

from kilolock.auth.portal import (
    DatabaseTokenChecker,
    IPrincipal,
    build_portal,
    credentials_from_header,
)
from kilolock.store.memory.store import MemoryStateStore
from tests.support.hosted_support import HostedStub, TenantAccess, basic, bearer
from tests.support.stub_client import lock_body, state_body

#: Store methods that read or change states (a token lookup is neither).
STATE_METHODS = {
    "read_current", "write_state", "delete_state", "acquire_lock", "release_lock", "get_lock",
    "get_summary", "list_states", "list_versions", "read_version", "get_projection",
    "query_resources", "list_events",
}


class RecordingStore(MemoryStateStore):
    """A memory store that notes every state-lane call it serves."""

    calls: list[str]

    def __getattribute__(self, name: str) -> Any:
        if name in STATE_METHODS:
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)


@pytest.fixture
def recording() -> RecordingStore:
    store = RecordingStore()
    object.__setattr__(store, "calls", [])
    return store


@pytest.fixture
def stub(recording: RecordingStore) -> HostedStub:
    return HostedStub(recording)


@pytest.fixture
def tenants(stub: HostedStub) -> tuple[TenantAccess, TenantAccess]:
    return stub.control.tenant("alpha"), stub.control.tenant("beta")


def test_credentials_that_get_401(stub: HostedStub,
                                  tenants: tuple[TenantAccess, TenantAccess]) -> None:
    """Missing, unknown, revoked, malformed and non-kl_ credentials all get the
    same 401 with the Basic challenge; a valid token gets in by Basic and Bearer."""
    alpha, _ = tenants
    refused = [
        {},
        alpha.auth("kl_" + "x" * 43),
        alpha.auth(alpha.revoked),
        alpha.auth(alpha.write[:-1]),
        alpha.auth("not-a-kilolock-token"),
        bearer(alpha.revoked),
        {"Authorization": "Basic !!!"},
        {"Authorization": "Digest abc"},
        alpha.auth("kl_" + "x" * 500),
    ]
    bodies = set()
    for headers in refused:
        reply = stub.state.get("/v1/states/prod", headers=headers)
        assert reply.status == 401, headers
        assert reply.header(b"www-authenticate") == b'Basic realm="kilolock"'
        bodies.add(reply.body)
    assert len(bodies) == 1
    assert stub.state.get("/v1/states/prod", headers=alpha.auth(alpha.write)).status == 404
    assert stub.state.get("/v1/states/prod", headers=bearer(alpha.write)).status == 404


def test_a_path_outside_the_tokens_scope_is_403_before_any_storage_read(
        stub: HostedStub, recording: RecordingStore,
        tenants: tuple[TenantAccess, TenantAccess]) -> None:
    """Another tenant's ws/env, an unknown one, a mix of own workspace and
    foreign environment, and a Basic username that is not the token's
    workspace are 403 for every method — and the store was never asked."""
    alpha, beta = tenants
    state = state_body(1)
    assert stub.state.post(f"/v1/states/{beta.prefix}/prod", state,
                           headers=beta.auth(beta.write)).status == 200
    recording.calls.clear()
    paths = [f"/v1/states/{beta.prefix}/prod",
             "/v1/states/ws_000000000000/env_000000000000/prod",
             f"/v1/states/{alpha.workspace_id}/{beta.env_id}/prod",
             f"/v1/states/{beta.workspace_id}/{alpha.env_id}/prod"]
    requests: list[tuple[str, str, dict[str, str]]] = []
    for path in paths:
        for secret in (alpha.write, alpha.read):
            requests.extend((method, path, alpha.auth(secret))
                            for method in ("GET", "POST", "DELETE", "LOCK", "UNLOCK"))
    requests += [(method, f"/v1/states/{alpha.prefix}/prod", basic(beta.workspace_id,
                                                                  alpha.write))
                 for method in ("GET", "POST", "LOCK")]
    requests += [("GET", "/v1/states/prod", basic("", alpha.write)),
                 ("POST", "/v1/state-unlock/prod", basic("terraform", alpha.write))]
    for method, path, headers in requests:
        body = lock_body("L") if method in ("LOCK", "UNLOCK") else state
        reply = stub.state.request(method, path, body=body if method != "GET" else None,
                                   headers=headers)
        assert reply.status == 403, (method, path, reply.body)
        assert reply.json()["error"]["code"] == "forbidden"
    assert recording.calls == []
    assert stub.state.get(f"/v1/states/{beta.prefix}/prod",
                          headers=beta.auth(beta.write)).body == state
    assert recording.calls == ["read_current"]  # the recorder does see reads


def test_read_token_may_only_get(stub: HostedStub, recording: RecordingStore,
                                 tenants: tuple[TenantAccess, TenantAccess]) -> None:
    """A read token GETs and HEADs its states; every other method on every
    route is 403 read-only before the store is asked, and changes nothing."""
    alpha, _ = tenants
    stored = state_body(1)
    assert stub.state.post("/v1/states/prod", stored,
                           headers=alpha.auth(alpha.write)).status == 200
    read = alpha.auth(alpha.read)
    assert stub.state.get("/v1/states/prod", headers=read).body == stored
    assert stub.state.get(f"/v1/states/{alpha.prefix}/prod", headers=read).body == stored
    assert stub.state.request("HEAD", "/v1/states/prod", headers=read).status == 200
    recording.calls.clear()
    for method, path, body in (
            ("POST", "/v1/states/prod", state_body(2)),
            ("PUT", "/v1/states/prod", state_body(2)),
            ("DELETE", "/v1/states/prod", None),
            ("LOCK", "/v1/states/prod", lock_body("L")),
            ("UNLOCK", "/v1/states/prod", b""),
            ("POST", "/v1/states/prod/lock", lock_body("L")),
            ("DELETE", "/v1/states/prod/lock", b""),
            ("POST", f"/v1/state-unlock/{alpha.prefix}/prod", b"")):
        reply = stub.state.request(method, path, body=body, headers=read)
        assert (reply.status, reply.json()["error"]["message"]) == (
            403, "this token is read-only"), (method, path)
    assert recording.calls == []
    assert stub.state.get("/v1/states/prod", headers=read).body == stored
    assert recording.calls == ["read_current"]


def test_single_segment_name_is_the_tokens_own_workspace_and_environment(
        stub: HostedStub, tenants: tuple[TenantAccess, TenantAccess]) -> None:
    """/v1/states/{name} and /v1/states/{ws}/{env}/{name} are one state for a
    token; the same name is a different state for another tenant."""
    alpha, beta = tenants
    assert stub.state.post("/v1/states/prod", state_body(1),
                           headers=alpha.auth(alpha.write)).status == 200
    assert stub.state.post(f"/v1/states/{beta.prefix}/prod", state_body(7),
                           headers=beta.auth(beta.write)).status == 200
    assert stub.state.get(f"/v1/states/{alpha.prefix}/prod",
                          headers=alpha.auth(alpha.write)).body == state_body(1)
    assert stub.state.get("/v1/states/prod", headers=beta.auth(beta.read)).body == state_body(7)
    lock = lock_body("held-by-alpha")
    assert stub.state.lock(f"/v1/states/{alpha.prefix}/prod", lock,
                           headers=alpha.auth(alpha.write)).status == 200
    conflict = stub.state.post("/v1/states/prod", state_body(2),
                               headers=alpha.auth(alpha.write))
    assert (conflict.status, conflict.body) == (423, lock)
    # beta's "prod" is not locked by alpha's lock
    assert stub.state.post("/v1/states/prod", state_body(8),
                           headers=beta.auth(beta.write)).status == 200


def test_names_another_tenant_has_answer_exactly_like_names_nobody_has(
        stub: HostedStub, tenants: tuple[TenantAccess, TenantAccess]) -> None:
    """For beta, alpha's 'prod' is a name beta does not have: GET 404 empty,
    DELETE 404 with byte-identical bodies to a name that never existed, and
    an owner UNLOCK with alpha's lock ID is the same no-op."""
    alpha, beta = tenants
    auth = beta.auth(beta.write)

    def answers(name: str) -> list[tuple[int, bytes]]:
        return [(r.status, r.body) for r in (
            stub.state.get(f"/v1/states/{name}", headers=auth),
            stub.state.delete(f"/v1/states/{name}", headers=auth),
            stub.state.unlock(f"/v1/states/{name}", lock_body("alpha-lock"), headers=auth))]

    before = answers("prod")
    assert stub.state.post("/v1/states/prod", state_body(1),
                           headers=alpha.auth(alpha.write)).status == 200
    assert stub.state.lock("/v1/states/prod", lock_body("alpha-lock"),
                           headers=alpha.auth(alpha.write)).status == 200
    after = answers("prod")
    assert after == before
    assert before[0] == (404, b"")
    assert before[1][0] == 404 and b"state_not_found" in before[1][1]
    assert before[2] == (200, b"")
    probe = stub.state.lock("/v1/states/prod", lock_body("probe"),
                            headers=alpha.auth(alpha.write))
    assert probe.status == 423


def test_state_events_name_the_token(stub: HostedStub,
                                     tenants: tuple[TenantAccess, TenantAccess]) -> None:
    """A write through a token is recorded in its tenant's chain as
    token:<name> with the token id; nothing lands in the other tenant's chain."""
    alpha, _ = tenants
    stub.state.post("/v1/states/prod", state_body(1), headers=alpha.auth(alpha.write))
    events = stub.control.ok("GET", "/tenants/alpha/events?kind=state_write")["events"]
    [write] = events
    assert (write["principal"], write["state"], write["detail"]["token"]) == (
        "token:writer", f"{alpha.prefix}/prod", alpha.write_token_id)
    assert stub.control.ok("GET", "/tenants/beta/events?kind=state_write")["events"] == []


def test_checker_keeps_the_basic_username_for_the_lane() -> None:
    """DatabaseTokenChecker's principal carries the token's tenant, scope,
    workspace, environment and id, and the Basic username as sent."""
    store = MemoryStateStore()
    stub = HostedStub(store)
    alpha = stub.control.tenant("alpha")
    portal = build_portal(DatabaseTokenChecker(store))
    header = basic("someone", alpha.read)["Authorization"].encode()
    results: list[Any] = []
    portal.login(credentials_from_header(header), None, IPrincipal).addBoth(results.append)
    principal = results[0][1]
    assert (principal.tenant, principal.scope, principal.workspace_id, principal.env_public_id,
            principal.basic_username, principal.name) == (
        alpha.id, "read", alpha.workspace_id, alpha.env_id, "someone", "token:reader")
    assert principal.token_id is not None and principal.token_id.startswith("tok_")
