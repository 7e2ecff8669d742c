"""How PostgreSQL stores the audit chain (schema 12): new events
hold their hash (and a write's sha256) as bytes, their lock ID as a uuid
and no prev_hash, events written before keep their text; both read back
as the same lowercase-hex events, verify as one chain, and every
tampering with the rows is caught, on real PostgreSQL, in rows of either
form.

Old-form rows are written by schema 11's own C{kl_append_event} in a
database at schema 11, then upgraded."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg2
import pytest
import pytest_twisted
from attrs import evolve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kilolock.core.audit import (
    ALTERED,
    GENESIS,
    HEAD_MISMATCH,
    MISSING,
    TRUNCATED,
    UNLINKED,
    ChainHead,
    event_hash,
    verify_chain,
)
from kilolock.core.events import AuditEvent
from kilolock.store.postgres.events import event_parameters
from kilolock.store.postgres.rows import event as event_row
from kilolock.store.postgres.statements import APPEND_EVENT, select_events
from kilolock.store.postgres.store import PostgresStateStore
from tests.support.at_rest_support import execute, query, state_with, upload
from tests.support.fixtures_postgres import new_database, schema_up_to, upgrade_schema

pytestmark = pytest.mark.postgres

TENANT = "acme"
AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LOCK_ID = "9c5b94b1-35ad-49bb-b118-8e8fc24abf80"
SHA = hashlib.sha256(b"state").hexdigest()

#: What an append takes besides the tenant: kind, principal, path, keywords.
Spec = tuple[str, str, str | None, dict[str, Any]]

#: A write cycle and a control event, twice: six events.
CYCLE: list[Spec] = [
    ("lock_acquire", "alice", "app", {"lock_id": LOCK_ID,
                                      "detail": {"who": "a@h", "operation": "apply"}}),
    ("state_write", "alice", "app", {"lock_id": LOCK_ID, "serial": 7, "sha256": SHA,
                                     "detail": {"version": 1, "size": 5}}),
    ("lock_release", "alice", "app", {"lock_id": LOCK_ID,
                                      "detail": {"who": "a@h", "operation": "apply"}}),
]
CHAIN: list[Spec] = [*CYCLE, ("token_create", "root", None, {"detail": {"name": "ci"}}),
                     *CYCLE]


def schema_at(dsn: str, version: int) -> None:
    """Apply the schema files up to C{version}, as that Kilolock did, with
    the tenant of the tests."""
    schema_up_to(dsn, version)
    execute(dsn, "INSERT INTO tenants (id) VALUES (%s)", (TENANT,))


def append(dsn: str, specs: list[Spec], tenant: str = TENANT) -> list[AuditEvent]:
    """Append events with the database's own C{kl_append_event} (the one
    of whatever schema it is at); the events as appended."""
    appended = []
    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            for offset, (kind, principal, path, keywords) in enumerate(specs):
                event, params = event_parameters(tenant, kind, principal, path,
                                                 AT + timedelta(seconds=offset), **keywords)
                cursor.execute(str(APPEND_EVENT), params)
                seq, prev, hash_ = cursor.fetchone()
                appended.append(evolve(event, seq=seq, prev_hash=prev, hash=hash_))
    finally:
        connection.close()
    return appended


@contextmanager
def database(admin_dsn: str, old: int, new: int) -> Iterator[tuple[str, list[AuditEvent]]]:
    """A database at schema 11 with C{old} events of L{CHAIN} appended
    there, upgraded, then the next C{new} events appended; its DSN and the
    events as appended."""
    with new_database(admin_dsn) as dsn:
        schema_at(dsn, 11)
        appended = append(dsn, CHAIN[:old])
        upgrade_schema(dsn)
        yield dsn, appended + append(dsn, CHAIN[old:old + new])


async def read(dsn: str, **filters: Any) -> tuple[list[AuditEvent], ChainHead]:
    """The tenant's events (filtered) and its recorded head, through the store."""
    from twisted.internet import reactor

    store = PostgresStateStore(dsn, reactor, pool_size=2)
    await store.start()
    try:
        return await store.list_events(TENANT, **filters), await store.chain_head(TENANT)
    finally:
        await store.stop()


