"""The Go http-backend clients of Terraform and OpenTofu, transcribed line by
line, for wire tests against a real listening Kilolock.

``GoHttpClient`` is ``httpClient`` of Terraform's
``internal/backend/remote-state/http/client.go`` (tag v1.15.5; the file is
the same at hashicorp/terraform 883c7221).  It says which release it models
(``terraform_version``): ``Lock`` changed in 1.15.0
(``HOLDER_IN_LOCK_ERROR_SINCE``), and the older one (tag v1.11.4, unchanged
through v1.14.9) is what many users still run.

``TofuHttpClient`` is ``httpClient`` of OpenTofu's
``internal/backend/remote-state/http/client.go`` at tag v1.12.6 (with the
``headers`` setting of ``backend.go``): it sends the user's ``headers``
(``Authorization: Bearer ...``), puts the holder's LockInfo in its
LockError (since OpenTofu v1.9.0, opentofu/opentofu#2090) and sends the
typed ID on ``force-unlock`` (since v1.10.0, opentofu/opentofu#2381).

Both keep the same methods, URLs, headers (``Content-Type``,
``Content-MD5``, Basic auth), framing, reading of status codes and retry
rule as ``go-retryablehttp`` (connection errors, 429 and 5xx except 501;
the body replayed byte-for-byte).  Only the retry *waits* are shortened
(``retryablehttp.NewClient()`` waits 1-30 s): the server never sees the
wait, only the replay.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import http.client
import json
import re
import socket
import time
import uuid
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
from attrs import define, evolve, field, frozen

from tests.support.stub_client import content_md5

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

    def string(self) -> str:
        """LockInfo.String(): the "Lock Info:" block Terraform prints."""
        return ("Lock Info:\n"
                f"  ID:        {self.ID}\n"
                f"  Path:      {self.Path}\n"
                f"  Operation: {self.Operation}\n"
                f"  Who:       {self.Who}\n"
                f"  Version:   {self.Version}\n"
                f"  Created:   {go_time_string(self.Created)}\n"
                f"  Info:      {self.Info}\n")

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


def go_time_string(created: str) -> str:
    """Go's time.Time.String() of an RFC 3339 time as encoding/json parses
    it: C{2006-01-02 15:04:05.999999999 -0700 MST}, trailing zeros of the
    fraction trimmed; C{Z} is the UTC location (C{+0000 UTC}), an offset a
    zone without a name (C{+0200 +0200})."""
    found = _RFC3339.match(created)
    if found is None:
        raise ValueError(f"Created {created!r} is not RFC 3339")
    fraction = (found.group(1) or "").rstrip("0")
    fraction = "" if fraction == "." else fraction
    zone = found.group(2)
    if zone == "Z":
        suffix = "+0000 UTC"
    else:
        offset = zone.replace(":", "")
        suffix = f"{offset} {offset}"
    return f"{created[:10]} {created[11:19]}{fraction} {suffix}"


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
    """statemgr.LockError: the state is locked.  C{info} is the LockInfo the
    client put in it: the holder's from Terraform 1.15.0, the caller's own
    request before (see L{GoHttpClient.Lock}); None when it put none."""

    def __init__(self, message: str, info: LockInfo | None = None) -> None:
        super().__init__(message)
        self.info = info

    def error(self) -> str:
        """LockError.Error(): the message, then the Info's "Lock Info:"
        block, joined by a newline (what follows "Error message:" in
        Terraform's "Error acquiring the state lock")."""
        parts = [str(self)]
        if self.info is not None:
            parts.append(self.info.string())
        return "\n".join(parts)


class ClientError(Exception):
    """Any other error the Go client returns."""


@frozen
class Payload:
    data: bytes
    md5: bytes


# -- httpClient (internal/backend/remote-state/http/client.go) -----------------

#: The first release whose http client puts the holder's LockInfo (parsed
#: from the 409/423 body) in the LockError of a lock conflict:
#: hashicorp/terraform#38144, commit 5e4cfd42 ("backend/http: Return
#: existing lock info from backend on conflict"), first tagged v1.15.0
#: (CHANGELOG: "Return conflicting lock info from HTTP backend instead of
#: the lock that failed to be taken").  Before it (v1.11.4 ... v1.14.9) the
#: LockError carries the caller's own LockInfo: Terraform's first line
#: names the holder's ID, its "Lock Info:" block the caller's request.
HOLDER_IN_LOCK_ERROR_SINCE = (1, 15, 0)


@define
class GoHttpClient:
    """httpClient, transcribed; C{retry_max} / C{retry_wait} stand for the
    retryablehttp.Client (NewClient(): RetryMax 4).  C{terraform_version}
    is the release modelled: 1.15.5 by default; below
    L{HOLDER_IN_LOCK_ERROR_SINCE}, L{Lock} is that of v1.11.4 (unchanged
    through v1.14.9)."""

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
    terraform_version: tuple[int, int, int] = (1, 15, 5)
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
            # v1.15.0 and later: Info is the holder's (&existing), or none
            # when the body does not parse.  v1.11.4 ... v1.14.9: Info is
            # always the caller's own request (info), only the message's
            # ID= is the holder's.
            holders = self.terraform_version >= HOLDER_IN_LOCK_ERROR_SINCE
            try:
                existing = LockInfo.unmarshal(body)
            except ValueError:
                raise LockError("HTTP remote state already locked, failed to unmarshal body",
                                None if holders else info) from None
            raise LockError(f"HTTP remote state already locked: ID={existing.ID}",
                            existing if holders else info)
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


# -- OpenTofu's httpClient (opentofu/opentofu v1.12.6) --------------------------------

#: OpenTofu's release the model follows.
TOFU_VERSION = (1, 12, 6)


class TofuConfigError(Exception):
    """What OpenTofu's backend.go refuses in the block (before any request)."""


def canonical_header(name: str) -> str:
    """Go's textproto.CanonicalMIMEHeaderKey, which http.Header.Set applies:
    C{authorization} is sent as C{Authorization}, C{x-team} as C{X-Team}."""
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def tofu_headers(headers: dict[str, str], username: str = "") -> dict[str, str]:
    """The C{headers} setting as backend.go's Configure takes it: an
    C{Authorization} header together with C{username} is refused, so are
    C{Content-Type} and C{Content-MD5} (reserved)."""
    taken: dict[str, str] = {}
    for name, value in headers.items():
        lowered = name.lower()
        if lowered == "authorization" and username:
            raise TofuConfigError(f'headers "{name}" cannot be set when providing username')
        if lowered in ("content-type", "content-md5"):
            raise TofuConfigError(f'headers "{name}" is reserved')
        taken[name] = value
    return taken


@define
class TofuHttpClient(GoHttpClient):
    """OpenTofu's httpClient (v1.12.6), transcribed where it differs from
    Terraform's:

      - httpRequest sets the user's C{Headers} (L{tofu_headers}) on every
        request, then Basic auth if C{Username}; a body (and its
        C{Content-Type}, C{Content-MD5}) only when there is data, sent with
        its C{Content-Length} (retryablehttp's []byte body): never chunked;
      - Lock's LockError carries the holder's LockInfo from the 409/423
        body, or the caller's when the body does not parse;
      - Unlock sends a LockInfo: the one it locked with, or, for
        C{force-unlock} (a client that never locked), one with only the
        typed ID (every other field Go's zero value).

    C{sent} keeps every request's bytes as they went on the wire."""

    Headers: dict[str, str] = field(factory=dict)
    sent: list[bytes] = field(factory=list)

    def fresh(self) -> TofuHttpClient:
        """A new client with the same configuration (a new OpenTofu process)."""
        return evolve(self, lockID="", jsonLockInfo=None, attempts=[], sent=[])

    def _attempt(self, method: str, url: str, data: bytes | None) -> tuple[int, bytes]:
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        headers: dict[str, str] = {}
        for name, value in self.Headers.items():
            headers[canonical_header(name)] = value
        if self.Username:
            token = base64.b64encode(f"{self.Username}:{self.Password}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        body = data or b""
        if body:
            headers["Content-Type"] = "application/json"
            headers["Content-Md5"] = content_md5(body)
        # net/http's order: Host, User-Agent, Content-Length, the header
        # map sorted by name, then the transport's Accept-Encoding.
        lines = [f"{method} {target} HTTP/1.1", f"Host: {parts.netloc}",
                 "User-Agent: Go-http-client/1.1"]
        if body:
            lines.append(f"Content-Length: {len(body)}")
        lines += [f"{name}: {headers[name]}" for name in sorted(headers)]
        lines.append("Accept-Encoding: gzip")
        request = "\r\n".join(lines).encode() + b"\r\n\r\n" + body
        self.sent.append(request)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            connection.connect()
            assert connection.sock is not None
            connection.sock.sendall(request)
            response = http.client.HTTPResponse(connection.sock, method=method)
            response.begin()
            return response.status, response.read()
        finally:
            connection.close()

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
                raise LockError("HTTP remote state already locked, failed to unmarshal body",
                                info) from None
            raise LockError(f"HTTP remote state already locked: ID={existing.ID}", existing)
        raise ClientError(f"Unexpected HTTP response code {status}")

    def Unlock(self, id: str) -> None:
        if self.UnlockURL is None:
            return
        # "force unlock command does not instantiate statemgr.LockInfo which
        # means that c.jsonLockInfo will be nil"
        lockInfo = LockInfo()
        if self.jsonLockInfo is not None:
            lockInfo = LockInfo.unmarshal(self.jsonLockInfo)
            if id != lockInfo.ID:
                raise LockError(f"lock id {json.dumps(id)} does not match existing lock",
                                lockInfo)
        lockInfo = evolve(lockInfo, ID=id)
        status, _ = self.httpRequest(self.UnlockMethod, self.UnlockURL, lockInfo.marshal(),
                                     "unlock")
        if status != 200:
            raise ClientError(f"Unexpected HTTP response code {status}")

