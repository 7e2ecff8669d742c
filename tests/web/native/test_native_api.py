"""The KL-native lane (/v1/native), resource by resource, in memory.

Routes, status codes and JSON shapes; rollback; the tenant rules (a foreign
state looks missing, byte for byte; a scoped token is confined to its
workspace/environment); sensitive values never leave the server.  The same
routes against a live server on both stores are exercised through `kl`
(test_kl.py).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from attrs import evolve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kilolock.auth.portal import build_portal
from kilolock.core.audit import event_hash
from kilolock.core.events import STATE_ROLLBACK, AuditEvent
from kilolock.core.model import DEFAULT_TENANT, Principal, parse_created
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.site import build_root
from tests.support.native_support import TokenTable
from tests.support.state_samples import ENVELOPE, LINEAGE, generation
from tests.support.stub_client import SiteClient, StubClient, lock_body

NATIVE = "/v1/native"


ACME = Principal("acme", "ann")
GLOBEX = Principal("globex", "gus")
ACME_SCOPED = Principal("acme", "ci", workspace_id="ws_a", env_public_id="env_1")
ACME_READER = Principal("acme", "dash", scope="read", workspace_id="ws_a",
                        env_public_id="env_1")
#: Basic credentials whose username is not the token's workspace.
ACME_MISNAMED = Principal("acme", "ci", workspace_id="ws_a", env_public_id="env_1",
                          basic_username="ws_b")
TOKENS = {"acme": ACME, "globex": GLOBEX, "scoped": ACME_SCOPED, "reader": ACME_READER,
          "misnamed": ACME_MISNAMED}


class Client(StubClient):
    """A StubClient whose requests carry C{token} as a Bearer token."""

    def __init__(self, store: MemoryStateStore | None = None, token: str | None = None,
                 table: bool = False) -> None:
        super().__init__(store)
        if table:
            self.site = SiteClient(build_root(self.store, build_portal(TokenTable(TOKENS)),
                                              reactor=None))
        self.token = token

    def as_(self, token: str) -> Client:
        other = Client.__new__(Client)
        other.__dict__.update(self.__dict__)
        other.token = token
        return other

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Any:
        headers = dict(headers or {})
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return super().request(method, path, body=body, headers=headers)

    def json_get(self, path: str, status: int = 200) -> Any:
        reply = self.get(path)
        assert reply.status == status, (reply.status, reply.body)
        assert reply.header(b"content-type") == b"application/json"
        return reply.json()

    def rollback(self, path: str, version: Any, query: str = "") -> Any:
        body = json.dumps({"version": version}).encode()
        return self.request("POST", f"{NATIVE}/states/{path}/-/rollback{query}", body=body,
                            headers={"Content-Type": "application/json"})


@pytest.fixture
def client() -> Client:
    return Client()


def write(client: Client, name: str, body: bytes, query: str = "") -> None:
    reply = client.post(f"/v1/states/{name}{query}", body)
    assert reply.status == 200, reply.body


def history(client: Client, name: str = "app") -> list[dict[str, Any]]:
    versions: list[dict[str, Any]] = client.json_get(
        f"{NATIVE}/states/{name}/-/versions")["versions"]
    return versions


# -- the lane and its listings ---------------------------------------------------


def test_lane_document_needs_no_credentials() -> None:
    """GET /v1/native names the lane even without credentials (static mode)."""
    client = Client(StubClient(auth_token="sekrit").store)
    client.site = StubClient(client.store, auth_token="sekrit").site
    reply = client.get(NATIVE)
    assert reply.status == 200
    assert reply.json() == {"lane": "kilolock-native", "version": "v1", "basePath": NATIVE}
    assert client.get(f"{NATIVE}/states").status == 401


def test_discovery_advertises_the_native_lane_unencoded(client: Client) -> None:
    """The discovery document lists the native lane after the HTTP lane (the
    TFE lane last), paths plain."""
    document = client.get("/.well-known/kilolock").json()
    http, native, tfe = document["lanes"]
    assert (http["name"], tfe["name"]) == ("terraform-http", "tfe")
    assert (native["name"], native["version"], native["basePath"]) == (
        "kilolock-native", "v1", NATIVE)
    assert native["statesPath"] == NATIVE + "/states"
    assert native["subresourceSegment"] == "-"
    for key in ("basePath", "statesPath", "resourcesPath", "eventsPath"):
        assert "%" not in native[key]


def test_list_states_shows_serial_size_lock_age_and_conditions(client: Client) -> None:
    """The list has serial, lineage, size, resource count, lock holder and age,
    the Locked/Projected conditions and ready derived from them."""
    first = generation(1, "blue", "s1")
    write(client, "app", first)
    write(client, "sealed", ENVELOPE)
    assert client.lock("/v1/states/app", lock_body("L1", who="ann@laptop")).status == 200
    states = {s["name"]: s for s in client.json_get(f"{NATIVE}/states")["states"]}
    assert set(states) == {"app", "sealed"}
    app = states["app"]
    assert (app["serial"], app["lineage"], app["size"], app["resourceCount"],
            app["versionCount"], app["currentVersion"]) == (1, LINEAGE, len(first), 2, 1, 1)
    assert app["sha256"] == hashlib.sha256(first).hexdigest()
    assert app["segments"] == ["app"]
    assert (app["lock"]["id"], app["lock"]["who"], app["lock"]["operation"]) == (
        "L1", "ann@laptop", "OperationTypeApply")
    assert app["lock"]["ageSeconds"] >= 0 and app["lock"]["acquiredAt"].endswith("Z")
    conditions = {c["type"]: c for c in app["conditions"]}
    assert (conditions["Locked"]["status"], conditions["Locked"]["reason"]) == ("True",
                                                                               "LockHeld")
    assert "ann@laptop" in conditions["Locked"]["message"]
    assert conditions["Locked"]["lastTransitionTime"] == app["lock"]["acquiredAt"]
    assert (conditions["Projected"]["status"], conditions["Projected"]["observedGeneration"]) \
        == ("True", 1)
    assert app["ready"] is False
    sealed = {c["type"]: c for c in states["sealed"]["conditions"]}
    assert (sealed["Projected"]["status"], sealed["Projected"]["reason"]) == (
        "False", "EncryptedState")
    assert sealed["Locked"]["status"] == "False"
    assert states["sealed"]["ready"] is True
    for condition in app["conditions"] + states["sealed"]["conditions"]:
        assert set(condition) == {"type", "status", "reason", "message",
                                  "observedGeneration", "lastTransitionTime"}


def test_unlocked_since_is_the_last_release(client: Client) -> None:
    """Locked=False carries the time of the last lock release as its transition."""
    write(client, "app", generation(1, "blue", "s"))
    body = lock_body("L1")
    client.lock("/v1/states/app", body)
    client.unlock("/v1/states/app", body)
    released = [e for e in client.json_get(f"{NATIVE}/events")["events"]
                if e["kind"] == "lock_release"]
    summary = client.json_get(f"{NATIVE}/states/app")
    locked = next(c for c in summary["conditions"] if c["type"] == "Locked")
    assert locked["lastTransitionTime"] == released[-1]["at"]
    assert summary["ready"] is True


def test_summary_of_one_and_three_segment_states(client: Client) -> None:
    """A state is addressed like in the HTTP lane: one segment or three."""
    write(client, "app", generation(1, "blue", "s"))
    write(client, "ws1/prod/net", generation(4, "red", "s"))
    assert client.json_get(f"{NATIVE}/states/app")["serial"] == 1
    hosted = client.json_get(f"{NATIVE}/states/ws1/prod/net")
    assert (hosted["name"], hosted["segments"], hosted["serial"]) == (
        "ws1/prod/net", ["ws1", "prod", "net"], 4)
    missing = client.get(f"{NATIVE}/states/nothing")
    assert (missing.status, missing.error_code) == (404, "state_not_found")


def test_lock_only_state_has_no_version_and_unknown_projection(client: Client) -> None:
    """A state a LOCK created lists with no serial and Projected=Unknown."""
    client.lock("/v1/states/fresh", lock_body("L"))
    fresh = client.json_get(f"{NATIVE}/states/fresh")
    assert (fresh["serial"], fresh["currentVersion"], fresh["versionCount"]) == (None, None, 0)
    projected = next(c for c in fresh["conditions"] if c["type"] == "Projected")
    assert (projected["status"], projected["reason"]) == ("Unknown", "NoVersion")
    assert client.json_get(f"{NATIVE}/states/fresh/-/versions")["versions"] == []
    lock = client.json_get(f"{NATIVE}/states/fresh/-/lock")
    assert (lock["locked"], lock["lock"]["id"]) == (True, "L")


# -- history, versions, diff, outputs -------------------------------------------


def test_history_lists_every_version_with_metadata(client: Client) -> None:
    """Versions come oldest first: number, serial, sha256, size, principal, time."""
    bodies = [generation(1, "blue", "s1"), generation(2, "green", "s2")]
    for body in bodies:
        write(client, "app", body)
    versions = history(client)
    assert [(v["number"], v["serial"], v["size"], v["sha256"], v["current"], v["kind"])
            for v in versions] == [
        (1, 1, len(bodies[0]), hashlib.sha256(bodies[0]).hexdigest(), False, "state_write"),
        (2, 2, len(bodies[1]), hashlib.sha256(bodies[1]).hexdigest(), True, "state_write")]
    assert all(v["principal"] == "anonymous" and parse_created(v["createdAt"]) is not None
               for v in versions)
    assert client.get(f"{NATIVE}/states/none/-/versions").error_code == "state_not_found"


def test_version_bytes_are_exact(client: Client) -> None:
    """/-/versions/{n} answers the bytes of version n exactly; n must exist."""
    bodies = [generation(1, "blue", "s1"), generation(2, "green", "s2")]
    for body in bodies:
        write(client, "app", body)
    for number, body in enumerate(bodies, start=1):
        reply = client.get(f"{NATIVE}/states/app/-/versions/{number}")
        assert (reply.status, reply.body) == (200, body)
        assert reply.header(b"x-kilolock-version") == str(number).encode()
    assert client.get(f"{NATIVE}/states/app/-/versions/3").error_code == "version_not_found"
    assert client.get(f"{NATIVE}/states/nope/-/versions/1").error_code == "state_not_found"
    for bad in ("0", "x", "-1"):
        assert client.get(f"{NATIVE}/states/app/-/versions/{bad}").status == 404


def test_diff_reports_resources_paths_and_outputs_without_secrets(client: Client) -> None:
    """A diff lists added/removed/changed addresses and attribute paths; a
    changed secret is reported as sensitive, never with its value."""
    write(client, "app", generation(1, "blue", "hunter2"))
    write(client, "app", generation(2, "green", "correcthorse", extra=True))
    reply = client.get(f"{NATIVE}/states/app/-/diff?from=1&to=2")
    assert reply.status == 200
    assert b"hunter2" not in reply.body and b"correcthorse" not in reply.body
    diff = reply.json()
    assert (diff["from"]["number"], diff["to"]["number"], diff["lineageChanged"]) == (1, 2,
                                                                                       False)
    assert diff["resources"]["added"] == [{"address": "terraform_data.cache[0]"}]
    assert diff["resources"]["removed"] == []
    (changed,) = diff["resources"]["changed"]
    assert changed["address"] == "terraform_data.app"
    assert changed["changes"] == [
        {"path": "input", "before": "blue", "after": "green"},
        {"path": "tags.Name", "before": "app-blue", "after": "app-green"},
        {"path": "password", "sensitive": True},
    ]
    assert diff["outputs"] == {"added": [], "removed": [], "changed": [
        {"name": "colour", "before": "blue", "after": "green"},
        {"name": "secret", "sensitive": True}]}
    backwards = client.json_get(f"{NATIVE}/states/app/-/diff?from=2&to=1")
    assert backwards["resources"]["removed"] == [{"address": "terraform_data.cache[0]"}]


def test_diff_defaults_to_the_last_change(client: Client) -> None:
    """Without from/to the diff is from the previous version to the current one."""
    write(client, "app", generation(1, "blue", "s"))
    write(client, "app", generation(2, "blue", "s", extra=True))
    diff = client.json_get(f"{NATIVE}/states/app/-/diff")
    assert (diff["from"]["number"], diff["to"]["number"]) == (1, 2)
    assert [a["address"] for a in diff["resources"]["added"]] == ["terraform_data.cache[0]"]
    same = client.json_get(f"{NATIVE}/states/app/-/diff?from=2&to=2")
    assert same["resources"] == {"added": [], "removed": [], "changed": []}


def test_diff_errors(client: Client) -> None:
    """Unknown versions are 404, bad numbers 400, encrypted versions 409."""
    write(client, "app", generation(1, "blue", "s"))
    assert client.get(f"{NATIVE}/states/app/-/diff?from=1&to=7").error_code == \
        "version_not_found"
    assert client.get(f"{NATIVE}/states/app/-/diff?from=x").status == 400
    write(client, "app", ENVELOPE)
    reply = client.get(f"{NATIVE}/states/app/-/diff?from=1&to=2")
    assert (reply.status, reply.error_code) == (409, "encrypted_state")
    assert client.get(f"{NATIVE}/states/none/-/diff").error_code == "state_not_found"


def test_outputs_withhold_sensitive_values(client: Client) -> None:
    """Outputs of the current (or a given) version; sensitive ones have no value."""
    write(client, "app", generation(1, "blue", "hunter2"))
    write(client, "app", generation(2, "green", "hunter3"))
    reply = client.get(f"{NATIVE}/states/app/-/outputs")
    assert b"hunter" not in reply.body
    current = reply.json()
    assert current["version"] == 2
    assert current["outputs"] == [
        {"name": "colour", "type": "string", "value": "green", "sensitive": False},
        {"name": "secret", "type": "string", "value": None, "sensitive": True}]
    older = client.get(f"{NATIVE}/states/app/-/outputs?version=1")
    assert b"hunter" not in older.body
    assert older.json()["outputs"][0]["value"] == "blue"
    assert client.get(f"{NATIVE}/states/app/-/outputs?version=9").error_code == \
        "version_not_found"
    write(client, "app", ENVELOPE)
    assert client.get(f"{NATIVE}/states/app/-/outputs").error_code == "encrypted_state"


# -- resources -----------------------------------------------------------------------


def test_resource_search_across_states(client: Client) -> None:
    """/v1/native/resources filters by type, address, module, attribute and state."""
    write(client, "app", generation(1, "blue", "hunter2"))
    write(client, "ws1/prod/net", generation(1, "red", "x", extra=True))
    found = client.json_get(f"{NATIVE}/resources?address=*.app")["resources"]
    assert [(r["state"], r["address"]) for r in found] == [
        ("app", "terraform_data.app"), ("ws1/prod/net", "terraform_data.app")]
    assert found[0]["attributes"]["password"] == "(sensitive)"
    by_module = client.json_get(f"{NATIVE}/resources?module=module.data")["resources"]
    assert [r["address"] for r in by_module] == ["module.data.terraform_data.db"] * 2
    by_value = client.json_get(f"{NATIVE}/resources?attribute=tags.Name=app-red")
    assert [r["state"] for r in by_value["resources"]] == ["ws1/prod/net"]
    assert client.json_get(f"{NATIVE}/resources?attribute=password=hunter2")["resources"] == []
    one = client.json_get(f"{NATIVE}/resources?state=ws1/prod/net&type=terraform_data")
    assert len(one["resources"]) == 3 and one["truncated"] is False
    limited = client.json_get(f"{NATIVE}/resources?limit=1")
    assert len(limited["resources"]) == 1 and limited["truncated"] is True
    per_state = client.json_get(f"{NATIVE}/states/app/-/resources?module=")
    assert [r["address"] for r in per_state["resources"]] == ["terraform_data.app"]
    for bad in ("attribute=novalue", "limit=0", "state=a/b", "state=a%2Fb%2Fc%2Fd"):
        assert client.get(f"{NATIVE}/resources?{bad}").status == 400, bad


# -- rollback --------------------------------------------------------------------------


def test_rollback_restores_a_version_as_a_new_one(client: Client) -> None:
    """Rollback writes version N's content with serial current+1 and the current
    lineage, Terraform-formatted, audited as state_rollback."""
    first = generation(1, "blue", "s1")
    write(client, "app", first)
    write(client, "app", generation(2, "green", "s2", extra=True))
    reply = client.rollback("app", 1)
    assert reply.status == 200, reply.body
    answer = reply.json()
    assert (answer["restoredFrom"], answer["version"]["number"], answer["version"]["serial"]) \
        == (1, 3, 3)
    restored = client.get("/v1/states/app").body
    expected = json.loads(first)
    expected["serial"] = 3
    assert restored == json.dumps(expected, indent=2).encode() + b"\n"
    versions = history(client)
    assert [(v["kind"], v["restoredFrom"]) for v in versions] == [
        ("state_write", None), ("state_write", None), (STATE_ROLLBACK, 1)]
    event = client.json_get(f"{NATIVE}/events?kind=state_rollback")["events"][-1]
    assert (event["state"], event["serial"], event["detail"]["restored_version"]) == (
        "app", 3, 1)
    diff = client.json_get(f"{NATIVE}/states/app/-/diff?from=1&to=3")
    assert diff["resources"] == {"added": [], "removed": [], "changed": []}


def test_rollback_keeps_the_current_lineage(client: Client) -> None:
    """A version of an older lineage is restored under the current lineage."""
    write(client, "app", generation(5, "blue", "s", lineage="old-lineage"))
    write(client, "app", generation(1, "green", "s"))
    assert client.rollback("app", 1).status == 200
    restored = json.loads(client.get("/v1/states/app").body)
    assert (restored["serial"], restored["lineage"]) == (2, LINEAGE)


def test_rollback_respects_the_lock(client: Client) -> None:
    """Locked by someone else: 423 with the holder as JSON; with the holder's
    ?ID= it goes through; an ?ID= on a free state is 409 lock_not_held."""
    write(client, "app", generation(1, "blue", "s"))
    write(client, "app", generation(2, "green", "s"))
    client.lock("/v1/states/app", lock_body("L1", who="bob@ci"))
    refused = client.rollback("app", 1)
    assert refused.status == 423
    error = refused.json()["error"]
    assert (error["code"], error["lock"]["ID"], error["lock"]["Who"]) == ("locked", "L1",
                                                                         "bob@ci")
    assert "bob@ci" in error["message"]
    assert client.rollback("app", 1, "?ID=other").status == 423
    assert client.rollback("app", 1, "?ID=L1").status == 200
    client.unlock("/v1/states/app", lock_body("L1"))
    late = client.rollback("app", 2, "?ID=L1")
    assert (late.status, late.error_code) == (409, "lock_not_held")
    assert [v["serial"] for v in history(client)] == [1, 2, 3]


def test_rollback_errors(client: Client) -> None:
    """Bad bodies 400, unknown versions/states 404, encrypted targets 409."""
    write(client, "app", generation(1, "blue", "s"))
    write(client, "app", ENVELOPE)
    for version in (0, "1", None, True):
        assert client.rollback("app", version).status == 400
    assert client.request("POST", f"{NATIVE}/states/app/-/rollback", body=b"nope").status == 400
    assert client.rollback("app", 5).error_code == "version_not_found"
    assert client.rollback("ghost", 1).error_code == "state_not_found"
    sealed = client.rollback("app", 2)
    assert (sealed.status, sealed.error_code) == (409, "encrypted_state")
    assert client.rollback("app", 1).status == 200  # plaintext restored over the envelope
    assert client.get(f"{NATIVE}/states/app/-/rollback").status == 405


# -- events --------------------------------------------------------------------------


def test_events_filters_paging_and_chain_fields(client: Client) -> None:
    """Events filter by state, kind, time and seq; each carries what the hash
    chain needs, and the hashes recompute."""
    write(client, "app", generation(1, "blue", "s"))
    write(client, "other", generation(1, "blue", "s"))
    body = lock_body("L1")
    client.lock("/v1/states/app", body)
    client.unlock("/v1/states/app", body)
    events = client.json_get(f"{NATIVE}/events")["events"]
    assert [(e["seq"], e["kind"], e["state"]) for e in events] == [
        (1, "state_write", "app"), (2, "state_write", "other"), (3, "lock_acquire", "app"),
        (4, "lock_release", "app")]
    for event in events:
        rebuilt = AuditEvent(seq=event["seq"], tenant=DEFAULT_TENANT, kind=event["kind"],
                             state_path=event["state"], principal=event["principal"],
                             at=parse_created(event["at"]), lock_id=event["lockId"],
                             serial=event["serial"], sha256=event["sha256"],
                             detail=event["detailText"], prev_hash=event["prevHash"])
        assert event_hash(rebuilt) == event["hash"]
    assert [e["seq"] for e in client.json_get(f"{NATIVE}/events?state=app")["events"]] == [
        1, 3, 4]
    assert [e["seq"] for e in client.json_get(
        f"{NATIVE}/states/app/-/events?kind=lock_acquire,lock_release")["events"]] == [3, 4]
    assert [e["seq"] for e in client.json_get(f"{NATIVE}/events?after=2")["events"]] == [3, 4]
    assert [e["seq"] for e in client.json_get(f"{NATIVE}/events?last=1")["events"]] == [4]
    page = client.json_get(f"{NATIVE}/events?limit=3")
    assert ([e["seq"] for e in page["events"]], page["more"], page["next"]) == ([1, 2, 3],
                                                                              True, 3)
    assert client.json_get(f"{NATIVE}/events?since=2999-01-01T00:00:00Z")["events"] == []
    assert client.get(f"{NATIVE}/events?since=yesterday").status == 400


def test_events_verify_reports_the_chain(client: Client) -> None:
    """/events/verify checks the tenant's whole chain; tampering is found."""
    write(client, "app", generation(1, "blue", "s"))
    write(client, "app", generation(2, "blue", "s"))
    good = client.json_get(f"{NATIVE}/events/verify")
    assert (good["verified"], good["events"], good["headSeq"], good["firstBrokenSeq"]) == (
        True, 2, 2, None)
    chain = client.store._events[DEFAULT_TENANT]
    chain[0] = evolve(chain[0], principal="mallory")  # tampered with, hash left alone
    bad = client.json_get(f"{NATIVE}/events/verify")
    assert (bad["verified"], bad["firstBrokenSeq"]) == (False, 1)