def forms(dsn: str) -> list[tuple[int, bool, bool, bool, bool, bool]]:
    """Per event: seq, whether hash, prev_hash, hash_bytes, sha256_bytes,
    lock_uuid are stored."""
    return query(dsn, "SELECT seq, hash IS NOT NULL, prev_hash IS NOT NULL,"
                      " hash_bytes IS NOT NULL, sha256_bytes IS NOT NULL,"
                      " lock_uuid IS NOT NULL FROM events ORDER BY seq")


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize("old", [0, 3, 7])
async def test_both_forms_read_as_appended_and_verify(postgres_admin_dsn: str,
                                                      old: int) -> None:
    """Whatever the mix of forms (all old, old then new, all new): the store
    reads back exactly the events as appended (lowercase hex, prev_hash
    included) whole or filtered, and the chain verifies against its head."""
    with database(postgres_admin_dsn, old, len(CHAIN) - old) as (dsn, appended):
        assert forms(dsn) == [(seq, seq <= old, seq <= old, seq > old,
                               seq > old and CHAIN[seq - 1][0] == "state_write",
                               seq > old and "lock_id" in CHAIN[seq - 1][3])
                              for seq in range(1, 8)]
        events, head = await read(dsn)
        assert events == appended
        assert head == ChainHead(7, appended[-1].hash)
        assert verify_chain(events, heads=[head]) is None
        assert appended[0].prev_hash == GENESIS
        writes, _ = await read(dsn, state_path="app", kinds=["state_write"])
        assert writes == [appended[1], appended[5]]
        assert all(event_hash(event) == event.hash for event in writes)


#: Tampering, as SQL on the rows of each form (old, new), and the break
#: verify_chain finds first: (problem, seq) for old rows, for new rows.
#: Where a new row has no prev_hash of its own, a broken link shows as the
#: next event's hash not matching (altered) instead of unlinked.
TAMPERING = {
    "content altered": (
        ("UPDATE events SET principal = 'mallory' WHERE seq = 2",) * 2,
        ((ALTERED, 2), (ALTERED, 2))),
    "sha256 altered": (
        ("UPDATE events SET sha256 = repeat('0', 64) WHERE seq = 2",
         "UPDATE events SET sha256_bytes = decode(repeat('0', 64), 'hex') WHERE seq = 2"),
        ((ALTERED, 2), (ALTERED, 2))),
    "lock ID altered": (
        ("UPDATE events SET lock_id = upper(lock_id) WHERE seq = 2",  # the case only
         "UPDATE events SET lock_uuid = '00000000-0000-4000-8000-000000000000' WHERE seq = 2"),
        ((ALTERED, 2), (ALTERED, 2))),
    "hash altered": (
        ("UPDATE events SET hash = upper(hash) WHERE seq = 2",  # the case only
         "UPDATE events SET hash_bytes = set_byte(hash_bytes, 31,"
         " get_byte(hash_bytes, 31) # 1) WHERE seq = 2"),
        ((ALTERED, 2), (ALTERED, 2))),
    "middle event deleted": (
        ("DELETE FROM events WHERE seq = 3",) * 2,
        ((MISSING, 4), (MISSING, 4))),
    "head event deleted": (
        ("DELETE FROM events WHERE seq = 7",) * 2,
        ((TRUNCATED, 7), (TRUNCATED, 7))),
    "rows swapped": (
        ("UPDATE events SET seq = -seq WHERE seq IN (2, 3);"
         " UPDATE events SET seq = CASE seq WHEN -2 THEN 3 ELSE 2 END WHERE seq < 0",) * 2,
        ((UNLINKED, 2), (ALTERED, 2))),
}


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize("old", [True, False], ids=["old rows", "new rows"])
@pytest.mark.parametrize("tampering", sorted(TAMPERING))
async def test_tampering_is_caught_in_either_form(postgres_admin_dsn: str, old: bool,
                                                  tampering: str) -> None:
    statements, expected = TAMPERING[tampering]
    with database(postgres_admin_dsn, 7 if old else 0, 0 if old else 7) as (dsn, _):
        execute(dsn, statements[0 if old else 1])
        events, head = await read(dsn)
        broken = verify_chain(events, heads=[head])
        assert broken is not None
        assert (broken.problem, broken.seq) == expected[0 if old else 1]


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize("old", [True, False], ids=["old rows", "new rows"])
async def test_a_rehashed_event_breaks_the_next_link(postgres_admin_dsn: str,
                                                     old: bool) -> None:
    """An event altered and given the hash of its new content (its own hash
    verifies): the next event no longer links to it (old rows: its stored
    prev_hash; new rows: its hash, computed over the hash before it)."""
    with database(postgres_admin_dsn, 7 if old else 0, 0 if old else 7) as (dsn, appended):
        forged = event_hash(evolve(appended[1], principal="mallory"))
        execute(dsn, "UPDATE events SET principal = 'mallory', hash = %s WHERE seq = 2"
                if old else "UPDATE events SET principal = 'mallory',"
                " hash_bytes = decode(%s, 'hex') WHERE seq = 2", (forged,))
        events, head = await read(dsn)
        assert events[1].hash == forged and event_hash(events[1]) == forged
        broken = verify_chain(events, heads=[head])
        assert broken is not None
        assert (broken.problem, broken.seq) == ((UNLINKED, 3) if old else (ALTERED, 3))


