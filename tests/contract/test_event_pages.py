"""The store contract of a window of audit events
(L{IStateStore.list_events_page}, the rule of L{kilolock.rules.event_pages}) on
both stores: every window equals the rule applied to the whole chain; and,
in PostgreSQL with 100,000 events, a page reads only what it shows (the
plan's actual rows), at the newest end and deep in the chain."""

from __future__ import annotations

import itertools
import json
from typing import Any

import psycopg2
import pytest
import pytest_twisted

from kilolock.core.events import AuditEvent
from kilolock.core.model import DEFAULT_TENANT
from kilolock.rules.event_pages import EventPageQuery, event_matches, in_window
from kilolock.store.postgres.event_pages import select_events_page

SCOPE = "ws_a/env_a/"
#: (kind, principal, state path, detail) of the seeded events, cycled.
SEEDS = [
    ("state_write", "token:ci", SCOPE + "net", {"client": "10.0.0.7", "version": 3}),
    ("lock_acquire", "token:alice", SCOPE + "app", {"who": "alice@laptop"}),
    ("tenant_token_create", "control", None, {"name": "ci"}),
    ("state_write", "oidc:repo:acme/infra", "ws_b/env_b/net", {"claims": {"ref": "main"}}),
    ("lock_release", "token:ci", SCOPE + "net", {"who": "ci@runner-3"}),
    ("lock_acquire", "token:bob", SCOPE + "net", {"who": "bob@café", "op": 'x"y'}),
]


async def seed(target: Any, count: int) -> list[AuditEvent]:
    for index, (kind, principal, path, detail) in zip(range(count), itertools.cycle(SEEDS)):
        await target.record_event(DEFAULT_TENANT, kind, principal, path,
                                  {**detail, "n": index})
    await target.record_event("acme", "state_write", "token:ci", SCOPE + "net", {})
    events: list[AuditEvent] = await target.list_events(DEFAULT_TENANT)
    return events


def expected(events: list[AuditEvent], query: EventPageQuery) -> list[int]:
    """The rule on the whole chain: the window's seqs in the store's order."""
    ordered = events if query.ascending else events[::-1]
    return [event.seq for event in ordered
            if in_window(query, event.seq) and event_matches(query, event)][:query.limit]


QUERIES = [
    EventPageQuery(limit=7),
    EventPageQuery(limit=7, before=20),
    EventPageQuery(limit=7, after=20),
    EventPageQuery(limit=100, before=1),
    EventPageQuery(limit=100, after=42),
    EventPageQuery(limit=5, kind="state_write"),
    EventPageQuery(limit=5, kind="state_write", before=30),
    EventPageQuery(limit=50, state_path=SCOPE + "net", after=3),
    EventPageQuery(limit=50, path_prefix=SCOPE),
    EventPageQuery(limit=50, path_prefix="ws_"),
    EventPageQuery(limit=50, by="alice"),  # principal and detail
    EventPageQuery(limit=50, by="runner-3"),  # a detail value
    EventPageQuery(limit=50, by="10.0.0"),
    EventPageQuery(limit=50, by="who"),  # a key
    EventPageQuery(limit=50, by="main"),  # inside a nested value
    EventPageQuery(limit=50, by="17"),  # a number's text
    EventPageQuery(limit=50, by="é"),  # stored escaped
    EventPageQuery(limit=50, by="x\"y"),  # a quote, escaped in the detail
    EventPageQuery(limit=3, kind="lock_acquire", path_prefix=SCOPE, by="alice", before=40),
    EventPageQuery(limit=10, kind="no_such_kind"),
]


