"""What OpenTofu's http backend sends, byte for byte, against a real
listening Kilolock.

No OpenTofu executable is at hand (neither PyPI nor Debian has one), so the
client is ``TofuHttpClient`` (``go_http_client``): OpenTofu's ``httpClient``
transcribed from ``internal/backend/remote-state/http/client.go`` at tag
v1.12.6, with the ``headers`` rules of ``backend.go``.  Where OpenTofu
differs from Terraform, Kilolock answers it as docs/http-lane.md says:

  - ``headers = { Authorization = "Bearer <token>" }`` is a credential on
    the HTTP lane under static auth (401 without it or with another);
  - a lock conflict's 423 body is the holder's LockInfo verbatim, which
    OpenTofu (since v1.9.0) puts in its lock error;
  - ``tofu force-unlock ID`` sends a LockInfo holding only the typed ID (since
    v1.10.0): an owner release, which frees the lock when the ID is the
    holder's, is a 200 with nothing held, and is 409 (the lock kept)
    otherwise.

The sequences of OpenTofu's own client tests (``client_test.go``) run here
too, each naming the Go test it mirrors.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from attrs import evolve

from tests.support.fixtures_server import STATIC_TOKEN, KilolockServer
from tests.support.go_http_client import (
    GO_ZERO_TIME,
    ClientError,
    LockError,
    LockInfo,
    TofuConfigError,
    TofuHttpClient,
    new_lock_info,
    remote_TestClient,
    remote_TestRemoteLocks,
    tofu_headers,
)
from tests.support.stub_client import content_md5

BEARER = {"Authorization": f"Bearer {STATIC_TOKEN}"}


def tofu(server: KilolockServer, name: str, **settings: Any) -> TofuHttpClient:
    """OpenTofu's client for the documented block of state C{name} (LOCK and
    UNLOCK on the state's URL), with the Bearer header unless told."""
    url = server.state_url(name)
    settings.setdefault("Headers", tofu_headers(BEARER))
    return TofuHttpClient(URL=url, LockURL=url, LockMethod="LOCK", UnlockURL=url,
                          UnlockMethod="UNLOCK", **settings)


def event_kinds(server: KilolockServer, name: str) -> list[str]:
    reply = server.request("GET", f"/v1/native/states/{name}/-/events", headers=BEARER)
    assert reply.status == 200, reply
    return [event["kind"] for event in reply.json()["events"]]


def holder_of(server: KilolockServer, name: str) -> Any:
    reply = server.request("GET", f"/v1/native/states/{name}/-/lock", headers=BEARER)
    assert reply.status == 200, reply
    return reply.json()["lock"]


# -- Bearer headers on the HTTP lane -------------------------------------------------


def test_a_bearer_header_is_the_credential_of_every_request(
        static_token_server: KilolockServer) -> None:
    """headers = { Authorization = "Bearer <token>" } under static auth: LOCK,
    the write under the lock, GET, UNLOCK and the TestClient sequence all
    pass; each request carried exactly that header and no Basic auth."""
    client = tofu(static_token_server, "bearer")
    info = new_lock_info()
    assert client.Lock(info) == info.ID
    client.Put(b'{"version": 4, "serial": 1, "lineage": "l", "resources": []}\n')
    payload = client.Get()
    assert payload is not None and json.loads(payload.data)["serial"] == 1
    client.Unlock(info.ID)
    remote_TestClient(tofu(static_token_server, "bearer-plain"))
    assert [status for _, _, status in client.attempts] == [200, 200, 200, 200]
    for request in client.sent:
        head = request.split(b"\r\n\r\n", 1)[0].decode()
        assert f"\r\nAuthorization: Bearer {STATIC_TOKEN}\r\n" in head
        assert "Basic" not in head
    assert event_kinds(static_token_server, "bearer") == [
        "lock_acquire", "state_write", "lock_release"]


def test_without_the_bearer_header_or_with_another_token_it_is_refused(
        static_token_server: KilolockServer) -> None:
    """No header, or a Bearer of another token: 401, which OpenTofu reports
    as "HTTP remote state endpoint requires auth"; nothing is locked or
    created."""
    for headers in ({}, {"Authorization": "Bearer kl_not-the-token"}):
        client = tofu(static_token_server, "refused", Headers=headers)
        with pytest.raises(ClientError, match="HTTP remote state endpoint requires auth"):
            client.Get()
        with pytest.raises(ClientError, match="HTTP remote state endpoint requires auth"):
            client.Lock(new_lock_info())
    # Not even a lock created the state.
    assert static_token_server.request("GET", "/v1/native/states/refused",
                                       headers=BEARER).status == 404


