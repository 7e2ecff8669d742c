"""C{kilolock-migrate}: bring a Kilolock database's schema up to date.

    kilolock-migrate [--database URL | --data-dir DIR]

The same upgrader Kilolock runs on every start (L{kilolock.store.schema}),
as an explicit step: before a deployment, or to see what a database holds.
It prints the schema version it found and the version it left, and applies
the missing schema files in one transaction (all or nothing).  Running it
again is harmless, and so is running it next to a live Kilolock: upgraders
take a transaction-scoped lock, and a Kilolock on an older schema is never
left half-upgraded.

Where the database is, first match wins:

  1. C{--database URL} (a C{postgresql://} URL or a libpq keyword string);
  2. C{--data-dir DIR}: the embedded PostgreSQL in C{DIR} (started for the
     upgrade, and stopped again unless a running Kilolock also uses it; a
     directory without a cluster gets a new one);
  3. C{KL_DATABASE_URL};
  4. the embedded PostgreSQL in C{KL_DATA_DIR}, default C{./kilolock-data}.

Exit codes (L{ExitCode}):

  - 0: the schema is current (upgraded now, or already);
  - 1: the database is newer than this Kilolock (nothing was changed);
  - 2: usage error (bad options, a malformed URL);
  - 3: the database cannot be reached, or the embedded PostgreSQL does not start;
  - 4: the upgrade failed (rolled back: the database is as it was).

Blocking code: a command-line tool, never imported by the server.  Nothing
printed repeats a password.
"""

from __future__ import annotations

import argparse
import enum
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

import psycopg2
from psycopg2.extensions import parse_dsn

from kilolock.store.postgres.dsn import connection_string
from kilolock.store.schema import SCHEMA_VERSION, SchemaTooNew, ensure_schema_blocking

__all__ = ["ExitCode", "main", "run"]

#: Seconds to wait for the database to accept a connection.
CONNECT_TIMEOUT = 10

DEFAULT_DATA_DIR = "./kilolock-data"


class ExitCode(enum.IntEnum):
    """What C{kilolock-migrate} exits with."""

    CURRENT = 0
    DATABASE_TOO_NEW = 1
    USAGE = 2
    UNREACHABLE = 3
    UPGRADE_FAILED = 4


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kilolock-migrate",
        description="Bring a Kilolock database's schema up to date (this Kilolock knows"
                    f" schema version {SCHEMA_VERSION}).",
        epilog="Exit codes: 0 current, 1 database newer than this Kilolock, 2 usage error,"
               " 3 database unreachable, 4 upgrade failed (rolled back).")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--database", metavar="URL",
                       help="PostgreSQL URL or libpq connection string [KL_DATABASE_URL]")
    where.add_argument("--data-dir", metavar="DIR",
                       help="data directory of the embedded PostgreSQL"
                            f" [KL_DATA_DIR, default {DEFAULT_DATA_DIR}]")
    return parser


def describe(database_url: str) -> str:
    """Where C{database_url} points, without its password."""
    params = parse_dsn(database_url)
    host = params.get("host") or "localhost"
    port = params.get("port")
    place = f"{host}:{port}" if port and not host.startswith("/") else host
    return f"database {params.get('dbname') or params.get('user') or '?'} on {place}"


def _connection_string(database_url: str) -> str:
    """C{database_url} with a connect timeout and no statement timeout (a
    long upgrade is not a stuck request)."""
    return connection_string(database_url, statement_timeout=0,
                             connect_timeout=CONNECT_TIMEOUT)


def upgrade(database_url: str, out: TextIO) -> ExitCode:
    """Upgrade the database at C{database_url}, reporting on C{out}."""
    try:
        dsn = _connection_string(database_url)
    except ValueError as error:
        print(f"kilolock-migrate: {error}", file=sys.stderr)
        return ExitCode.USAGE
    print(f"kilolock-migrate: {describe(dsn)}", file=out)
    try:
        connection = psycopg2.connect(dsn)
    except psycopg2.Error as error:
        print(f"kilolock-migrate: cannot connect: {_first_line(error)}", file=sys.stderr)
        return ExitCode.UNREACHABLE
    try:
        try:
            with connection, connection.cursor() as cursor:
                found, now = ensure_schema_blocking(cursor)
        except SchemaTooNew as error:
            print(f"schema version before: {error.found}", file=out)
            print(f"kilolock-migrate: {error}", file=sys.stderr)
            return ExitCode.DATABASE_TOO_NEW
        except psycopg2.OperationalError as error:
            print(f"kilolock-migrate: the database went away: {_first_line(error)}",
                  file=sys.stderr)
            return ExitCode.UNREACHABLE
        except psycopg2.Error as error:
            print(f"kilolock-migrate: the upgrade failed and was rolled back:"
                  f" {_first_line(error)}", file=sys.stderr)
            return ExitCode.UPGRADE_FAILED
    finally:
        connection.close()
    print(f"schema version before: {found}", file=out)
    print(f"schema version after: {now}"
          + (" (upgraded)" if now != found else " (already current)"), file=out)
    return ExitCode.CURRENT


def upgrade_embedded(data_dir: str, out: TextIO) -> ExitCode:
    """Upgrade the embedded PostgreSQL in C{data_dir} (started for the
    upgrade, stopped afterwards unless another process uses it)."""
    from kilolock.store.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(data_dir)
    print(f"kilolock-migrate: embedded PostgreSQL in {server.pgdata}", file=out)
    try:
        try:
            dsn = server.start_blocking()
        except Exception as error:
            print(f"kilolock-migrate: the embedded PostgreSQL did not start:"
                  f" {type(error).__name__}: {_first_line(error)}", file=sys.stderr)
            return ExitCode.UNREACHABLE
        return upgrade(dsn, out)
    finally:
        server.stop_blocking()


def run(argv: Sequence[str], environ: Mapping[str, str] = os.environ,
        out: TextIO = sys.stdout) -> ExitCode:
    """The command with C{argv} (without the program name)."""
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as exit_:
        return ExitCode.CURRENT if exit_.code == 0 else ExitCode.USAGE
    if args.database:
        return upgrade(args.database, out)
    if args.data_dir:
        return upgrade_embedded(args.data_dir, out)
    if environ.get("KL_DATABASE_URL"):
        return upgrade(environ["KL_DATABASE_URL"], out)
    return upgrade_embedded(environ.get("KL_DATA_DIR") or DEFAULT_DATA_DIR, out)


def main() -> None:
    """The console script."""
    sys.exit(int(run(sys.argv[1:])))


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


if __name__ == "__main__":
    main()
