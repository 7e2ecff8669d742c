"""The control API of hosted mode, in memory (a Kilolock site over a MemoryStateStore):
authentication, every route, validation (400 naming the field), duplicates
(409), unknown handles (404), the token response with its backend block,
revocation, tenant deletion, and the audit trail with its verification.

The same API against real servers on both stores is exercised by
test_cross_tenant.py, test_conformance.py and test_terraform_hosted.py."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from attrs import evolve

from kilolock.rules import hosted
from tests.support.hosted_support import (
    CONTROL_HEADERS,
    CONTROL_TOKEN,
    STUB_PUBLIC_URL,
    HostedStub,
    basic,
)
from tests.support.stub_client import lock_body, state_body


@pytest.fixture
def stub() -> HostedStub:
    return HostedStub()


def create_tenant(stub: HostedStub, slug: str = "acme") -> dict[str, Any]:
    return stub.control.ok("POST", "/tenants", {"slug": slug, "name": "Acme Corp"}, 201)


def error_of(reply: Any) -> tuple[int, str, str | None]:
    error = reply.json()["error"]
    return reply.status, error["code"], error.get("field")


# -- authentication --------------------------------------------------------------


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer not-the-control-token"},
    {"Authorization": f"Bearer {CONTROL_TOKEN}x"},
    basic("control", CONTROL_TOKEN),
    {"Authorization": f"Token {CONTROL_TOKEN}"},
], ids=["none", "wrong", "longer", "basic", "other-scheme"])
def test_every_route_needs_the_control_bearer_token(stub: HostedStub,
                                                    headers: dict[str, str]) -> None:
    """Without exactly `Bearer KL_CONTROL_TOKEN`, known and unknown routes
    alike answer 401 with a Bearer challenge, and nothing is created."""
    for method, path in (("GET", "/tenants"), ("POST", "/tenants"), ("GET", "/nowhere"),
                         ("DELETE", "/tenants/acme")):
        reply = stub.control.call(method, path, {"slug": "acme", "name": "A"}, headers=headers)
        assert error_of(reply) == (401, "unauthorized", None)
        assert reply.header(b"www-authenticate") == b'Bearer realm="kilolock-control"'
    assert stub.control.ok("GET", "/tenants") == {"tenants": []}


def test_healthz_needs_no_token(stub: HostedStub) -> None:
    """/healthz on the control listener is unauthenticated."""
    assert stub.control_client.get("/healthz").status == 200


def test_state_tokens_are_not_control_tokens(stub: HostedStub) -> None:
    """A tenant's own token gets 401 on the control API."""
    create_tenant(stub)
    issued = stub.control.ok("POST", "/tenants/acme/tokens",
                             {"name": "ci", "environment": "default"}, 201)
    reply = stub.control.call("GET", "/tenants",
                              headers={"Authorization": f"Bearer {issued['token_secret']}"})
    assert reply.status == 401


# -- tenants ---------------------------------------------------------------------


def test_create_tenant_answers_201_with_its_default_workspace_and_environment(
        stub: HostedStub) -> None:
    """POST /v1/api/tenants creates the tenant with workspace and environment
    'default' and shows their plain-segment ids; GET by slug or id shows the same."""
    created = create_tenant(stub)
    assert (created["slug"], created["name"], created["deleted_at"]) == ("acme", "Acme Corp",
                                                                         None)
    [workspace] = created["workspaces"]
    [environment] = workspace["environments"]
    assert workspace["name"] == environment["name"] == "default"
    for public_id in (created["id"], workspace["id"], environment["id"]):
        assert quote(public_id, safe="") == public_id
    assert hosted.is_public_id(workspace["id"], "ws_")
    assert hosted.is_public_id(environment["id"], "env_")
    assert created["state_count"] == 0
    assert stub.control.ok("GET", "/tenants/acme") == created
    assert stub.control.ok("GET", f"/tenants/{created['id']}") == created
    listed = stub.control.ok("GET", "/tenants")["tenants"]
    assert [t["slug"] for t in listed] == ["acme"]


