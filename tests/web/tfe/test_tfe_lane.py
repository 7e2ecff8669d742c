"""The TFE lane in memory (L{TFEStub}): discovery, organizations, workspaces,
tags, locks across both lanes, state versions, outputs, and every answer
held to go-tfe's decoding rules (C{jsonapi_rules})."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kilolock.core.events import LOCK_ACQUIRE, LOCK_FORCE_RELEASE
from kilolock.core.model import DEFAULT_TENANT, StateKey
from kilolock.tfe.locks import TFE_OPERATION
from kilolock.web.tfe.jsonapi import NOT_FOUND_BODY
from tests.support.jsonapi_rules import (
    ENTITLEMENTS,
    ORGANIZATION,
    STATE_VERSION,
    STATE_VERSION_OUTPUT,
    TAG,
    TAG_BINDING,
    WORKSPACE,
    check_document,
)
from tests.support.stub_client import lock_body, state_body, terraform_headers
from tests.support.tfe_support import ORG, TOKEN, TFEStub, bearer, url_path, version_document

OUTPUTS = {
    "greeting": {"value": "hi", "type": "string"},
    "ports": {"value": [80, 443], "type": ["list", "number"]},
    "secret": {"value": "hunter2", "type": "string", "sensitive": True},
}


@pytest.fixture
def tfe() -> TFEStub:
    return TFEStub()


def write_version(tfe: TFEStub, workspace_id: str, raw: bytes, serial: int) -> Any:
    """Lock, create a version with its bytes inline, unlock."""
    assert tfe.lock(workspace_id).status == 200
    created = tfe.ok("POST", f"/api/v2/workspaces/{workspace_id}/state-versions",
                     version_document(raw, serial, inline=True), 201)
    tfe.ok("POST", f"/api/v2/workspaces/{workspace_id}/actions/unlock")
    return created


# -- discovery, ping, organizations -------------------------------------------


def test_terraform_discovery_names_the_api_three_times(tfe: TFEStub) -> None:
    """/.well-known/terraform.json advertises tfe.v2, tfe.v2.1 and tfe.v2.2 at
    /api/v2/ and nothing else, without credentials."""
    reply = tfe.request("GET", "/.well-known/terraform.json", token=None)
    assert reply.status == 200
    assert reply.json() == {"tfe.v2": "/api/v2/", "tfe.v2.1": "/api/v2/",
                            "tfe.v2.2": "/api/v2/"}
    lanes = tfe.request("GET", "/.well-known/kilolock").json()["lanes"]
    assert {"name": "tfe", "version": "v2", "basePath": "/api/v2/",
            "terraformDiscovery": "/.well-known/terraform.json"} in lanes


def test_ping_and_every_answer_carry_the_api_version(tfe: TFEStub) -> None:
    """Ping needs no credentials; TFP-API-Version (2.5) is on every answer of
    the lane, errors included, and TFP-AppName never is."""
    for method, path, token in (("GET", "/api/v2/ping", None),
                                ("GET", f"{ORG}/entitlement-set", TOKEN),
                                ("GET", f"{ORG}/entitlement-set", None),
                                ("GET", "/api/v2/runs/run-1", TOKEN),
                                ("DELETE", "/api/v2/ping", TOKEN),
                                ("GET", "/api/v2/workspaces/a%2Fb", TOKEN)):
        reply = tfe.request(method, path, token=token)
        assert reply.header(b"tfp-api-version") == b"2.5", (method, path)
        assert reply.header(b"tfp-appname") is None
    assert tfe.request("GET", "/api/v2/ping", token=None).status == 204


def test_the_organization_is_the_tenant(tfe: TFEStub) -> None:
    """The caller's organization is listed, read and its entitlements say
    state storage without operations; another organization is the lane's one
    404, and no credentials are a JSON:API 401."""
    listing = tfe.ok("GET", "/api/v2/organizations")
    check_document(listing, ORGANIZATION, many=True)
    assert [org["id"] for org in listing["data"]] == ["default"]
    check_document(tfe.ok("GET", ORG), ORGANIZATION)
    entitlements = tfe.ok("GET", f"{ORG}/entitlement-set")
    check_document(entitlements, ENTITLEMENTS)
    assert entitlements["data"]["attributes"]["operations"] is False
    assert entitlements["data"]["attributes"]["state-storage"] is True
    other = tfe.request("GET", "/api/v2/organizations/acme/entitlement-set")
    assert (other.status, other.body) == (404, NOT_FOUND_BODY)
    anonymous = tfe.request("GET", f"{ORG}/entitlement-set", token=None)
    assert anonymous.status == 401
    assert anonymous.json()["errors"][0]["status"] == "401"
    assert anonymous.header(b"content-type") == b"application/vnd.api+json"


# -- workspaces -----------------------------------------------------------------


def test_create_read_by_name_and_id_in_local_mode(tfe: TFEStub) -> None:
    """A created workspace is local (no operations, version "latest"), has
    the caller's permissions with can-force-delete, and reads the same by
    name and by id; the relationship names its organization."""
    created = tfe.create("app", tags=["web"])
    check_document({"data": created}, WORKSPACE)
    attributes = created["attributes"]
    assert (attributes["name"], attributes["execution-mode"], attributes["operations"],
            attributes["terraform-version"], attributes["locked"]) == (
        "app", "local", False, "latest", False)
    assert attributes["tag-names"] == ["web"]
    assert attributes["permissions"]["can-force-delete"] is True
    assert attributes["permissions"]["can-queue-run"] is False
    assert created["relationships"]["organization"]["data"] == {"type": "organizations",
                                                                "id": "default"}
    by_name = tfe.ok("GET", f"{ORG}/workspaces/app")
    by_id = tfe.ok("GET", f"/api/v2/workspaces/{created['id']}")
    assert by_name["data"]["id"] == by_id["data"]["id"] == created["id"]
    check_document(by_id, WORKSPACE)


def test_a_patch_is_accepted_and_a_rename_refused(tfe: TFEStub) -> None:
    """PATCH with terraform-version (Terraform's, OpenTofu's) answers the
    workspace, version still "latest"; a new name is a 422."""
    created = tfe.create("app")
    patched = tfe.ok("PATCH", f"/api/v2/workspaces/{created['id']}", {"data": {
        "type": "workspaces", "attributes": {"terraform-version": "1.15.5"}}})
    assert patched["data"]["attributes"]["terraform-version"] == "latest"
    renamed = tfe.request("PATCH", f"/api/v2/workspaces/{created['id']}", {"data": {
        "type": "workspaces", "attributes": {"name": "other"}}})
    assert renamed.status == 422
    assert renamed.json()["errors"][0]["source"] == {"pointer": "/data/attributes/name"}


def test_an_http_lane_state_is_a_workspace(tfe: TFEStub) -> None:
    """A state written through /v1/states/NAME is the workspace NAME: listed,
    read by name, its current version the bytes written (one state, two
    lanes)."""
    raw = state_body(3)
    assert tfe.request("POST", "/v1/states/legacy", body=raw,
                       headers={**bearer(), **terraform_headers(raw)}).status == 200
    workspace = tfe.ok("GET", f"{ORG}/workspaces/legacy")["data"]
    current = tfe.ok("GET", f"/api/v2/workspaces/{workspace['id']}/current-state-version")
    check_document(current, STATE_VERSION)
    assert current["data"]["attributes"]["serial"] == 3
    download = tfe.request("GET", url_path(
        current["data"]["attributes"]["hosted-state-download-url"]))
    assert download.body == raw
    listed = tfe.ok("GET", f"{ORG}/workspaces")
    assert [w["attributes"]["name"] for w in listed["data"]] == ["legacy"]


def test_listing_filters_and_pages(tfe: TFEStub) -> None:
    """search[tags] keeps workspaces with every tag, search[exclude-tags]
    drops, search[name] is a substring, filter[tagged] matches bindings,
    and pages carry their pagination."""
    for name, tags in (("api-prod", ["svc", "prod"]), ("api-dev", ["svc"]),
                       ("db-prod", ["prod"]), ("misc", [])):
        tfe.create(name, tags)
    tfe.ok("PATCH", f"/api/v2/workspaces/{tfe.ok('GET', f'{ORG}/workspaces/misc')['data']['id']}"
           "/tag-bindings", {"data": [{"type": "tag-bindings",
                                       "attributes": {"key": "team", "value": "ops"}}]})

    def names(query: str) -> list[str]:
        listing = tfe.ok("GET", f"{ORG}/workspaces?{query}")
        check_document(listing, WORKSPACE, many=True)
        return [w["attributes"]["name"] for w in listing["data"]]

    assert names("search[tags]=svc,prod") == ["api-prod"]
    assert names("search[tags]=prod&search[exclude-tags]=svc") == ["db-prod"]
    assert names("search[name]=API") == ["api-dev", "api-prod"]
    assert names("search[wildcard-name]=*-prod") == ["api-prod", "db-prod"]
    assert names("filter[tagged][0][key]=team&filter[tagged][0][value]=ops") == ["misc"]
    assert names("filter[tagged][0][key]=team&filter[tagged][0][value]=dev") == []
    second = tfe.ok("GET", f"{ORG}/workspaces?page[size]=3&page[number]=2")
    assert [w["attributes"]["name"] for w in second["data"]] == ["misc"]
    assert second["meta"]["pagination"] == {
        "current-page": 2, "prev-page": 1, "next-page": None, "total-pages": 2,
        "total-count": 4, "page-size": 3}
    assert tfe.request("GET", f"{ORG}/workspaces?page[size]=1000").status == 400


def test_tags_and_tag_bindings(tfe: TFEStub) -> None:
    """Tags added through relationships/tags and tag-bindings merge; both
    listings decode."""
    created = tfe.create("app", tags=["web"])
    base = f"/api/v2/workspaces/{created['id']}"
    assert tfe.request("POST", f"{base}/relationships/tags", {"data": [
        {"type": "tags", "attributes": {"name": "blue"}}]}).status == 204
    bindings = tfe.ok("PATCH", f"{base}/tag-bindings", {"data": [
        {"type": "tag-bindings", "attributes": {"key": "env", "value": "prod"}}]})
    assert [(b["attributes"]["key"], b["attributes"]["value"]) for b in bindings["data"]] == [
        ("web", ""), ("blue", ""), ("env", "prod")]
    for resource in tfe.ok("GET", f"{base}/tag-bindings")["data"]:
        check_document({"data": resource}, TAG_BINDING)
    tags = tfe.ok("GET", f"{base}/relationships/tags")["data"]
    for resource in tags:
        check_document({"data": resource}, TAG)
    assert [tag["attributes"]["name"] for tag in tags] == ["web", "blue", "env"]


def test_delete_and_safe_delete(tfe: TFEStub) -> None:
    """Safe-delete refuses a workspace that manages resources (409, nothing
    deleted) and a locked one; DELETE (force) deletes it with its state, whose
    events stay; an empty workspace safe-deletes."""
    created = tfe.create("app")
    write_version(tfe, created["id"], state_body(1), 1)
    refused = tfe.request("POST", f"{ORG}/workspaces/app/actions/safe-delete")
    assert refused.status == 409
    assert tfe.request("GET", "/v1/states/app", headers=bearer()).status == 200
    assert tfe.lock(created["id"]).status == 200
    locked = tfe.request("DELETE", f"{ORG}/workspaces/app")
    assert locked.status == 409 and "locked" in locked.json()["errors"][0]["detail"]
    tfe.ok("POST", f"/api/v2/workspaces/{created['id']}/actions/unlock")
    assert tfe.request("DELETE", f"{ORG}/workspaces/app").status == 204
    assert tfe.request("GET", f"{ORG}/workspaces/app").status == 404
    assert tfe.request("GET", "/v1/states/app", headers=bearer()).status == 404
    kinds = [event.kind for event in tfe.store.list_events(DEFAULT_TENANT).result]
    assert kinds[-2:] == ["state_delete", "tfe_workspace_delete"]
    tfe.create("empty")
    assert tfe.request("POST", f"{ORG}/workspaces/empty/actions/safe-delete").status == 204
    assert tfe.request("GET", f"{ORG}/workspaces/empty").status == 404


# -- one lock across both lanes ------------------------------------------------------


def test_a_tfe_lock_blocks_the_http_lane_with_a_printable_lockinfo(tfe: TFEStub) -> None:
    """A TFE-lane lock makes LOCK on /v1/states/NAME answer 423 with a
    LockInfo naming who, when and "locked through the TFE lane"; a second
    TFE lock is 409, by the same caller too; unlock releases it."""
    created = tfe.create("app")
    locked = tfe.lock(created["id"])
    assert locked.json()["data"]["attributes"]["locked"] is True
    body = lock_body("http-lock")
    conflict = tfe.request("LOCK", "/v1/states/app", body=body,
                           headers={**bearer(), **terraform_headers(body)})
    assert conflict.status == 423
    info = json.loads(conflict.body)
    assert info["Operation"] == TFE_OPERATION
    assert info["Who"].startswith("static-token")
    assert info["Created"].endswith("Z") and info["Path"] == "default/app"
    again = tfe.lock(created["id"])
    assert again.status == 409
    tfe.ok("POST", f"/api/v2/workspaces/{created['id']}/actions/unlock")
    assert tfe.request("LOCK", "/v1/states/app", body=body,
                       headers={**bearer(), **terraform_headers(body)}).status == 200


def test_an_http_lane_lock_blocks_the_tfe_lane(tfe: TFEStub) -> None:
    """An HTTP-lane holder makes actions/lock 409; TFE unlock does not release
    it (409 "is locked by User"); force-unlock does, audited as forced."""
    created = tfe.create("app")
    body = lock_body("http-lock", who="bob@ci")
    assert tfe.request("LOCK", "/v1/states/app", body=body,
                       headers={**bearer(), **terraform_headers(body)}).status == 200
    assert tfe.lock(created["id"]).status == 409
    unlock = tfe.request("POST", f"/api/v2/workspaces/{created['id']}/actions/unlock")
    assert unlock.status == 409
    assert "is locked by User bob@ci" in unlock.json()["errors"][0]["detail"]
    forced = tfe.ok("POST", f"/api/v2/workspaces/{created['id']}/actions/force-unlock")
    assert forced["data"]["attributes"]["locked"] is False
    again = tfe.request("POST", f"/api/v2/workspaces/{created['id']}/actions/force-unlock")
    assert again.status == 409
    events = tfe.store.list_events(DEFAULT_TENANT).result
    assert [e.kind for e in events if e.kind.startswith("lock")] == [LOCK_ACQUIRE,
                                                                   LOCK_FORCE_RELEASE]
    native = tfe.ok("GET", "/v1/native/states/app/-/lock", headers=bearer())
    assert native["lock"] is None


def test_the_http_lane_force_unlocks_a_tfe_lock(tfe: TFEStub) -> None:
    """An UNLOCK without a lock ID on the HTTP lane releases a TFE-lane lock,
    audited as a forced release; the TFE holder's unlock then answers 409."""
    created = tfe.create("app")
    assert tfe.lock(created["id"]).status == 200
    forced = tfe.request("UNLOCK", "/v1/states/app", body=b"", headers=bearer())
    assert forced.status == 200
    kinds = [event.kind for event in tfe.store.list_events(DEFAULT_TENANT).result]
    assert kinds[-2:] == [LOCK_ACQUIRE, LOCK_FORCE_RELEASE]
    again = tfe.request("POST", f"/api/v2/workspaces/{created['id']}/actions/unlock")
    assert again.status == 409


