"""PostgreSQL fixtures: one embedded server for the whole session, a fresh
database per test.

  - C{embedded_postgres} (session): an L{EmbeddedPostgres} started in a
    temporary directory, stopped at the end of the session.
  - C{postgres_admin_dsn} (session): a superuser DSN on that server.  With
    C{KL_TEST_POSTGRES_URL} set (a superuser URL of an external server, e.g.
    Debian's C{postgresql} package in CI) that server is used instead and
    nothing is started.
  - C{postgres_dsn}: a fresh database with the current schema (a copy of a
    template database upgraded once per session), dropped after the test.
  - C{blank_postgres_dsn}: a fresh, empty database (no schema).

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from psycopg2 import sql
from psycopg2.extensions import make_dsn, parse_dsn

from kilolock.store.embedded import EmbeddedPostgres
from kilolock.store.schema import ensure_schema_blocking

TEMPLATE_DATABASE = "kilolock_test_template"


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
    """The session's embedded PostgreSQL (started on first use)."""
    with embedded_postgres_in_temporary_directory() as server:
        server.start_blocking()
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


@pytest.fixture(scope="session")
def postgres_template(postgres_admin_dsn: str) -> Iterator[str]:
    """A database upgraded to the current schema, copied for each test."""
    run_admin(postgres_admin_dsn, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
        sql.Identifier(TEMPLATE_DATABASE)))
    run_admin(postgres_admin_dsn, sql.SQL("CREATE DATABASE {}").format(
        sql.Identifier(TEMPLATE_DATABASE)))
    connection = psycopg2.connect(dsn_for_database(postgres_admin_dsn, TEMPLATE_DATABASE))
    try:
        with connection, connection.cursor() as cursor:
            ensure_schema_blocking(cursor)
    finally:
        connection.close()
    yield TEMPLATE_DATABASE
    run_admin(postgres_admin_dsn, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
        sql.Identifier(TEMPLATE_DATABASE)))


def _fresh_database(admin_dsn: str, template: str) -> Iterator[str]:
    name = f"kilolock_test_{uuid.uuid4().hex[:12]}"
    run_admin(admin_dsn, sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
        sql.Identifier(name), sql.Identifier(template)))
    try:
        yield dsn_for_database(admin_dsn, name)
    finally:
        run_admin(admin_dsn, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


@pytest.fixture
def postgres_dsn(postgres_admin_dsn: str, postgres_template: str) -> Iterator[str]:
    """A fresh database with the current schema, dropped after the test."""
    yield from _fresh_database(postgres_admin_dsn, postgres_template)


@pytest.fixture
def blank_postgres_dsn(postgres_admin_dsn: str) -> Iterator[str]:
    """A fresh database without any Kilolock table, dropped after the test."""
    yield from _fresh_database(postgres_admin_dsn, "template0")
