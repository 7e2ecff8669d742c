"""Terraform's own http-backend conformance sequences, as wire tests against a
real listening Kilolock.

Terraform tests its http backend client against a toy server; here the same
sequences run against Kilolock, with ``GoHttpClient`` (``go_http_client``:
Terraform's ``httpClient``, transcribed, for the release it names).

Each test names the Go test it mirrors and cites its file.  Go tests that
check client-side configuration only (``TestHTTPClientFactory``,
``TestHTTPClientFactoryWithEnv``, ``TestHTTPClient_impl``) or TLS set-up
(``TestMTLSServer_*``) have no wire sequence to mirror.

At the end, raw-socket tests pin the exact framing Terraform uses for
LOCK/UNLOCK and for force-unlock (UNLOCK with ``Transfer-Encoding: chunked``
and zero bytes), as recorded from Terraform 1.15.5 by test_terraform_e2e.py.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from attrs import evolve, frozen

from tests.support.fixtures_server import Fault, FaultProxy, KilolockServer
from tests.support.go_http_client import (
    ClientError,
    GoHttpClient,
    LockError,
    LockInfo,
    Payload,
    full_initial_state_file,
    go_time_string,
    new_lock_info,
    remote_TestClient,
    remote_TestRemoteLocks,
)
from tests.support.stub_client import content_md5

ProxyFactory = Callable[[int], FaultProxy]

# -- fixtures -------------------------------------------------------------------


@pytest.fixture
def state_url(kilolock_server: KilolockServer) -> str:
    return kilolock_server.state_url("conformance")


def locking_client(url: str, **settings: Any) -> GoHttpClient:
    return GoHttpClient(URL=url, LockURL=url, LockMethod="LOCK", UnlockURL=url,
                        UnlockMethod="UNLOCK", **settings)


# -- TestHTTPClient (internal/backend/remote-state/http/client_test.go) --------


def test_TestHTTPClient_basic_get_update(state_url: str) -> None:
    """TestHTTPClient "basic get/update": remote.TestClient with POST and no
    locking (client_test.go)."""
    remote_TestClient(GoHttpClient(URL=state_url))


def test_TestHTTPClient_single_put(state_url: str) -> None:
    """TestHTTPClient "just a single PUT": remote.TestClient with
    UpdateMethod PUT (client_test.go)."""
    client = GoHttpClient(URL=state_url, UpdateMethod="PUT")
    remote_TestClient(client)
    assert [method for method, _, _ in client.attempts] == ["PUT", "GET", "DELETE", "GET"]


def test_TestHTTPClient_locking_and_alternative_update_method(state_url: str) -> None:
    """TestHTTPClient "locking and alternative UpdateMethod": two PUT clients
    with LOCK/UNLOCK on the state URL through remote.TestRemoteLocks
    (client_test.go, internal/states/remote/testing.go)."""
    a = locking_client(state_url, UpdateMethod="PUT")
    b = locking_client(state_url, UpdateMethod="PUT")
    remote_TestRemoteLocks(a, b)
    lock_statuses = [status for method, _, status in a.attempts + b.attempts
                     if method == "LOCK"]
    assert sorted(lock_statuses) == [200, 200, 423]


def test_TestHTTPClient_webdav_ish_put_twice(kilolock_server: KilolockServer) -> None:
    """TestHTTPClient "WebDAV-ish backend": remote.TestClient twice with PUT;
    the second round writes identical bytes again (client_test.go; the toy
    server answers 201 then 204, Kilolock 200 both times)."""
    client = GoHttpClient(URL=kilolock_server.state_url("webdav"), UpdateMethod="PUT")
    remote_TestClient(client)
    remote_TestClient(client)
    assert [status for method, _, status in client.attempts if method == "PUT"] == [200, 200]


def test_TestHTTPClient_broken_backend(kilolock_server: KilolockServer,
                                       fault_proxy_factory: ProxyFactory) -> None:
    """TestHTTPClient "broken backend": every other request answered 500
    before it reaches the server (TestBrokenHTTPBackend); the client retries
    each and remote.TestClient still passes (client_test.go)."""
    proxy = fault_proxy_factory(kilolock_server.port)
    broken = itertools.cycle([True, False])
    proxy.add_fault(lambda exchange: next(broken), Fault.ANSWER_500_WITHOUT_FORWARDING,
                    times=10_000)
    client = GoHttpClient(URL=f"{proxy.base_url}/v1/states/broken")
    remote_TestClient(client)
    assert [status for _, _, status in client.attempts] == [500, 200, 500, 200, 500, 200, 500, 404]
    reached = [(x.method, x.upstream_status) for x in proxy.seen() if x.upstream_status]
    assert reached == [("POST", 200), ("GET", 200), ("DELETE", 200), ("GET", 404)]


def test_TestHTTPClient_lockErrors(kilolock_server: KilolockServer, state_url: str) -> None:
    """TestHTTPClient_lockErrors: locking a state another client holds fails
    with a LockError whose Info is the holder's Operation and Who, parsed
    from the 423 body (client_test.go).

    The Go test's pre-locked toy server holds a LockInfo without an ID;
    Kilolock refuses such a LOCK (400: a lock needs an ID), so the holder
    here has one, and Go's zero Created time."""
    holder = LockInfo(ID="setup-lock-id", Operation="test-setup-lock",
                      Who="i-am-the-one-who-locks")
    assert kilolock_server.with_body("LOCK", state_url, holder.marshal()).status == 200

    locker = locking_client(state_url, UpdateMethod="PUT")
    info = evolve(new_lock_info(), Operation="can-i-get-a-lock?",
                  Who="client-that-wants-the-lock")
    with pytest.raises(LockError) as refused:
        locker.Lock(info)
    assert refused.value.info is not None
    assert refused.value.info.Operation == "test-setup-lock"
    assert refused.value.info.Who == "i-am-the-one-who-locks"
    assert refused.value.info == holder
    assert str(refused.value) == "HTTP remote state already locked: ID=setup-lock-id"


