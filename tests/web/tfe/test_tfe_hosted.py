"""The TFE lane in the database auth mode, in memory (L{HostedStub}): the
organization is the tenant's slug, a workspace NAME is the state the token
addresses as NAME on the HTTP lane, scopes decide as on the HTTP lane
(write, read, outputs-only), other tenants' and other environments' ids are
the lane's one 404, and the control API creates workspaces ahead of
C{terraform init}."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kilolock.web.tfe.jsonapi import NOT_FOUND_BODY
from tests.support.hosted_support import HostedStub, TenantAccess, basic, bearer
from tests.support.stub_client import Reply, state_body, terraform_headers
from tests.support.tfe_support import JSONAPI, version_document

OUTPUTS = {"public": {"value": "hello", "type": "string"},
           "secret": {"value": "hunter2", "type": "string", "sensitive": True}}


class Hosted:
    """A hosted stub, a tenant with write/read/outputs-only tokens, a second
    environment's writer and a second tenant."""

    def __init__(self) -> None:
        self.stub = HostedStub()
        self.acme = self.stub.control.tenant("acme")
        issued = self.stub.control.ok("POST", "/tenants/acme/tokens", {
            "name": "dashboard", "environment": "default", "scope": "outputs"}, 201)
        self.outputs_answer = issued
        self.outputs = issued["token_secret"]
        self.stub.control.ok("POST", "/tenants/acme/workspaces/default/environments",
                             {"name": "staging"}, 201)
        self.staging = self.stub.control.ok("POST", "/tenants/acme/tokens", {
            "name": "staging-ci", "environment": "staging"}, 201)["token_secret"]
        self.other = self.stub.control.tenant("globex")

    def call(self, method: str, path: str, token: str, document: Any = None,
             body: bytes | None = None, headers: dict[str, str] | None = None) -> Reply:
        sent = {**bearer(token), **(headers or {})}
        if document is not None:
            body = json.dumps(document).encode()
            sent["Content-Type"] = JSONAPI
        return self.stub.state.request(method, path, body=body, headers=sent)

    def ok(self, method: str, path: str, token: str, document: Any = None,
           status: int = 200) -> Any:
        reply = self.call(method, path, token, document)
        assert reply.status == status, (method, path, reply.status, reply.body)
        return reply.json() if reply.body else None


@pytest.fixture
def hosted() -> Hosted:
    return Hosted()


def create_with_outputs(hosted: Hosted) -> dict[str, Any]:
    """The writer creates app in acme and writes a state with outputs."""
    writer = hosted.acme.write
    workspace = hosted.ok("POST", "/api/v2/organizations/acme/workspaces", writer, {
        "data": {"type": "workspaces", "attributes": {"name": "app"}}}, 201)["data"]
    hosted.ok("POST", f"/api/v2/workspaces/{workspace['id']}/actions/lock", writer)
    hosted.ok("POST", f"/api/v2/workspaces/{workspace['id']}/state-versions", writer,
              version_document(state_body(1, outputs=OUTPUTS), 1, inline=True), 201)
    hosted.ok("POST", f"/api/v2/workspaces/{workspace['id']}/actions/unlock", writer)
    return workspace  # type: ignore[no-any-return]


def test_a_workspace_is_the_tokens_state_of_that_name(hosted: Hosted) -> None:
    """The organization is the tenant's slug; the workspace app written on
    the TFE lane is /v1/states/app for the same token (Basic, username the
    workspace id), i.e. the state {ws}/{env}/app."""
    create_with_outputs(hosted)
    access: TenantAccess = hosted.acme
    over_http = hosted.stub.state.request("GET", "/v1/states/app",
                                          headers=access.auth(access.write))
    assert over_http.status == 200
    assert over_http.body == state_body(1, outputs=OUTPUTS)
    full = hosted.stub.state.request("GET", f"/v1/states/{access.prefix}/app",
                                     headers=access.auth(access.write))
    assert full.body == over_http.body
    assert hosted.call("GET", "/api/v2/organizations/default/workspaces/app",
                       access.write).status == 404


