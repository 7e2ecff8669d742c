"""The pure parts of the TFE lane: the JSON:API documents clients send
(parsed or refused with a 4xx naming the pointer, never anything else), the
ids and naming rules, tags, grants, the lock the lane takes, outputs, and
the route templates of unimplemented routes; and, through the lane in
memory, bad input of every kind (a JSON:API 4xx, nothing stored, never a
500) and the whole route family under /api/v2 (property-based)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kilolock.core.errors import ChecksumMismatch, InvalidText, KilolockError, NotFound
from kilolock.core.model import DEFAULT_TENANT, OutputRow, Principal, StateKey
from kilolock.tfe import grants
from kilolock.tfe.errors import InvalidAttribute, InvalidDocument
from kilolock.tfe.locks import TFE_OPERATION, lane_of, owns, tfe_lock_info
from kilolock.tfe.model import JSON_PART, PENDING, STATE_PART, PendingVersion, Tag, TFEWorkspace
from kilolock.tfe.names import (
    InvalidName,
    check_workspace_name,
    new_pending_id,
    new_workspace_id,
    output_id,
    parse_output_id,
    parse_version_id,
    version_id,
    workspace_name_of,
)
from kilolock.tfe.outputs import output_of_state, view_of_row
from kilolock.tfe.requests import (
    parse_lock_reason,
    parse_state_version_create,
    parse_tag_bindings,
    parse_tags,
    parse_workspace_create,
    parse_workspace_update,
)
from kilolock.tfe.tags import WorkspaceFilter, merge_tags
from kilolock.web.tfe.lane import UNIMPLEMENTED_LOG, route_template
from tests.support.log_events import logged
from tests.support.stub_client import state_body
from tests.support.tfe_support import ORG, TFEStub, workspace_document

PARSERS = (parse_workspace_create, parse_workspace_update, parse_lock_reason, parse_tags,
           parse_tag_bindings, lambda body: parse_state_version_create(body, 10**6))


def doc(value: Any) -> bytes:
    return json.dumps(value).encode()


# -- documents in --------------------------------------------------------------


def test_workspace_creation_documents() -> None:
    """A creation names the workspace; tags come from the tags and
    tag-bindings relationships, in order."""
    parsed = parse_workspace_create(doc(workspace_document("app", ["web"], {"env": "prod"})))
    assert (parsed.name, parsed.tags) == ("app", (Tag("web"), Tag("env", "prod")))
    for document, pointer in (
            (workspace_document("default"), "/data/attributes/name"),
            (workspace_document("a/b"), "/data/attributes/name"),
            (workspace_document("a b"), "/data/attributes/name"),
            (workspace_document("tab\there"), "/data/attributes/name"),
            (workspace_document(".."), "/data/attributes/name"),
            (workspace_document("x" * 256), "/data/attributes/name"),
            (workspace_document(7), "/data/attributes/name"),
            ({"data": {"type": "workspaces", "attributes": {}}}, "/data/attributes/name"),
            (workspace_document("a", ["has space"]), "/data/relationships/tags/data/0/attributes"),
            ({"data": {"type": "workspaces", "attributes": {"name": "a"},
                       "relationships": {"tags": "x"}}}, "/data/relationships/tags")):
        with pytest.raises(InvalidAttribute) as refused:
            parse_workspace_create(doc(document))
        assert refused.value.pointer == pointer, document
    for body, pointer in ((b"{", ""), (b"[]", ""), (doc({"data": []}), "/data"),
                          (doc({"data": {"type": "runs"}}), "/data/type")):
        with pytest.raises(InvalidDocument) as malformed:
            parse_workspace_create(body)
        assert malformed.value.pointer == pointer
    # The text rules of every lane (kilolock.core.text): the rule's code,
    # and the value at fault by its JSON pointer.
    for body, rule, pointer in (
            (doc(workspace_document("nul\x00")), "nul_character", "/data/attributes/name"),
            (doc(workspace_document("\ud800")), "invalid_unicode", "/data/attributes/name"),
            (b"\xff", "invalid_unicode", None), (b"[" * 100_000, "too_deep", None)):
        with pytest.raises(InvalidText) as broken:
            parse_workspace_create(body)
        assert (broken.value.code, broken.value.pointer) == (rule, pointer)


def test_state_version_documents() -> None:
    """serial (an int64), md5 (32 hex) and the optional lineage, force,
    inline state (strict base64) and JSON outputs are checked."""
    raw = state_body(4)
    parsed = parse_state_version_create(doc({"data": {"type": "state-versions", "attributes": {
        "serial": 4, "md5": "A" * 32, "lineage": "l", "force": True,
        "state": base64.b64encode(raw).decode(), "json-state-outputs": "e30="}}}), 10**7)
    assert (parsed.serial, parsed.md5, parsed.lineage, parsed.state) == (4, "a" * 32, "l", raw)
    good = {"serial": 1, "md5": "0" * 32}
    for change, name in (({"serial": "1"}, "serial"), ({"serial": True}, "serial"),
                         ({"serial": -1}, "serial"), ({"serial": 2**63}, "serial"),
                         ({"serial": 1.5}, "serial"), ({"md5": "xyz"}, "md5"),
                         ({"md5": None}, "md5"), ({"lineage": 3}, "lineage"),
                         ({"force": "yes"}, "force"),
                         ({"state": "!!"}, "state"), ({"state": 5}, "state"),
                         ({"json-state-outputs": {}}, "json-state-outputs")):
        body = doc({"data": {"type": "state-versions", "attributes": {**good, **change}}})
        with pytest.raises(InvalidAttribute) as refused:
            parse_state_version_create(body, 10**6)
        assert refused.value.pointer == f"/data/attributes/{name}", change
    with pytest.raises(InvalidDocument):
        parse_state_version_create(doc({"data": {"type": "state-versions",
                                                 "attributes": good}}), 10)
    lone = doc({"data": {"type": "state-versions",
                         "attributes": {**good, "lineage": "\ud800"}}})
    with pytest.raises(InvalidText) as broken:
        parse_state_version_create(lone, 10**6)
    assert (broken.value.code, broken.value.pointer) == (
        "invalid_unicode", "/data/attributes/lineage")


def test_small_documents() -> None:
    """Updates, lock reasons, tags and tag bindings."""
    assert parse_workspace_update(doc({"data": {"type": "workspaces", "attributes": {
        "terraform-version": "1.15.5"}}})) is None
    assert parse_workspace_update(doc({"data": {"type": "workspaces", "attributes": {
        "name": "b"}}})) == "b"
    assert parse_lock_reason(b"") == ""
    assert parse_lock_reason(doc({"data": {"attributes": {"reason": "why"}}})) == "why"
    assert parse_lock_reason(doc({"data": {"attributes": {"reason": 5}}})) == ""
    with pytest.raises(InvalidDocument):
        parse_lock_reason(b"nope")
    assert parse_tags(doc({"data": [{"type": "tags", "attributes": {"name": "a"}}]})) == (
        Tag("a"),)
    assert parse_tag_bindings(doc({"data": [{"type": "tag-bindings", "attributes": {
        "key": "k", "value": ""}}]})) == (Tag("k"),)
    with pytest.raises(InvalidDocument):
        parse_tags(doc({"data": [{"type": "tag-bindings", "attributes": {"name": "a"}}]}))
    with pytest.raises(InvalidAttribute):
        parse_tags(doc({"data": [{"type": "tags", "attributes": {"name": "a,b"}}] * 1}))
    with pytest.raises(InvalidAttribute):
        parse_tags(doc({"data": [{"type": "tags", "attributes": {"name": f"t{i}"}}
                                 for i in range(101)]}))


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
              st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=20)
documents = st.one_of(
    json_values,
    st.fixed_dictionaries({"data": st.fixed_dictionaries(
        {"type": st.sampled_from(["workspaces", "state-versions", "tags", "x"])},
        optional={"attributes": st.dictionaries(st.sampled_from(
            ["name", "serial", "md5", "lineage", "state", "force", "reason", "key", "value"]),
            json_values, max_size=5), "relationships": json_values})}),
    st.fixed_dictionaries({"data": st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["tags", "tag-bindings"]),
         "attributes": st.dictionaries(st.sampled_from(["name", "key", "value"]),
                                       json_values, max_size=3)}), max_size=3)}))


@settings(max_examples=300, deadline=None)
@given(document=documents, garbage=st.binary(max_size=64), use_garbage=st.booleans())
def test_parsers_accept_or_refuse_with_a_4xx(document: Any, garbage: bytes,
                                             use_garbage: bool) -> None:
    """Whatever the body, every parser returns or raises a KilolockError of
    status 400 or 422 (never anything else)."""
    body = garbage if use_garbage else doc(document)
    for parse in PARSERS:
        try:
            parse(body)
        except KilolockError as error:
            assert error.status in (400, 422)


# -- ids, names, tags ----------------------------------------------------------------


def test_ids_round_trip_and_refuse_lookalikes() -> None:
    """Workspace and pending ids are random; version and output ids name
    their workspace and numbers and parse back; anything else is None."""
    workspace = new_workspace_id()
    assert workspace != new_workspace_id() and len(workspace) == 19
    assert len(new_pending_id()) == 27
    ref = parse_version_id(version_id(workspace, 12))
    assert ref is not None and (ref.workspace_id, ref.number) == (workspace, 12)
    out = parse_output_id(output_id(workspace, 3, 2))
    assert out is not None and (out.workspace_id, out.number, out.index) == (workspace, 3, 2)
    for text in ("sv-x-1", f"sv-{workspace[3:]}-0", f"sv-{workspace[3:]}-01",
                 f"wsout-{workspace[3:]}-1", new_pending_id(), "", "sv--1"):
        assert parse_version_id(text) is None and parse_output_id(text) is None


def test_workspace_names_and_the_states_they_are() -> None:
    """A name is a state name Terraform also accepts; a listing sees the
    one-segment states of a tenant, or the third segment under a scope."""
    assert check_workspace_name("app-1.prod_x") == "app-1.prod_x"
    for bad in ("default", "", "a/b", "a b", ".", "x\x7f", 3):
        with pytest.raises(InvalidName):
            check_workspace_name(bad)
    assert workspace_name_of("app", None) == "app"
    assert workspace_name_of("a/b/c", None) is None
    assert workspace_name_of("ws_1/env_1/app", "ws_1/env_1/") == "app"
    assert workspace_name_of("ws_1/env_2/app", "ws_1/env_1/") is None
    assert workspace_name_of("default", None) is None


def test_tags_merge_and_filter() -> None:
    """A plain tag never clears a value; filters combine."""
    assert merge_tags([Tag("env", "prod")], [Tag("env"), Tag("a"), Tag("env", "dev")]) == (
        Tag("env", "dev"), Tag("a"))
    workspace = TFEWorkspace("ws-x", StateKey(DEFAULT_TENANT, "api-prod"),
                             datetime(2026, 1, 1, tzinfo=UTC), (Tag("svc"), Tag("env", "p")))
    assert WorkspaceFilter(name="PROD", tags=("svc",)).keeps(workspace)
    assert not WorkspaceFilter(exclude_tags=("svc",)).keeps(workspace)
    assert WorkspaceFilter(wildcard="api-*").keeps(workspace)
    assert not WorkspaceFilter(wildcard="api-[p]*").keeps(workspace)
    assert WorkspaceFilter(bindings=(Tag("env", "p"), Tag("svc"))).keeps(workspace)
    assert not WorkspaceFilter(bindings=(Tag("env", "q"),)).keeps(workspace)


# -- grants, locks, outputs -------------------------------------------------------------


def test_claims_follow_the_grant_rule() -> None:
    """The right grant, before expiry, for a part not yet taken, with the
    announced MD5 (the raw state): anything else is NotFound, but a wrong MD5
    (after a right grant) is ChecksumMismatch."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    grant = grants.new_grant()
    assert len(base64.urlsafe_b64decode(grant + "=")) == 32
    pending = PendingVersion("sv-1", "ws-1", StateKey(DEFAULT_TENANT, "a"), 1, "l", "0" * 32,
                             "lock", "alice", grants.grant_hash(grant), now,
                             now + grants.GRANT_LIFETIME)
    right = grants.grant_hash(grant)
    grants.check_claim(pending, right, STATE_PART, "0" * 32, now)
    grants.check_claim(pending, right, JSON_PART, None, now)
    for args in ((None, right, STATE_PART, "0" * 32, now),
                 (pending, grants.grant_hash("x"), STATE_PART, "0" * 32, now),
                 (pending, right, STATE_PART, "0" * 32, now + grants.GRANT_LIFETIME),
                 (pending, right, "other", None, now)):
        with pytest.raises(NotFound):
            grants.check_claim(*args)  # type: ignore[arg-type]
    with pytest.raises(ChecksumMismatch):
        grants.check_claim(pending, right, STATE_PART, "1" * 32, now)
    from attrs import evolve
    with pytest.raises(NotFound):
        grants.check_claim(evolve(pending, status="uploading"), right, STATE_PART, "0" * 32,
                           now)
    assert evolve(pending, status=PENDING).status_at(now + timedelta(hours=1)) == "discarded"