@pytest_twisted.ensureDeferred
async def test_a_filtered_read_without_the_predecessor(postgres_admin_dsn: str) -> None:
    """A new row whose predecessor is gone reads with an empty prev_hash
    (not another event's hash), so even a filtered selection finds it
    unverifiable; an old row keeps its stored prev_hash."""
    with database(postgres_admin_dsn, 2, 5) as (dsn, appended):
        execute(dsn, "DELETE FROM events WHERE seq IN (1, 5)")
        writes, _ = await read(dsn, kinds=["state_write"])
        assert writes == [appended[1], evolve(appended[5], prev_hash="")]
        broken = verify_chain(writes, complete=False)
        assert broken is not None and (broken.problem, broken.seq) == (ALTERED, 6)
        whole, _ = await read(dsn)
        assert [(event.seq, event.prev_hash) for event in whole] == [
            (2, appended[0].hash), (3, appended[1].hash), (4, appended[2].hash), (6, ""),
            (7, appended[5].hash)]


def test_the_upgrade_rewrites_no_row(postgres_admin_dsn: str) -> None:
    """Schemas 12 and 13 leave the events table's file and its old rows as they
    were (no rewrite: the upgrade is instant), and its checks refuse a new
    row in neither or both forms."""
    with new_database(postgres_admin_dsn) as dsn:
        schema_at(dsn, 11)
        append(dsn, CHAIN)
        before = query(dsn, "SELECT pg_relation_filenode('events'),"
                            " array_agg(ctid::text ORDER BY seq) FROM events")
        upgrade_schema(dsn)
        assert query(dsn, "SELECT pg_relation_filenode('events'),"
                          " array_agg(ctid::text ORDER BY seq) FROM events") == before
        for columns, values in (
                ("hash_bytes, prev_hash, hash", "sha256('x'), '', ''"),  # both forms
                ("hash", "repeat('a', 64)"),  # the old form without its prev_hash
                ("hash_bytes", "'\\x00'::bytea"),  # not 32 bytes
                ("hash_bytes, prev_hash", "sha256('x'), ''"),  # a prev_hash with bytes
                ("hash_bytes, sha256, sha256_bytes", "sha256('x'), 'a', sha256('y')"),
                ("hash_bytes, lock_id, lock_uuid", f"sha256('x'), 'a', '{LOCK_ID}'")):
            with pytest.raises(psycopg2.errors.CheckViolation):
                execute(dsn, f"INSERT INTO events (tenant_id, seq, kind, principal, at,"
                             f" {columns}) VALUES ('{TENANT}', 99, 'k', 'p', now(), {values})")


_texts = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
                 max_size=20)
_sha256s = st.one_of(st.none(), st.just(SHA), st.just(SHA.upper()), _texts)
_lock_ids = st.one_of(st.none(), st.uuids().map(str), st.uuids().map(lambda u: str(u).upper()),
                      _texts)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["state_write", "lock_acquire", "note"]),
                          _texts, st.one_of(st.none(), _texts), _sha256s, _lock_ids,
                          st.dictionaries(_texts, _texts, max_size=3)),
                min_size=1, max_size=5))
