"""State operations on the native API (/v1/native/operations), in memory:
what each kind writes, the locks they take and respect on both lanes,
progress and cancellation, abandoned operations, atomic writes of two
states, and bad requests (never a 500).

The same operations against live servers on both stores, with the real
Terraform planning the result, are in test_state_operations_terraform.py.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet import task

from kilolock.core.errors import KilolockError
from kilolock.core.model import LockInfo, StateKey
from kilolock.core.text import MAX_JSON_DEPTH
from kilolock.stateops.model import RUNNING, OperationRecord, Owner
from kilolock.stateops.requests import parse_operation
from kilolock.stateops.runner import LEASE_SECONDS, RENEW_SECONDS, OperationRunner, operation_lock
from kilolock.tfe.locks import lane_of
from kilolock.tfstate.parse import parse_state
from tests.support.native_support import MONOLITH, NATIVE, PRINCIPALS, NativeSite, fired
from tests.support.stub_client import lock_body, state_body


@pytest.fixture
def site() -> NativeSite:
    built = NativeSite()
    assert built.put_state("mono", MONOLITH).status == 200
    return built


def started(site: NativeSite, document: Any, token: str = "ann") -> dict[str, Any]:
    reply = site.operation(document, token)
    assert reply.status == 202, reply
    assert reply.header(b"location") == f"{NATIVE}/operations/{reply.json()['id']}".encode()
    operation: dict[str, Any] = site.read_operation(reply.json()["id"], token)
    return operation


def test_a_move_writes_the_next_version_through_both_lanes(site: NativeSite) -> None:
    """mv: a new version with the serial + 1 and the same lineage, audited as
    state_operation naming the operation; the Terraform lane's GET returns
    it; the operation's lock was taken and released."""
    operation = started(site, {"kind": "mv", "state": "mono", "from": "terraform_data.old",
                               "to": "terraform_data.renamed"})
    assert operation["status"] == "succeeded", operation
    assert operation["progress"] == {"step": "done", "stepsDone": 5, "steps": 5}
    assert operation["result"]["moved"] == [{"from": "terraform_data.old",
                                             "to": "terraform_data.renamed"}]
    version = operation["result"]["versions"][0]
    before, after = parse_state(MONOLITH), parse_state(site.current("mono") or b"")
    assert (after.serial, after.lineage) == (before.serial + 1, before.lineage)
    assert version["number"] == 2 and version["serial"] == after.serial
    assert [v["kind"] for v in site.versions("mono")] == ["state_write", "state_operation"]
    events = site.request("GET", f"{NATIVE}/states/mono/-/events").json()["events"]
    kinds = [(e["kind"], e["detail"].get("operation")) for e in events[1:]]
    name = f"kl state mv ({operation['id']})"
    # The release names no operation of its own: it is its acquire's (the
    # event with the same lock ID).
    assert kinds == [("lock_acquire", name), ("state_operation", operation["id"]),
                     ("lock_release", None)]
    assert events[1]["lockId"] == events[3]["lockId"] is not None
    assert site.request("GET", f"{NATIVE}/states/mono/-/lock").json()["locked"] is False


def test_remove_split_and_move_between_states(site: NativeSite) -> None:
    """rm, split (new states: serial 1, a new lineage) and mv with toState
    into an existing state (its serial + 1, its lineage kept)."""
    removed = started(site, {"kind": "rm", "state": "mono",
                             "addresses": ["terraform_data.legacy", "module.app"]})
    assert removed["status"] == "succeeded"
    assert "terraform_data.legacy" in removed["result"]["removed"]
    split = started(site, {"kind": "split", "state": "mono", "parts": [
        {"module": "module.net", "state": "network"}]})
    assert split["status"] == "succeeded" and split["result"]["created"] == ["network"]
    network = parse_state(site.current("network") or b"")
    assert network.serial == 1 and network.lineage != parse_state(MONOLITH).lineage
    assert site.put_state("apps", state_body(4, lineage="apps-lineage")).status == 200
    moved = started(site, {"kind": "mv", "state": "mono", "from": "terraform_data.items",
                           "to": "terraform_data.items", "toState": "apps"})
    assert moved["status"] == "succeeded", moved
    apps = parse_state(site.current("apps") or b"")
    assert (apps.serial, apps.lineage) == (5, "apps-lineage")
    assert apps.projection is not None
    assert [r.address for r in apps.projection.resources] == [
        "terraform_data.example", "terraform_data.items[0]", "terraform_data.items[1]",
        "terraform_data.items[2]"]
    mono = parse_state(site.current("mono") or b"").projection
    assert mono is not None and not any(r.name == "items" for r in mono.resources)


