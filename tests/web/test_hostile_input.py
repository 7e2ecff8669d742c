"""Hostile input, class by class, on both stores through the real sites:
each example the issue names is a 400 with its rule's code and stores
nothing; what a state may hold is stored exactly and projected safely;
records stored before the rules never break a read view; and a value the
database itself refuses is a 400, never a 503 or an outage."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
import pytest_twisted

from kilolock.core.errors import InvalidText
from kilolock.core.model import DEFAULT_TENANT, LockInfo, Principal, StateKey
from kilolock.core.text import nesting_depth
from kilolock.kl.commands.events import check_chain
from tests.support.hostile_support import STORES, Harness, make_harness, read_views_answer
from tests.support.log_events import logged
from tests.support.stub_client import state_body, terraform_headers


@pytest.fixture(params=STORES)
def harness(request: pytest.FixtureRequest) -> Harness:
    """A seeded harness on each store."""
    return make_harness(request)


def nested(depth: int, inner: str = "1") -> bytes:
    return ("[" * depth + inner + "]" * depth).encode()


def lock_info(**members: str) -> bytes:
    """A LockInfo as Terraform sends it, members replaced by raw JSON text."""
    document = {"ID": '"id-1"', "Operation": '"OperationTypeApply"', "Info": '""',
                "Who": '"alice@laptop"', "Version": '"1.15.5"',
                "Created": '"2026-11-29T23:05:20.206526015Z"', "Path": '""', **members}
    return ("{" + ",".join(f'"{k}":{v}' for k, v in document.items()) + "}").encode()


def deep_state(depth: int) -> bytes:
    """A v4 state whose one attribute holds 1e400, C{depth} levels down."""
    return (b'{"version":4,"serial":3,"lineage":"7b1d5c1e-0000-4000-8000-000000000001",'
            b'"resources":[{"mode":"managed","type":"t","name":"n","instances":[{'
            b'"attributes":{"id":"x","deep":' + nested(depth - 6, "1e400") + b"}}]}]}")


#: (lane, method, path, body, status, code, field): each a class of input
#: that answered 500 (or a false 503) before the text rules.
CASES: dict[str, tuple[str, str, str, bytes | None, int, str, str | None]] = {
    "LockInfo 20,000 deep": ("state", "LOCK", "/v1/states/app", nested(20_000), 400,
                             "too_deep", None),
    "LockInfo 100,000 deep": ("state", "LOCK", "/v1/states/app", nested(100_000), 400,
                              "too_long", None),
    "unlock body 20,000 deep": ("state", "UNLOCK", "/v1/states/held", nested(20_000), 400,
                                "too_deep", None),
    "control body 20,000 deep": ("control", "POST", "/v1/api/tenants", nested(20_000), 400,
                                 "too_deep", "body"),
    "native body 100,000 deep": ("state", "POST", "/v1/native/states/app/-/rollback",
                                 nested(100_000), 400, "too_deep", None),
    "state 600 deep with 1e400": ("state", "POST", "/v1/states/app", deep_state(600), 400,
                                  "too_deep", None),
    "NUL in lock ID": ("state", "LOCK", "/v1/states/app", lock_info(ID='"a\\u0000"'), 400,
                       "nul_character", "ID"),
    "%00 in ?ID=": ("state", "POST", "/v1/states/app?ID=a%00", state_body(3), 400,
                    "nul_character", "ID"),
    "lone surrogate in lock ID": ("state", "LOCK", "/v1/states/app",
                                  lock_info(ID='"\\ud800"'), 400, "invalid_unicode", "ID"),
    "lone surrogate in Who": ("state", "LOCK", "/v1/states/app",
                              lock_info(Who='"me\\ud800"'), 400, "invalid_unicode", "Who"),
    "1e400 in a LockInfo": ("state", "LOCK", "/v1/states/app", lock_info(Info="1e400"), 400,
                            "not_finite", "Info"),
    "lone surrogate in a tenant name": ("control", "POST", "/v1/api/tenants",
                                        b'{"slug": "t1", "name": "x\\udc00"}', 400,
                                        "invalid_unicode", "name"),
    "NUL in a tenant name": ("control", "POST", "/v1/api/tenants",
                             b'{"slug": "t1", "name": "x\\u0000"}', 400, "nul_character",
                             "name"),
    "NUL in a workspace name": ("control", "POST", "/v1/api/tenants/acme/workspaces",
                                b'{"name": "w\\u0000"}', 400, "nul_character", "name"),
    "newline after a slug": ("control", "POST", "/v1/api/tenants",
                             b'{"slug": "t1\\n", "name": "T"}', 400, "invalid_field", "slug"),
    "NUL in a native query parameter": ("state", "GET", "/v1/native/resources?type=%00", None,
                                        400, "nul_character", "type"),
    "NUL in a repeatable parameter": ("state", "GET", "/v1/native/events?kind=a,b%00", None,
                                      400, "nul_character", "kind"),
    "not UTF-8 in a control parameter": ("control", "GET",
                                         "/v1/api/tenants/acme/events?state=%FF", None, 400,
                                         "invalid_unicode", "state"),
    "version beyond an integer": ("state", "GET",
                                  "/v1/native/states/app/-/outputs?version=2147483648", None,
                                  400, "bad_request", None),
    "a Unicode digit as a version": ("state", "GET",
                                     "/v1/native/states/app/-/diff?to=%C2%B2", None, 400,
                                     "bad_request", None),
    "version segment beyond an integer": ("state", "GET",
                                          "/v1/native/states/app/-/versions/99999999999",
                                          None, 404, "not_found", None),
    "rollback beyond an integer": ("state", "POST", "/v1/native/states/app/-/rollback",
                                   b'{"version": 99999999999}', 404, "version_not_found",
                                   None),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest_twisted.ensureDeferred
async def test_each_class_is_refused_with_its_rule_and_stores_nothing(harness: Harness,
                                                                      case: str) -> None:
    """The examples of every class: the status and code of the rule, the
    field at fault, and the store exactly as it was."""
    lane, method, path, body, status, code, field = CASES[case]

    def check() -> None:
        before = harness.snapshot()
        if lane == "control":
            reply = harness.control_request(method, path, body)
        else:
            reply = harness.state_request(method, path, body,
                                          terraform_headers(body) if body else None)
        assert (reply.status, reply.error_code) == (status, code), reply.body
        assert reply.json()["error"].get("field") == field
        assert harness.snapshot() == before

    await harness.run(check)


@pytest_twisted.ensureDeferred
async def test_a_state_holding_what_a_database_refuses_is_stored_exactly(
        harness: Harness) -> None:
    """A state may hold NUL, unpaired surrogates, 1e400 and a few kB of
    incompressible resource type: it is stored byte for byte (Terraform is
    never refused for a state it wrote), projected with U+FFFD and text for
    the numbers, found by its type, and every read view answers."""
    long_type = base64.b64encode(os.urandom(4500)).decode()  # incompressible
    deep = nested(400, "1e400").decode()
    body = (
        '{"version":4,"serial":3,"lineage":"7b1d5c1e-0000-4000-8000-000000000001",'
        '"outputs":{"o\\u0000":{"value":["\\ud800",1e400],'
        '"type":["tuple",["string","number"]]}},'
        '"resources":[{"mode":"managed","type":"' + long_type + '","name":"n\\udfff",'
        '"provider":"p","instances":[{"index_key":"k\\u0000","deposed":"d\\ud800",'
        '"attributes":{"id":"x","nul":"a\\u0000b","lone":"\\ude00","big":-1e400,'
        '"deep":' + deep + "}}]}]}").encode()

    def check() -> None:
        assert harness.state_request("POST", "/v1/states/app", body).status == 200
        assert harness.state_request("GET", "/v1/states/app").body == body
        found = harness.state_request(
            "GET", f"/v1/native/resources?type={quote(long_type, safe='')}").json()
        (match,) = found["resources"]
        assert match["name"] == "n\ufffd" and match["deposed"] == "d\ufffd"
        assert match["address"].startswith(long_type)
        attributes = match["attributes"]
        assert (attributes["nul"], attributes["lone"], attributes["big"]) == (
            "a\ufffdb", "\ufffd", "-Infinity")
        outputs = harness.state_request("GET", "/v1/native/states/app/-/outputs").json()
        assert outputs["outputs"][0]["name"] == "o\ufffd"
        assert outputs["outputs"][0]["value"] == ["\ufffd", "Infinity"]
        diff = harness.state_request("GET", "/v1/native/states/app/-/diff")
        assert diff.status == 200
        read_views_answer(harness)
        assert harness.state_request("GET", "/readyz").status == 200

    await harness.run(check)


@pytest_twisted.ensureDeferred
async def test_a_state_at_the_nesting_limit_is_stored_read_and_restored(
        harness: Harness) -> None:
    """A state nested to the limit, 1e400 at the bottom: stored, projected
    (as text), diffed, its outputs read, rolled back to and pulled."""

    def check() -> None:
        body = deep_state(512)
        assert harness.state_request("POST", "/v1/states/app", body).status == 200
        for view in ("/-/diff", "/-/outputs", "/-/resources", "/-/versions/3"):
            reply = harness.state_request("GET", "/v1/native/states/app" + view)
            assert reply.status == 200, (view, reply.body[:300])
        restored = harness.state_request("POST", "/v1/native/states/app/-/rollback",
                                         b'{"version": 3}')
        assert restored.status == 200, restored.body
        assert harness.state_request("GET", "/v1/states/app").body == body.replace(
            b'"serial":3', b'"serial":4')

    await harness.run(check)


#: A LockInfo stored before the rules: an unpaired surrogate in Who, a
#: number beyond a double, an Info nested 900 levels.
OLD_LOCK = (b'{"ID":"old-lock","Who":"eve\\ud800","Operation":"OperationTypeApply",'
            b'"Created":"2026-01-02T03:04:05Z","Version":1e400,"Info":' + nested(900) + b"}")


@pytest_twisted.ensureDeferred
async def test_records_stored_before_the_rules_never_break_a_read(harness: Harness) -> None:
    """A lock (and its events) stored by an older Kilolock, holding what the
    rules now refuse: the state list, summary, lock view, events, both chain
    verifications and the dashboard answer -- the holder shown with U+FFFD,
    the event's detail (which is hashed) with its escape, so that kl's own
    check of the chain holds; the lock can be released."""
    key = StateKey(DEFAULT_TENANT, "app")
    old = Principal(DEFAULT_TENANT, "old-client")

    def check() -> None:
        assert harness.wait(lambda: harness.store.acquire_lock(
            key, LockInfo.stored(OLD_LOCK), old)) is True
        harness.wait(lambda: harness.store.record_event(
            DEFAULT_TENANT, "note", "old-client", detail={"who": "eve\ud800"}))
        read_views_answer(harness)
        lock = harness.state_request("GET", "/v1/native/states/app/-/lock").json()["lock"]
        assert (lock["id"], lock["who"], lock["info"]) == ("old-lock", "eve\ufffd", None)
        events = harness.state_request("GET", "/v1/native/events").json()["events"]
        assert events[-2]["detail"]["who"] == "eve\ufffd"
        assert events[-1]["detail"]["who"] == "eve\ud800"
        assert "\\ud800" in events[-1]["detailText"]
        assert check_chain(events, complete=True) is None
        conflict = harness.state_request("POST", "/v1/native/states/app/-/rollback",
                                         b'{"version": 1}')
        assert conflict.status == 423 and conflict.json()["error"]["lock"] is None
        page = harness.state_request("GET", "/ui/states/app")
        assert page.status == 200 and "eve\ufffd".encode() in page.body
        assert harness.state_request("UNLOCK", "/v1/states/app", b"").status == 200
        read_views_answer(harness)

    await harness.run(check)


# -- the database's own refusals (PostgreSQL) ------------------------------------------


def _index_row_too_big(cursor: Any) -> Any:
    async def txn(cursor: Any) -> None:
        await cursor.execute("CREATE TEMPORARY TABLE wide (x text)")
        await cursor.execute("CREATE INDEX ON wide (x)")
        await cursor.execute("INSERT INTO wide VALUES (%s)", (os.urandom(8000).hex(),))
    return txn


def _statement(sql: str, *params: Any) -> Callable[[Any], Any]:
    async def txn(cursor: Any) -> None:
        await cursor.execute(sql, params)
    return txn


DATA_ERRORS = {
    "54000 index row size": (_index_row_too_big(None), "too_long"),
    "22021 not in repertoire": (_statement("SELECT convert_from('\\xff'::bytea, 'UTF8')"),
                                "invalid_unicode"),
    "22003 out of range": (_statement("SELECT %s::integer", 2**40), "out_of_range"),
    "NUL parameter": (_statement("SELECT %s", "a\x00b"), "nul_character"),
    "surrogate parameter": (_statement("SELECT %s", "a\ud800"), "invalid_unicode"),
}


@pytest.mark.postgres
@pytest.mark.parametrize("case", sorted(DATA_ERRORS))
@pytest_twisted.ensureDeferred
async def test_a_value_the_database_refuses_is_a_400_not_an_outage(postgres_dsn: str,
                                                                   case: str) -> None:
    """A data error of a statement -- the index row size of 54000, a
    character or number the database cannot hold, a NUL psycopg2 will not
    send -- fails the call with the text rule's 400: no 503, no outage in
    the log, the database still counted reachable and ready."""
    from twisted.internet import reactor

    from kilolock.store.postgres.store import PostgresStateStore

    store = PostgresStateStore(postgres_dsn, reactor, pool_size=2)
    await store.start()
    try:
        txn, rule = DATA_ERRORS[case]
        with logged("the state database stopped answering ({kind}); answering 503 until"
                    " it is back") as outages, pytest.raises(InvalidText) as caught:
            await store.runner.run_interaction(txn)
        assert (caught.value.status, caught.value.code) == (400, rule)
        assert outages == [] and store.runner.reachable is True
        assert (await store.probe()).reachable is True
        await store.write_state(StateKey(DEFAULT_TENANT, "after"),
                                _upload(state_body(1)), None, Principal(DEFAULT_TENANT, "a"))
    finally:
        await store.stop()


def _upload(raw: bytes) -> Any:
    from kilolock.web.body import prepare_upload

    return prepare_upload(raw)


def test_the_bodies_of_the_cases_are_what_they_say() -> None:
    """A guard on the tables above: lock_info replaces a member, deep_state
    nests exactly as deep as it is asked to."""
    assert json.loads(lock_info(Who='"x"'))["Who"] == "x"
    assert nesting_depth(json.loads(deep_state(512)), 1000) == 512
    assert nesting_depth(json.loads(deep_state(600)), 1000) == 600