# -- paths and methods ----------------------------------------------------------------


def test_paths_follow_the_http_lane_rules(client: Client) -> None:
    """Encoded slashes and dot segments are 400 on every native route; unknown
    routes are JSON 404s; a state may itself be named '-'."""
    write(client, "app", generation(1, "blue", "s"))
    for path in ("/states/a%2Fb", "/states/app/-/versions/a%2Fb", "/states/..%2F/-/lock"):
        reply = client.get(NATIVE + path)
        assert (reply.status, reply.error_code) == (400, "encoded_slash"), path
    reply = client.get(NATIVE + "/states/app/-/../lock")
    assert (reply.status, reply.error_code) == (400, "dot_segment")
    for path in ("/states/app/-/nothing", "/states/a/b", "/states/app/-", "/nothing",
                 "/events/nothing", "/states/app/-/versions/1/raw"):
        reply = client.get(NATIVE + path)
        assert (reply.status, reply.error_code) == (404, "not_found"), path
    write(client, "-", generation(1, "blue", "s"))
    assert client.json_get(f"{NATIVE}/states/-")["name"] == "-"
    assert len(client.json_get(f"{NATIVE}/states/-/-/versions")["versions"]) == 1
    assert client.request("DELETE", f"{NATIVE}/states/app").status == 405