@pytest.mark.parametrize(("document", "field"), [
    ({"slug": "Acme", "name": "A"}, "slug"),
    ({"slug": "acme corp", "name": "A"}, "slug"),
    ({"slug": "", "name": "A"}, "slug"),
    ({"slug": 7, "name": "A"}, "slug"),
    ({"name": "A"}, "slug"),
    ({"slug": "acme"}, "name"),
    ({"slug": "acme", "name": ""}, "name"),
    ({"slug": "acme", "name": "A", "plan": "gold"}, "plan"),
    (["acme"], "body"),
    ("not json", "body"),
])
def test_bad_tenant_input_is_400_naming_the_field(stub: HostedStub, document: Any,
                                                  field: str) -> None:
    """Every malformed create names the offending field and creates nothing."""
    if document == "not json":
        reply = stub.control_client.request("POST", "/v1/api/tenants", body=b"{nope",
                                            headers=CONTROL_HEADERS)
    else:
        reply = stub.control.call("POST", "/tenants", document)
    assert error_of(reply) == (400, "invalid_field", field)
    assert stub.control.ok("GET", "/tenants") == {"tenants": []}


def test_duplicate_slug_is_409(stub: HostedStub) -> None:
    """A second tenant with a live slug is 409 already_exists naming 'slug'."""
    create_tenant(stub)
    reply = stub.control.call("POST", "/tenants", {"slug": "acme", "name": "Other"})
    assert error_of(reply) == (409, "already_exists", "slug")


def test_unknown_things_are_404(stub: HostedStub) -> None:
    """Unknown tenants, workspaces, environments, tokens and routes are 404."""
    create_tenant(stub)
    cases = {
        "/tenants/nobody": "tenant_not_found",
        "/tenants/tn_000000000000": "tenant_not_found",
        "/tenants/acme/workspaces/nowhere": "workspace_not_found",
        "/tenants/acme/workspaces/default/environments/nowhere": "environment_not_found",
        "/tenants/acme/workspaces/nowhere/environments": "workspace_not_found",
        "/tenants/acme/tokens/tok_000000000000": "token_not_found",
        "/tenants/nobody/events": "tenant_not_found",
        "/tenants/acme/elsewhere": "not_found",
        "/tenant": "not_found",
    }
    for path, code in cases.items():
        assert error_of(stub.control.call("GET", path)) == (404, code, None), path
    revoke = stub.control.call("DELETE", "/tenants/acme/tokens/tok_000000000000")
    assert error_of(revoke) == (404, "token_not_found", None)


def test_wrong_method_is_405_with_allow(stub: HostedStub) -> None:
    """A route answers a method it does not serve with 405 and its Allow list."""
    reply = stub.control.call("PUT", "/tenants", {"slug": "x", "name": "X"})
    assert error_of(reply) == (405, "method_not_allowed", None)
    assert reply.header(b"allow") == b"GET, POST"


def test_encoded_slash_in_a_control_path_is_400(stub: HostedStub) -> None:
    """Control paths follow the state lane's segment rules: %2F is refused."""
    create_tenant(stub)
    reply = stub.control.call("GET", "/tenants/acme%2Fworkspaces")
    assert error_of(reply)[:2] == (400, "encoded_slash")


# -- workspaces and environments -----------------------------------------------


def test_workspaces_and_environments_over_the_api(stub: HostedStub) -> None:
    """Workspaces (each with a 'default' environment) and environments are
    created (201), listed, shown by name or id, refused when duplicate (409)
    and deleted."""
    create_tenant(stub)
    network = stub.control.ok("POST", "/tenants/acme/workspaces", {"name": "network"}, 201)
    assert [e["name"] for e in network["environments"]] == ["default"]
    staging = stub.control.ok("POST", "/tenants/acme/workspaces/network/environments",
                              {"name": "staging"}, 201)
    assert staging["workspace_id"] == network["id"]
    shown = stub.control.ok("GET", f"/tenants/acme/workspaces/{network['id']}")
    assert [e["name"] for e in shown["environments"]] == ["default", "staging"]
    assert stub.control.ok("GET", f"/tenants/acme/workspaces/network/environments/"
                                  f"{staging['id']}") == staging
    listed = stub.control.ok("GET", "/tenants/acme/workspaces")["workspaces"]
    assert [w["name"] for w in listed] == ["default", "network"]
    assert error_of(stub.control.call("POST", "/tenants/acme/workspaces",
                                      {"name": "network"})) == (409, "already_exists", "name")
    assert error_of(stub.control.call(
        "POST", "/tenants/acme/workspaces/network/environments",
        {"name": "staging"})) == (409, "already_exists", "name")
    assert error_of(stub.control.call("POST", "/tenants/acme/workspaces",
                                      {"name": "bad name"})) == (400, "invalid_field", "name")
    assert stub.control.ok("DELETE", "/tenants/acme/workspaces/network/environments/"
                                     "staging")["id"] == staging["id"]
    assert stub.control.ok("DELETE", "/tenants/acme/workspaces/network")["id"] == network["id"]
    assert [w["name"] for w in stub.control.ok("GET", "/tenants/acme/workspaces")[
        "workspaces"]] == ["default"]