@pytest.mark.parametrize(("token", "state", "to_state"), [
    ("ann", "mono", "mono"),
    ("scoped", "mono", "ws_a/env_1/mono"),
    ("scoped", "ws_a/env_1/mono", "mono"),
])
def test_a_move_into_its_own_state_is_a_move_within_it(token: str, state: str,
                                                       to_state: str) -> None:
    """toState naming the source state itself -- spelt the same, or as its
    one-segment name in a scoped token's workspace/environment and its full
    path -- is a move within that state (kl state mv S A B --to-state S is
    kl state mv S A B): one version, one lock, nothing created."""
    site = NativeSite()
    assert site.put_state("mono", MONOLITH, token=token).status == 200
    operation = started(site, {"kind": "mv", "state": state, "from": "terraform_data.old",
                               "to": "terraform_data.renamed", "toState": to_state}, token)
    assert operation["status"] == "succeeded", operation
    assert operation["request"]["toState"] is None
    assert operation["result"]["moved"] == [{"from": "terraform_data.old",
                                             "to": "terraform_data.renamed"}]
    assert [version["number"] for version in operation["result"]["versions"]] == [2]
    assert len(operation["locks"]) == 1 and "created" not in operation["result"]
    assert [name for name, _ in _listing(site, token)] == [
        operation["request"]["state"]]


def test_import_a_state_file(site: NativeSite) -> None:
    """import: the file as the next version (its serial raised above the
    current one when it is not); an older serial or an unrelated lineage is
    refused unless forced (Terraform's state push checks)."""
    lineage, serial = parse_state(MONOLITH).lineage, parse_state(MONOLITH).serial
    older = started(site, {"kind": "import", "state": "mono",
                           "stateFile": state_body(3, lineage=lineage).decode()})
    assert (older["status"], older["error"]["code"]) == ("failed", "serial_too_low")
    operation = started(site, {"kind": "import", "state": "mono",
                               "stateFile": state_body(serial, lineage=lineage).decode()})
    assert operation["status"] == "succeeded", operation
    imported = parse_state(site.current("mono") or b"")
    assert (imported.serial, imported.lineage) == (serial + 1, lineage)
    unrelated = started(site, {"kind": "import", "state": "mono",
                               "stateFile": state_body(99, lineage="other").decode()})
    assert unrelated["status"] == "failed"
    assert unrelated["error"]["code"] == "lineage_mismatch"
    forced = started(site, {"kind": "import", "state": "mono", "force": True,
                            "stateFile": state_body(99, lineage="other").decode()})
    assert forced["status"] == "succeeded"
    assert site.current("mono") == state_body(99, lineage="other")
    fresh = started(site, {"kind": "import", "state": "fresh",
                           "stateFile": state_body(7).decode()})
    assert fresh["status"] == "succeeded" and site.current("fresh") == state_body(7)


def test_a_terraform_lock_refuses_an_operation(site: NativeSite) -> None:
    """A state Terraform holds: 423 showing the holder, the operation
    recorded as failed, nothing written, Terraform's lock untouched."""
    held = lock_body("terraform-apply")
    assert site.lock("mono", held).status == 200
    reply = site.operation({"kind": "rm", "state": "mono",
                            "addresses": ["terraform_data.legacy"]})
    assert reply.status == 423
    error = reply.json()["error"]
    assert error["code"] == "locked" and error["lock"] == json.loads(held)
    operation = site.read_operation(error["operation"])
    assert operation["status"] == "failed" and operation["error"]["lock"]["ID"] == (
        "terraform-apply")
    assert len(site.versions("mono")) == 1
    assert site.lock("mono", lock_body("probe")).body == held


