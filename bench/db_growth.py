"""Database bytes per version: how fast PostgreSQL grows with history.

Kilolock (PostgreSQL store, an embedded cluster of the benchmark's own) gets
--states states, each rewritten --versions times by Terraform's cycle (LOCK
-> POST ?ID= -> UNLOCK) with 2 of its 50 resources changed each time
(bench/state_history.py: the realistic 41 KB state).  Printed: the growth of
every table (heap, TOAST and indexes) from the first versions to the last,
per version written, after a VACUUM (so that dead rows, e.g. replaced
projection rows, count once as reusable space, as with autovacuum), and the
bytes a GET of a version returns checked against what was written.

    python bench/db_growth.py [--states 20] [--versions 50] [--vacuum-every N]

With C{--vacuum-every N} a VACUUM also runs after every N versions of each
state, as autovacuum would on a busy table: dead projection rows are then
reused within the window instead of counting once each.  Also printed: each
index's growth, and each event kind's average row size (its hashes apart).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from http_client import Connection
from servers import new_database, postgres_cluster, running
from state_history import history
from write_cycle import lock_info

TABLES = ("state_versions", "events", "resources", "resource_dependencies", "outputs",
          "states", "locks", "tenants")


def event_sizes(dsn: str) -> list[tuple[str, int, float, float]]:
    """Per event kind: how many, the average row (pg_column_size of the
    row), and the average of its three hash columns as stored."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        return [(str(kind), int(count), float(row), float(hashes)) for kind, count, row, hashes
                in connection.execute(
                    "SELECT kind, count(*), avg(pg_column_size(e.*)),"
                    " avg(coalesce(pg_column_size(sha256), 0) + pg_column_size(prev_hash)"
                    "     + pg_column_size(hash))"
                    " FROM events e GROUP BY kind ORDER BY kind").fetchall()]


def index_sizes(dsn: str) -> dict[str, int]:
    """Each index of the tables measured, in bytes."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        return {str(name): int(size) for name, size in connection.execute(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid)"
            " FROM pg_index WHERE indrelid::regclass::text = ANY(%s)",
            (list(TABLES),)).fetchall()}


def sizes(dsn: str) -> dict[str, int]:
    """Each table's size in bytes (heap, TOAST, indexes) after a VACUUM."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("VACUUM")
        return {table: int(connection.execute("SELECT pg_total_relation_size(%s)",
                                               (table,)).fetchone()[0])  # type: ignore[index]
                for table in TABLES}


async def write(port: int, name: str, bodies: list[bytes], first: int) -> None:
    connection = await Connection.open(port)
    try:
        path = f"/v1/states/{name}"
        for body in bodies:
            lock_id = str(uuid.uuid4())
            info = lock_info(lock_id)
            for method, target, payload in (("LOCK", path, info),
                                            ("POST", f"{path}?ID={lock_id}", body),
                                            ("UNLOCK", path, info)):
                status, _ = await connection.request(method, target, payload)
                if status != 200:
                    raise RuntimeError(f"{method} answered {status}")
        for number, body in enumerate(bodies, first):
            status, got = await connection.request(
                "GET", f"/v1/native/states/{name}/-/versions/{number}")
            if status != 200 or got != body:
                raise RuntimeError(f"GET version {number}: {status}, not the bytes written")
    finally:
        await connection.close()


async def write_all(port: int, states: int, bodies: list[list[bytes]], start: int,
                    end: int) -> None:
    await asyncio.gather(*(write(port, f"history-{index}", bodies[index][start:end], start + 1)
                           for index in range(states)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, default=20)
    parser.add_argument("--versions", type=int, default=50)
    parser.add_argument("--vacuum-every", type=int, default=0,
                        help="VACUUM after every N versions of each state (as autovacuum"
                             " would), not only before and after")
    args = parser.parse_args()
    warm = 5
    bodies = [list(history(warm + args.versions, seed=index)) for index in range(args.states)]
    print(f"state size: {len(bodies[0][0])} bytes, 50 resources, 2 changed per version")
    with postgres_cluster() as cluster:
        dsn = new_database(cluster, "growth")
        with running("postgres", ["--database", dsn]) as (port, _):
            asyncio.run(write_all(port, args.states, bodies, 0, warm))
            before, indexes_before = sizes(dsn), index_sizes(dsn)
            step = args.vacuum_every or args.versions
            for start in range(warm, warm + args.versions, step):
                asyncio.run(write_all(port, args.states, bodies, start,
                                      min(start + step, warm + args.versions)))
                if args.vacuum_every:
                    sizes(dsn)  # a VACUUM, as autovacuum would run
            after, indexes_after = sizes(dsn), index_sizes(dsn)
            kinds = event_sizes(dsn)
    versions = args.states * args.versions
    print(f"{versions} versions ({args.states} states x {args.versions})")
    print("| table | bytes per version |")
    print("|---|---|")
    for table in TABLES:
        print(f"| {table} | {(after[table] - before[table]) / versions:.0f} |")
    total = sum(after.values()) - sum(before.values())
    print(f"| **all** | **{total / versions:.0f}** |")
    print("| index | bytes per version |")
    print("|---|---|")
    for name in sorted(indexes_after):
        grown = indexes_after[name] - indexes_before.get(name, 0)
        if grown:
            print(f"| {name} | {grown / versions:.0f} |")
    print("| event kind | events | average row bytes | of which hashes |")
    print("|---|---|---|---|")
    for kind, count, row, hashes in kinds:
        print(f"| {kind} | {count} | {row:.0f} | {hashes:.0f} |")


if __name__ == "__main__":
    main()