# -- tenants and scopes --------------------------------------------------------------


def test_a_foreign_state_looks_missing_byte_for_byte() -> None:
    """Another tenant's state, version, diff and outputs answer exactly like a
    name nobody uses (foreign-handle-looks-missing)."""
    acme = Client(token="acme", table=True)
    globex = acme.as_("globex")
    write(acme, "prod", generation(1, "blue", "s"))
    write(acme, "prod", generation(2, "blue", "s"))
    for suffix in ("", "/-/versions", "/-/versions/1", "/-/diff?from=1&to=2", "/-/outputs",
                   "/-/lock", "/-/resources"):
        foreign = globex.get(f"{NATIVE}/states/prod{suffix}")
        never = globex.get(f"{NATIVE}/states/never-existed{suffix}")
        assert foreign.status == 404, suffix
        assert (foreign.status, foreign.body) == (never.status, never.body.replace(
            b"never-existed", b"prod")), suffix
        assert acme.get(f"{NATIVE}/states/prod{suffix}").status == 200, suffix
    assert globex.rollback("prod", 1).body == globex.rollback("never", 1).body
    assert globex.json_get(f"{NATIVE}/states")["states"] == []
    assert globex.json_get(f"{NATIVE}/resources")["resources"] == []
    assert globex.json_get(f"{NATIVE}/events")["events"] == []
    assert acme.as_("nobody").get(f"{NATIVE}/states").status == 401