def test_any_event_reads_back_as_appended(postgres_dsn: str,
                                          specs: list[tuple[Any, ...]]) -> None:
    """Any event (any text, a sha256 in hex, in capitals or not hex at all,
    a lock ID a uuid or not, in capitals or not) reads back from the new
    form exactly as appended, and the chain verifies."""
    tenant = "t-" + hashlib.sha256(repr(specs).encode()).hexdigest()[:12]
    execute(postgres_dsn, "INSERT INTO tenants (id) VALUES (%s) ON CONFLICT DO NOTHING",
            (tenant,))
    execute(postgres_dsn, "DELETE FROM events WHERE tenant_id = %s", (tenant,))
    execute(postgres_dsn, "UPDATE tenants SET chain_seq = 0, chain_head = %s WHERE id = %s",
            (GENESIS, tenant))
    appended = append(postgres_dsn, [
        (kind, principal or "p", path, {"sha256": sha256, "lock_id": lock_id,
                                        "detail": detail})
        for kind, principal, path, sha256, lock_id, detail in specs], tenant=tenant)
    statement = select_events(None, None, None, None)
    rows = query(postgres_dsn, statement, {"tenant": tenant})
    assert [event_row(row) for row in rows] == appended
    assert verify_chain(appended) is None
    assert [event_row(row) for row in query(
        postgres_dsn, select_events(None, [kind for kind, *_ in specs], None, None),
        {"tenant": tenant, "kinds": [kind for kind, *_ in specs]})] == appended


@pytest_twisted.ensureDeferred
async def test_a_time_range_reads_only_its_pages(postgres_dsn: str) -> None:
    """list_events' time range over 50,000 events (two tenants, a second
    apart) returns exactly the events in [since, until) and reads a small
    part of the table (the BRIN index on at), not all of it."""
    execute(postgres_dsn, "INSERT INTO tenants (id) VALUES (%s), ('other')", (TENANT,))
    execute(postgres_dsn, "INSERT INTO events (tenant_id, seq, kind, principal, at, detail,"
                          " hash_bytes) SELECT CASE WHEN n %% 2 = 0 THEN %s ELSE 'other' END,"
                          " (n + 1) / 2, 'note', 'p', %s + n * interval '1 second',"
                          " '{\"n\":' || n || '}', sha256(n::text::bytea)"
                          " FROM generate_series(1, 50000) AS n", (TENANT, AT))
    connection = psycopg2.connect(postgres_dsn)
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE events")
            since, until = AT + timedelta(seconds=30_000), AT + timedelta(seconds=30_200)
            statement = select_events(None, None, since, until)
            params = {"tenant": TENANT, "since": since, "until": until}
            cursor.execute(statement, params)
            assert [row[0] for row in cursor.fetchall()] == list(range(15_000, 15_100))
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params)
            plan = cursor.fetchone()[0][0]["Plan"]
            cursor.execute("SELECT relpages FROM pg_class WHERE relname = 'events'")
            (pages,) = cursor.fetchone()
    finally:
        connection.close()
    assert pages > 400
    assert plan["Shared Hit Blocks"] + plan["Shared Read Blocks"] < pages / 4, plan


@pytest_twisted.ensureDeferred
async def test_the_dashboard_finds_a_writer_without_reading_older_events(
        postgres_dsn: str) -> None:
    """A state's listing row carries the event that wrote its current
    version, found from the newest of the state's events down: with 5,000
    older events of the state, the statement reads a handful of rows (no
    window reading past the LIMIT), and the event comes back whole."""
    from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
    from kilolock.rules.listing import StateListQuery
    from kilolock.store.postgres.dashboard import select_states_page
    from tests.support.stores import postgres_store

    execute(postgres_dsn, "INSERT INTO events (tenant_id, seq, kind, state_path, principal,"
                          " at, detail, hash_bytes) SELECT %s, n, 'lock_acquire', 'app', 'p',"
                          " %s, '{}', sha256(n::text::bytea) FROM generate_series(1, 5000) n",
            (DEFAULT_TENANT, AT))
    execute(postgres_dsn, "UPDATE tenants SET chain_seq = 5000,"
                          " chain_head = encode(sha256('5000'::bytea), 'hex') WHERE id = %s",
            (DEFAULT_TENANT,))
    execute(postgres_dsn, "ANALYZE events")
    store = postgres_store(postgres_dsn)
    await store.start()
    try:
        raw = state_with(1, "m", "s", count=2)
        await store.write_state(StateKey(DEFAULT_TENANT, "app"), upload(raw), None,
                                Principal(DEFAULT_TENANT, "alice"))
        written = (await store.list_events(DEFAULT_TENANT, state_path="app",
                                           kinds=["state_write"]))[0]
        listing = await store.list_states_page(DEFAULT_TENANT, StateListQuery())
    finally:
        await store.stop()
    assert [row.last_write for row in listing.listings] == [written]
    statement, _, params = select_states_page(StateListQuery())
    rows = query(postgres_dsn, "EXPLAIN (ANALYZE, FORMAT JSON) " + statement,
                 {**params, "tenant": DEFAULT_TENANT})
    assert most_rows(rows[0][0][0]["Plan"]) <= 10


