"""Named conformance checks of the addressing rules of hosted mode:

  - state-path-travels-as-ordinary-segments
  - encoded-slash-is-refused
  - lock-bound-to-its-state
  - foreign-handle-looks-missing
  - operation-bound-to-its-creating-principal
  - upload-session-bound-to-its-creating-principal
  - artifact-digest-is-not-a-capability (the decision record's name), also
    run as version-digest-is-not-a-capability (the contract's name for the
    same rule applied to Kilolock's version bytes)

By default each check runs against a fresh local server in database mode on
each store.  To run them against any live Kilolock in database mode, set:

  KL_CONFORMANCE_URL            the state lane, e.g. https://kilolock.example.com
  KL_CONFORMANCE_CONTROL_URL    its control API, e.g. http://127.0.0.1:8090
  KL_CONFORMANCE_CONTROL_TOKEN  the control token

The checks then create two tenants with random slugs (``conformance-...``)
and delete them, with their states, when done:

  KL_CONFORMANCE_URL=... KL_CONFORMANCE_CONTROL_URL=... \\
  KL_CONFORMANCE_CONTROL_TOKEN=... pytest tests/web/test_conformance.py
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import ssl
import uuid
from collections.abc import Iterator, Mapping
from urllib.parse import quote, urlsplit

import pytest

from tests.support.fixtures_server import ServerFactory, exchange
from tests.support.hosted_support import ControlClient, TenantAccess, start_hosted_server
from tests.support.stub_client import Reply, content_md5, lock_body, state_body

LIVE_URL = os.environ.get("KL_CONFORMANCE_URL")


def _request(base_url: str, method: str, path: str, body: bytes | None = None,
             headers: Mapping[str, str] | None = None) -> Reply:
    parts = urlsplit(base_url)
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(parts.hostname or "", parts.port or 443,
                                                 timeout=30,
                                                 context=ssl.create_default_context())
    else:
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port or 80,
                                                timeout=30)
    return exchange(connection, method, parts.path.rstrip("/") + path, body, headers)


class Target:
    """A Kilolock in database mode and two tenants on it (A and B)."""

    def __init__(self, base_url: str, control: ControlClient) -> None:
        self.base_url = base_url
        self.control = control
        suffix = uuid.uuid4().hex[:8]
        self.a: TenantAccess = control.tenant(f"conformance-a-{suffix}")
        self.b: TenantAccess = control.tenant(f"conformance-b-{suffix}")

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Reply:
        sent = dict(headers or {})
        if body is not None:
            sent.setdefault("Content-Type", "application/json")
            sent.setdefault("Content-MD5", content_md5(body))
        return _request(self.base_url, method, path, body, sent)

    def as_a(self, method: str, path: str, body: bytes | None = None) -> Reply:
        return self.request(method, path, body, self.a.auth(self.a.write))

    def as_b(self, method: str, path: str, body: bytes | None = None) -> Reply:
        return self.request(method, path, body, self.b.auth(self.b.write))

    def clean_up(self) -> None:
        """Release what the checks left locked, then delete both tenants."""
        for tenant in (self.a, self.b):
            for state in self.control.ok("GET", f"/tenants/{tenant.slug}/states")["states"]:
                if state["lock"] is not None:
                    self.request("POST", f"/v1/state-unlock/{state['path']}", b"",
                                 tenant.auth(tenant.write))
            self.control.ok("DELETE", f"/tenants/{tenant.slug}?states=delete")


def _live_target() -> Target:
    control_url = os.environ.get("KL_CONFORMANCE_CONTROL_URL")
    control_token = os.environ.get("KL_CONFORMANCE_CONTROL_TOKEN")
    if not (LIVE_URL and control_url and control_token):
        pytest.fail("KL_CONFORMANCE_URL needs KL_CONFORMANCE_CONTROL_URL and"
                    " KL_CONFORMANCE_CONTROL_TOKEN")

    def call(method: str, path: str, body: bytes | None = None,
             headers: Mapping[str, str] | None = None) -> Reply:
        sent = {**(headers or {}), "Authorization": f"Bearer {control_token}"}
        return _request(control_url, method, path, body, sent)

    return Target(LIVE_URL, ControlClient(call))


if LIVE_URL:
    @pytest.fixture
    def target() -> Iterator[Target]:
        """Two fresh tenants on the live server named by KL_CONFORMANCE_URL."""
        built = _live_target()
        yield built
        built.clean_up()
else:
    @pytest.fixture
    def target(kilolock_server_factory: ServerFactory) -> Iterator[Target]:
        """Two fresh tenants on a new local server in database mode (one per store)."""
        hosted = start_hosted_server(kilolock_server_factory)
        built = Target(hosted.base_url, hosted.control)
        yield built
        built.clean_up()


def _same_answer(first: Reply, second: Reply) -> bool:
    """Status, body and content type equal (per-request headers aside)."""
    return (first.status, first.body, first.header(b"content-type")) == (
        second.status, second.body, second.header(b"content-type"))


# -- the checks ------------------------------------------------------------------


def test_conformance_state_path_travels_as_ordinary_segments(target: Target) -> None:
    """state-path-travels-as-ordinary-segments: workspace, environment and
    state name are three ordinary segments; the hosted path and the
    single-segment name reach one state; a percent-encoded character decodes
    within its own segment; the backend block's addresses and the discovery
    document's paths need no percent-encoding."""
    a = target.a
    assert target.as_a("POST", f"/v1/states/{a.prefix}/network", state_body(1)).status == 200
    assert target.as_a("GET", "/v1/states/network").body == state_body(1)
    assert target.as_a("POST", "/v1/states/caf%C3%A9", state_body(2)).status == 200
    assert target.as_a("GET", f"/v1/states/{a.prefix}/caf%C3%A9").body == state_body(2)
    listed = target.control.ok("GET", f"/tenants/{a.slug}/states")["states"]
    assert {s["path"] for s in listed} == {f"{a.prefix}/network", f"{a.prefix}/café"}

    issued = target.control.ok("POST", f"/tenants/{a.slug}/tokens",
                               {"name": "segments", "environment": "default"}, 201)
    for address in (issued["state_address"], issued["unlock_address"]):
        path = urlsplit(address).path
        assert quote(path, safe="/") == path and "%" not in path
        assert path.split("/")[3:6] == [issued["workspace_id"], issued["env_public_id"],
                                        "default"]
    discovery = target.request("GET", "/.well-known/kilolock")
    assert discovery.status == 200
    for lane in discovery.json()["lanes"]:
        for key in ("basePath", "unlockPath"):
            if key in lane:
                assert quote(lane[key], safe="/") == lane[key]


