"""What each index of state_versions serves: the statements that use it,
timed with the index and without it.

--states states of --versions versions each (rows inserted by SQL, a full
snapshot every 10 versions, the others deltas against it; payloads of 700
bytes) in a database at the current schema.  For each index, its
statements (as the store runs them) are timed (median of --rounds, ms) and
explained, then the index is dropped and they are timed again (the index is
restored before the next one).  The per-version cost of each index is
bench/db_growth.py's.  (state_versions_base, the index of a delta's base,
went with schema 18: a purge finds the deltas of a version among the
versions after it, on state_versions_number.)

    python bench/version_indexes.py [--states 20] [--versions 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from servers import new_database, postgres_cluster

from kilolock.store.schema.upgrade import ensure_schema_blocking

#: Per index: its definition, and the statements that use it (label, SQL
#: with %(state)s = a state's id, %(n)s = a number near the end of history).
INDEXES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "state_versions_serial": (
        "CREATE INDEX state_versions_serial ON state_versions (state_id, serial)",
        [("a write's serial check (kl_write_state)",
          "SELECT EXISTS (SELECT 1 FROM state_versions v WHERE v.state_id = %(state)s"
          " AND v.serial = %(n)s + 1000000)")]),
    "state_versions_sha256": (
        "CREATE INDEX state_versions_sha256 ON state_versions USING hash (sha256)",
        [("a blob by sha256 (GET /v1/native/blobs)",
          "SELECT v.number FROM state_versions v JOIN states s ON s.id = v.state_id"
          " WHERE s.tenant_id = 'default' AND v.sha256 = md5(%(n)s::text) || md5('x')"
          " AND v.pruned_at IS NULL")]),
}


def load(dsn: str, states: int, versions: int) -> None:
    with psycopg.connect(dsn) as connection, connection.cursor() as cursor:
        ensure_schema_blocking(cursor)
        cursor.execute("INSERT INTO tenants (id) VALUES ('default') ON CONFLICT DO NOTHING")
        cursor.execute("INSERT INTO states (tenant_id, path, created_at, updated_at)"
                       " SELECT 'default', 's' || n, now(), now()"
                       " FROM generate_series(1, %s) AS n", (states,))
        for base in (True, False):  # the snapshots first: the deltas' key names them
            cursor.execute(
                "INSERT INTO state_versions (state_id, number, serial, lineage, sha256, size,"
                " payload, codec, base_number, created_at, principal, projected)"
                " SELECT s.id, n, n, 'lineage', md5(n::text) || md5('x'), 41000,"
                " convert_to(repeat('x', 700), 'UTF8'),"
                " CASE WHEN n %% 10 = 1 THEN 'zstd' ELSE 'zstd-delta' END,"
                " CASE WHEN n %% 10 = 1 THEN NULL ELSE n - (n - 1) %% 10 END, now(), 'p', true"
                " FROM states s, generate_series(1, %s) AS n"
                " WHERE (n %% 10 = 1) = %s", (versions, base))
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE")


def run(connection: Any, statement: str, params: dict[str, Any]) -> float:
    began = time.perf_counter()
    for part in statement.split("; "):
        connection.execute(part, params)
    return (time.perf_counter() - began) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, default=20)
    parser.add_argument("--versions", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with postgres_cluster() as cluster:
        dsn = new_database(cluster, "version_indexes")
        load(dsn, args.states, args.versions)
        params = {"state": 3, "n": args.versions - 9}
        print(f"{args.states} states x {args.versions} versions; medians of {args.rounds}, ms")
        print("| index | statement | with it | without it |")
        print("|---|---|---|---|")
        plans = []
        with psycopg.connect(dsn, autocommit=True) as connection:
            for index, (definition, statements) in INDEXES.items():
                cells = {}
                for present in (True, False):
                    if not present:
                        connection.execute(f"DROP INDEX {index}")
                    for label, statement in statements:
                        times = [run(connection, statement, params)
                                 for _ in range(args.rounds + 1)][1:]
                        cells.setdefault(label, []).append(statistics.median(times))
                        last = statement.split("; ")[1 if "; " in statement else 0]
                        plan = connection.execute(
                            "EXPLAIN (ANALYZE, COSTS OFF) " + last, params).fetchall() \
                            if not last.startswith("DELETE") else [
                                row for row in _explain_rolled_back(connection, last, params)]
                        plans.append(f"{index} {'present' if present else 'dropped'}: {label}\n"
                                     + "\n".join(f"    {row[0]}" for row in plan))
                connection.execute(definition)  # type: ignore[arg-type]
                for label, (with_it, without_it) in cells.items():
                    print(f"| {index} | {label} | {with_it:.2f} | {without_it:.2f} |")
        print()
        print("\n".join(plans))


def _explain_rolled_back(connection: Any, statement: str,
                         params: dict[str, Any]) -> list[tuple[str]]:
    connection.execute("BEGIN")
    try:
        return list(connection.execute("EXPLAIN (ANALYZE, COSTS OFF) " + statement,
                                       params).fetchall())
    finally:
        connection.execute("ROLLBACK")


if __name__ == "__main__":
    main()
