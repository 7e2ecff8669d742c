"""Benchmark: what a stored version costs on disk, through a real server.

    python bench/at_rest.py [--versions 200] [--states 3] [--large-versions 20]
                            [--large-resources 5000] [--skip-large]

Kilolock (twistd, PostgreSQL store on an embedded cluster of the
benchmark's own) is written two histories through the HTTP lane, once with
encryption at rest off and once on (a fresh database each):

  - small: C{--states} states of C{--versions} versions each of the
    realistic 50-resource state (bench/state_history.py: 41 KB, two random
    resources changed per version);
  - large: C{--large-versions} versions of bench/large_state.py's state at
    C{--large-resources} resources (5,000: 12 MB; 50,000 is W2's 120 MB),
    two values changed per version.

Then, in the unencrypted database, every payload is replaced by the raw
bytes of its version (as rows were stored before compression: C{identity},
the column's storage back to EXTENDED so PostgreSQL compresses them with
pglz, as it did) -- "before compression".

Printed per history and configuration, after a VACUUM (FULL for the
rewritten one): the bytes of C{state_versions} (heap, TOAST, indexes) per
version, and the payload and wrapped-key bytes alone per version; every
version is read back and compared with what was written.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from http_client import Connection
from large_state import big_state
from servers import ENCRYPTED, new_database, postgres_cluster, running
from state_history import history, patched_history

#: Each state's versions, made again on every call (a large history is
#: never held in memory whole).
Histories = dict[str, Callable[[], Iterable[bytes]]]


async def write_all(port: int, states: Histories) -> None:
    """POST every version of every state, then GET each back."""
    connection = await Connection.open(port)
    try:
        for name, versions in states.items():
            for body in versions():
                status, answer = await connection.request("POST", f"/v1/states/{name}", body)
                if status != 200:
                    raise RuntimeError(f"POST {name}: {status} {answer[:200]!r}")
        for name, versions in states.items():
            for number, body in enumerate(versions(), 1):
                status, got = await connection.request(
                    "GET", f"/v1/native/states/{name}/-/versions/{number}")
                if status != 200 or got != body:
                    raise RuntimeError(f"version {number} of {name} does not read back")
    finally:
        await connection.close()


def measure(dsn: str, versions: int, full: bool = False) -> tuple[float, float]:
    """(state_versions bytes per version, payload and key bytes per version)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("VACUUM (FULL) state_versions" if full else "VACUUM state_versions")
        total = connection.execute("SELECT pg_total_relation_size('state_versions')").fetchone()
        payload = connection.execute(
            "SELECT sum(pg_column_size(payload) + coalesce(octet_length(data_key), 0))"
            " FROM state_versions").fetchone()
    assert total is not None and payload is not None
    return int(total[0]) / versions, int(payload[0]) / versions


def as_before_compression(dsn: str, states: Histories) -> None:
    """Every payload replaced by its raw bytes, as rows were stored before
    compression (codec identity, pglz TOAST)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("ALTER TABLE state_versions ALTER COLUMN payload SET STORAGE EXTENDED")
        for name, versions in states.items():
            for number, body in enumerate(versions(), 1):
                connection.execute(
                    "UPDATE state_versions v SET payload = %b, codec = 'identity',"
                    " base_number = NULL FROM states s WHERE s.id = v.state_id"
                    " AND s.path = %s AND v.number = %s", (body, name, number))


def run(cluster: object, title: str, states: Histories) -> None:
    sizes = [len(body) for versions in states.values() for body in versions()]
    count, raw = len(sizes), sum(sizes) / len(sizes)
    print(f"-- {title}: {count} versions, {raw:,.0f} raw bytes per version")
    print("| configuration | state_versions bytes per version | payload + key bytes per version |")
    print("|---|---|---|")
    plain_dsn = ""
    for kind in ("postgres", ENCRYPTED):
        dsn = new_database(cluster, f"bench_at_rest_{uuid.uuid4().hex[:8]}")  # type: ignore[arg-type]
        with running(kind, ["--database", dsn]) as (port, _):
            asyncio.run(write_all(port, states))
        table, payload = measure(dsn, count)
        label = "compressed, encrypted" if kind == ENCRYPTED else "compressed, not encrypted"
        print(f"| {label} | {table:,.0f} | {payload:,.0f} |", flush=True)
        if kind == "postgres":
            plain_dsn = dsn
    as_before_compression(plain_dsn, states)
    table, payload = measure(plain_dsn, count, full=True)
    print(f"| before compression (raw bytea, pglz) | {table:,.0f} | {payload:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", type=int, default=200)
    parser.add_argument("--states", type=int, default=3)
    parser.add_argument("--large-versions", type=int, default=20)
    parser.add_argument("--large-resources", type=int, default=5000)
    parser.add_argument("--skip-large", action="store_true")
    args = parser.parse_args()
    small: Histories = {
        f"s{index}": functools.partial(history, args.versions, seed=13 + index)
        for index in range(args.states)}
    with postgres_cluster() as cluster:
        run(cluster, "small: the realistic 50-resource state", small)
        if not args.skip_large:
            first = big_state(args.large_resources)
            large: Histories = {"big": functools.partial(
                patched_history, first, args.large_versions, rb"i-[0-9a-f]{12}")}
            run(cluster, f"large: bench/large_state.py's state, {args.large_resources}"
                         " resources", large)


if __name__ == "__main__":
    main()