def test_other_environments_and_tenants_see_nothing(hosted: Hosted) -> None:
    """Another environment's token lists no app and finds none by name; its
    id, its versions and outputs answer the one 404 to that token and to
    another tenant's; another tenant's organization is 404 too."""
    workspace = create_with_outputs(hosted)
    listing = hosted.ok("GET", "/api/v2/organizations/acme/workspaces", hosted.staging)
    assert listing["data"] == []
    outputs = hosted.ok("GET", f"/api/v2/workspaces/{workspace['id']}/"
                        "current-state-version-outputs", hosted.acme.write)["data"]
    suffix = workspace["id"].removeprefix("ws-")
    for token in (hosted.staging, hosted.other.write):
        for path in (f"/api/v2/workspaces/{workspace['id']}",
                     f"/api/v2/workspaces/{workspace['id']}/current-state-version",
                     f"/api/v2/state-versions/sv-{suffix}-1",
                     f"/api/v2/state-versions/sv-{suffix}-1/download",
                     f"/api/v2/state-version-outputs/{outputs[0]['id']}",
                     "/api/v2/organizations/acme/workspaces/app"):
            reply = hosted.call("GET", path, token)
            assert (reply.status, reply.body) == (404, NOT_FOUND_BODY), (path, token)
    foreign = hosted.call("POST", f"/api/v2/workspaces/{workspace['id']}/actions/lock",
                          hosted.other.write)
    assert (foreign.status, foreign.body) == (404, NOT_FOUND_BODY)
    assert hosted.call("GET", "/api/v2/organizations/acme/entitlement-set",
                       hosted.other.write).status == 404


def test_a_read_only_token_reads_and_never_locks_or_writes(hosted: Hosted) -> None:
    """A read token reads the workspace, its state and sensitive outputs,
    and is refused (403) lock, create and delete."""
    workspace = create_with_outputs(hosted)
    reader = hosted.acme.read
    current = hosted.ok("GET", f"/api/v2/workspaces/{workspace['id']}/current-state-version",
                        reader)
    assert hosted.call("GET", current["data"]["attributes"]["hosted-state-download-url"]
                       .split("kilolock.test", 1)[1], reader).status == 200
    permissions = hosted.ok("GET", f"/api/v2/workspaces/{workspace['id']}",
                            reader)["data"]["attributes"]["permissions"]
    assert (permissions["can-lock"], permissions["can-read-state-versions"]) == (False, True)
    for method, path in (("POST", f"/api/v2/workspaces/{workspace['id']}/actions/lock"),
                         ("POST", "/api/v2/organizations/acme/workspaces"),
                         ("DELETE", "/api/v2/organizations/acme/workspaces/app")):
        assert hosted.call(method, path, reader).status == 403, path
    outputs = hosted.ok("GET", f"/api/v2/workspaces/{workspace['id']}/"
                        "current-state-version-outputs", reader)["data"]
    secret = next(o for o in outputs if o["attributes"]["name"] == "secret")
    assert hosted.ok("GET", f"/api/v2/state-version-outputs/{secret['id']}",
                     reader)["data"]["attributes"]["value"] == "hunter2"