def test_an_operation_lock_refuses_terraform_with_a_printable_lockinfo(
        site: NativeSite) -> None:
    """While an operation works, Terraform's LOCK and write get 423 with a
    LockInfo Terraform prints: an ID, an Operation and Info naming the
    operation, a Created in RFC 3339 with a Z."""
    site.holds.hold("writing")
    operation = site.operation({"kind": "mv", "state": "mono", "from": "module.app",
                                "to": "module.application"}).json()
    refused = site.lock("mono", lock_body("terraform"))
    assert refused.status == 423
    info = LockInfo.from_bytes(refused.body)
    assert operation["id"] in info.operation and operation["id"] in json.loads(
        refused.body)["Info"]
    assert info.created is not None and json.loads(refused.body)["Created"].endswith("Z")
    assert info.id == operation["locks"][0]["lockId"]
    assert site.put_state("mono", state_body(99)).status == 423
    view = site.request("GET", f"{NATIVE}/states/mono/-/lock").json()
    assert (view["lock"]["lane"], view["lock"]["id"]) == ("operation", info.id)
    site.holds.release()
    assert site.read_operation(operation["id"])["status"] == "succeeded"
    assert site.lock("mono", lock_body("terraform")).status == 200
    view = site.request("GET", f"{NATIVE}/states/mono/-/lock").json()
    assert view["lock"]["lane"] == "http"


@pytest.mark.parametrize(("operation", "lane"), [
    ("kl state mv (op_5d0c2a7f1e9b4c3d2a1b0c9d)", "operation"),
    ("kl state import (op_00ff)", "operation"),
    ("locked through the TFE lane", "tfe"),
    ("OperationTypeApply", "http"),
    ("kl state mv (op_5d0c) and more", "http"),
    ("kl state mv (op_XYZ)", "http"),
    ("", "http"),
])
def test_which_lane_took_a_lock(operation: str, lane: str) -> None:
    """An operation's lock is told apart by its exact Operation; a
    Terraform LockInfo that only looks like one is Terraform's."""
    info = LockInfo.from_bytes(json.dumps({"ID": "x", "Operation": operation}).encode())
    assert lane_of(info) == lane


def test_cancelling_before_the_write_leaves_no_version(site: NativeSite) -> None:
    """Cancelled while held before its write: status cancelled, no version,
    the lock released, the split's new state never created; cancelling a
    finished operation is a 409."""
    site.holds.hold("writing")
    operation = site.operation({"kind": "split", "state": "mono", "parts": [
        {"module": "module.net", "state": "network"}]}).json()
    assert site.read_operation(operation["id"])["progress"]["step"] == "planning"
    cancelled = site.request("DELETE", f"{NATIVE}/operations/{operation['id']}")
    assert cancelled.status == 202 and cancelled.json()["cancelRequested"] is True
    site.holds.release()
    after = site.read_operation(operation["id"])
    assert after["status"] == "cancelled" and after["result"] is None
    assert len(site.versions("mono")) == 1 and site.current("network") is None
    assert site.request("GET", f"{NATIVE}/states/mono/-/lock").json()["locked"] is False
    assert site.request("GET", f"{NATIVE}/states/network").status == 404
    again = site.request("POST", f"{NATIVE}/operations/{operation['id']}/cancel")
    assert (again.status, again.json()["error"]["code"]) == (409, "operation_finished")


def _listing(site: NativeSite, token: str = "ann") -> list[tuple[str, int]]:
    """The caller's states as the state list shows them: (name, versionCount)."""
    states = site.request("GET", f"{NATIVE}/states", token=token).json()["states"]
    return [(state["name"], state["versionCount"]) for state in states]


def _events(site: NativeSite) -> list[tuple[str, str | None, str | None]]:
    """The audit trail: (kind, state, the operation a lock event names)."""
    events = site.request("GET", f"{NATIVE}/events?limit=1000").json()["events"]
    return [(e["kind"], e["state"], e["detail"].get("operation")) for e in events]