def test_environment_with_states_cannot_be_deleted(stub: HostedStub) -> None:
    """409 not_empty while a state lives under the environment (or workspace)."""
    tenant = create_tenant(stub)
    workspace = tenant["workspaces"][0]
    issued = stub.control.ok("POST", "/tenants/acme/tokens",
                             {"name": "ci", "environment": "default"}, 201)
    assert stub.state.post("/v1/states/prod", state_body(1),
                           headers=basic(workspace["id"], issued["token_secret"])).status == 200
    env_id = workspace["environments"][0]["id"]
    for path in (f"/tenants/acme/workspaces/default/environments/{env_id}",
                 "/tenants/acme/workspaces/default"):
        assert error_of(stub.control.call("DELETE", path)) == (409, "not_empty", None)


# -- tokens --------------------------------------------------------------------------


def test_token_secret_is_shown_once_with_a_ready_backend_block(stub: HostedStub) -> None:
    """POST .../tokens answers 201 (no-store) with token_secret, workspace_id,
    env_public_id and the hosted backend block (state-unlock with POST,
    username = workspace_id, no secret in it); listings never show the secret."""
    tenant = create_tenant(stub)
    workspace = tenant["workspaces"][0]
    reply = stub.control.call("POST", "/tenants/acme/tokens",
                              {"name": "terraform-ci", "environment": "default",
                               "state": "network"})
    assert reply.status == 201
    assert reply.header(b"cache-control") == b"no-store"
    issued = reply.json()
    secret = issued["token_secret"]
    assert secret.startswith("kl_") and len(secret) == 46
    ws, env = workspace["id"], workspace["environments"][0]["id"]
    assert (issued["workspace_id"], issued["env_public_id"], issued["scope"],
            issued["username"]) == (ws, env, "write", ws)
    address = f"{STUB_PUBLIC_URL}/v1/states/{ws}/{env}/network"
    assert issued["state_address"] == address
    assert issued["unlock_address"] == f"{STUB_PUBLIC_URL}/v1/state-unlock/{ws}/{env}/network"
    block = issued["backend_block"]
    for line in (f'address        = "{address}"', f'lock_address   = "{address}"',
                 f'unlock_address = "{issued["unlock_address"]}"', 'lock_method    = "LOCK"',
                 'unlock_method  = "POST"', f'username       = "{ws}"', "TF_HTTP_PASSWORD"):
        assert line in block
    assert secret not in block and "password =" not in block.replace("# password:", "")
    assert issued["remote_state_block"].startswith('data "terraform_remote_state" "network"')

    listed = stub.control.call("GET", "/tenants/acme/tokens")
    assert secret not in listed.body.decode()
    assert hosted.token_hash(secret) not in listed.body.decode()
    [token] = listed.json()["tokens"]
    assert token == stub.control.ok("GET", f"/tenants/acme/tokens/{issued['id']}")
    assert (token["id"], token["active"], token["last_used_at"]) == (issued["id"], True, None)
    events = stub.control.call("GET", "/tenants/acme/events").body.decode()
    assert secret not in events and hosted.token_hash(secret) not in events


def test_read_token_gets_no_backend_block(stub: HostedStub) -> None:
    """A read token's answer has the terraform_remote_state block but no
    backend block (it cannot lock or write)."""
    create_tenant(stub)
    issued = stub.control.ok("POST", "/tenants/acme/tokens",
                             {"name": "reader", "environment": "default", "scope": "read"}, 201)
    assert issued["scope"] == "read" and "backend_block" not in issued
    assert "terraform_remote_state" in issued["remote_state_block"]


@pytest.mark.parametrize(("document", "field"), [
    ({"environment": "default"}, "name"),
    ({"name": "ci"}, "environment"),
    ({"name": "ci", "environment": "nowhere"}, "environment"),
    ({"name": "ci", "environment": "default", "workspace": "nowhere"}, "workspace"),
    ({"name": "ci", "environment": "default", "scope": "owner"}, "scope"),
    ({"name": "ci", "environment": "default", "state": "a/b"}, "state"),
    ({"name": "ci", "environment": "default", "password": "x"}, "password"),
    ({"name": "c i", "environment": "default"}, "name"),
])
def test_bad_token_input_is_400_naming_the_field(stub: HostedStub, document: dict[str, Any],
                                                 field: str) -> None:
    """Each wrong token request names its field; no token is created."""
    create_tenant(stub)
    reply = stub.control.call("POST", "/tenants/acme/tokens", document)
    assert error_of(reply) == (400, "invalid_field", field)
    assert stub.control.ok("GET", "/tenants/acme/tokens") == {"tokens": []}