def test_an_outputs_only_token_reads_workspaces_and_plain_outputs_only(
        hosted: Hosted) -> None:
    """An outputs-only token (issued without any backend block) lists and
    reads workspaces and non-sensitive outputs (tfe_outputs' include=outputs
    too); sensitive values, the state (on both lanes), versions and every
    write are 403."""
    workspace = create_with_outputs(hosted)
    token = hosted.outputs
    assert hosted.outputs_answer["scope"] == "outputs"
    assert "backend_block" not in hosted.outputs_answer
    assert "remote_state_block" not in hosted.outputs_answer
    assert [w["attributes"]["name"] for w in hosted.ok(
        "GET", "/api/v2/organizations/acme/workspaces", token)["data"]] == ["app"]
    read = hosted.ok("GET", "/api/v2/organizations/acme/workspaces/app?include=outputs", token)
    assert {o["attributes"]["name"]: o["attributes"]["value"] for o in read["included"]} == {
        "public": "hello", "secret": None}
    assert read["data"]["attributes"]["permissions"]["can-read-state-versions"] is False
    outputs = hosted.ok("GET", f"/api/v2/workspaces/{workspace['id']}/"
                        "current-state-version-outputs", token)["data"]
    by_name = {o["attributes"]["name"]: o for o in outputs}
    assert hosted.ok("GET", f"/api/v2/state-version-outputs/{by_name['public']['id']}",
                     token)["data"]["attributes"]["value"] == "hello"
    suffix = workspace["id"].removeprefix("ws-")
    for method, path in (
            ("GET", f"/api/v2/state-version-outputs/{by_name['secret']['id']}"),
            ("GET", f"/api/v2/workspaces/{workspace['id']}/current-state-version"),
            ("GET", f"/api/v2/state-versions/sv-{suffix}-1/download"),
            ("POST", f"/api/v2/workspaces/{workspace['id']}/actions/lock"),
            ("POST", "/api/v2/organizations/acme/workspaces"),
            ("GET", "/v1/states/app"),
            ("GET", "/v1/native/states/app")):
        reply = hosted.call(method, path, token)
        assert reply.status == 403, (method, path, reply.body)
    basic_reply = hosted.stub.state.request("GET", "/v1/states/app", headers=basic(
        hosted.acme.workspace_id, token))
    assert basic_reply.status == 403


def test_the_control_api_creates_workspaces_ahead_of_init(hosted: Hosted) -> None:
    """POST /v1/api/tenants/{t}/terraform-workspaces creates a tagged
    workspace in an environment, which its tokens then find by tag; bad
    fields are 400 naming them; an existing name is 422."""
    control = hosted.stub.control
    created = control.ok("POST", "/tenants/acme/terraform-workspaces", {
        "name": "net", "environment": "default", "tags": ["ci", "team=ops"]}, 201)
    assert (created["name"], created["tags"]) == ("net", ["ci", "team=ops"])
    assert created["state_path"] == f"{hosted.acme.prefix}/net"
    found = hosted.ok("GET", "/api/v2/organizations/acme/workspaces?search[tags]=ci",
                      hosted.acme.write)
    assert [w["attributes"]["name"] for w in found["data"]] == ["net"]
    listed = control.ok("GET", "/tenants/acme/terraform-workspaces?environment=default")
    assert [w["name"] for w in listed["terraform_workspaces"]] == ["net"]
    for document, field in (({"name": "default", "environment": "default"}, "name"),
                            ({"name": "a b", "environment": "default"}, "name"),
                            ({"name": "x", "environment": "default", "tags": "ci"}, "tags"),
                            ({"name": "x", "environment": "default", "tags": [" "]}, "tags"),
                            ({"name": "x"}, "environment"),
                            ({"name": "x", "environment": "default", "extra": 1}, "extra")):
        reply = control.call("POST", "/tenants/acme/terraform-workspaces", document)
        assert reply.status == 400 and reply.json()["error"]["field"] == field, document
    again = control.call("POST", "/tenants/acme/terraform-workspaces",
                         {"name": "net", "environment": "default"})
    assert again.status == 422


def test_a_revoked_token_is_refused(hosted: Hosted) -> None:
    """A revoked token is a JSON:API 401 on the lane."""
    reply = hosted.call("GET", "/api/v2/organizations/acme/workspaces", hosted.acme.revoked)
    assert reply.status == 401
    assert reply.json()["errors"][0]["status"] == "401"


def test_basic_credentials_with_the_wrong_username_are_forbidden(hosted: Hosted) -> None:
    """The TFE lane follows the HTTP lane's rule for Basic credentials."""
    reply = hosted.stub.state.request(
        "GET", "/api/v2/organizations/acme/workspaces",
        headers={"Authorization": "Basic " + base64.b64encode(
            f"ws_000000000000:{hosted.acme.write}".encode()).decode()})
    assert reply.status == 403
    raw = state_body(1)
    assert hosted.stub.state.request("POST", "/v1/states/x", body=raw, headers={
        **hosted.acme.auth(hosted.acme.write), **terraform_headers(raw)}).status == 200