def most_rows(node: dict[str, Any]) -> int:
    """The most rows any node of an executed plan read: produced or removed
    by its filter (loops counted)."""
    read = int(node["Actual Rows"]) + int(node.get("Rows Removed by Filter", 0))
    return max([read * int(node.get("Actual Loops", 1)),
                *(most_rows(child) for child in node.get("Plans", []))])


#: Alterations of one column of a stored event (SQL, the row is C{seq}).
ALTERATIONS = {
    "principal": "principal = principal || 'x'",
    "kind": "kind = 'lock_force_release'",
    "state_path": "state_path = coalesce(state_path, '') || '/x'",
    "at": "at = at + interval '1 microsecond'",
    "detail": "detail = '{\"who\":\"mallory\"}'",
    "serial": "serial = coalesce(serial, 0) + 1",
    "lock_id": "lock_uuid = CASE WHEN lock_uuid IS NULL THEN gen_random_uuid() END",
    "sha256": "sha256_bytes = CASE WHEN sha256_bytes IS NULL THEN sha256('x') END",
    "hash": "hash_bytes = sha256(hash_bytes)",
}


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(min_value=1, max_value=len(CHAIN)), st.sampled_from(sorted(ALTERATIONS)))
def test_any_altered_column_of_a_new_event_is_caught(postgres_dsn: str, seq: int,
                                                     column: str) -> None:
    """Whichever column of whichever new-form event is altered, the chain
    no longer verifies against its head, and the break is at that event."""
    tenant = f"t-{seq}-{column}"
    execute(postgres_dsn, "DELETE FROM events WHERE tenant_id = %s", (tenant,))
    execute(postgres_dsn, "INSERT INTO tenants (id) VALUES (%s) ON CONFLICT (id) DO UPDATE"
                          " SET chain_seq = 0, chain_head = %s", (tenant, GENESIS))
    appended = append(postgres_dsn, CHAIN, tenant=tenant)
    execute(postgres_dsn, f"UPDATE events SET {ALTERATIONS[column]}"
                          " WHERE tenant_id = %s AND seq = %s", (tenant, seq))
    rows = query(postgres_dsn, select_events(None, None, None, None), {"tenant": tenant})
    events = [event_row(row) for row in rows]
    assert events != appended
    broken = verify_chain(events, heads=[ChainHead(len(CHAIN), appended[-1].hash)])
    assert broken is not None
    assert broken.seq == seq


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize("old", [True, False], ids=["old rows", "new rows"])
async def test_a_rewritten_chain_fails_only_a_pinned_head(postgres_admin_dsn: str,
                                                          old: bool) -> None:
    """The chain rewritten from seq 3 on (re-hashed, re-linked) with the
    recorded head moved along verifies against that head -- nothing in the
    database can tell -- and fails a head pinned at seq 3 before
    (head_mismatch), in either form."""
    with database(postgres_admin_dsn, 7 if old else 0, 0 if old else 7) as (dsn, appended):
        pinned = ChainHead(3, appended[2].hash)
        forged = appended[:2]
        for event in appended[2:]:
            event = evolve(event, principal="mallory", prev_hash=forged[-1].hash)
            forged.append(evolve(event, hash=event_hash(event)))
            if old:
                execute(dsn, "UPDATE events SET principal = 'mallory', prev_hash = %s,"
                             " hash = %s WHERE seq = %s",
                        (forged[-1].prev_hash, forged[-1].hash, event.seq))
            else:
                execute(dsn, "UPDATE events SET principal = 'mallory',"
                             " hash_bytes = decode(%s, 'hex') WHERE seq = %s",
                        (forged[-1].hash, event.seq))
        execute(dsn, "UPDATE tenants SET chain_head = %s WHERE id = %s",
                (forged[-1].hash, TENANT))
        events, head = await read(dsn)
        assert events == forged
        assert verify_chain(events, heads=[head]) is None
        broken = verify_chain(events, heads=[head, pinned])
        assert broken is not None
        assert (broken.problem, broken.seq) == (HEAD_MISMATCH, 3)
