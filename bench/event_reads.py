"""Reading the audit trail from PostgreSQL: how fast each kind of read is
with the events stored one way or the other.

Two tenants of --events events each (interleaved, as a busy database holds
them; 50 states, a write cycle's three kinds), hash-chained, in two
databases of one embedded cluster: the old form (prev_hash and hash as hex
text, as schema 11 wrote them) and the new form (hash as bytes, no
prev_hash).  Timed (medians of --rounds, milliseconds), each as the store
runs it (kilolock.store.postgres.statements / event_pages): the whole
chain (what verification reads), one state's events, a page of 50, and a
time range of 1 % of the events (list_events since/until) -- the last with
the index the schema has, then with each --time-index candidate in its place
(EXPLAIN ANALYZE printed for each).

    python bench/event_reads.py [--events 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from attrs import evolve
from servers import new_database, postgres_cluster

from kilolock.core.audit import GENESIS, event_hash
from kilolock.core.events import AuditEvent
from kilolock.rules.event_pages import EventPageQuery
from kilolock.store.postgres.event_pages import select_events_page
from kilolock.store.postgres.statements import select_events
from kilolock.store.schema.upgrade import ensure_schema_blocking

START = datetime(2026, 1, 1, tzinfo=UTC)
KINDS = ("lock_acquire", "state_write", "lock_release")
TENANTS = ("acme", "other")


def chain(tenant: str, count: int) -> list[AuditEvent]:
    """C{count} chained events of C{tenant}, a second apart."""
    events, prev = [], GENESIS
    for seq in range(1, count + 1):
        kind = KINDS[seq % 3]
        event = AuditEvent(
            seq=seq, tenant=tenant, kind=kind, state_path=f"team/app-{seq // 3 % 50}",
            principal="token:ci", at=START + timedelta(seconds=seq), lock_id=str(seq),
            serial=seq if kind == "state_write" else None,
            sha256=hashlib.sha256(str(seq).encode()).hexdigest()
            if kind == "state_write" else None,
            detail='{"client":"10.0.0.1","operation":"OperationTypeApply","who":"ci@host"}',
            prev_hash=prev)
        event = evolve(event, hash=event_hash(event))
        events.append(event)
        prev = event.hash
    return events


def load(dsn: str, count: int, old_form: bool) -> None:
    """The schema, then both tenants' chains, interleaved, in one COPY."""
    chains = [chain(tenant, count) for tenant in TENANTS]
    columns = ("tenant_id, seq, kind, state_path, principal, at, lock_id, serial, detail, "
               + ("sha256, prev_hash, hash" if old_form else "sha256_bytes, hash_bytes"))
    with psycopg.connect(dsn) as connection, connection.cursor() as cursor:
        ensure_schema_blocking(cursor)
        for tenant, events in zip(TENANTS, chains, strict=True):
            cursor.execute("INSERT INTO tenants (id, chain_seq, chain_head)"
                           " VALUES (%s, %s, %s)", (tenant, count, events[-1].hash))
        with cursor.copy(f"COPY events ({columns}) FROM STDIN") as copy:
            for index in range(count):
                for events in chains:
                    event = events[index]
                    common = (event.tenant, event.seq, event.kind, event.state_path,
                              event.principal, event.at, event.lock_id, event.serial,
                              event.detail)
                    if old_form:
                        copy.write_row((*common, event.sha256, event.prev_hash, event.hash))
                    else:
                        copy.write_row((*common, None if event.sha256 is None
                                        else bytes.fromhex(event.sha256),
                                        bytes.fromhex(event.hash)))
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE events")


def timed(dsn: str, statement: str, params: dict[str, Any], rounds: int) -> tuple[float, int]:
    """The median milliseconds of C{statement} (rows fetched), and its rows."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        times, found = [], 0
        for _ in range(rounds + 1):  # the first warms the cache
            began = time.perf_counter()
            found = len(connection.execute(statement, params).fetchall())  # type: ignore[arg-type]
            times.append((time.perf_counter() - began) * 1000)
        return statistics.median(times[1:]), found


def explain(dsn: str, statement: str, params: dict[str, Any]) -> str:
    with psycopg.connect(dsn, autocommit=True) as connection:
        rows = connection.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement,  # type: ignore[arg-type]
                                  params).fetchall()
        return "\n".join(f"    {row[0]}" for row in rows)


def reads(count: int) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each read, as the store builds it."""
    middle = START + timedelta(seconds=count // 2)
    page, page_params = select_events_page("acme", EventPageQuery(limit=50))
    return {
        "whole chain": (select_events(None, None, None, None), {"tenant": "acme"}),
        "one state": (select_events("team/app-7", None, None, None),
                      {"tenant": "acme", "path": "team/app-7"}),
        "page of 50": (page, page_params),
        "time range (1 %)": (select_events(None, None, middle, middle), {
            "tenant": "acme", "since": middle, "until": middle + timedelta(seconds=count // 100)}),
    }


#: Indexes that may serve the time range instead of events_tenant_at.
TIME_INDEXES = {
    "btree (tenant_id, at)": "CREATE INDEX events_tenant_at ON events (tenant_id, at)",
    "brin (at)": "CREATE INDEX events_at ON events USING brin (at)",
    "brin (at) 32 pages": "CREATE INDEX events_at ON events USING brin (at)"
                          " WITH (pages_per_range = 32)",
    "none": "",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--time-index", action="append", choices=sorted(TIME_INDEXES))
    args = parser.parse_args()
    statements = reads(args.events)
    with postgres_cluster() as cluster:
        dsns = {form: new_database(cluster, "events_" + form.replace(" ", "_"))
                for form in ("old form", "new form")}
        for form, dsn in dsns.items():
            load(dsn, args.events, form == "old form")
        print(f"{args.events} events of each of two tenants, medians of {args.rounds}, ms")
        print("| read | rows | old form | new form |")
        print("|---|---|---|---|")
        for name, (statement, params) in statements.items():
            cells = [timed(dsn, statement, params, args.rounds) for dsn in dsns.values()]
            print(f"| {name} | {cells[0][1]} | {cells[0][0]:.2f} | {cells[1][0]:.2f} |")
        dsn = dsns["new form"]
        statement, params = statements["time range (1 %)"]
        with psycopg.connect(dsn, autocommit=True) as connection:
            present = {str(name) for (name,) in connection.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'events'").fetchall()}
        print("\n| time range served by | index bytes | ms |")
        print("|---|---|---|")
        plans = io.StringIO()
        for label in args.time_index or sorted(TIME_INDEXES):
            with psycopg.connect(dsn, autocommit=True) as connection:
                for name in ("events_tenant_at", "events_at"):
                    connection.execute(f"DROP INDEX IF EXISTS {name}")
                if TIME_INDEXES[label]:
                    connection.execute(TIME_INDEXES[label])  # type: ignore[arg-type]
                connection.execute("ANALYZE events")
                size = connection.execute(
                    "SELECT coalesce(sum(pg_relation_size(indexrelid)), 0) FROM pg_index"
                    " WHERE indexrelid::regclass::text IN ('events_tenant_at', 'events_at')"
                ).fetchone()
            ms, _ = timed(dsn, statement, params, args.rounds)
            print(f"| {label} | {size[0] if size else 0} | {ms:.2f} |")
            plans.write(f"{label}:\n{explain(dsn, statement, params)}\n")
        print(f"\n(indexes of the schema: {', '.join(sorted(present))})\n")
        print(plans.getvalue())


if __name__ == "__main__":
    main()