@pytest.mark.parametrize(("document", "code"), [
    ({"kind": "mv", "state": "typo-name", "from": "terraform_data.old",
      "to": "terraform_data.new"}, "version_not_found"),
    ({"kind": "rm", "state": "typo-name", "addresses": ["terraform_data.old"]},
     "version_not_found"),
    ({"kind": "mv", "state": "typo-name", "from": "terraform_data.old",
      "to": "terraform_data.old", "toState": "elsewhere"}, "version_not_found"),
    ({"kind": "split", "state": "typo-name", "parts": [{"module": "module.net",
                                                        "state": "network"}]},
     "version_not_found"),
    ({"kind": "split", "state": "mono", "parts": [{"module": "module.ghost",
                                                   "state": "network"}]},
     "address_not_in_state"),
    ({"kind": "mv", "state": "mono", "from": "terraform_data.ghost",
      "to": "terraform_data.ghost", "toState": "network"}, "address_not_in_state"),
    ({"kind": "import", "state": "fresh", "stateFile": "{\"version\": 4}"}, "invalid_state"),
])
def test_a_refused_operation_leaves_no_state_behind(site: NativeSite, document: Any,
                                                    code: str) -> None:
    """An operation that fails while it runs creates no state: the state
    list is exactly as before (no empty record of a misspelt state, of a
    split's or a move's new state), and the audit trail gains only the
    lock events of the states that existed (naming the operation), no
    event of a state that did not."""
    listed, before = _listing(site), _events(site)
    operation = started(site, document)
    assert (operation["status"], operation["error"]["code"]) == ("failed", code), operation
    assert _listing(site) == listed == [("mono", 1)]
    name = f"kl state {document['kind']} ({operation['id']})"
    existing = [("lock_acquire", "mono", name), ("lock_release", "mono", None)]
    mono_named = document["state"] == "mono"
    assert _events(site)[len(before):] == (existing if mono_named else [])
    assert [lock["state"] for lock in operation["locks"]] == (["mono"] if mono_named else [])


def test_a_state_written_while_the_operation_ran_refuses_its_write(
        site: NativeSite) -> None:
    """A split's new state (not locked: it did not exist) that Terraform
    writes while the split runs: the split fails (state_exists) writing
    nothing; Terraform's version stays; the source is unchanged."""
    site.holds.hold("writing")
    operation = site.operation({"kind": "split", "state": "mono", "parts": [
        {"module": "module.net", "state": "network"}]}).json()
    assert site.put_state("network", state_body(1)).status == 200
    site.holds.release()
    failed = site.read_operation(operation["id"])
    assert (failed["status"], failed["error"]["code"]) == ("failed", "state_exists")
    assert site.current("network") == state_body(1) and site.current("mono") == MONOLITH
    assert _listing(site) == [("mono", 1), ("network", 1)]


def test_a_lock_taken_on_a_new_state_while_the_operation_ran_refuses_its_write(
        site: NativeSite) -> None:
    """A move's new destination that Terraform locks while the move runs:
    the move fails (locked, naming Terraform's lock) writing nothing, and
    Terraform's lock stays."""
    site.holds.hold("writing")
    operation = site.operation({"kind": "mv", "state": "mono", "from": "module.net",
                                "to": "module.net", "toState": "network"}).json()
    held = lock_body("terraform-init")
    assert site.lock("network", held).status == 200
    site.holds.release()
    failed = site.read_operation(operation["id"])
    assert (failed["status"], failed["error"]["code"]) == ("failed", "locked")
    assert failed["error"]["lock"]["ID"] == "terraform-init"
    assert site.current("network") is None and site.current("mono") == MONOLITH
    assert site.lock("network", lock_body("probe")).body == held