def test_the_lock_the_lane_takes() -> None:
    """A fresh ID each time, who and when, the lane's operation; the lane
    recognises its own locks, and only its caller owns one."""
    alice = Principal(DEFAULT_TENANT, "alice", address="10.0.0.1")
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    first = tfe_lock_info(alice, "default/app", "Locked by Terraform\x00", now)
    second = tfe_lock_info(alice, "default/app", "", now)
    assert first.id != second.id
    body = json.loads(first.raw)
    assert (body["Who"], body["Operation"], body["Info"]) == (
        "alice@10.0.0.1", TFE_OPERATION, "Locked by Terraform")
    assert body["Created"] == "2026-01-02T03:04:05.000000Z"
    from kilolock.core.model import HeldLock, LockInfo
    held = HeldLock(first, now, "alice")
    assert lane_of(first) == "tfe" and owns(held, alice)
    assert not owns(held, Principal(DEFAULT_TENANT, "bob"))
    assert not owns(HeldLock(LockInfo.from_bytes(b'{"ID":"x"}'), now, "alice"), alice)


def test_outputs_as_the_api_shows_them() -> None:
    """Types are named from the cty type (or the value); a sensitive row has no
    value; one output is read out of a state by its index."""
    view = view_of_row(OutputRow("p", '["list","number"]', "[1]", False))
    assert (view.type_name, view.detailed_type, view.value) == ("array", ["list", "number"], [1])
    assert view_of_row(OutputRow("s", '"string"', None, True)).value is None
    assert view_of_row(OutputRow("d", None, '{"a":true}', False)).type_name == "object"
    raw = state_body(1, outputs={"a": {"value": 1, "type": "number"},
                                 "b": {"value": "x", "type": "string", "sensitive": True}})
    found = output_of_state(raw, 1)
    assert found is not None and (found.name, found.sensitive, found.value) == ("b", True, "x")
    assert output_of_state(raw, 2) is None and output_of_state(b"{", 0) is None