@pytest_twisted.ensureDeferred
async def test_every_window_is_the_rule_applied_to_the_chain(store: Any) -> None:
    """Newest first below a cursor, oldest first above one; kind, state,
    scope prefix (events about no state excluded) and author filters; only
    the tenant's events."""
    events = await seed(store, 42)
    assert len(events) == 42
    for query in QUERIES:
        found = await store.list_events_page(DEFAULT_TENANT, query)
        assert [event.seq for event in found] == expected(events, query), query
        assert all(event.tenant == DEFAULT_TENANT for event in found)
    assert [event.seq for event in await store.list_events_page(
        DEFAULT_TENANT, EventPageQuery(limit=3))] == [42, 41, 40]
    assert [event.seq for event in await store.list_events_page(
        DEFAULT_TENANT, EventPageQuery(limit=3, after=0))] == [1, 2, 3]
    assert [event.principal for event in await store.list_events_page(
        DEFAULT_TENANT, EventPageQuery(limit=50, by="alice"))] == ["token:alice"] * 7
    assert await store.list_events_page("nobody", EventPageQuery(limit=5)) == []
    # The events themselves, whole (hashes included).
    by_seq = {event.seq: event for event in events}
    for event in await store.list_events_page(DEFAULT_TENANT, EventPageQuery(limit=42)):
        assert event == by_seq[event.seq]


def bulk_events(dsn: str, count: int) -> None:
    """C{count} events of the default tenant inserted by SQL (hashes are
    placeholders: paging reads no hash), then ANALYZE."""
    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute("INSERT INTO tenants (id) VALUES (%s) ON CONFLICT DO NOTHING",
                           (DEFAULT_TENANT,))
            cursor.execute(
                "INSERT INTO events (tenant_id, seq, kind, state_path, principal, at, detail,"
                " prev_hash, hash)"
                " SELECT %s, n, CASE WHEN n %% 100 = 0 THEN 'lock_force_release'"
                "   ELSE 'state_write' END, 'ws/env/s' || (n %% 50), 'token:ci',"
                " now(), '{\"n\": ' || n || '}', repeat('0', 64), repeat('1', 64)"
                " FROM generate_series(1, %s) AS n", (DEFAULT_TENANT, count))
            cursor.execute("UPDATE tenants SET chain_seq = %s WHERE id = %s",
                           (count, DEFAULT_TENANT))
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE events")
    finally:
        connection.close()


def rows_read(dsn: str, query: EventPageQuery) -> tuple[list[int], int]:
    """The seqs C{query} selects, and the most rows any node of its
    executed plan produced (EXPLAIN ANALYZE)."""
    statement, params = select_events_page(DEFAULT_TENANT, query)
    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(statement, params)
            seqs = [row[0] for row in cursor.fetchall()]
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
            plan = cursor.fetchone()[0]
    finally:
        connection.close()

    def most(node: dict[str, Any]) -> int:
        return max([int(node["Actual Rows"]) * int(node.get("Actual Loops", 1)),
                    *(most(child) for child in node.get("Plans", []))])

    return seqs, most(json.loads(plan)[0]["Plan"] if isinstance(plan, str) else plan[0]["Plan"])


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_a_page_of_100000_events_reads_only_its_rows(postgres_dsn: str) -> None:
    """With 100,000 events, the newest page, a page deep in the chain and
    a page above a cursor each read at most the page's rows (plus one) off
    the (tenant, seq) index; a kind filter that one event in 100 matches
    reads about 100 rows per match, not the chain."""
    from tests.support.stores import postgres_store

    started = postgres_store(postgres_dsn)
    await started.start()  # the schema
    try:
        bulk_events(postgres_dsn, 100_000)
        newest = await started.list_events_page(DEFAULT_TENANT, EventPageQuery(limit=101))
        assert [event.seq for event in newest] == list(range(100_000, 99_899, -1))
    finally:
        await started.stop()
    for query, seqs in (
            (EventPageQuery(limit=101), list(range(100_000, 99_899, -1))),
            (EventPageQuery(limit=101, before=50_001), list(range(50_000, 49_899, -1))),
            (EventPageQuery(limit=101, after=1_000), list(range(1_001, 1_102)))):
        found, read = rows_read(postgres_dsn, query)
        assert found == seqs
        assert read <= 101, (query, read)
    found, read = rows_read(postgres_dsn, EventPageQuery(limit=11, kind="lock_force_release",
                                                         before=50_001))
    assert found == list(range(50_000, 48_900, -100))
    assert read <= 1_100, read