def test_a_failure_between_the_two_writes_writes_neither(site: NativeSite,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         ) -> None:
    """A move between two states whose second write fails (injected after
    the first is prepared): neither state gets a version; locks released."""
    assert site.put_state("apps", state_body(4)).status == 200
    prepare = site.store._prepare_version
    calls: list[int] = []

    def failing(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected: the disk is full")
        return prepare(*args)

    monkeypatch.setattr(site.store, "_prepare_version", failing)
    operation = started(site, {"kind": "mv", "state": "mono", "from": "module.net",
                               "to": "module.net", "toState": "apps"})
    assert len(calls) == 2
    assert operation["status"] == "failed"
    assert operation["error"]["code"] == "internal_error"
    assert "disk" not in json.dumps(operation)
    assert [len(site.versions(name)) for name in ("mono", "apps")] == [1, 1]
    assert site.current("mono") == MONOLITH and site.current("apps") == state_body(4)
    for name in ("mono", "apps"):
        assert site.request("GET", f"{NATIVE}/states/{name}/-/lock").json()["locked"] is False


def test_an_abandoned_operation_fails_and_frees_its_locks(site: NativeSite) -> None:
    """A running operation whose process stopped renewing its lease: the
    next look at it (after the lease) marks it failed and releases its
    locks; before that it is running."""
    ann = PRINCIPALS["ann"]
    now = site.clock()
    info = operation_lock("op_dead", "rm", ann, now)
    assert fired(site.store.acquire_lock(StateKey("acme", "mono"), info, ann)) is True
    fired(site.store.create_operation(OperationRecord(
        id="op_dead", owner=Owner.of(ann), kind="rm", request="{}", status=RUNNING,
        created_at=now, updated_at=now, runner="another-process",
        lease_expires_at=now + timedelta(seconds=30), locks=(("mono", info.id),))))
    assert site.read_operation("op_dead")["status"] == "running"
    site.clock.advance(LEASE_SECONDS)
    abandoned = site.read_operation("op_dead")
    assert abandoned["status"] == "failed"
    assert abandoned["error"]["code"] == "operation_abandoned"
    assert site.request("GET", f"{NATIVE}/states/mono/-/lock").json()["locked"] is False


@pytest.mark.parametrize(("document", "field"), [
    ({"kind": "mv", "state": "mono", "from": "module.a", "to": "terraform_data.x"}, "to"),
    ({"kind": "mv", "state": "mono", "from": "a.b", "to": "c.b"}, "to"),
    ({"kind": "mv", "state": "mono", "from": "a.b[", "to": "a.c"}, "from"),
    ({"kind": "rm", "state": "mono", "addresses": []}, "addresses"),
    ({"kind": "rm", "state": "mono", "addresses": ["a.b", 3]}, "addresses[1]"),
    ({"kind": "rm", "state": "mono", "addresses": ["a.b"], "extra": 1}, "extra"),
    ({"kind": "split", "state": "mono", "parts": [{"module": "module.a", "state": "mono"}]},
     "parts[0].state"),
    ({"kind": "split", "state": "mono", "parts": [{"module": "terraform_data.old",
                                                   "state": "new"}]}, "parts[0].module"),
    ({"kind": "split", "state": "mono", "parts": [{"module": "module.net", "state": "a"},
                                                  {"module": "terraform_data.items[0]",
                                                   "state": "b"}]}, "parts[1].module"),
    ({"kind": "split", "state": "mono", "parts": [{"module": "module.net", "state": "a",
                                                   "to": "terraform_data.x"}]},
     "parts[0].to"),
    ({"kind": "split", "state": "mono", "parts": [{"module": "module.a", "state": "x"},
                                                  {"module": "module.a.module.b",
                                                   "state": "y"}]}, "parts[1].module"),
    ({"kind": "import", "state": "mono"}, "stateFile"),
    ({"kind": "import", "state": "mono", "stateFile": "{}", "upload": "up_x"}, "stateFile"),
    ({"kind": "import", "state": "mono", "stateFile": "{}", "force": "yes"}, "force"),
    ({"kind": "nope", "state": "mono"}, "kind"),
    ({"kind": "rm", "state": "a/b", "addresses": ["a.b"]}, "state"),
    ({"kind": "rm", "state": "..", "addresses": ["a.b"]}, "state"),
    ([], "body"),
])
def test_bad_requests_name_the_field(site: NativeSite, document: Any, field: str) -> None:
    """Every refused request is a 400 naming the field, and starts nothing:
    no operation, no lock event, no state."""
    events = _events(site)
    reply = site.operation(document)
    assert reply.status == 400, reply
    assert reply.json()["error"]["field"] == field
    assert len(site.versions("mono")) == 1
    assert _events(site) == events and _listing(site) == [("mono", 1)]


def test_who_may_start_and_read_operations(site: NativeSite) -> None:
    """A read-only token may not start one (403), a scoped token not outside
    its scope (403); no credentials: 401; an unknown id: 404."""
    document = {"kind": "rm", "state": "mono", "addresses": ["terraform_data.legacy"]}
    assert site.operation(document, "reader").status == 403
    assert site.operation({**document, "state": "ws_b/env_1/mono"}, "scoped").status == 403
    assert site.request("POST", f"{NATIVE}/operations", b"{}", token=None).status == 401
    missing = site.request("GET", f"{NATIVE}/operations/op_000000000000000000000000")
    assert (missing.status, missing.json()["error"]["code"]) == (404, "operation_not_found")
    wrong = site.request("PUT", f"{NATIVE}/operations")
    assert wrong.status == 405


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(
    st.binary(max_size=200),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20)),
                 lambda inner: st.one_of(st.lists(inner, max_size=4),
                                         st.dictionaries(st.sampled_from(
                                             ["kind", "state", "from", "to", "toState",
                                              "addresses", "parts", "module", "stateFile",
                                              "upload", "force", "x"]), inner, max_size=6)),
                 max_leaves=15).map(lambda doc: json.dumps(doc).encode())))
