"""Database bytes per version: how fast PostgreSQL grows with history.

Kilolock (PostgreSQL store, an embedded cluster of the benchmark's own) gets
--states states, each rewritten --versions times by Terraform's cycle (LOCK
-> POST ?ID= -> UNLOCK) with 2 (--changed) of its 50 resources changed each time
(bench/state_history.py: the realistic 41 KB state).  Printed: the growth of
every table (heap, TOAST and indexes) from the first versions to the last,
per version written, after a VACUUM (so that dead rows, e.g. replaced
projection rows, count once as reusable space, as with autovacuum), and the
bytes a GET of a version returns checked against what was written.

    python bench/db_growth.py [--states 20] [--versions 50] [--vacuum-every N]
        [--no-vacuum] [--changed 2] [--kinds postgres-baseline,postgres]

With C{--kinds} several server kinds are measured in the same run, each on
a database of its own (C{postgres-baseline}: the code of another source
tree, KL_BENCH_BASELINE_TREE, e.g. main's: C{git archive main | tar -x -C
DIR}).  Also printed: the stored payload per version and the share of
versions that are full snapshots, and a version row's bytes besides its
payload.

With C{--vacuum-every N} a VACUUM also runs after every N versions of each
state, as autovacuum would on a busy table: dead projection rows are then
reused within the window instead of counting once each.  Also printed: each
index's growth, and each event kind's average row size (its hashes apart).

With C{--no-vacuum} no VACUUM runs at all: the growth is the files' as the
writes left them, dead rows included, less only what PostgreSQL reclaimed
by itself -- page pruning, or autovacuum, whose runs on each table during
the measurement are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from http_client import Connection
from servers import BASELINE, new_database, postgres_cluster, running
from state_history import history
from write_cycle import lock_info

TABLES = ("state_versions", "events", "resources", "resource_dependencies", "outputs",
          "states", "locks", "tenants")


def event_sizes(dsn: str) -> list[tuple[str, int, float, float]]:
    """Per event kind: how many, the average row (pg_column_size of the
    row), and the average of its hash columns as stored (whichever the
    schema has: text before schema 12, bytes too since)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        hash_columns = [str(name) for (name,) in connection.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'events'::regclass"
            " AND attname IN ('sha256', 'prev_hash', 'hash', 'hash_bytes', 'sha256_bytes')"
            " ORDER BY attnum").fetchall()]
        return [(str(kind), int(count), float(row), float(hashes)) for kind, count, row, hashes
                in connection.execute(
                    "SELECT kind, count(*), avg(pg_column_size(e.*)),"
                    " avg(" + " + ".join(f"coalesce(pg_column_size({column}), 0)"
                                        for column in hash_columns) + ")"
                    " FROM events e GROUP BY kind ORDER BY kind").fetchall()]


def autovacuums(dsn: str) -> dict[str, int]:
    """How many times autovacuum has vacuumed each table measured."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        return {str(name): int(count) for name, count in connection.execute(
            "SELECT relname, autovacuum_count FROM pg_stat_user_tables"
            " WHERE relname = ANY(%s)", (list(TABLES),)).fetchall()}


def index_sizes(dsn: str) -> dict[str, int]:
    """Each index of the tables measured, in bytes."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        return {str(name): int(size) for name, size in connection.execute(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid)"
            " FROM pg_index WHERE indrelid::regclass::text = ANY(%s)",
            (list(TABLES),)).fetchall()}


def sizes(dsn: str, vacuum: bool = True) -> dict[str, int]:
    """Each table's size in bytes (heap, TOAST, indexes), after a VACUUM
    when C{vacuum}."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        if vacuum:
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


def payload_figures(dsn: str) -> tuple[float, float, float]:
    """Per version: the stored payload's bytes, the share of versions that
    are full snapshots (the others are deltas), and the row's bytes besides
    its payload (pg_column_size of the row, less the payload's)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute(
            "SELECT avg(octet_length(payload)), avg((codec <> 'zstd-delta')::int),"
            " avg(pg_column_size(v.*) - pg_column_size(payload)) FROM state_versions v"
        ).fetchone()
        assert row is not None
        return float(row[0]), float(row[1]), float(row[2])


@dataclass
class Growth:
    """What one server kind's history cost, per version written."""

    tables: dict[str, float]
    indexes: dict[str, float]
    kinds: list[tuple[str, int, float, float]]
    payload: float
    snapshots: float
    row: float
    autovacuums: dict[str, int]
    resources_at_end: int