def test_kl_lock_status_tells_the_lanes_apart(tfe: TFEStub) -> None:
    """The native lock document (what kl lock status prints) names the lane."""
    created = tfe.create("app")
    tfe.lock(created["id"])
    lock = tfe.ok("GET", "/v1/native/states/app/-/lock", token=TOKEN)["lock"]
    assert (lock["lane"], lock["operation"]) == ("tfe", TFE_OPERATION)


# -- state versions and outputs ---------------------------------------------------


def test_writes_need_the_writers_own_tfe_lock(tfe: TFEStub) -> None:
    """Creating a state version without the lock, or under an HTTP-lane lock,
    is 409 and stores nothing."""
    created = tfe.create("app")
    path = f"/api/v2/workspaces/{created['id']}/state-versions"
    raw = state_body(1)
    assert tfe.request("POST", path, version_document(raw, 1, inline=True)).status == 409
    body = lock_body("http-lock")
    tfe.request("LOCK", "/v1/states/app", body=body,
                headers={**bearer(), **terraform_headers(body)})
    assert tfe.request("POST", path, version_document(raw, 1)).status == 409
    assert tfe.store.read_current(StateKey(DEFAULT_TENANT, "app")).result is None


def test_inline_versions_follow_the_serial_rule(tfe: TFEStub) -> None:
    """The legacy inline state is stored byte for byte; the same serial with
    other bytes is 409 (at creation, before any upload URL); a replay of the
    stored bytes is fine; a lower serial (push -force) is a new version."""
    created = tfe.create("app")
    first = state_body(5)
    answer = write_version(tfe, created["id"], first, 5)
    check_document(answer, STATE_VERSION)
    assert answer["data"]["attributes"]["status"] == "finalized"
    assert tfe.lock(created["id"]).status == 200
    path = f"/api/v2/workspaces/{created['id']}/state-versions"
    conflict = tfe.request("POST", path, version_document(state_body(5, lineage="x"), 5))
    assert conflict.status == 409
    assert tfe.request("POST", path, version_document(first, 5, inline=True)).status == 201
    older = state_body(2)
    assert tfe.request("POST", path, version_document(older, 2, inline=True)).status == 201
    assert tfe.store.read_current(StateKey(DEFAULT_TENANT, "app")).result == older
    versions = tfe.store.list_versions(StateKey(DEFAULT_TENANT, "app")).result
    assert [v.serial for v in versions] == [5, 2]