def test_conformance_encoded_slash_is_refused(target: Target) -> None:
    """encoded-slash-is-refused: %2F (either case) inside any segment of a
    state path is 400 encoded_slash on every route, before authentication
    decides anything, and nothing is stored under any reading of the path."""
    a = target.a
    paths = [f"/v1/states/{a.workspace_id}%2F{a.env_id}%2Fnet",
             f"/v1/states/{a.prefix}/team%2fnet",
             f"/v1/states/{a.prefix}%2Fnet",
             f"/v1/states/{a.prefix}/team%2Fnet/lock",
             f"/v1/state-unlock/{a.prefix}/team%2Fnet"]
    for path in paths:
        for method, body in (("GET", None), ("POST", state_body(1)), ("LOCK", lock_body("x")),
                             ("UNLOCK", b""), ("DELETE", None)):
            if path.startswith("/v1/state-unlock/") and method != "POST":
                continue
            for headers in (target.a.auth(target.a.write), {}):
                reply = target.request(method, path, body, headers)
                assert reply.status == 400, (method, path, reply.status)
                assert reply.json()["error"]["code"] == "encoded_slash"
    assert target.control.ok("GET", f"/tenants/{a.slug}/states")["states"] == []
    # Each reading of the path names no state: a state nobody wrote (404,
    # no body), or four segments that address nothing (a JSON 404).
    for probe, answer in (("net", (404, b"")), ("team", (404, b"")),
                          ("team/net", (404, "not_found"))):
        reply = target.as_a("GET", f"/v1/states/{a.prefix}/{probe}")
        assert (reply.status, reply.body if answer[1] == b"" else reply.error_code) == answer