def test_route_templates_hide_names_and_ids() -> None:
    """Ids and names become {id}; words after actions/relationships stay."""
    assert route_template(b"/api/v2/runs/run-abc/actions/apply") == \
        "/api/v2/runs/{id}/actions/apply"
    assert route_template(b"/api/v2/organizations/acme/workspaces/app/vars?x=1") == \
        "/api/v2/organizations/{id}/workspaces/{id}/vars"
    assert route_template(b"/api/v2/" + b"runs/" * 20) == \
        "/api/v2/runs/{id}/runs/{id}/runs/{id}/runs/{id}/..."


# -- bad input through the lane ---------------------------------------------------------


def test_bad_input_is_a_jsonapi_4xx_and_stores_nothing() -> None:
    """Malformed documents, wrong types, bad names, 'default', oversize
    documents, unknown organizations: a JSON:API 4xx, no workspace created."""
    tfe = TFEStub()
    for body, status in ((b"{", 400), (b"\xff\xfe", 400), (b"[" * 50_000, 400),
                         (json.dumps({"data": {"type": "runs"}}).encode(), 400),
                         (json.dumps(workspace_document("default")).encode(), 422),
                         (json.dumps(workspace_document("a/b")).encode(), 422),
                         (json.dumps(workspace_document("nul\x00")).encode(), 400),
                         (json.dumps(workspace_document("\ud800")).encode(), 400),
                         (json.dumps(workspace_document("x" * 300)).encode(), 422),
                         (b'{"data": {"type": "workspaces", "attributes": {"name": "'
                          + b"x" * (1024 * 1024) + b'"}}}', 400)):
        reply = tfe.request("POST", f"{ORG}/workspaces", body=body,
                            headers={"Content-Type": "application/vnd.api+json"})
        assert reply.status == status, (body[:40], reply.body)
        assert reply.json()["errors"][0]["status"] == str(status)
    unknown = tfe.request("POST", "/api/v2/organizations/nope/workspaces",
                          workspace_document("app"))
    assert unknown.status == 404
    assert tfe.store.tfe_list_workspaces(DEFAULT_TENANT, None).result == []
    assert tfe.store.list_events(DEFAULT_TENANT).result == []


