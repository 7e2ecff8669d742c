"""Retention and purges on the native and control APIs, in memory: routes,
statuses, who may (tenant admins only), every bad input a clear 4xx with
nothing changed, and tombstones in the version history.

The same against live servers on both stores (and through kl):
test_at_rest_server.py."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from kilolock.auth.portal import OpenChecker, build_portal
from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey, utcnow
from kilolock.retention.policy import RetentionPolicy
from kilolock.web.site import build_root
from tests.support.hosted_support import HostedStub
from tests.support.native_support import TokenTable
from tests.support.stub_client import SiteClient, StubClient, state_body

NATIVE = "/v1/native"
ADMIN = Principal("acme", "root", scope="admin", workspace_id="ws_a", env_public_id="env_1")
WRITER = Principal("acme", "ci", workspace_id="ws_a", env_public_id="env_1")
READER = Principal("acme", "dash", scope="read", workspace_id="ws_a", env_public_id="env_1")
TOKENS = {"admin": ADMIN, "writer": WRITER, "reader": READER}
SCOPED = "ws_a/env_1/app"


def body(serial: int) -> bytes:
    return state_body(serial, resources=[{
        "mode": "managed", "type": "null_resource", "name": "n",
        "provider": 'provider["registry.terraform.io/hashicorp/null"]',
        "instances": [{"schema_version": 0, "sensitive_attributes": [], "attributes": {
            "id": hashlib.sha256(str(serial).encode()).hexdigest()}}]}])


class Client(StubClient):
    """An open-mode server (its caller is the tenant's admin), or with
    C{table} a server whose Bearer tokens are L{TOKENS}."""

    def __init__(self, table: bool = False, retention: RetentionPolicy | None = None) -> None:
        super().__init__()
        checker = TokenTable(TOKENS) if table else OpenChecker()
        self.site = SiteClient(build_root(self.store, build_portal(checker), reactor=None,
                                          retention=retention or RetentionPolicy()))
        self.token: str | None = None

    def as_(self, token: str) -> Client:
        self.token = token
        return self

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Any:
        headers = dict(headers or {})
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return super().request(method, path, body=body, headers=headers)

    def send(self, method: str, path: str, document: Any = None) -> Any:
        raw = document if isinstance(document, bytes) else (
            None if document is None else json.dumps(document).encode())
        return self.request(method, NATIVE + path, body=raw,
                            headers={"Content-Type": "application/json"})

    def write(self, name: str, serials: range) -> None:
        for serial in serials:
            assert self.post(f"/v1/states/{name}", body(serial)).status == 200

    def history(self, name: str) -> list[dict[str, Any]]:
        reply = self.send("GET", f"/states/{name}/-/versions")
        assert reply.status == 200, reply.body
        versions: list[dict[str, Any]] = reply.json()["versions"]
        return versions


def purge(client: Client, name: str, number: int, reason: Any = "leaked a password") -> Any:
    return client.send("POST", f"/states/{name}/-/versions/{number}/purge", {"reason": reason})


def test_a_purge_leaves_a_tombstone_in_history() -> None:
    """Open mode: the caller is the tenant's admin.  The purged version's
    history entry says when and why; its bytes answer 410; the diff skips
    it; the other versions read back."""
    client = Client()
    client.write("app", range(1, 4))
    reply = purge(client, "app", 2, "leaked the db password")
    assert reply.status == 200, reply.body
    tombstone = reply.json()["version"]
    assert tombstone["number"] == 2 and tombstone["pruned"]["reason"] == "leaked the db password"
    history = client.history("app")
    assert [entry["pruned"] is not None for entry in history] == [False, True, False]
    assert history[1]["sha256"] == hashlib.sha256(body(2)).hexdigest()
    gone = client.send("GET", "/states/app/-/versions/2")
    assert (gone.status, gone.error_code) == (410, "version_pruned")
    assert "leaked the db password" in gone.json()["error"]["message"]
    diff = client.send("GET", "/states/app/-/diff").json()
    assert (diff["from"]["number"], diff["to"]["number"]) == (1, 3)
    assert client.send("GET", "/states/app/-/versions/1").body == body(1)
    refused = client.send("GET", "/states/app/-/diff?from=2&to=3")
    assert (refused.status, refused.error_code) == (410, "version_pruned")
    rollback = client.send("POST", "/states/app/-/rollback", {"version": 2})
    assert rollback.status == 410
    verify = client.send("GET", "/events/verify").json()
    assert verify["verified"] is True


def test_the_current_version_cannot_be_purged() -> None:
    """409 with what to do; nothing changes."""
    client = Client()
    client.write("app", range(1, 3))
    reply = purge(client, "app", 2)
    assert (reply.status, reply.error_code) == (409, "version_is_current")
    assert "roll back" in reply.json()["error"]["message"]
    assert [entry["pruned"] for entry in client.history("app")] == [None, None]


@pytest.mark.parametrize(("document", "field"), [
    (b"not json", "body"), (b"[1]", "body"), (b"[" * 60_000, "body"),
    ({}, "reason"), ({"reason": ""}, "reason"), ({"reason": "   "}, "reason"),
    ({"reason": 7}, "reason"), ({"reason": "x" * 501}, "reason"),
    ({"reason": "line\nbreak"}, "reason"), ({"reason": "nul\u0000"}, "reason"),
    (b'{"reason": "lone \\ud800"}', "reason"), ({"reason": "r", "force": True}, "force"),
    (b'{"reason": "' + b"x" * 70_000 + b'"}', "body"),
], ids=lambda value: repr(value)[:30])
def test_a_bad_purge_body_is_a_400_and_nothing_goes(document: Any, field: str) -> None:
    """Every bad body names its field; the version keeps its bytes."""
    client = Client()
    client.write("app", range(1, 3))
    raw = document if isinstance(document, bytes) else json.dumps(document).encode()
    reply = client.send("POST", "/states/app/-/versions/1/purge", raw)
    assert (reply.status, reply.json()["error"].get("field")) == (400, field)
    assert client.send("GET", "/states/app/-/versions/1").body == body(1)


@pytest.mark.parametrize(("path", "status", "code"), [
    ("/states/app/-/versions/9/purge", 404, "version_not_found"),
    ("/states/nothing/-/versions/1/purge", 404, "state_not_found"),
    ("/states/app/-/versions/0/purge", 404, "not_found"),
    ("/states/app/-/versions/1/purge/more", 404, "not_found"),
])
def test_purging_what_is_not_there_is_a_404(path: str, status: int, code: str) -> None:
    client = Client()
    client.write("app", range(1, 3))
    reply = client.send("POST", path, {"reason": "r"})
    assert (reply.status, reply.error_code) == (status, code)


def test_only_tenant_admins_purge_and_set_retention() -> None:
    """A write token gets 403 not_admin, a read token 403 read_only; an admin
    token purges and sets retention in its workspace/environment, but not
    the tenant's default."""
    client = Client(table=True).as_("admin")
    client.write("app", range(1, 4))
    for token, words in (("writer", "need a tenant admin"), ("reader", "read-only")):
        client.as_(token)
        reply = purge(client, "app", 1)
        assert (reply.status, reply.error_code) == (403, "forbidden"), reply.body
        assert words in reply.json()["error"]["message"]
        state = client.send("PUT", "/states/app/-/retention", {"versions": 1, "days": None})
        assert state.status == 403
        assert client.send("GET", "/states/app/-/retention").status == 200
    client.as_("admin")
    assert purge(client, "app", 1).status == 200
    assert client.send("PUT", "/states/app/-/retention",
                       {"versions": 5, "days": None}).status == 200
    tenant_wide = client.send("PUT", "/retention", {"versions": 5, "days": None})
    assert tenant_wide.status == 403
    history = client.history(SCOPED)
    assert [entry["pruned"] is not None for entry in history] == [True, False, False]


def test_retention_levels_on_the_native_api() -> None:
    """A state's policy comes from the server until the tenant or the state
    overrides it; DELETE goes back a level; each change is audited."""
    client = Client(retention=RetentionPolicy(128, 28))
    client.write("app", range(1, 2))
    answer = client.send("GET", "/states/app/-/retention").json()
    assert (answer["source"], answer["policy"]["versions"], answer["policy"]["days"]) == (
        "server", 128, 28)
    tenant = client.send("PUT", "/retention", {"versions": 10, "days": None})
    assert tenant.json()["source"] == "tenant" and tenant.json()["policy"]["versions"] == 10
    assert client.send("GET", "/states/app/-/retention").json()["source"] == "tenant"
    state = client.send("PUT", "/states/app/-/retention", {"versions": None, "days": None})
    assert state.json()["source"] == "state" and state.json()["policy"]["keepsEverything"]
    assert state.json()["stateOverride"]["updatedAt"]
    back = client.send("DELETE", "/states/app/-/retention").json()
    assert back["source"] == "tenant" and back["stateOverride"] is None
    assert client.send("DELETE", "/retention").json()["source"] == "server"
    kinds = [event["kind"] for event in client.send("GET", "/events?kind=retention_set"
                                                          "&kind=retention_clear")
             .json()["events"]]
    assert kinds == ["retention_set", "retention_set", "retention_clear", "retention_clear"]


@pytest.mark.parametrize(("document", "field"), [
    (b"{", "body"), ({"versions": 0, "days": None}, "versions"), ({"days": 3}, "versions"),
    ({"versions": None, "days": "7"}, "days"), ({"versions": 1, "days": 1, "x": 1}, "x"),
    (b'{"versions": 1e400, "days": null}', "versions"),
])
def test_a_bad_policy_is_a_400_and_nothing_changes(document: Any, field: str) -> None:
    client = Client()
    client.write("app", range(1, 2))
    raw = document if isinstance(document, bytes) else json.dumps(document).encode()
    for path in ("/states/app/-/retention", "/retention"):
        reply = client.send("PUT", path, raw)
        assert (reply.status, reply.json()["error"].get("field")) == (400, field)
    assert client.send("GET", "/states/app/-/retention").json()["source"] == "server"


def test_a_memory_store_prunes_what_the_api_set() -> None:
    """An override set through the API is what pruning follows."""
    client = Client()
    client.write("app", range(1, 5))
    client.send("PUT", "/states/app/-/retention", {"versions": 2, "days": None})
    outcome = client.store.prune_state(StateKey(DEFAULT_TENANT, "app"), RetentionPolicy(),
                                       utcnow(), 500).result
    assert outcome.pruned == (1, 2)
    assert [entry["pruned"] is not None for entry in client.history("app")] == [
        True, True, False, False]


# -- the control API ----------------------------------------------------------


def test_the_control_api_purges_and_sets_retention() -> None:
    """The operator purges a tenant's version and sets the tenant's and a
    state's retention."""
    stub = HostedStub()
    tenant = stub.control.tenant("acme")
    path = f"{tenant.prefix}/app"
    for serial in (1, 2, 3):
        reply = stub.state.post(f"/v1/states/{path}", body(serial),
                                headers=tenant.auth(tenant.write))
        assert reply.status == 200, reply.body
    purged = stub.control.ok("POST", "/tenants/acme/version-purges",
                             {"state": path, "version": 1, "reason": "leak"})
    assert purged["version"]["pruned"]["reason"] == "leak"
    current = stub.control.call("POST", "/tenants/acme/version-purges",
                                {"state": path, "version": 3, "reason": "leak"})
    assert (current.status, current.json()["error"]["code"]) == (409, "version_is_current")
    answer = stub.control.ok("PUT", "/tenants/acme/retention", {"versions": 128, "days": 28})
    assert answer["source"] == "tenant" and answer["tenant"] == tenant.id
    own = stub.control.ok("PUT", f"/tenants/acme/retention?state={path}",
                          {"versions": 3, "days": None})
    assert (own["state"], own["source"]) == (path, "state")
    assert stub.control.ok("GET", f"/tenants/acme/retention?state={path}")["source"] == "state"
    events = stub.control.ok("GET", "/tenants/acme/events?kind=version_purge")["events"]
    assert [(event["principal"], event["detail"]["purged_version"]) for event in events] == [
        ("control", 1)]
    assert stub.control.ok("GET", "/tenants/acme/events/verify")["ok"] is True


@pytest.mark.parametrize(("document", "field"), [
    ({"version": 1, "reason": "r"}, "state"), ({"state": "a/b", "version": 1, "reason": "r"},
                                               "state"),
    ({"state": "..", "version": 1, "reason": "r"}, "state"),
    ({"state": "app", "version": "1", "reason": "r"}, "version"),
    ({"state": "app", "version": 0, "reason": "r"}, "version"),
    ({"state": "app", "version": 2**40, "reason": "r"}, "version"),
    ({"state": "app", "version": True, "reason": "r"}, "version"),
    ({"state": "app", "version": 1}, "reason"),
])
def test_a_bad_control_purge_names_its_field(document: Any, field: str) -> None:
    stub = HostedStub()
    stub.control.tenant("acme")
    reply = stub.control.call("POST", "/tenants/acme/version-purges", document)
    assert (reply.status, reply.json()["error"].get("field")) == (400, field)


def test_control_retention_of_a_bad_state_path_is_a_400() -> None:
    stub = HostedStub()
    stub.control.tenant("acme")
    reply = stub.control.call("GET", "/tenants/acme/retention?state=a%2F..%2Fb")
    assert (reply.status, reply.json()["error"].get("field")) == (400, "state")
    for path in ("app", "ws_000000000000/env_000000000000/app"):  # not its environments
        reply = stub.control.call("PUT", f"/tenants/acme/retention?state={path}",
                                  {"versions": 3, "days": None})
        assert (reply.status, reply.json()["error"].get("field")) == (400, "state")
    missing = stub.control.call("GET", "/tenants/nobody/retention")
    assert missing.status == 404


def test_a_hosted_admin_token_purges_in_its_environment() -> None:
    """Hosted mode: the control API issues a token of scope admin (with a
    backend block: it writes too); it purges on the native API where a
    write token gets 403."""
    stub = HostedStub()
    tenant = stub.control.tenant("acme")
    issued = stub.control.ok("POST", "/tenants/acme/tokens",
                             {"name": "root", "environment": "default", "scope": "admin"}, 201)
    assert issued["scope"] == "admin" and "backend_block" in issued
    for serial in (1, 2):
        reply = stub.state.post(f"/v1/states/{tenant.prefix}/app", body(serial),
                                headers=tenant.auth(issued["token_secret"]))
        assert reply.status == 200, reply.body
    purge_body = json.dumps({"reason": "leak"}).encode()
    path = "/v1/native/states/app/-/versions/1/purge"
    refused = stub.state.request("POST", path, purge_body,
                                 headers={"Authorization": f"Bearer {tenant.write}"})
    assert refused.status == 403
    done = stub.state.request("POST", path, purge_body,
                              headers={"Authorization": f"Bearer {issued['token_secret']}"})
    assert done.status == 200, done.body