def test_conformance_lock_bound_to_its_state(target: Target) -> None:
    """lock-bound-to-its-state: a lock ID releases and authorises writes only
    on the state it was taken on — not on another state of the same tenant,
    nor on the same name in another tenant (where it is a no-op), and never
    through another tenant's force-unlock."""
    a, b = target.a, target.b
    held = lock_body("lock-of-alpha")
    assert target.as_a("POST", "/v1/states/alpha", state_body(1)).status == 200
    assert target.as_a("LOCK", "/v1/states/alpha", held).status == 200

    # another state of A: the ID holds nothing there
    assert target.as_a("UNLOCK", "/v1/states/beta", held).status == 200
    refused = target.as_a("POST", "/v1/states/beta?ID=lock-of-alpha", state_body(1))
    assert (refused.status, refused.json()["error"]["code"]) == (409, "lock_not_held")
    # the same name in tenant B: owner release, force release and writes
    # with A's ID touch only B's own state
    assert target.as_b("UNLOCK", "/v1/states/alpha", held).status == 200
    assert target.as_b("UNLOCK", "/v1/states/alpha", b"").status == 200
    assert target.as_b("POST", f"/v1/state-unlock/{b.prefix}/alpha", b"").status == 200
    stolen = target.as_b("POST", "/v1/states/alpha?ID=lock-of-alpha", state_body(9))
    assert (stolen.status, stolen.json()["error"]["code"]) == (409, "lock_not_held")
    # A's lock is intact and still authorises A's write
    probe = target.as_a("LOCK", "/v1/states/alpha", lock_body("probe"))
    assert probe.status == 423 and probe.body == held
    assert target.as_a("POST", "/v1/states/alpha?ID=lock-of-alpha",
                       state_body(2)).status == 200
    assert target.as_a("UNLOCK", f"/v1/states/{a.prefix}/alpha", held).status == 200
    assert target.as_a("GET", "/v1/states/alpha").body == state_body(2)


def test_conformance_foreign_handle_looks_missing(target: Target) -> None:
    """foreign-handle-looks-missing: everything B can name that A holds — A's
    state names (under B's own scope), A's lock IDs, A's version numbers on
    the native lane when the server offers it — answers B exactly as it did
    before A had them: same status, same bytes."""
    b = target.b
    native = any(lane.get("name") == "kilolock-native"
                 for lane in target.request("GET", "/.well-known/kilolock").json()["lanes"])
    # (method, path, body, the status B gets both times)
    probes: list[tuple[str, str, bytes | None, int]] = [
        ("GET", "/v1/states/shared", None, 404),
        ("HEAD", "/v1/states/shared", None, 404),
        ("DELETE", "/v1/states/shared", None, 404),
        ("UNLOCK", "/v1/states/shared", lock_body("alpha-lock"), 200),  # releases nothing
        ("POST", "/v1/states/shared?ID=alpha-lock", state_body(3), 409),  # lock_not_held
        ("POST", "/v1/state-unlock/shared", b"alpha-lock", 200),
    ]
    if native:
        probes += [("GET", f"/v1/native/states/{path}", None, 404) for path in (
            "shared", "shared/-/versions", "shared/-/versions/1", "shared/-/lock",
            "shared/-/outputs")]
        probes += [("GET", "/v1/native/states/shared/-/events", None, 200),  # no events
                   ("GET", "/v1/native/events?state=shared", None, 200)]

    def answers() -> list[Reply]:
        return [target.request(method, path, body, b.auth(b.read if method in (
            "GET", "HEAD") else b.write)) for method, path, body, _ in probes]

    before = answers()
    assert target.as_a("POST", "/v1/states/shared", state_body(1)).status == 200
    assert target.as_a("POST", "/v1/states/shared", state_body(2)).status == 200
    assert target.as_a("LOCK", "/v1/states/shared", lock_body("alpha-lock")).status == 200
    after = answers()
    for (method, path, _, status), first, second in zip(probes, before, after, strict=True):
        assert _same_answer(first, second), (method, path, first, second)
        assert first.status == status, (method, path, first.status)
    assert before[0].status == 404 and before[0].body == b""
    # A's state is untouched by all of B's attempts
    assert target.as_a("GET", "/v1/states/shared").body == state_body(2)
    held = target.as_a("LOCK", "/v1/states/shared", lock_body("probe"))
    assert held.status == 423 and json.loads(held.body)["ID"] == "alpha-lock"



# -- handles of the native lane (decision record 0018, rules 2 and 3) -------------


def _native(target: Target) -> str:
    """The native lane's base path (the checks below need it)."""
    for lane in target.request("GET", "/.well-known/kilolock").json()["lanes"]:
        if lane.get("name") == "kilolock-native":
            return str(lane["basePath"])
    pytest.skip("the server offers no kilolock-native lane")


def _second_writer(target: Target) -> dict[str, str]:
    """Basic credentials of another write token of tenant A (another principal)."""
    issued = target.control.ok("POST", f"/tenants/{target.a.slug}/tokens",
                               {"name": f"second-{uuid.uuid4().hex[:6]}",
                                "environment": "default"}, 201)
    return target.a.auth(issued["token_secret"])


def _json_body(document: object) -> bytes:
    return json.dumps(document).encode()