#: A holder's LockInfo as Terraform 1.15.5 sends it on LOCK.
APPLY_HOLDER = LockInfo(ID="3c7e0d2a-6f1b-4a7e-9d55-0c8f2b1a9e10",
                        Operation="OperationTypeApply", Who="alice@laptop", Version="1.15.5",
                        Created="2026-11-29T23:05:20.206526015Z")


@pytest.mark.parametrize("release", [(1, 15, 5), (1, 11, 4)], ids=["1.15.5", "1.11.4"])
def test_what_each_release_shows_of_a_lock_conflict(
        kilolock_server: KilolockServer, state_url: str, release: tuple[int, int, int]) -> None:
    """Kilolock answers a LOCK of a held state 423 with the holder's
    LockInfo, byte for byte, whatever the client.  What Terraform makes of
    it depends on its release (Lock in client.go at v1.15.5 and v1.11.4):
    from 1.15.0 the "Lock Info:" block is the holder's; before, the first
    line's ID= is the holder's but the block is the caller's own request
    (here a plan by bob), so nothing of the holder but its ID is shown."""
    assert kilolock_server.with_body("LOCK", state_url, APPLY_HOLDER.marshal()).status == 200
    caller = evolve(new_lock_info(), Operation="OperationTypePlan", Who="bob@ci",
                    Version=".".join(map(str, release)))
    conflict = kilolock_server.with_body("LOCK", state_url, caller.marshal())
    assert (conflict.status, conflict.body) == (423, APPLY_HOLDER.marshal())

    with pytest.raises(LockError) as refused:
        locking_client(state_url, terraform_version=release).Lock(caller)
    shown = APPLY_HOLDER if release >= (1, 15, 0) else caller
    assert refused.value.info == shown
    assert refused.value.error() == (
        "HTTP remote state already locked: ID=3c7e0d2a-6f1b-4a7e-9d55-0c8f2b1a9e10\n"
        "Lock Info:\n"
        f"  ID:        {shown.ID}\n"
        "  Path:      \n"
        f"  Operation: {shown.Operation}\n"
        f"  Who:       {shown.Who}\n"
        f"  Version:   {shown.Version}\n"
        f"  Created:   {go_time_string(shown.Created)}\n"
        "  Info:      \n")
    assert ("alice@laptop" in refused.value.error()) is (release >= (1, 15, 0))