def test_any_body_is_an_answer_never_a_500(body: bytes) -> None:
    """Whatever the body: a 202, 4xx, never a 500."""
    site = NativeSite()
    site.put_state("mono", MONOLITH)
    reply = site.request("POST", f"{NATIVE}/operations", body,
                         headers={"Content-Type": "application/json"})
    assert reply.status in (202, 400, 403, 404, 409), reply
    if reply.status == 202:
        assert site.read_operation(reply.json()["id"])["status"] in ("succeeded", "failed")


#: Any character, NUL and unpaired surrogates included.
_ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
_MEMBERS = ["kind", "state", "from", "to", "toState", "addresses", "parts", "module",
            "stateFile", "upload", "force", "x"]
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), _ANY_TEXT,
              st.sampled_from(["rm", "mv", "split", "import", "mono", "module.net",
                               "terraform_data.old", "a.b["])),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.sampled_from(_MEMBERS), _ANY_TEXT),
                                            inner, max_size=5)),
    max_leaves=20)
_TEXT_RULES = {"too_deep", "not_finite", "nul_character", "invalid_unicode", "too_long"}


def _finite(document: Any) -> bool:
    """Whether JSON can write C{document} without NaN or Infinity."""
    try:
        json.dumps(document, allow_nan=False)
    except ValueError:
        return False
    return True


def _operation_case(document: Any, depth: int) -> tuple[bytes, tuple[str, str] | None]:
    """C{document} as JSON (NaN, Infinity and unpaired surrogates written as
    Python writes them) and, when it is an object and C{depth} passes the
    limit, the refusal it must get: its last member C{x} nests C{depth}
    levels, and is checked first (after the numbers, which decoding checks)."""
    if not isinstance(document, dict) or depth + 1 <= MAX_JSON_DEPTH:
        return json.dumps(document).encode(), None
    members = {k: v for k, v in document.items() if k != "x"}
    members["x"] = json.loads("[" * depth + "]" * depth)
    expected = ("too_deep", "x") if _finite(document) else ("not_finite", "body")
    return json.dumps(members).encode(), expected


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(
    st.binary(max_size=100).map(lambda raw: (raw, None)),
    st.tuples(st.one_of(_VALUES, st.dictionaries(st.sampled_from(_MEMBERS), _VALUES,
                                                 max_size=6)),
              st.sampled_from([0, 0, 0, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, 700])).map(
        lambda pair: _operation_case(*pair))))
