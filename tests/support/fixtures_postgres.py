"""PostgreSQL fixtures: one embedded server for the whole session, a fresh
database per test.

  - C{embedded_postgres} (session): an L{EmbeddedPostgres} started in a
    temporary directory, stopped at the end of the session.
  - C{postgres_admin_dsn} (session): a superuser DSN on that server.  With
    C{KL_TEST_POSTGRES_URL} set (a superuser URL of an external server, e.g.
    Debian's C{postgresql} package in CI) that server is used instead and
    nothing is started.
  - C{postgres_dsn}: a database with the current schema and no data: one
    database upgraded once per session, emptied (TRUNCATE) before each test.
  - C{blank_postgres_dsn}: a fresh, empty database (no schema), dropped
    after the test.

Helpers for tests of an upgrade: L{schema_up_to} builds a database as an
older Kilolock did, L{upgrade_schema} brings it up to date.

Fixtures here are synchronous and use psycopg2 directly: they run outside
the reactor's work, so blocking briefly is fine.  Import the reactor inside
fixtures, never at module level.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import pytest_twisted
from psycopg2 import sql
from psycopg2.extensions import make_dsn, parse_dsn

from kilolock.store.postgres.embedded import EmbeddedPostgres
from kilolock.store.schema.upgrade import SCHEMA_VERSION, ensure_schema_blocking, migrations


@contextlib.contextmanager
def embedded_postgres_in_temporary_directory() -> Iterator[EmbeddedPostgres]:
    """An embedded PostgreSQL (not started) in a new directory, stopped and
    removed afterwards.

    Not under pytest's C{tmp_path}: pytest resets C{/tmp/pytest-of-<user>}
    to mode 0700 whenever any pytest session starts, which locks the
    cluster's owner (C{embedded_postgres} when running as root) out of its
    own directory.
    """
    directory = Path(tempfile.mkdtemp(prefix="kilolock-test-pg-"))
    server = EmbeddedPostgres(directory / "data")
    try:
        yield server
    finally:
        try:
            server.stop_blocking()
        finally:
            shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def embedded_postgres() -> Iterator[EmbeddedPostgres]:
    """The session's embedded PostgreSQL (started on first use), tuned for
    tests: no fsync, asynchronous commit (a crash loses nothing a test needs)."""
    with embedded_postgres_in_temporary_directory() as server:
        admin_dsn = dsn_for_database(server.start_blocking(), "postgres")
        for setting in ("fsync = off", "synchronous_commit = off", "full_page_writes = off"):
            run_admin(admin_dsn, f"ALTER SYSTEM SET {setting}")
        run_admin(admin_dsn, "SELECT pg_reload_conf()")
        yield server


@pytest.fixture(scope="session")
def postgres_admin_dsn(request: pytest.FixtureRequest) -> str:
    """A superuser DSN: C{KL_TEST_POSTGRES_URL}, or the embedded server's."""
    external = os.environ.get("KL_TEST_POSTGRES_URL")
    if external:
        return external
    server: EmbeddedPostgres = request.getfixturevalue("embedded_postgres")
    return server.dsn("postgres")


def dsn_for_database(admin_dsn: str, database: str) -> str:
    """C{admin_dsn} pointed at another database of the same server."""
    params = parse_dsn(admin_dsn)
    params["dbname"] = database
    return str(make_dsn(**params))


def run_admin(admin_dsn: str, statement: Any, params: Any = None) -> None:
    """Run one statement in autocommit mode (CREATE/DROP DATABASE need it)."""
    connection = psycopg2.connect(admin_dsn, connect_timeout=10)
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
    finally:
        connection.close()