def test_an_oversize_body_is_a_jsonapi_413() -> None:
    """A body over the site's limit is refused before routing, in the lane's
    dialect under /api/v2 (and Kilolock's JSON elsewhere)."""
    tfe = TFEStub()
    tfe.site.site.max_body_bytes = 1000
    reply = tfe.request("POST", f"{ORG}/workspaces", body=b"x" * 2000)
    assert reply.status == 413
    assert reply.json()["errors"][0]["status"] == "413"
    assert reply.header(b"tfp-api-version") == b"2.5"
    other = tfe.request("POST", "/v1/states/app", body=b"x" * 2000)
    assert other.json()["error"]["code"] == "payload_too_large"


def test_unimplemented_routes_are_logged_once_per_template() -> None:
    """A route the lane does not serve (or a method it does not take) is the
    one 404, and is logged once per method and template."""
    tfe = TFEStub()
    with logged(UNIMPLEMENTED_LOG) as events:
        for path in ("/api/v2/runs/run-1", "/api/v2/runs/run-2", "/api/v2/runs/run-3"):
            assert tfe.request("GET", path).status == 404
        assert tfe.request("DELETE", "/api/v2/ping").status == 404
        assert tfe.request("GET", f"{ORG}/projects").status == 404
    routes = [event["tfe_route"] for event in events]
    assert routes == ["GET /api/v2/runs/{id}", "DELETE /api/v2/ping",
                      "GET /api/v2/organizations/{id}/projects"]


