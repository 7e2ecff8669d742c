"""Terraform's own http-backend conformance sequences, as wire tests against a
real listening Kilolock.

Terraform tests its http backend client against a toy server; here the same
sequences run against Kilolock.  ``GoHttpClient`` is a line-by-line
transcription of ``httpClient`` in Terraform's
``internal/backend/remote-state/http/client.go`` (hashicorp/terraform
883c7221, the code of Terraform 1.15): the same methods, URLs, headers
(``Content-Type``, ``Content-MD5``, Basic auth), the same framing (an empty
body is sent chunked, as Go's ``net/http`` does), the same reading of status
codes and the same retry rule as ``go-retryablehttp`` (connection errors, 429
and 5xx except 501; the body replayed byte-for-byte).  Only the retry *waits*
are shortened (``retryablehttp.NewClient()`` waits 1-30 s): the server never
sees the wait, only the replay.

Each test names the Go test it mirrors and cites its file.  Go tests that
check client-side configuration only (``TestHTTPClientFactory``,
``TestHTTPClientFactoryWithEnv``, ``TestHTTPClient_impl``) or TLS set-up
(``TestMTLSServer_*``) have no wire sequence to mirror.

At the end, raw-socket tests pin the exact framing Terraform uses for
LOCK/UNLOCK and for force-unlock (UNLOCK with ``Transfer-Encoding: chunked``
and zero bytes), as recorded from Terraform 1.15.5 by test_terraform_e2e.py.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import http.client
import itertools
import json
import re
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import pytest
from attrs import define, evolve, field, frozen
from fixtures_server import Fault, FaultProxy, KilolockServer
from stub_client import content_md5

ProxyFactory = Callable[[int], FaultProxy]

#: Go's time.Time zero value as encoding/json writes it.
GO_ZERO_TIME = "0001-01-01T00:00:00Z"

# -- statemgr.LockInfo (internal/states/statemgr/locker.go) -------------------

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")


@frozen
class LockInfo:
    """statemgr.LockInfo; C{marshal} is Go's json.Marshal of it."""

    ID: str = ""
    Operation: str = ""
    Info: str = ""
    Who: str = ""
    Version: str = ""
    Created: str = GO_ZERO_TIME
    Path: str = ""

    def marshal(self) -> bytes:
        return json.dumps({name: getattr(self, name) for name in
                           ("ID", "Operation", "Info", "Who", "Version", "Created", "Path")},
                          separators=(",", ":")).encode()

    @classmethod
    def unmarshal(cls, body: bytes) -> LockInfo:
        """Go's json.Unmarshal into a LockInfo: keys matched case-insensitively,
        unknown keys ignored, C{Created} must be RFC 3339 with a zone."""
        document = json.loads(body)
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        fields = {name.lower(): name for name in
                  ("ID", "Operation", "Info", "Who", "Version", "Created", "Path")}
        values: dict[str, str] = {}
        for key, value in document.items():
            name = fields.get(key.lower())
            if name is None:
                continue
            if not isinstance(value, str):
                raise ValueError(f"{name} is not a string")
            values[name] = value
        created = values.get("Created", GO_ZERO_TIME)
        if not _RFC3339.match(created):
            raise ValueError(f"Created {created!r} is not RFC 3339")
        return cls(**values)