def measure(cluster: Any, kind: str, states: int, versions: int, vacuum_every: int,
            bodies: list[list[bytes]], vacuum: bool = True) -> Growth:
    """Write the histories through a server of C{kind} on a new database."""
    warm = 5
    dsn = new_database(cluster, "growth_" + kind.replace("-", "_"))
    with running(kind, ["--database", dsn]) as (port, _):
        asyncio.run(write_all(port, states, bodies, 0, warm))
        before, indexes_before = sizes(dsn, vacuum), index_sizes(dsn)
        autovacuums_before = autovacuums(dsn)
        step = vacuum_every or versions
        for start in range(warm, warm + versions, step):
            asyncio.run(write_all(port, states, bodies, start,
                                  min(start + step, warm + versions)))
            if vacuum_every:
                sizes(dsn)  # a VACUUM, as autovacuum would run
        after, indexes_after = sizes(dsn, vacuum), index_sizes(dsn)
        autovacuums_after = autovacuums(dsn)
        kinds = event_sizes(dsn)
        payload, snapshots, row = payload_figures(dsn)
    written = states * versions
    return Growth(
        tables={table: (after[table] - before[table]) / written for table in TABLES},
        indexes={name: (size - indexes_before.get(name, 0)) / written
                 for name, size in indexes_after.items()},
        kinds=kinds, payload=payload, snapshots=snapshots, row=row,
        autovacuums={table: count - autovacuums_before.get(table, 0)
                     for table, count in autovacuums_after.items()},
        resources_at_end=after["resources"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, default=20)
    parser.add_argument("--versions", type=int, default=50)
    parser.add_argument("--vacuum-every", type=int, default=0,
                        help="VACUUM after every N versions of each state (as autovacuum"
                             " would), not only before and after")
    parser.add_argument("--changed", type=int, default=2,
                        help="resources changed by each version, of 50")
    parser.add_argument("--no-vacuum", action="store_true",
                        help="no VACUUM at all, not even before and after: the growth as"
                             " the writes left the files")
    parser.add_argument("--kinds", default="postgres",
                        help="comma-separated server kinds, each on a database of its own in"
                             f" the same cluster, e.g. {BASELINE},postgres (the baseline's"
                             " tree in KL_BENCH_BASELINE_TREE)")
    args = parser.parse_args()
    if args.no_vacuum and args.vacuum_every:
        parser.error("--no-vacuum and --vacuum-every exclude each other")
    kinds = args.kinds.split(",")
    bodies = [list(history(5 + args.versions, changed=args.changed, seed=index))
              for index in range(args.states)]
    print(f"state size: {len(bodies[0][0])} bytes, 50 resources, {args.changed} changed per"
          " version")
    with postgres_cluster() as cluster:
        results = {kind: measure(cluster, kind, args.states, args.versions, args.vacuum_every,
                                 bodies, not args.no_vacuum) for kind in kinds}
    vacuums = ("no VACUUM" if args.no_vacuum
               else f"VACUUM every {args.vacuum_every or args.versions} versions")
    print(f"{args.states * args.versions} versions ({args.states} states x {args.versions}),"
          f" {vacuums}")
    header = " | ".join(kinds)
    print(f"| table, bytes per version | {header} |")
    print("|---|" + "---|" * len(kinds))
    for table in TABLES:
        print(f"| {table} | " + " | ".join(f"{results[kind].tables[table]:.0f}"
                                           for kind in kinds) + " |")
    print("| **all** | " + " | ".join(f"**{sum(results[kind].tables.values()):.0f}**"
                                      for kind in kinds) + " |")
    print(f"| index, bytes per version | {header} |")
    print("|---|" + "---|" * len(kinds))
    for name in sorted({name for kind in kinds for name in results[kind].indexes}):
        grown = [results[kind].indexes.get(name) for kind in kinds]
        if any(grown):
            print(f"| {name} | " + " | ".join("-" if value is None else f"{value:.0f}"
                                               for value in grown) + " |")
    print("| autovacuum runs during the measurement | " + " | ".join(
        ", ".join(f"{table} {count}" for table, count in sorted(results[kind].autovacuums.items())
                  if count) or "none" for kind in kinds) + " |")
    print("| the projection's resources at the end (one version per state), bytes | " + " | ".join(
        f"{results[kind].resources_at_end}" for kind in kinds) + " |")
    print(f"| a version row, bytes | {header} |")
    print("|---|" + "---|" * len(kinds))
    print("| payload (snapshot share) | " + " | ".join(
        f"{results[kind].payload:.0f} ({results[kind].snapshots:.0%})" for kind in kinds) + " |")
    print("| the row besides its payload | " + " | ".join(
        f"{results[kind].row:.0f}" for kind in kinds) + " |")
    for kind in kinds:
        print(f"{kind}: | event kind | events | average row bytes | of which hashes |")
        print("|---|---|---|---|")
        for event_kind, count, row, hashes in results[kind].kinds:
            print(f"| {event_kind} | {count} | {row:.0f} | {hashes:.0f} |")


if __name__ == "__main__":
    main()
