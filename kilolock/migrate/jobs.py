"""The commands of C{kilolock-migrate} beyond the schema upgrade: C{status}
(what the version rows hold: codecs, key ids, tombstones; and the chunks of
upload sessions in progress), the row jobs of
L{kilolock.migrate.rows} (C{rotate-keys}, C{encrypt-versions},
C{decrypt-versions}, C{compress-versions}), C{vacuum-purged} (the tables
that hold state bytes rewritten, so that the bytes of purged versions leave
PostgreSQL's data files) and C{recover} (L{kilolock.migrate.recover}).  Each runs
on a psycopg2 connection that L{kilolock.migrate.main} opened; blocking code,
for the command line only.
Nothing printed holds a secret or a state's bytes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, TextIO

import psycopg2
from psycopg2 import sql

from kilolock.atrest.keyring import KeyRing
from kilolock.migrate.recover import dump_lines, rows_from_database, rows_from_dump, write_versions
from kilolock.migrate.rows import JOBS, RowProgress, count_rows, run_job

__all__ = ["INCOMPLETE", "OK", "VACUUMED_TABLES", "recover_from_database", "recover_from_dump",
           "row_job", "status", "vacuum_purged"]

OK = 0
#: Rows were left to do or could not be read (the job's report says which).
INCOMPLETE = 5

_STATUS = """
SELECT v.codec, v.kek_id, count(*), coalesce(sum(octet_length(v.payload)), 0)
FROM state_versions v GROUP BY v.codec, v.kek_id ORDER BY v.codec, v.kek_id NULLS FIRST
"""


_CHUNK_STATUS = """
SELECT c.kek_id, count(*), coalesce(sum(octet_length(c.data)), 0)
FROM upload_chunks c GROUP BY c.kek_id ORDER BY c.kek_id NULLS FIRST
"""


def status(connection: Any, out: TextIO) -> int:
    """Print how many version rows each codec and key id has, and their
    stored bytes; then the chunks of upload sessions in progress by key id."""
    with connection, connection.cursor() as cursor:
        cursor.execute(_STATUS)
        found = cursor.fetchall()
        cursor.execute(_CHUNK_STATUS)
        chunks = cursor.fetchall()
    print(f"{'CODEC':<12} {'KEY ID':<24} {'VERSIONS':>10} {'STORED BYTES':>14}", file=out)
    for codec, kek_id, count, stored in found:
        print(f"{codec:<12} {kek_id or '(not encrypted)':<24} {count:>10} {stored:>14}",
              file=out)
    if not found:
        print("(no versions)", file=out)
    for kek_id, count, stored in chunks:
        print(f"{'upload chunk':<12} {kek_id or '(not encrypted)':<24} {count:>10} {stored:>14}",
              file=out)
    return OK


def row_job(connection: Any, name: str, keys: KeyRing | None, out: TextIO,
            batch: int | None = None) -> int:
    """Run the job C{name} with a progress bar on stderr; print what it did
    and what is left.  @return: the exit code (L{INCOMPLETE} when rows are
    left or failed)."""
    job = JOBS[name]
    active = None if keys is None else keys.active_key_id
    with connection, connection.cursor() as cursor:
        total = count_rows(cursor, job, active)
    if keys is not None and name != "decrypt-versions":
        print(f"kilolock-migrate: {job.what}: {total} rows; active key {active}", file=out)
    else:
        print(f"kilolock-migrate: {job.what}: {total} rows", file=out)
    progress = RowProgress(total, sys.stderr, job.what)
    report = run_job(connection, job, keys, progress, batch)
    progress.finish()
    print(f"changed: {report.changed}", file=out)
    if job.chunk_where is not None:
        print(f"chunks of upload sessions changed: {report.chunks_changed}", file=out)
    if report.unchanged:
        print(f"left as they are (zstd does not shrink them): {report.unchanged}", file=out)
    for what, reason in report.failed:
        print(f"FAILED: {what}: {reason}", file=sys.stderr)
    if report.remaining:
        print(f"kilolock-migrate: {report.remaining} rows still to do (in use during the run,"
              " or written meanwhile by a server with an older configuration): run the"
              " command again", file=sys.stderr)
    return INCOMPLETE if report.failed or report.remaining else OK


#: The tables whose rows hold a state's bytes or values: the versions'
#: payloads (and their TOAST), the projection (values Terraform does not
#: mark sensitive: where a leaked secret usually is), and the chunks of
#: upload sessions.  An UPDATE or DELETE leaves the old row in the table's
#: files until VACUUM, and a plain VACUUM leaves its bytes in the page's free
#: space until a new row happens to overwrite them: only a rewrite of the
#: table (VACUUM FULL) is sure to drop them.
VACUUMED_TABLES = ("state_versions", "resources", "outputs", "resource_dependencies",
                   "upload_chunks")


def vacuum_purged(connection: Any, out: TextIO, lock_timeout: float) -> int:
    """Rewrite each of L{VACUUMED_TABLES} (C{VACUUM (FULL, ANALYZE)}, one
    table at a time, each holding its table's ACCESS EXCLUSIVE lock while
    it is rewritten); print each one's size before and after and how long
    it took.  A table whose lock is not had within C{lock_timeout} seconds
    (a long transaction holds it) is left, and named.

    @return: the exit code (L{INCOMPLETE} when a table was left)."""
    connection.autocommit = True
    left = []
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, false)",
                       (f"{max(1, round(lock_timeout * 1000))}ms",))
        for table in VACUUMED_TABLES:
            cursor.execute("SELECT pg_total_relation_size(%s::regclass)", (table,))
            (before,) = cursor.fetchone()
            started = time.monotonic()
            try:
                cursor.execute(sql.SQL("VACUUM (FULL, ANALYZE) {}").format(
                    sql.Identifier(table)))
            except psycopg2.errors.LockNotAvailable:
                print(f"kilolock-migrate: {table}: its lock was not had within"
                      f" {lock_timeout:g} s (a long transaction holds it); left as it is",
                      file=sys.stderr)
                left.append(table)
                continue
            cursor.execute("SELECT pg_total_relation_size(%s::regclass)", (table,))
            (after,) = cursor.fetchone()
            print(f"{table}: {before} -> {after} bytes, rewritten in"
                  f" {time.monotonic() - started:.1f} s", file=out)
    if left:
        print(f"kilolock-migrate: {len(left)} tables left ({', '.join(left)}): run the"
              " command again", file=sys.stderr)
        return INCOMPLETE
    return OK


def recover_from_database(connection: Any, keys: KeyRing | None, out_dir: Path,
                          tenant: str | None, path: str | None, out: TextIO) -> int:
    """Write every version the database holds under C{out_dir}."""
    with connection:
        report = write_versions(rows_from_database(connection, tenant, path), keys, out_dir, out)
    return _summary(report.written, report.pruned, report.failed, out)


def recover_from_dump(dump: Path, keys: KeyRing | None, out_dir: Path, tenant: str | None,
                      path: str | None, out: TextIO) -> int:
    """Write every version a pg_dump file holds under C{out_dir}."""
    rows = rows_from_dump(dump_lines(dump), tenant, path)
    report = write_versions(rows, keys, out_dir, out)
    return _summary(report.written, report.pruned, report.failed, out)


def _summary(written: int, pruned: int, failed: tuple[str, ...], out: TextIO) -> int:
    print(f"kilolock-migrate: recovered {written} versions (each checked against its"
          f" sha256); {pruned} tombstones; {len(failed)} failed", file=out)
    return INCOMPLETE if failed else OK