def test_backend_headers_rules() -> None:
    """backend.go: an Authorization header with username is refused, so are
    Content-Type and Content-MD5; other headers are sent with Go's
    canonical names."""
    with pytest.raises(TofuConfigError, match='headers "Authorization" cannot be set when'
                       " providing username"):
        tofu_headers(BEARER, username="terraform")
    for reserved in ("content-type", "Content-MD5"):
        with pytest.raises(TofuConfigError, match=f'headers "{reserved}" is reserved'):
            tofu_headers({reserved: "x"})
    assert tofu_headers({"authorization": "Bearer t", "x-team": "infra"}) == {
        "authorization": "Bearer t", "x-team": "infra"}


# -- lock conflicts ------------------------------------------------------------------


def test_a_lock_conflict_names_the_holder(static_token_server: KilolockServer) -> None:
    """TestHttpClient_lock "Locked remote state": the 423 body is the
    holder's LockInfo as it sent it, and OpenTofu's lock error carries it:
    "HTTP remote state already locked: ID=<holder>" and the holder's
    "Lock Info" (client_test.go)."""
    holder = LockInfo(ID="linus-torvalds-http-remote-state-lock-id", Who="LinusTorvalds",
                      Operation="TestTypePlan", Created="2024-08-15T09:00:26Z")
    assert tofu(static_token_server, "held").Lock(holder) == holder.ID
    caller = LockInfo(ID="ada-lovelace-state-lock-id", Who="AdaLovelace",
                      Operation="TestTypePlan", Created="2023-08-16T15:09:26Z")
    client = tofu(static_token_server, "held")
    with pytest.raises(LockError) as refused:
        client.Lock(caller)
    assert refused.value.info == holder
    assert refused.value.error() == (
        "HTTP remote state already locked: ID=linus-torvalds-http-remote-state-lock-id\n"
        + holder.string())
    reply = static_token_server.with_body("LOCK", "/v1/states/held", caller.marshal(), BEARER)
    assert (reply.status, reply.body) == (423, holder.marshal())
    assert client.lockID == ""


def test_a_holder_opentofu_cannot_parse(static_token_server: KilolockServer) -> None:
    """TestHttpClient_lock "failed to unmarshal body": a holder whose Created
    has no zone (a hand-made LOCK; Kilolock only needs an ID) is not shown:
    the error carries the caller's own LockInfo."""
    body = b'{"ID": "by-hand", "Created": "2026-01-02T03:04:05"}'
    assert static_token_server.with_body("LOCK", "/v1/states/odd", body, BEARER).status == 200
    caller = new_lock_info()
    with pytest.raises(LockError) as refused:
        tofu(static_token_server, "odd").Lock(caller)
    assert str(refused.value) == "HTTP remote state already locked, failed to unmarshal body"
    assert refused.value.info == caller


def test_TestHTTPClient_locking(static_token_server: KilolockServer) -> None:
    """TestHTTPClient "locking and alternative UpdateMethod": two PUT clients
    through remote.TestRemoteLocks, B's lock error naming A's lock
    (client_test.go, internal/states/remote/testing.go)."""
    a = tofu(static_token_server, "pair", UpdateMethod="PUT")
    b = tofu(static_token_server, "pair", UpdateMethod="PUT")
    remote_TestRemoteLocks(a, b)
    assert sorted(status for method, _, status in a.attempts + b.attempts
                  if method == "LOCK") == [200, 200, 423]


def test_TestHTTPClient_headers_keep_the_content_type(
        static_token_server: KilolockServer) -> None:
    """TestHTTPClient's headers case: a user header is sent on every request
    and a user Content-Type never replaces application/json on a write
    (client_test.go; the client is built directly, as there, without
    backend.go's rules)."""
    client = tofu(static_token_server, "headers", UpdateMethod="PUT",
                  Headers={**BEARER, "user-defined": "test", "content-type": "application/xml"})
    remote_TestClient(client)
    for request in client.sent:
        head = request.split(b"\r\n\r\n", 1)[0].decode()
        assert "\r\nUser-Defined: test\r\n" in head
        if head.startswith("PUT"):
            assert "\r\nContent-Type: application/json\r\n" in head