def new_lock_info() -> LockInfo:
    """statemgr.NewLockInfo(): a random UUID, user@host, now in UTC (RFC 3339
    with nanoseconds, trailing zeros trimmed, like Go's time.Time JSON)."""
    nanos = time.time_ns()
    stamp = datetime.fromtimestamp(nanos // 1_000_000_000, tz=UTC)
    fraction = f"{nanos % 1_000_000_000:09d}".rstrip("0")
    created = stamp.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"
    return LockInfo(ID=str(uuid.uuid4()), Who=f"{getpass.getuser()}@{socket.gethostname()}",
                    Version="1.15.5", Created=created)


class LockError(Exception):
    """statemgr.LockError: the state is locked; C{info} is the holder (or None)."""

    def __init__(self, message: str, info: LockInfo | None = None) -> None:
        super().__init__(message)
        self.info = info


class ClientError(Exception):
    """Any other error the Go client returns."""


@frozen
class Payload:
    data: bytes
    md5: bytes


# -- httpClient (internal/backend/remote-state/http/client.go) -----------------


@define
class GoHttpClient:
    """httpClient, transcribed; C{retry_max} / C{retry_wait} stand for the
    retryablehttp.Client (NewClient(): RetryMax 4)."""

    URL: str
    UpdateMethod: str = ""
    LockURL: str | None = None
    LockMethod: str = ""
    UnlockURL: str | None = None
    UnlockMethod: str = ""
    Username: str = ""
    Password: str = ""
    retry_max: int = 4
    retry_wait: float = 0.01
    lockID: str = ""
    jsonLockInfo: bytes | None = None
    #: (method, url, status) of every attempt, for the tests' own assertions.
    attempts: list[tuple[str, str, int | None]] = field(factory=list)

    def fresh(self) -> GoHttpClient:
        """A new client with the same configuration (a new Terraform process)."""
        return evolve(self, lockID="", jsonLockInfo=None, attempts=[])

    def _attempt(self, method: str, url: str, data: bytes | None) -> tuple[int, bytes]:
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            connection.putrequest(method, target, skip_accept_encoding=True)
            connection.putheader("User-Agent", "Go-http-client/1.1")
            if self.Username:
                token = base64.b64encode(f"{self.Username}:{self.Password}".encode()).decode()
                connection.putheader("Authorization", f"Basic {token}")
            if data is not None:
                connection.putheader("Content-Type", "application/json")
                connection.putheader("Content-Md5", content_md5(data))
                if data:
                    connection.putheader("Content-Length", str(len(data)))
                else:
                    # ContentLength 0 with a non-nil body: net/http sends it chunked.
                    connection.putheader("Transfer-Encoding", "chunked")
            connection.putheader("Accept-Encoding", "gzip")
            if data is None:
                connection.endheaders()
            elif data:
                connection.endheaders(data)
            else:
                connection.endheaders(b"0\r\n\r\n")
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def httpRequest(self, method: str, url: str, data: bytes | None,
                    what: str) -> tuple[int, bytes]:
        """One logical request with retryablehttp's retry rule."""
        attempt = 0
        while True:
            attempt += 1
            try:
                status, body = self._attempt(method, url, data)
            except OSError as error:
                self.attempts.append((method, url, None))
                if attempt > self.retry_max:
                    raise ClientError(f"Failed to {what}: giving up after {attempt}"
                                      f" attempt(s): {error}") from None
            else:
                self.attempts.append((method, url, status))
                retry = status == 429 or (status >= 500 and status != 501)
                if not retry:
                    return status, body
                if attempt > self.retry_max:
                    raise ClientError(f"Failed to {what}: giving up after {attempt} attempt(s)")
            time.sleep(self.retry_wait)

    def Lock(self, info: LockInfo) -> str:
        if self.LockURL is None:
            return ""
        self.lockID = ""
        jsonLockInfo = info.marshal()
        status, body = self.httpRequest(self.LockMethod, self.LockURL, jsonLockInfo, "lock")
        if status == 200:
            self.lockID = info.ID
            self.jsonLockInfo = jsonLockInfo
            return info.ID
        if status == 401:
            raise ClientError("HTTP remote state endpoint requires auth")
        if status == 403:
            raise ClientError("HTTP remote state endpoint invalid auth")
        if status in (409, 423):
            try:
                existing = LockInfo.unmarshal(body)
            except ValueError:
                raise LockError("HTTP remote state already locked, failed to unmarshal body"
                                ) from None
            raise LockError(f"HTTP remote state already locked: ID={existing.ID}", existing)
        raise ClientError(f"Unexpected HTTP response code {status}")

    def Unlock(self, id: str) -> None:
        if self.UnlockURL is None:
            return
        # &c.jsonLockInfo is never nil: a client that never locked sends an empty body.
        status, _ = self.httpRequest(self.UnlockMethod, self.UnlockURL,
                                     self.jsonLockInfo or b"", "unlock")
        if status != 200:
            raise ClientError(f"Unexpected HTTP response code {status}")

    def Get(self) -> Payload | None:
        status, body = self.httpRequest("GET", self.URL, None, "get state")
        if status in (204, 404):
            return None
        if status == 401:
            raise ClientError("HTTP remote state endpoint requires auth")
        if status == 403:
            raise ClientError("HTTP remote state endpoint invalid auth")
        if status == 500:
            raise ClientError("HTTP remote state internal server error")
        if status != 200:
            raise ClientError(f"Unexpected HTTP response code {status}")
        if not body:
            return None
        return Payload(body, hashlib.md5(body).digest())

    def Put(self, data: bytes) -> None:
        url = self.URL
        if self.lockID:
            parts = urlsplit(url)
            query = dict(_parse_query(parts.query))
            query["ID"] = self.lockID
            url = urlunsplit(parts._replace(query=urlencode(sorted(query.items()))))
        method = self.UpdateMethod or "POST"
        status, _ = self.httpRequest(method, url, data, "upload state")
        if status not in (200, 201, 204):
            raise ClientError(f"HTTP error: {status}")

    def Delete(self) -> None:
        status, _ = self.httpRequest("DELETE", self.URL, None, "delete state")
        if status != 200:
            raise ClientError(f"HTTP error: {status}")


def _parse_query(query: str) -> list[tuple[str, str]]:
    from urllib.parse import parse_qsl

    return parse_qsl(query, keep_blank_values=True)


# -- remote.TestClient / TestRemoteLocks (internal/states/remote/testing.go) ---


def full_initial_state_file(lineage: str = "stub-lineage", serial: int = 2) -> bytes:
    """statefile.Write(statefile.New(statemgr.TestFullInitialState(), lineage,
    serial)): a child module's resource with no instances and two root outputs,
    one sensitive; MarshalIndent with two spaces plus a final newline."""
    document = {
        "version": 4,
        "terraform_version": "1.15.5",
        "serial": serial,
        "lineage": lineage,
        "outputs": {
            "nonsensitive_output": {"value": "hello, world!", "type": "string"},
            "sensitive_output": {"value": "it's a secret", "type": "string",
                                 "sensitive": True},
        },
        "resources": [{
            "module": "module.child",
            "mode": "managed",
            "type": "null_resource",
            "name": "foo",
            "provider": 'provider["registry.terraform.io/hashicorp/null"]',
            "instances": [],
        }],
        "check_results": None,
    }
    return json.dumps(document, indent=2).encode() + b"\n"


def remote_TestClient(client: GoHttpClient) -> None:
    """remote.TestClient: Put, Get equals, Delete, Get nil."""
    data = full_initial_state_file()
    client.Put(data)
    payload = client.Get()
    assert payload is not None and payload.data == data, "expected the full state back"
    client.Delete()
    assert client.Get() is None, "expected empty state after Delete"


def remote_TestRemoteLocks(a: GoHttpClient, b: GoHttpClient) -> None:
    """remote.TestRemoteLocks: A locks, B is refused with a LockError, A
    unlocks, B locks with a different ID, B unlocks."""
    infoA = evolve(new_lock_info(), Operation="test", Who="clientA")
    infoB = evolve(new_lock_info(), Operation="test", Who="clientB")

    lockIDA = a.Lock(infoA)
    assert lockIDA, "unable to get initial lock"
    with pytest.raises(LockError) as refused:
        b.Lock(infoB)
    assert refused.value.info is not None and lockIDA == refused.value.info.ID

    a.Unlock(lockIDA)
    lockIDB = b.Lock(infoB)
    assert lockIDB != lockIDA, f"duplicate lock IDs: {lockIDB!r}"
    b.Unlock(lockIDB)


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