def test_revoked_token_is_refused_at_once_and_its_name_is_free(stub: HostedStub) -> None:
    """DELETE .../tokens/{id} revokes: the secret gets 401 on the state lane
    from the next request; the token stays listed as revoked; revoking again
    is harmless; a new token may take the name (rotation)."""
    tenant = create_tenant(stub)
    ws = tenant["workspaces"][0]["id"]
    issued = stub.control.ok("POST", "/tenants/acme/tokens",
                             {"name": "ci", "environment": "default"}, 201)
    auth = basic(ws, issued["token_secret"])
    assert stub.state.get("/v1/states/prod", headers=auth).status == 404
    used = stub.control.ok("GET", f"/tenants/acme/tokens/{issued['id']}")
    assert used["last_used_at"] is not None
    revoked = stub.control.ok("DELETE", f"/tenants/acme/tokens/{issued['id']}")
    assert revoked["active"] is False and revoked["revoked_at"] is not None
    refused = stub.state.get("/v1/states/prod", headers=auth)
    assert refused.status == 401
    assert refused.header(b"www-authenticate") == b'Basic realm="kilolock"'
    assert stub.control.ok("DELETE", f"/tenants/acme/tokens/{issued['id']}") == revoked
    rotated = stub.control.ok("POST", "/tenants/acme/tokens",
                              {"name": "ci", "environment": "default"}, 201)
    assert stub.state.get("/v1/states/prod",
                          headers=basic(ws, rotated["token_secret"])).status == 404
    kinds = [e["kind"] for e in stub.control.ok("GET", "/tenants/acme/events")["events"]]
    assert kinds == ["tenant_create", "token_create", "token_revoke", "token_create"]


# -- deleting tenants ----------------------------------------------------------------


def test_tenant_deletion_refuses_states_then_keeps_the_audit_trail(stub: HostedStub) -> None:
    """DELETE of a tenant with states is 409; with ?states=delete it goes,
    tokens stop working, the slug is free, and the old tenant's events stay
    readable and verifiable by its id."""
    tenant = create_tenant(stub)
    ws = tenant["workspaces"][0]["id"]
    issued = stub.control.ok("POST", "/tenants/acme/tokens",
                             {"name": "ci", "environment": "default"}, 201)
    auth = basic(ws, issued["token_secret"])
    assert stub.state.post("/v1/states/prod", state_body(1), headers=auth).status == 200
    assert error_of(stub.control.call("DELETE", "/tenants/acme")) == (409, "not_empty", None)
    assert error_of(stub.control.call("DELETE", "/tenants/acme?states=yes")) == (
        400, "invalid_field", "states")
    deleted = stub.control.ok("DELETE", "/tenants/acme?states=delete")
    assert deleted["deleted_at"] is not None
    env = tenant["workspaces"][0]["environments"][0]["id"]
    assert deleted["deleted_states"] == [f"{ws}/{env}/prod"]
    assert deleted["revoked_tokens"] == [issued["id"]]
    assert stub.state.get("/v1/states/prod", headers=auth).status == 401
    assert stub.control.call("GET", "/tenants/acme").status == 404
    assert stub.control.ok("GET", "/tenants") == {"tenants": []}
    assert [t["id"] for t in stub.control.ok("GET", "/tenants?deleted=true")["tenants"]] == [
        tenant["id"]]
    old = stub.control.ok("GET", f"/tenants/{tenant['id']}/events")["events"]
    assert [e["kind"] for e in old] == ["tenant_create", "token_create", "state_write",
                                        "state_delete", "tenant_delete"]
    assert stub.control.ok("GET", f"/tenants/{tenant['id']}/events/verify")["ok"] is True
    again = create_tenant(stub)
    assert again["id"] != tenant["id"]
    assert [e["kind"] for e in stub.control.ok("GET", "/tenants/acme/events")["events"]] == [
        "tenant_create"]


# -- the audit trail -----------------------------------------------------------------


