"""Truncation of the audit trail is detected, on both stores: each tenant's
chain head is recorded apart from its events (moved in the transaction of
every append), so deleting the newest events shows in the native and the
control API's verification; a head pinned outside Kilolock (C{kl events
head}, C{kl events verify --expect-head}) also catches a rewrite of events
and head together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg2
import pytest
import pytest_twisted

from kilolock.core.audit import ChainHead
from kilolock.core.model import DEFAULT_TENANT
from kilolock.kl.exits import EXIT_BROKEN_CHAIN, EXIT_USAGE
from tests.support.fixtures_server import KilolockServer
from tests.support.hostile_support import STORES, Harness, make_harness
from tests.support.kl_runner import kl_environment, run_kl
from tests.support.stub_client import state_body


@pytest.fixture(params=STORES)
def harness(request: pytest.FixtureRequest) -> Harness:
    return make_harness(request)


def truncate(harness: Harness, keep: int, tenant: str = DEFAULT_TENANT,
             move_head: bool = False) -> None:
    """Delete the tenant's events after seq C{keep} behind Kilolock's back;
    with C{move_head}, also set its recorded head to the last one kept (a
    rewrite of chain and head together)."""
    if harness.dsn is None:
        events = harness.store._events[tenant]
        del events[keep:]
        if move_head:
            harness.store._heads[tenant] = ChainHead(events[-1].seq, events[-1].hash)
        return
    connection = psycopg2.connect(harness.dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute("DELETE FROM events WHERE tenant_id = %s AND seq > %s",
                           (tenant, keep))
            if move_head:
                cursor.execute("UPDATE tenants SET chain_seq = e.seq,"
                               " chain_head = coalesce(e.hash, encode(e.hash_bytes, 'hex'))"
                               " FROM events e WHERE tenants.id = %s AND e.tenant_id = %s"
                               " AND e.seq = %s", (tenant, tenant, keep))
    finally:
        connection.close()


@pytest_twisted.ensureDeferred
async def test_the_head_is_the_newest_event(harness: Harness) -> None:
    """/v1/native/events/head names the newest event; verify reports the
    same head, and a pinned head that the chain passes through verifies."""

    def check() -> None:
        events = harness.state_request("GET", "/v1/native/events").json()["events"]
        head = harness.state_request("GET", "/v1/native/events/head").json()
        assert (head["seq"], head["hash"], head["tenant"]) == (
            events[-1]["seq"], events[-1]["hash"], DEFAULT_TENANT)
        assert head["head"] == f"{head['seq']}:{head['hash']}"
        pinned = f"{events[1]['seq']}:{events[1]['hash']}"
        verify = harness.state_request("GET", f"/v1/native/events/verify?head={pinned}").json()
        assert (verify["verified"], verify["headSeq"], verify["headHash"], verify["truncated"],
                verify["pinnedHead"]) == (True, head["seq"], head["hash"], False, pinned)

    await harness.run(check)


@pytest_twisted.ensureDeferred
async def test_deleting_the_newest_events_is_reported_as_truncation(harness: Harness) -> None:
    """The newest events deleted from the database (or the memory store's
    chain): the native and the control API's verification say truncated,
    from which seq, against the recorded head."""

    def check() -> None:
        head = harness.state_request("GET", "/v1/native/events/head").json()
        truncate(harness, head["seq"] - 2)
        verify = harness.state_request("GET", "/v1/native/events/verify").json()
        assert (verify["verified"], verify["truncated"], verify["problem"],
                verify["brokenHead"], verify["firstBrokenSeq"], verify["lastSeq"],
                verify["headSeq"]) == (False, True, "truncated", "recorded", head["seq"] - 1,
                                       head["seq"] - 2, head["seq"])
        assert "missing (truncated)" in verify["reason"]
        tenant = harness.state_request("GET", "/v1/native/events/head").json()
        assert tenant["seq"] == head["seq"]  # the head row survived the deletion

        acme = harness.control_request("GET", "/v1/api/tenants/acme").json()["id"]
        truncate(harness, 0, tenant=acme)
        control = harness.control_request("GET", f"/v1/api/tenants/{acme}/events/verify")
        document = control.json()
        assert (control.status, document["ok"], document["truncated"], document["events"],
                document["last_seq"]) == (200, False, True, 0, 0)
        assert document["first_broken"]["problem"] == "truncated"
        assert document["first_broken"]["seq"] == 1

    await harness.run(check)


@pytest_twisted.ensureDeferred
async def test_a_pinned_head_catches_a_rewrite_of_chain_and_head(harness: Harness) -> None:
    """Deleting events and moving the recorded head with them is invisible to
    the store's own check; a head pinned before catches it (truncated, the
    pinned head at fault), and so does a pinned head the chain no longer
    passes through (head_mismatch)."""

    def check() -> None:
        pinned = harness.state_request("GET", "/v1/native/events/head").json()["head"]
        truncate(harness, ChainHead.parse(pinned).seq - 1, move_head=True)
        assert harness.state_request("GET", "/v1/native/events/verify").json()["verified"]
        verify = harness.state_request("GET", f"/v1/native/events/verify?head={pinned}").json()
        assert (verify["verified"], verify["truncated"], verify["brokenHead"]) == (
            False, True, "pinned")
        first = harness.state_request("GET", "/v1/native/events").json()["events"][0]
        forged = f"{first['seq']}:{'0' * 64}"
        mismatch = harness.state_request("GET",
                                         f"/v1/native/events/verify?head={forged}").json()
        assert (mismatch["problem"], mismatch["brokenHead"], mismatch["firstBrokenSeq"]) == (
            "head_mismatch", "pinned", first["seq"])
        refused = harness.state_request("GET", "/v1/native/events/verify?head=7")
        assert (refused.status, refused.error_code) == (400, "invalid_field")
        acme = harness.control_request("GET", "/v1/api/tenants/acme").json()["id"]
        control = harness.control_request(
            "GET", f"/v1/api/tenants/{acme}/events/verify?head=1:{'0' * 64}").json()
        assert (control["ok"], control["pinned_head"], control["first_broken"]["head"],
                control["first_broken"]["problem"]) == (False, f"1:{'0' * 64}", "pinned",
                                                        "head_mismatch")

    await harness.run(check)


# -- kl against a server ----------------------------------------------------------------


def test_kl_prints_the_head_and_checks_a_pinned_one(kilolock_server: KilolockServer,
                                                    tmp_path: Path) -> None:
    """`kl events head` prints SEQ:HASH; `kl events verify --expect-head`
    with it verifies, with any other head of that seq exits 7 naming the
    rewrite, and with a malformed one is a usage error."""
    env = kl_environment(kilolock_server.base_url, home=tmp_path)
    assert kilolock_server.with_body("POST", "/v1/states/app", state_body(1)).status == 200
    head = run_kl("events", "head", env=env).check().out.strip()
    seq = ChainHead.parse(head).seq
    assert run_kl("events", "verify", "--expect-head", head, env=env).check().out
    forged = run_kl("events", "verify", "--expect-head", f"{seq}:{'0' * 64}", env=env)
    assert forged.code == EXIT_BROKEN_CHAIN
    assert "was rewritten" in forged.out
    ahead = run_kl("events", "verify", "--expect-head", f"{seq + 5}:{'0' * 64}", env=env)
    assert ahead.code == EXIT_BROKEN_CHAIN and "truncated" in ahead.out
    assert run_kl("events", "verify", "--expect-head", "7", env=env).code == EXIT_USAGE


@pytest.mark.postgres
@pytest.mark.parametrize("server_store", ["postgres"], indirect=True)
def test_kl_verify_finds_events_deleted_from_the_database(
        kilolock_server_factory: Any, postgres_dsn: str, tmp_path: Path) -> None:
    """Events deleted from PostgreSQL behind a running server (only there can
    something outside the server delete them): `kl events verify` exits 7,
    and both the server and kl say the chain is truncated."""
    server = kilolock_server_factory()
    env = kl_environment(server.base_url, home=tmp_path)
    for serial in (1, 2, 3):
        assert server.with_body("POST", "/v1/states/app", state_body(serial)).status == 200
    head = ChainHead.parse(run_kl("events", "head", env=env).check().out)
    assert run_kl("events", "verify", env=env).code == 0
    connection = psycopg2.connect(postgres_dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute("DELETE FROM events WHERE seq > %s", (head.seq - 2,))
    finally:
        connection.close()
    result = run_kl("events", "verify", env=env)
    assert result.code == EXIT_BROKEN_CHAIN
    assert "the server finds the chain broken" in result.out and "truncated" in result.out
    assert "kl finds the chain broken" in result.out