@contextlib.contextmanager
def new_database(admin_dsn: str) -> Iterator[str]:
    """A new, empty database (a unique name: sessions may share a server);
    dropped afterwards.  @return: its DSN."""
    name = f"kilolock_test_{uuid.uuid4().hex[:12]}"
    run_admin(admin_dsn, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield dsn_for_database(admin_dsn, name)
    finally:
        run_admin(admin_dsn, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


@pytest.fixture(scope="session")
def postgres_session_database(postgres_admin_dsn: str) -> Iterator[str]:
    """One database with the current schema for the session's tests (emptied
    before each by C{postgres_dsn}).  @return: its DSN."""
    with new_database(postgres_admin_dsn) as dsn:
        connection = psycopg2.connect(dsn)
        try:
            with connection, connection.cursor() as cursor:
                ensure_schema_blocking(cursor)
        finally:
            connection.close()
        yield dsn


#: Rows the schema itself creates, restored after emptying the tables.
_SEED_ROWS = "INSERT INTO tenants (id) VALUES ('default') ON CONFLICT (id) DO NOTHING"


def terminate_other_sessions(dsn: str) -> int:
    """End every other session of the database (as a restart would).
    @return: how many."""
    connection = psycopg2.connect(dsn, connect_timeout=10)
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                           " WHERE datname = current_database() AND pid <> pg_backend_pid()")
            (count,) = cursor.fetchone()
            return int(count)
    finally:
        connection.close()


def empty_database(dsn: str) -> None:
    """Make a database with the current schema as it was just after the
    upgrade: end its other sessions, empty every table except schema_version
    (identities restarted), restore the seed rows."""
    terminate_other_sessions(dsn)
    connection = psycopg2.connect(dsn, connect_timeout=10)
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                           " AND tablename <> 'schema_version'")
            tables = [sql.Identifier(name) for (name,) in cursor.fetchall()]
            cursor.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
                sql.SQL(", ").join(tables)))
            cursor.execute(_SEED_ROWS)
    finally:
        connection.close()


@pytest.fixture
def postgres_dsn(postgres_session_database: str) -> str:
    """The DSN of a database with the current schema and no data (emptied
    for this test)."""
    empty_database(postgres_session_database)
    return postgres_session_database


@pytest_twisted.async_yield_fixture
async def started_postgres_store(postgres_dsn: str) -> AsyncIterator[Any]:
    """A started L{PostgresStateStore} (two pooled connections) on
    L{postgres_dsn}'s empty database, stopped after the test."""
    from twisted.internet import reactor

    from kilolock.store.postgres.store import PostgresStateStore

    built = PostgresStateStore(postgres_dsn, reactor, pool_size=2)
    await built.start()
    yield built
    await built.stop()


@pytest.fixture
def blank_postgres_dsn(postgres_admin_dsn: str) -> Iterator[str]:
    """A fresh database without any Kilolock table, dropped after the test."""
    with new_database(postgres_admin_dsn) as dsn:
        yield dsn


def schema_up_to(dsn: str, version: int) -> None:
    """Apply the schema files up to C{version} to an empty database, as the
    Kilolock of that version did."""
    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute("CREATE TABLE schema_version (version integer PRIMARY KEY,"
                           " name text NOT NULL, applied_at timestamptz NOT NULL"
                           " DEFAULT now())")
            for migration in migrations()[:version]:
                cursor.execute(migration.sql)
                cursor.execute("INSERT INTO schema_version (version, name) VALUES (%s, %s)",
                               (migration.version, migration.name))
    finally:
        connection.close()


@contextlib.contextmanager
def database_at(admin_dsn: str, version: int) -> Iterator[str]:
    """A new database left by the Kilolock of schema C{version}
    (L{schema_up_to}); dropped afterwards.  @return: its DSN."""
    with new_database(admin_dsn) as dsn:
        schema_up_to(dsn, version)
        yield dsn


@pytest.fixture
def database_at_schema(request: pytest.FixtureRequest, postgres_admin_dsn: str
                       ) -> Iterator[str]:
    """L{database_at} the schema version the test names as this fixture's
    indirect parameter: C{@pytest.mark.parametrize("database_at_schema",
    [13], indirect=True)}."""
    with database_at(postgres_admin_dsn, request.param) as dsn:
        yield dsn


def as_kilolock_of(monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """Stores started until C{monkeypatch} is undone find the database
    current at schema C{version}, as the Kilolock of that version did: they
    do not upgrade it."""
    from kilolock.store.postgres import runner

    async def current(cursor: Any) -> tuple[int, int]:
        return version, version

    monkeypatch.setattr(runner, "ensure_schema", current)


def upgrade_schema(dsn: str) -> None:
    """Bring a database up to L{SCHEMA_VERSION}, as a start of Kilolock does."""
    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            assert ensure_schema_blocking(cursor)[1] == SCHEMA_VERSION
    finally:
        connection.close()
