"""The C{kilolock-migrate} command, run as the installed console script
against real PostgreSQL databases (an embedded cluster of its own, or the
session's server)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg2
import pytest

from kilolock.migrate.main import ExitCode, run
from kilolock.store.schema.upgrade import SCHEMA_VERSION, ensure_schema_blocking, migrations
from tests.support.migrate_support import SCRIPT, migrate


def recorded_versions(dsn: str) -> list[int]:
    """The versions in a database's schema_version table."""
    connection = psycopg2.connect(dsn, connect_timeout=10)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute("SELECT version FROM schema_version ORDER BY version")
            return [version for (version,) in cursor.fetchall()]
    finally:
        connection.close()


def postmaster_running(pgdata: Path) -> bool:
    """Whether the cluster in C{pgdata} has a live server."""
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().split()[0])
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory for an embedded cluster (not under pytest's tmp_path,
    see fixtures_postgres); any server left in it is stopped afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="kilolock-test-migrate-"))
    try:
        yield directory / "data"
    finally:
        pid_file = directory / "data" / "postgres" / "postmaster.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGQUIT)
        shutil.rmtree(directory, ignore_errors=True)


def test_the_console_script_is_installed() -> None:
    """`pip install` puts kilolock-migrate next to the interpreter, and its --help
    names the exit codes."""
    assert SCRIPT.exists()
    result = migrate("--help")
    assert result.returncode == 0
    assert "--database" in result.stdout and "--data-dir" in result.stdout
    assert "Exit codes: 0 current, 1 database newer" in " ".join(result.stdout.split())


@pytest.mark.postgres
@pytest.mark.slow
def test_embedded_cluster_is_created_upgraded_then_left_alone(data_dir: Path) -> None:
    """--data-dir on an empty directory creates the cluster and upgrades it
    (0 -> current); a second run changes nothing; the server is stopped after each."""
    first = migrate("--data-dir", str(data_dir))
    assert first.returncode == ExitCode.CURRENT, first.stderr
    assert "schema version before: 0\n" in first.stdout
    assert f"schema version after: {SCHEMA_VERSION} (upgraded)\n" in first.stdout
    assert not postmaster_running(data_dir / "postgres")

    second = migrate("--data-dir", str(data_dir))
    assert second.returncode == ExitCode.CURRENT, second.stderr
    assert f"schema version before: {SCHEMA_VERSION}\n" in second.stdout
    assert f"schema version after: {SCHEMA_VERSION} (already current)\n" in second.stdout
    assert not postmaster_running(data_dir / "postgres")


@pytest.mark.postgres
@pytest.mark.slow
def test_data_dir_comes_from_KL_DATA_DIR(data_dir: Path) -> None:
    """Without options the embedded cluster in KL_DATA_DIR is upgraded."""
    result = migrate(env={"KL_DATA_DIR": str(data_dir)})
    assert result.returncode == ExitCode.CURRENT, result.stderr
    assert f"embedded PostgreSQL in {data_dir / 'postgres'}" in result.stdout
    assert (data_dir / "postgres" / "PG_VERSION").exists()


@pytest.mark.postgres
def test_database_url_is_upgraded_once(blank_postgres_dsn: str) -> None:
    """--database on a blank database applies every schema file and records
    them; the second run reports the same version and records nothing new."""
    first = migrate("--database", blank_postgres_dsn)
    assert first.returncode == ExitCode.CURRENT, first.stderr
    assert "schema version before: 0\n" in first.stdout
    assert f"schema version after: {SCHEMA_VERSION} (upgraded)\n" in first.stdout
    expected = [migration.version for migration in migrations()]
    assert recorded_versions(blank_postgres_dsn) == expected

    second = migrate("--database", blank_postgres_dsn)
    assert second.returncode == ExitCode.CURRENT, second.stderr
    assert f"schema version before: {SCHEMA_VERSION}\n" in second.stdout
    assert "(already current)" in second.stdout
    assert recorded_versions(blank_postgres_dsn) == expected


@pytest.mark.postgres
def test_database_url_comes_from_KL_DATABASE_URL(blank_postgres_dsn: str) -> None:
    """Without options KL_DATABASE_URL names the database (and wins over KL_DATA_DIR)."""
    result = migrate(env={"KL_DATABASE_URL": blank_postgres_dsn,
                          "KL_DATA_DIR": "/nonexistent/never-used"})
    assert result.returncode == ExitCode.CURRENT, result.stderr
    assert recorded_versions(blank_postgres_dsn)[-1] == SCHEMA_VERSION


@pytest.mark.postgres
def test_a_database_newer_than_the_code_is_refused(blank_postgres_dsn: str) -> None:
    """A database upgraded by a newer Kilolock: exit 1, a message naming both
    versions, and the database untouched."""
    connection = psycopg2.connect(blank_postgres_dsn, connect_timeout=10)
    try:
        with connection, connection.cursor() as cursor:
            ensure_schema_blocking(cursor)
            cursor.execute("INSERT INTO schema_version (version, name) VALUES (%s, %s)",
                           (SCHEMA_VERSION + 1, "from_the_future.sql"))
    finally:
        connection.close()
    result = migrate("--database", blank_postgres_dsn)
    assert result.returncode == ExitCode.DATABASE_TOO_NEW
    assert f"schema version before: {SCHEMA_VERSION + 1}\n" in result.stdout
    assert (f"the database schema is at version {SCHEMA_VERSION + 1} but this Kilolock"
            f" knows only versions up to {SCHEMA_VERSION}") in result.stderr
    assert "Traceback" not in result.stderr
    assert recorded_versions(blank_postgres_dsn)[-1] == SCHEMA_VERSION + 1


def test_an_unreachable_database_exits_3_without_the_password() -> None:
    """A refused connection: exit 3 with libpq's reason; the password is never printed."""
    result = migrate("--database", "postgresql://kl:s3cret-pw@127.0.0.1:1/kilolock")
    assert result.returncode == ExitCode.UNREACHABLE
    assert "cannot connect" in result.stderr
    assert "s3cret-pw" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_usage_errors_exit_2() -> None:
    """Both places at once, or a URL that is no connection string: exit 2."""
    both = migrate("--database", "postgresql:///x", "--data-dir", "/tmp/x")
    assert both.returncode == ExitCode.USAGE
    assert "not allowed with argument" in both.stderr
    assert run(["--database", "definitely not a dsn"]) == ExitCode.USAGE