def test_the_operation_parser_answers_a_4xx_naming_the_rule(
        case: tuple[bytes, tuple[str, str] | None]) -> None:
    """parse_operation, on any bytes or JSON (NUL, unpaired surrogates,
    non-finite numbers, nesting past the limit): a request, or a 400 that
    names its rule -- a text rule's own code, or invalid_field with the
    field -- never another exception.  A body nesting past the limit is
    too_deep, naming the member."""
    body, expected = case
    try:
        parse_operation(body)
    except KilolockError as error:
        assert error.status == 400, error
        if error.code == "invalid_field":
            assert error.details()["field"], error
        else:
            assert error.code in _TEXT_RULES, error
        if expected is not None:
            assert (error.code, error.details().get("field")) == expected
    else:
        assert expected is None


@pytest.mark.parametrize(("body", "code", "field"), [
    (b'{"kind": "rm", "state": "mo\\u0000no", "addresses": ["a.b"]}', "nul_character",
     "state"),
    (b'{"kind": "rm", "state": "mono", "addresses": ["a\\u0000.b"]}', "nul_character",
     "addresses"),
    (b'{"kind": "rm", "state": "mono", "addresses": ["a.b"], "x": ' + b"[" * 600
     + b"]" * 600 + b"}", "too_deep", "x"),
    (b'{"kind": "mv", "state": "mono", "from": "a.b", "to": "a.c", "toState": "\\ud800"}',
     "invalid_unicode", "toState"),
    (b'{"kind": "import", "state": "mono", "stateFile": "{}", "force": 1e400}', "not_finite",
     "force"),
    (b'{"kind": "import", "state": "mono", "stateFile": "{}", "force": NaN}', "not_finite",
     "body"),
    (b'{"kind": "rm", "state": "mono", "addresses": ["a.b"]}\xff', "invalid_unicode", "body"),
])
def test_text_rules_on_operation_bodies(site: NativeSite, body: bytes, code: str,
                                        field: str) -> None:
    """An operation body breaking a text rule is a 400 with the rule's code
    naming the member (as every JSON body of every lane), starting nothing."""
    events = _events(site)
    reply = site.request("POST", f"{NATIVE}/operations", body,
                         headers={"Content-Type": "application/json"})
    assert reply.status == 400, reply
    error = reply.json()["error"]
    assert (error["code"], error.get("field")) == (code, field), error
    assert _events(site) == events and _listing(site) == [("mono", 1)]


def test_a_running_operation_renews_its_lease() -> None:
    """While it runs, the operation's lease is renewed every RENEW_SECONDS on
    the runner's clock: long past its first lease it is still running (no
    sweep fails it); once finished it holds no lease."""
    ticks = task.Clock()

    def runner(store: Any, reactor: Any, **options: Any) -> OperationRunner:
        return OperationRunner(store, reactor, clock=ticks, **options)

    site = NativeSite(runner=runner)
    site.put_state("mono", MONOLITH)
    site.holds.hold("writing")
    operation = site.operation({"kind": "rm", "state": "mono",
                                "addresses": ["terraform_data.legacy"]}).json()
    owner = Owner.of(PRINCIPALS["ann"])
    start = site.clock()
    first = fired(site.store.find_operation(owner, operation["id"])).lease_expires_at
    assert first == start + timedelta(seconds=LEASE_SECONDS)
    for _ in range(6):
        site.clock.advance(RENEW_SECONDS)
        ticks.advance(RENEW_SECONDS)
    assert site.clock() > first
    assert site.read_operation(operation["id"])["status"] == "running"
    renewed = fired(site.store.find_operation(owner, operation["id"])).lease_expires_at
    assert renewed == site.clock() + timedelta(seconds=LEASE_SECONDS)
    site.holds.release()
    done = fired(site.store.find_operation(owner, operation["id"]))
    assert (done.status, done.lease_expires_at) == ("succeeded", None)
    assert ticks.getDelayedCalls() == []