def test_a_scoped_token_sees_only_its_workspace_environment() -> None:
    """A ws/env token maps a bare name into its scope, is 403 outside it, and its
    listings, searches and events are confined to it; read tokens cannot roll back."""
    acme = Client(token="acme", table=True)
    scoped = acme.as_("scoped")
    write(acme, "ws_a/env_1/app", generation(1, "blue", "s"))
    write(acme, "ws_a/env_1/app", generation(2, "green", "s"))
    write(acme, "ws_b/env_9/app", generation(7, "red", "s"))
    assert scoped.json_get(f"{NATIVE}/states/app")["name"] == "ws_a/env_1/app"
    assert scoped.json_get(f"{NATIVE}/states/ws_a/env_1/app")["serial"] == 2
    outside = scoped.get(f"{NATIVE}/states/ws_b/env_9/app")
    assert (outside.status, outside.error_code) == (403, "forbidden")
    assert scoped.get(f"{NATIVE}/states/ws_b/env_9/missing").status == 403
    assert [s["name"] for s in scoped.json_get(f"{NATIVE}/states")["states"]] == [
        "ws_a/env_1/app"]
    assert {r["state"] for r in scoped.json_get(f"{NATIVE}/resources")["resources"]} == {
        "ws_a/env_1/app"}
    assert scoped.get(f"{NATIVE}/resources?state=ws_b/env_9/app").status == 403
    events = scoped.json_get(f"{NATIVE}/events")
    assert events["scoped"] is True
    assert {e["state"] for e in events["events"]} == {"ws_a/env_1/app"}
    reader = acme.as_("reader")
    assert reader.json_get(f"{NATIVE}/states/app/-/versions")["versions"][0]["serial"] == 1
    refused = reader.rollback("app", 1)
    assert (refused.status, refused.error_code) == (403, "forbidden")
    assert scoped.rollback("app", 1).status == 200
    assert acme.json_get(f"{NATIVE}/states/ws_a/env_1/app")["serial"] == 3