def test_events_filter_by_state_kind_and_time(stub: HostedStub) -> None:
    """GET .../events filters by state path, kinds (repeated or comma-separated)
    and the time range [since, until); a bad time is 400 naming the field."""
    tenant = create_tenant(stub)
    ws = tenant["workspaces"][0]["id"]
    env = tenant["workspaces"][0]["environments"][0]["id"]
    issued = stub.control.ok("POST", "/tenants/acme/tokens",
                             {"name": "ci", "environment": "default"}, 201)
    auth = basic(ws, issued["token_secret"])
    stub.state.post("/v1/states/app", state_body(1), headers=auth)
    stub.state.lock("/v1/states/net", lock_body("L1"), headers=auth)
    events = stub.control.ok("GET", "/tenants/acme/events")["events"]
    assert [e["kind"] for e in events] == ["tenant_create", "token_create", "state_write",
                                           "lock_acquire"]
    write = events[2]
    assert (write["state"], write["principal"], write["detail"]["token"]) == (
        f"{ws}/{env}/app", "token:ci", issued["id"])
    by_state = stub.control.ok("GET", f"/tenants/acme/events?state={ws}/{env}/net")["events"]
    assert [e["kind"] for e in by_state] == ["lock_acquire"]
    by_kind = stub.control.ok("GET", "/tenants/acme/events?kind=state_write,tenant_create")
    assert [e["kind"] for e in by_kind["events"]] == ["tenant_create", "state_write"]
    repeated = stub.control.ok("GET", "/tenants/acme/events?kind=token_create&kind=lock_acquire")
    assert [e["kind"] for e in repeated["events"]] == ["token_create", "lock_acquire"]
    at = events[2]["at"]
    assert stub.control.ok("GET", f"/tenants/acme/events?since={at}")["events"][0]["seq"] >= 3
    assert all(e["seq"] < 3 or e["at"] < at for e in stub.control.ok(
        "GET", f"/tenants/acme/events?until={at}")["events"])
    assert error_of(stub.control.call("GET", "/tenants/acme/events?since=yesterday")) == (
        400, "invalid_field", "since")


def test_verify_reports_the_first_broken_link(stub: HostedStub) -> None:
    """events/verify answers ok with the head while the chain holds, and the
    first broken event (its seq and why) once an event was altered."""
    tenant = create_tenant(stub)
    for name in ("a", "b", "c"):
        stub.control.ok("POST", "/tenants/acme/workspaces", {"name": name}, 201)
    verified = stub.control.ok("GET", "/tenants/acme/events/verify")
    assert (verified["ok"], verified["events"], verified["head_seq"]) == (True, 4, 4)
    assert "first_broken" not in verified
    chain = stub.store._events[tenant["id"]]
    chain[2] = evolve(chain[2], detail=json.dumps({"name": "forged"}))
    broken = stub.control.ok("GET", "/tenants/acme/events/verify")
    assert broken["ok"] is False
    assert broken["first_broken"]["seq"] == 3
    assert "altered" in broken["first_broken"]["reason"]
    del chain[1]
    gap = stub.control.ok("GET", "/tenants/acme/events/verify")
    assert gap["first_broken"]["seq"] == 3
    assert "expected event seq 2" in gap["first_broken"]["reason"]


def test_control_mutations_are_events_with_the_callers_address(stub: HostedStub) -> None:
    """Every control-plane mutation appends its event, principal 'control'."""
    create_tenant(stub)
    stub.control.ok("POST", "/tenants/acme/workspaces", {"name": "net"}, 201)
    stub.control.ok("POST", "/tenants/acme/workspaces/net/environments", {"name": "prod"}, 201)
    token = stub.control.ok("POST", "/tenants/acme/tokens",
                            {"name": "ci", "environment": "prod", "workspace": "net"}, 201)
    stub.control.ok("DELETE", f"/tenants/acme/tokens/{token['id']}")
    stub.control.ok("DELETE", "/tenants/acme/workspaces/net/environments/prod")
    stub.control.ok("DELETE", "/tenants/acme/workspaces/net")
    events = stub.control.ok("GET", "/tenants/acme/events")["events"]
    assert [e["kind"] for e in events] == [
        "tenant_create", "workspace_create", "environment_create", "token_create",
        "token_revoke", "environment_delete", "workspace_delete"]
    assert {e["principal"] for e in events} == {"control"}
    assert stub.control.ok("GET", "/tenants/acme/events/verify")["ok"] is True