segments = st.one_of(
    st.sampled_from(["organizations", "default", "workspaces", "app", "actions", "lock",
                     "unlock", "force-unlock", "safe-delete", "state-versions",
                     "current-state-version", "current-state-version-outputs",
                     "state-version-outputs", "state-version-uploads", "state", "json-state",
                     "tag-bindings", "relationships", "tags", "entitlement-set", "ping",
                     "download", "ws-AAAAAAAAAAAAAAAA", "sv-AAAAAAAAAAAAAAAA-1", "..",
                     "%2F", "%00", "%ff", "", "x" * 300]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/?#"), max_size=12))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(segments, min_size=1, max_size=6),
       method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "LOCK"]),
       body=st.one_of(st.just(b""), st.binary(max_size=40),
                      st.just(json.dumps(workspace_document("app")).encode())))
def test_the_route_family_never_fails_unexpectedly(parts: list[str], method: str,
                                                   body: bytes) -> None:
    """Any path under /api/v2 with any method and body is answered below 500
    with TFP-API-Version (a JSON:API document whenever there is a body)."""
    from urllib.parse import quote
    tfe = TFEStub()
    tfe.create("app")
    path = "/api/v2/" + "/".join(quote(part, safe="%") for part in parts)
    reply = tfe.request(method, path, body=body or None)
    assert reply.status < 500, (method, path, reply.body)
    assert reply.header(b"tfp-api-version") == b"2.5"
    if reply.body and method != "HEAD" and not path.endswith("/download"):
        assert reply.header(b"content-type") == b"application/vnd.api+json"
        json.loads(reply.body)