@pytest.mark.parametrize("release", [(1, 15, 5), (1, 11, 4)], ids=["1.15.5", "1.11.4"])
def test_a_holder_without_a_time_zone_is_not_shown(
        kilolock_server: KilolockServer, state_url: str, release: tuple[int, int, int]) -> None:
    """A holder whose Created carries no time zone (Kilolock only requires
    an ID) does not parse as Go's LockInfo: "failed to unmarshal body", with
    no "Lock Info:" from 1.15.0, the caller's own before."""
    holder = b'{"ID": "zoneless", "Who": "script@host", "Created": "2026-01-02T03:04:05"}'
    assert kilolock_server.with_body("LOCK", state_url, holder).status == 200
    caller = new_lock_info()
    with pytest.raises(LockError) as refused:
        locking_client(state_url, terraform_version=release).Lock(caller)
    assert str(refused.value) == "HTTP remote state already locked, failed to unmarshal body"
    assert refused.value.info == (None if release >= (1, 15, 0) else caller)


def test_TestHTTPClient_lockErrors_with_no_id_is_refused(
        kilolock_server: KilolockServer, state_url: str) -> None:
    """The exact pre-lock of TestHTTPClient_lockErrors (a LockInfo with an
    empty ID) is answered 400 by Kilolock and takes no lock."""
    anonymous = LockInfo(Operation="test-setup-lock", Who="i-am-the-one-who-locks")
    reply = kilolock_server.with_body("LOCK", state_url, anonymous.marshal())
    assert reply.status == 400
    assert reply.json()["error"]["code"]
    client = locking_client(state_url)
    lock_id = client.Lock(new_lock_info())
    client.Unlock(lock_id)


# -- TestBackendStateLocks / TestBackendStateForceUnlock -----------------------
# internal/backend/testing.go testLocksInWorkspace, with the http backend's
# StateMgr (backend.go: remote.State{Client}; RefreshState = Client.Get).


def backend_StateMgr(client: GoHttpClient) -> Payload | None:
    """b.StateMgr(default): a remote.State whose RefreshState reads the state."""
    return client.Get()


def test_TestBackendStateLocks(state_url: str) -> None:
    """TestBackendStateLocks: while A holds the lock another backend instance
    can still load the state, B cannot lock; after A unlocks B locks with a
    different ID and unlocks (internal/backend/testing.go)."""
    b1 = locking_client(state_url)
    b2 = locking_client(state_url)
    GoHttpClient(URL=state_url).Put(full_initial_state_file())
    backend_StateMgr(b1)
    backend_StateMgr(b2)

    infoA = evolve(new_lock_info(), Operation="test", Who="clientA")
    infoB = evolve(new_lock_info(), Operation="test", Who="clientB")
    lockIDA = b1.Lock(infoA)
    assert lockIDA

    # "Make sure we can still get the statemgr.Full from another instance even when locked."
    assert backend_StateMgr(locking_client(state_url)) is not None

    with pytest.raises(LockError):
        b2.Lock(infoB)
    b1.Unlock(lockIDA)
    lockIDB = b2.Lock(infoB)
    assert lockIDB != lockIDA
    b2.Unlock(lockIDB)


def test_TestBackendStateForceUnlock(kilolock_server: KilolockServer, state_url: str) -> None:
    """TestBackendStateForceUnlock: B, refused, unlocks with the ID from the
    LockError.  The http client ignores that ID and sends the LockInfo of its
    own last lock, which Kilolock answers 409 (an owner release naming a lock
    that is not the one held); the same release from a fresh client, as
    `terraform force-unlock` sends it (empty chunked body), frees the state
    (internal/backend/testing.go; Terraform does not run this sequence for
    the http backend, whose Unlock ignores its id argument)."""
    b1 = locking_client(state_url)
    b2 = locking_client(state_url)
    backend_StateMgr(b1)
    backend_StateMgr(b2)
    infoA = evolve(new_lock_info(), Operation="test", Who="clientA")
    infoB = evolve(new_lock_info(), Operation="test", Who="clientB")
    lockIDA = b1.Lock(infoA)
    with pytest.raises(LockError):
        b2.Lock(infoB)
    b1.Unlock(lockIDA)
    b2.Unlock(b2.Lock(infoB))

    # "test the equivalent of -force-unlock, by using the id from the error output"
    infoA = evolve(infoA, ID=str(uuid.uuid4()))
    lockIDA = b1.Lock(infoA)
    with pytest.raises(LockError) as refused:
        b2.Lock(infoB)
    assert refused.value.info is not None and lockIDA == refused.value.info.ID

    with pytest.raises(ClientError, match="Unexpected HTTP response code 409"):
        b2.Unlock(refused.value.info.ID)
    assert b2.jsonLockInfo == infoB.marshal()

    force = b2.fresh()
    force.Unlock(refused.value.info.ID)
    assert force.attempts == [("UNLOCK", state_url, 200)]
    lockIDB = b2.Lock(infoB)
    b2.Unlock(lockIDB)
    b1.Unlock(lockIDA)  # an owner release with no lock held is an idempotent 200
    assert b1.attempts[-1] == ("UNLOCK", state_url, 200)