# -- force-unlock --------------------------------------------------------------------


def zeroed(lock_id: str) -> bytes:
    """The UNLOCK body of C{tofu force-unlock LOCK_ID}: statemgr.LockInfo{ID:
    id}.Marshal(), every other field Go's zero value."""
    return (f'{{"ID":"{lock_id}","Operation":"","Info":"","Who":"","Version":"",'
            f'"Created":"{GO_ZERO_TIME}","Path":""}}').encode()


def test_force_unlock_with_the_holders_id_releases_it(
        static_token_server: KilolockServer) -> None:
    """TestHttpClient_Unlock "Successful force unlock": a fresh client
    (force-unlock never locked) sends UNLOCK with the typed ID in a zeroed
    LockInfo, byte for byte as below; the holder's ID releases the lock,
    recorded as an owner release (lock_release); another client locks next."""
    holder = new_lock_info()
    assert tofu(static_token_server, "stuck").Lock(holder) == holder.ID
    force = tofu(static_token_server, "stuck")
    force.Unlock(holder.ID)
    body = zeroed(holder.ID)
    port = static_token_server.port
    assert force.sent == [
        b"UNLOCK /v1/states/stuck HTTP/1.1\r\n"
        + f"Host: 127.0.0.1:{port}\r\n".encode()
        + b"User-Agent: Go-http-client/1.1\r\n"
        + f"Content-Length: {len(body)}\r\n".encode()
        + f"Authorization: Bearer {STATIC_TOKEN}\r\n".encode()
        + f"Content-Md5: {content_md5(body)}\r\n".encode()
        + b"Content-Type: application/json\r\n"
        + b"Accept-Encoding: gzip\r\n\r\n" + body]
    assert force.attempts[-1][2] == 200
    assert holder_of(static_token_server, "stuck") is None
    assert event_kinds(static_token_server, "stuck") == ["lock_acquire", "lock_release"]
    assert tofu(static_token_server, "stuck").Lock(new_lock_info())


def test_force_unlock_with_another_id_keeps_the_lock(
        static_token_server: KilolockServer) -> None:
    """TestHttpClient_Unlock "Unsuccessful force unlock": a typed ID that is
    not the holder's is an owner release of another lock: 409 (the body the
    holder's LockInfo, which OpenTofu does not read), "Unexpected HTTP
    response code 409", the lock kept.  With nothing held the same request
    is a 200 (nothing to release)."""
    holder = new_lock_info()
    assert tofu(static_token_server, "kept").Lock(holder) == holder.ID
    with pytest.raises(ClientError, match="Unexpected HTTP response code 409"):
        tofu(static_token_server, "kept").Unlock("not-the-holders-id")
    reply = static_token_server.with_body("UNLOCK", "/v1/states/kept",
                                          zeroed("not-the-holders-id"), BEARER)
    assert (reply.status, reply.body) == (409, holder.marshal())
    assert holder_of(static_token_server, "kept")["id"] == holder.ID
    free = tofu(static_token_server, "free")
    free.Unlock("anything")
    assert free.attempts == [("UNLOCK", static_token_server.state_url("free"), 200)]


def test_unlock_after_lock_sends_the_lock_info_it_locked_with(
        static_token_server: KilolockServer) -> None:
    """TestHttpClient_Unlock "Successfully unlocked" and "Lock ID's don't
    match": the client that locked sends its own LockInfo back (released);
    asked to unlock another ID it sends nothing and fails itself."""
    client = tofu(static_token_server, "mine")
    info = evolve(new_lock_info(), Operation="TestTypePlan", Who="BjarneStroustrup")
    client.Lock(info)
    with pytest.raises(LockError, match='lock id "edsger" does not match existing lock'):
        client.Unlock("edsger")
    assert len(client.sent) == 1
    client.Unlock(info.ID)
    assert client.sent[-1].endswith(b"\r\n\r\n" + info.marshal())
    assert holder_of(static_token_server, "mine") is None
    assert event_kinds(static_token_server, "mine") == ["lock_acquire", "lock_release"]