def test_outputs_carry_detailed_types_and_withhold_sensitive_values(tfe: TFEStub) -> None:
    """current-state-version-outputs lists every output with its detailed-type,
    a sensitive value null; state-version-outputs/:id reveals it; the
    ?include=outputs of tfe_outputs holds workspace-outputs."""
    created = tfe.create("app")
    write_version(tfe, created["id"], state_body(1, outputs=OUTPUTS), 1)
    listing = tfe.ok("GET", f"/api/v2/workspaces/{created['id']}/current-state-version-outputs")
    check_document(listing, STATE_VERSION_OUTPUT, many=True)
    shown = {o["attributes"]["name"]: o["attributes"] for o in listing["data"]}
    assert shown["ports"]["detailed-type"] == ["list", "number"]
    assert (shown["ports"]["type"], shown["ports"]["value"]) == ("array", [80, 443])
    assert (shown["secret"]["sensitive"], shown["secret"]["value"]) == (True, None)
    secret_id = next(o["id"] for o in listing["data"] if o["attributes"]["name"] == "secret")
    revealed = tfe.ok("GET", f"/api/v2/state-version-outputs/{secret_id}")
    check_document(revealed, STATE_VERSION_OUTPUT)
    assert revealed["data"]["attributes"]["value"] == "hunter2"
    included = tfe.ok("GET", f"{ORG}/workspaces/app?include=outputs")
    check_document(included, WORKSPACE)
    assert {o["attributes"]["name"]: o["attributes"]["value"]
            for o in included["included"]} == {"greeting": "hi", "ports": [80, 443],
                                               "secret": None}