# -- the wire framing, on a raw socket ------------------------------------------


@frozen
class RawReply:
    status: int
    headers: dict[str, str]
    body: bytes


def raw_request(server: KilolockServer, method: str, path: str, body: bytes | None,
                chunks: list[bytes] | None = None) -> RawReply:
    """Send a request framed exactly like Go's net/http (canonical header
    names, Content-Md5), with C{Connection: close}; parse the answer."""
    head = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{server.port}",
            "User-Agent: Go-http-client/1.1"]
    payload = b""
    if chunks is not None:
        whole = b"".join(chunks)
        head += ["Transfer-Encoding: chunked", f"Content-Md5: {content_md5(whole)}",
                 "Content-Type: application/json"]
        payload = b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in chunks if c)
        payload += b"0\r\n\r\n"
    elif body is not None:
        head += [f"Content-Length: {len(body)}", f"Content-Md5: {content_md5(body)}",
                 "Content-Type: application/json"]
        payload = body
    head += ["Accept-Encoding: gzip", "Connection: close"]
    answer = server.raw_exchange("\r\n".join(head).encode() + b"\r\n\r\n" + payload)
    header_block, _, rest = answer.partition(b"\r\n\r\n")
    lines = header_block.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in lines[1:])}
    if "content-length" in headers:
        rest = rest[:int(headers["content-length"])]
    return RawReply(status, headers, rest)


def test_lock_and_unlock_framed_like_terraform_over_a_socket(
        kilolock_server: KilolockServer) -> None:
    """LOCK and UNLOCK with Content-Length bodies, framed like Go's net/http,
    on a real socket: 200, 423 + holder for a second locker, 200."""
    path = "/v1/states/wire"
    mine = new_lock_info().marshal()
    theirs = new_lock_info().marshal()
    assert raw_request(kilolock_server, "LOCK", path, mine).status == 200
    conflict = raw_request(kilolock_server, "LOCK", path, theirs)
    assert (conflict.status, conflict.body) == (423, mine)
    assert conflict.headers["content-type"].startswith("application/json")
    assert raw_request(kilolock_server, "UNLOCK", path, mine).status == 200
    assert raw_request(kilolock_server, "LOCK", path, theirs).status == 200


@pytest.mark.parametrize(("method", "path"), [
    ("UNLOCK", "/v1/states/forced"),
    ("POST", "/v1/state-unlock/forced"),
    ("DELETE", "/v1/states/forced/lock"),
])
def test_force_unlock_chunked_empty_body_over_a_socket(
        kilolock_server: KilolockServer, method: str, path: str) -> None:
    """force-unlock's request (Transfer-Encoding: chunked, zero bytes, JSON
    type, MD5 of empty) releases whatever lock is held, on every unlock route."""
    holder = new_lock_info().marshal()
    assert raw_request(kilolock_server, "LOCK", "/v1/states/forced", holder).status == 200
    reply = raw_request(kilolock_server, method, path, None, chunks=[])
    assert reply.status == 200, reply
    assert raw_request(kilolock_server, "LOCK", "/v1/states/forced",
                       new_lock_info().marshal()).status == 200


def test_owner_unlock_in_several_chunks_over_a_socket(kilolock_server: KilolockServer) -> None:
    """A chunked UNLOCK body split over several chunks is decoded whole: the
    owner's LockInfo releases its lock; another ID is answered 409 + holder."""
    path = "/v1/states/chunky"
    info = new_lock_info().marshal()
    assert raw_request(kilolock_server, "LOCK", path, info).status == 200
    other = raw_request(kilolock_server, "UNLOCK", path, None,
                        chunks=[new_lock_info().marshal()])
    assert (other.status, other.body) == (409, info)
    released = raw_request(kilolock_server, "UNLOCK", path, None,
                           chunks=[info[:10], info[10:25], info[25:]])
    assert released.status == 200
    assert raw_request(kilolock_server, "LOCK", path, new_lock_info().marshal()).status == 200
