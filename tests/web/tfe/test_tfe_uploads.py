"""Upload capabilities of the TFE lane (in memory, on a task.Clock): the
upload URLs a pending state version hands out are the only credential of
the PUTs go-tfe sends, so each is single use, expiring, bound to its
pending version, to the MD5 announced and to its creator still holding the
lock; and nothing refused is ever stored."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kilolock.core.events import STATE_WRITE
from kilolock.core.model import DEFAULT_TENANT, StateKey
from kilolock.tfe.grants import GRANT_LIFETIME
from kilolock.web.tfe.jsonapi import NOT_FOUND_BODY
from tests.support.jsonapi_rules import STATE_VERSION, check_document
from tests.support.stub_client import lock_body, state_body, terraform_headers
from tests.support.tfe_support import TFEStub, bearer, url_path, version_document

APP = StateKey(DEFAULT_TENANT, "app")


@pytest.fixture
def tfe() -> TFEStub:
    return TFEStub()


def announce(tfe: TFEStub, raw: bytes, serial: int, lock: bool = True,
             **document: Any) -> tuple[dict[str, Any], str, str]:
    """Create the workspace app (if needed), lock it, announce a version:
    the pending version and its two upload paths."""
    found = tfe.request("GET", "/api/v2/organizations/default/workspaces/app")
    workspace = found.json()["data"] if found.status == 200 else tfe.create("app")
    if lock:
        assert tfe.lock(workspace["id"]).status == 200
    pending = tfe.ok("POST", f"/api/v2/workspaces/{workspace['id']}/state-versions",
                     version_document(raw, serial, **document), 201)["data"]
    attributes = pending["attributes"]
    return (pending, url_path(attributes["hosted-state-upload-url"]),
            url_path(attributes["hosted-json-state-upload-url"]))


def put(tfe: TFEStub, path: str, body: bytes) -> Any:
    """A PUT exactly as go-tfe sends it to an upload URL: no credentials."""
    return tfe.request("PUT", path, body=body, token=None,
                       headers={"Content-Type": "application/octet-stream"})


def writes(tfe: TFEStub) -> int:
    return sum(1 for event in tfe.store.list_events(DEFAULT_TENANT).result
               if event.kind == STATE_WRITE)


def test_upload_makes_the_version_current_once(tfe: TFEStub) -> None:
    """The pending version becomes current when its bytes arrive (with its
    projection and one audit event), is then finalized; the JSON state is
    taken and not kept; each URL works once; the grant has 256 bits."""
    raw = state_body(1, outputs={"x": {"value": 1, "type": "number"}})
    pending, state_url, json_url = announce(tfe, raw, 1)
    check_document({"data": pending}, STATE_VERSION)
    assert pending["attributes"]["status"] == "pending"
    assert tfe.store.read_current(APP).result is None
    grant = state_url.split("grant=", 1)[1]
    assert len(grant) >= 43  # 32 random bytes, URL-safe base64
    assert put(tfe, json_url, b'{"format_version":"1.0"}').status == 200
    assert put(tfe, state_url, raw).status == 200
    assert tfe.store.read_current(APP).result == raw
    assert tfe.store.get_projection(APP).result.outputs[0].name == "x"
    assert writes(tfe) == 1
    read_document = tfe.ok("GET", f"/api/v2/state-versions/{pending['id']}")
    check_document(read_document, STATE_VERSION)
    read = read_document["data"]["attributes"]
    assert read["status"] == "finalized"
    assert tfe.request("GET", url_path(read["hosted-state-download-url"])).body == raw
    for path, body in ((state_url, raw), (json_url, b"{}")):
        again = put(tfe, path, body)
        assert (again.status, again.body) == (404, NOT_FOUND_BODY)
    assert writes(tfe) == 1
    assert b"format_version" not in json.dumps(
        [event.detail for event in tfe.store.list_events(DEFAULT_TENANT).result]).encode()


def test_a_grant_expires(tfe: TFEStub) -> None:
    """After its lifetime (10 minutes) the URL answers 404, nothing is stored,
    and the pending version reads as discarded."""
    raw = state_body(1)
    pending, state_url, _ = announce(tfe, raw, 1)
    assert GRANT_LIFETIME.total_seconds() <= 600
    tfe.clock.advance(GRANT_LIFETIME.total_seconds())
    refused = put(tfe, state_url, raw)
    assert (refused.status, refused.body) == (404, NOT_FOUND_BODY)
    assert tfe.store.read_current(APP).result is None
    status = tfe.ok("GET", f"/api/v2/state-versions/{pending['id']}")["data"]
    assert status["attributes"]["status"] == "discarded"


def test_bytes_with_another_md5_are_refused(tfe: TFEStub) -> None:
    """Bytes whose MD5 is not the announced one are a 400 and not stored; the
    announced bytes are still taken afterwards."""
    raw = state_body(1)
    _, state_url, _ = announce(tfe, raw, 1)
    refused = put(tfe, state_url, state_body(1, lineage="x"))
    assert refused.status == 400
    assert refused.header(b"content-type") == b"application/vnd.api+json"
    assert tfe.store.read_current(APP).result is None
    assert put(tfe, state_url, raw).status == 200
    assert tfe.store.read_current(APP).result == raw


def test_a_lock_lost_meanwhile_refuses_the_bytes(tfe: TFEStub) -> None:
    """Force-unlocked (and locked again by another lane) between announcement
    and upload: the PUT is refused (409), nothing is stored, the version is
    discarded and its URL dead."""
    raw = state_body(1)
    pending, state_url, _ = announce(tfe, raw, 1)
    workspace = tfe.ok("GET", "/api/v2/organizations/default/workspaces/app")["data"]
    tfe.ok("POST", f"/api/v2/workspaces/{workspace['id']}/actions/force-unlock")
    body = lock_body("other-holder")
    tfe.request("LOCK", "/v1/states/app", body=body,
                headers={**bearer(), **terraform_headers(body)})
    refused = put(tfe, state_url, raw)
    assert refused.status == 409
    assert tfe.store.read_current(APP).result is None
    assert tfe.ok("GET", f"/api/v2/state-versions/{pending['id']}")[
        "data"]["attributes"]["status"] == "discarded"
    assert put(tfe, state_url, raw).status == 404


def test_unlocked_after_announcement_refuses_the_bytes(tfe: TFEStub) -> None:
    """Unlocked (and not locked again) before the bytes came: 409, nothing stored."""
    raw = state_body(1)
    _, state_url, _ = announce(tfe, raw, 1)
    workspace = tfe.ok("GET", "/api/v2/organizations/default/workspaces/app")["data"]
    tfe.ok("POST", f"/api/v2/workspaces/{workspace['id']}/actions/unlock")
    assert put(tfe, state_url, raw).status == 409
    assert tfe.store.read_current(APP).result is None


def test_a_grant_works_for_its_own_version_only(tfe: TFEStub) -> None:
    """A grant presented for another pending version, a made-up grant, or no
    grant: the same 404, nothing stored."""
    raw = state_body(1)
    first, first_url, _ = announce(tfe, raw, 1)
    second, second_url, _ = announce(tfe, raw, 1, lock=False)
    grant = first_url.split("grant=", 1)[1]
    other = second_url.split("?", 1)[0] + f"?grant={grant}"
    for path in (other, first_url.split("?", 1)[0], first_url.split("=")[0] + "=forged"):
        reply = put(tfe, path, raw)
        assert (reply.status, reply.body) == (404, NOT_FOUND_BODY)
    assert tfe.store.read_current(APP).result is None
    assert first["id"] != second["id"]


def test_a_refused_state_discards_the_version(tfe: TFEStub) -> None:
    """Bytes that match the MD5 but are no state (or break the serial rule)
    are refused, stored nowhere, and the version is discarded."""
    garbage = b"not a state"
    pending, state_url, _ = announce(tfe, garbage, 1)
    assert put(tfe, state_url, garbage).status == 400
    assert tfe.store.read_current(APP).result is None
    assert tfe.ok("GET", f"/api/v2/state-versions/{pending['id']}")[
        "data"]["attributes"]["status"] == "discarded"