def test_conformance_operation_bound_to_its_creating_principal(target: Target) -> None:
    """operation-bound-to-its-creating-principal: reading or cancelling an
    operation from another principal of its tenant, or from another tenant,
    is answered exactly as for an id that never existed (404, same bytes),
    never 403; the operation is untouched and its creator still reads it."""
    base = _native(target)
    a = target.a
    assert target.as_a("POST", "/v1/states/handles", state_body(1)).status == 200
    started = target.request("POST", f"{base}/operations", _json_body({
        "kind": "rm", "state": "handles", "addresses": ["terraform_data.example"]}),
        a.auth(a.write))
    assert started.status == 202, started
    operation = started.json()["id"]
    never = "op_" + "0" * 24
    for stranger in (_second_writer(target), target.b.auth(target.b.write)):
        for method, suffix in (("GET", ""), ("DELETE", ""), ("POST", "/cancel")):
            theirs = target.request(method, f"{base}/operations/{operation}{suffix}", None,
                                    stranger)
            nobodys = target.request(method, f"{base}/operations/{never}{suffix}", None,
                                     stranger)
            assert theirs.status == 404 and _same_answer(theirs, nobodys), (method, suffix)
    mine = target.request("GET", f"{base}/operations/{operation}", None, a.auth(a.write))
    assert mine.status == 200 and mine.json()["cancelRequested"] is False


def test_conformance_upload_session_bound_to_its_creating_principal(target: Target) -> None:
    """upload-session-bound-to-its-creating-principal: reading, continuing,
    committing or abandoning an upload session from another principal or
    tenant is answered exactly as for an id that never existed; the
    session keeps what its creator sent, and its creator commits it."""
    base = _native(target)
    a = target.a
    raw = state_body(7)
    opened = target.request("POST", f"{base}/uploads", _json_body({
        "state": "uploaded", "size": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}),
        a.auth(a.write))
    assert opened.status == 201, opened
    upload = opened.json()["id"]
    assert target.request("PUT", f"{base}/uploads/{upload}?offset=0", raw[:50],
                          a.auth(a.write)).status == 200
    never = "up_" + "0" * 24
    actions = [("GET", "", None), ("PUT", "?offset=50", raw[50:]),
               ("POST", "/commit", None), ("DELETE", "", None)]
    for stranger in (_second_writer(target), target.b.auth(target.b.write)):
        for method, suffix, body in actions:
            theirs = target.request(method, f"{base}/uploads/{upload}{suffix}", body, stranger)
            nobodys = target.request(method, f"{base}/uploads/{never}{suffix}", body, stranger)
            assert theirs.status == 404 and _same_answer(theirs, nobodys), (method, suffix)
    session = target.request("GET", f"{base}/uploads/{upload}", None, a.auth(a.write)).json()
    assert session["received"] == [[0, 50]]
    assert target.request("PUT", f"{base}/uploads/{upload}?offset=50", raw[50:],
                          a.auth(a.write)).status == 200
    assert target.request("POST", f"{base}/uploads/{upload}/commit", None,
                          a.auth(a.write)).status == 200
    assert target.as_a("GET", "/v1/states/uploaded").body == raw


def _digest_check(target: Target) -> None:
    base = _native(target)
    raw = state_body(5, lineage=str(uuid.uuid4()))
    digest = hashlib.sha256(raw).hexdigest()
    path, never = f"{base}/blobs/{digest}", f"{base}/blobs/{'0' * 64}"
    b = target.b.auth(target.b.read)
    before = target.request("GET", path, None, b)
    assert target.as_a("POST", "/v1/states/digested", raw).status == 200
    theirs, nobodys = target.request("GET", path, None, b), target.request("GET", never, None, b)
    assert theirs.status == 404 and _same_answer(theirs, nobodys) and _same_answer(before,
                                                                                  theirs)
    for credentials in (target.a.auth(target.a.read), _second_writer(target)):
        held = target.request("GET", path, None, credentials)
        assert held.status == 200 and held.body == raw
    assert target.as_b("POST", "/v1/states/same-bytes", raw).status == 200
    assert target.request("GET", path, None, b).body == raw


def test_conformance_artifact_digest_is_not_a_capability(target: Target) -> None:
    """artifact-digest-is-not-a-capability: version bytes addressed by their
    SHA-256 answer only a tenant that holds them (any of its principals);
    another tenant naming the digest gets what a digest nobody stored gets,
    until it writes those bytes itself."""
    _digest_check(target)


def test_conformance_version_digest_is_not_a_capability(target: Target) -> None:
    """version-digest-is-not-a-capability: the contract's name for the same
    rule (a state version's digest is the artifact Kilolock addresses)."""
    _digest_check(target)