def test_a_basic_username_other_than_the_workspace_is_403_everywhere() -> None:
    """The HTTP lane's Basic-username rule holds on every native route, those
    that name no state included."""
    misnamed = Client(token="misnamed", table=True)
    for path in ("/states", "/states/app", "/states/app/-/versions", "/resources", "/events",
                 "/events/verify"):
        reply = misnamed.get(NATIVE + path)
        assert (reply.status, reply.error_code) == (403, "forbidden"), path


class WholeListForbidden(MemoryStateStore):
    """A store that fails if the whole event list is read."""

    def list_events(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole event list was read")


def chain_of_many_events(store: MemoryStateStore) -> Client:
    """40 events over three states of two environments (writes, locks,
    unlocks) of tenant acme."""
    acme = Client(store, token="acme", table=True)
    for index in range(1, 5):
        for name in ("ws_a/env_1/app", "ws_a/env_1/db", "ws_b/env_2/web"):
            write(acme, name, generation(index, "blue", name.replace("/", "-")))
            body = lock_body(f"L-{name}-{index}")
            acme.lock(f"/v1/states/{name}", body)
            acme.unlock(f"/v1/states/{name}", body)
    return acme


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(token=st.sampled_from(["acme", "scoped"]),
       state=st.sampled_from([None, "ws_a/env_1/app", "ws_b/env_2/web"]),
       kind=st.sampled_from([None, "state_write", "lock_release"]),
       after=st.one_of(st.none(), st.integers(0, 40)),
       paging=st.sampled_from(["", "limit=1", "limit=5", "limit=100", "last=1", "last=7"]))
def test_an_events_page_from_the_store_window_is_the_page_of_the_whole_list(
        token: str, state: str | None, kind: str | None, after: int | None,
        paging: str) -> None:
    """A query the store can page on its own is answered from a window of
    the chain (the whole list is never read) and is exactly the page that
    filtering the whole list gives (a time range forces that path)."""
    fast = chain_of_many_events(WholeListForbidden())
    whole = Client(fast.store, token="acme", table=True)
    parts = [paging] if paging else []
    if state is not None:
        parts.append(f"state={state}")
    if kind is not None:
        parts.append(f"kind={kind}")
    if after is not None:
        parts.append(f"after={after}")
    query = "&".join(parts)
    answered = fast.as_(token).get(f"{NATIVE}/events?{query}")
    if token == "scoped" and state == "ws_b/env_2/web":
        assert answered.status == 403
        return
    assert answered.status == 200, answered.body
    store: Any = fast.store
    store.list_events = lambda *a, **k: MemoryStateStore.list_events(store, *a, **k)
    reference = whole.as_(token).json_get(
        f"{NATIVE}/events?{query}&since=1970-01-01T00:00:00Z")
    assert answered.json() == reference