def test_unknown_and_foreign_ids_answer_the_same_bytes(tfe: TFEStub) -> None:
    """Every unknown id -- workspace, state version, output, upload -- answers
    the lane's one 404 document."""
    created = tfe.create("app")
    suffix = created["id"].removeprefix("ws-")
    for path in ("/api/v2/workspaces/ws-AAAAAAAAAAAAAAAA",
                 "/api/v2/workspaces/not-an-id/current-state-version",
                 f"/api/v2/state-versions/sv-{suffix}-9",
                 f"/api/v2/state-versions/sv-{suffix}-9/download",
                 "/api/v2/state-versions/sv-AAAAAAAAAAAAAAAAAAAAAAAA",
                 f"/api/v2/state-version-outputs/wsout-{suffix}-1-0",
                 f"{ORG}/workspaces/missing"):
        reply = tfe.request("GET", path)
        assert (reply.status, reply.body) == (404, NOT_FOUND_BODY), path


ENVELOPE = json.dumps({
    "serial": 4, "lineage": "5a1c7f3e-0000-4000-8000-00000000000e",
    "meta": {"key_provider.pbkdf2.main": "eyJzYWx0IjoiIn0="},
    "encrypted_data": "c2VjcmV0IGJ5dGVz", "encryption_version": "v0"}).encode()


def test_an_opentofu_envelope_is_stored_opaque(tfe: TFEStub) -> None:
    """An encrypted envelope uploaded through the lane is stored byte for
    byte and downloaded as is; its outputs cannot be read (409) and it is
    never safe-deleted (the server cannot tell what it manages)."""
    created = tfe.create("sealed")
    write_version(tfe, created["id"], ENVELOPE, 4)
    current = tfe.ok("GET", f"/api/v2/workspaces/{created['id']}/current-state-version")
    download = tfe.request("GET", url_path(
        current["data"]["attributes"]["hosted-state-download-url"]))
    assert download.body == ENVELOPE
    outputs = tfe.request("GET", f"/api/v2/workspaces/{created['id']}/"
                          "current-state-version-outputs")
    assert outputs.status == 409 and "encrypted" in outputs.json()["errors"][0]["detail"]
    assert tfe.request("POST", f"{ORG}/workspaces/sealed/actions/safe-delete").status == 409
