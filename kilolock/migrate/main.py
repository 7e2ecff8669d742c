"""C{kilolock-migrate}: bring a Kilolock database's schema up to date, and the
maintenance of its version rows.

    kilolock-migrate [upgrade] [--database URL | --data-dir DIR]
    kilolock-migrate status [--database URL | --data-dir DIR]
    kilolock-migrate rotate-keys --encryption-keys FILE [--batch N] [WHERE]
    kilolock-migrate encrypt-versions --encryption-keys FILE [--batch N] [WHERE]
    kilolock-migrate decrypt-versions --encryption-keys FILE [--batch N] [WHERE]
    kilolock-migrate compress-versions [--encryption-keys FILE] [--batch N] [WHERE]
    kilolock-migrate vacuum-purged [--lock-timeout SECONDS] [WHERE]
    kilolock-migrate recover --out DIR [--encryption-keys FILE] [--tenant T] [--state PATH]
                             (--dump FILE | WHERE)

C{upgrade} (the default) is the same upgrader Kilolock runs on every start
(L{kilolock.store.schema.upgrade}), as an explicit step: before a deployment, or to
see what a database holds.  It prints the schema version it found and the
version it left, and applies the missing schema files in one transaction
(all or nothing).  Running it again is harmless, and so is running it next
to a live Kilolock: upgraders take a transaction-scoped lock, and a
Kilolock on an older schema is never left half-upgraded.

The row jobs (L{kilolock.migrate.rows}) upgrade the schema first, then
work online, in committed batches, next to running servers, with a progress
bar on stderr; interrupted, they are run again and pick up where they
stopped.  C{rotate-keys} rewraps every data key under the key file's
active key (payloads untouched); C{encrypt-versions} and
C{decrypt-versions} turn encryption on or off for the rows already stored;
C{compress-versions} compresses rows stored before compression.
C{vacuum-purged} rewrites the tables that hold state bytes (VACUUM FULL,
one table at a time, each locked while it is rewritten): the bytes of
purged and pruned versions, left behind by PostgreSQL's MVCC, leave the
data files (not the WAL: see docs/at-rest.md).
C{recover} (L{kilolock.migrate.recover}) needs no running Kilolock: it writes every
version out of a C{pg_dump} file or the database, each checked against its
sha256 (it reads; it never changes the database or its schema).
C{status} counts the rows by codec and key id.

Where the database is (C{WHERE}), first match wins:

  1. C{--database URL} (a C{postgresql://} URL or a libpq keyword string);
  2. C{--data-dir DIR}: the embedded PostgreSQL in C{DIR} (started for the
     command, and stopped again unless a running Kilolock also uses it; a
     directory without a cluster gets a new one);
  3. C{KL_DATABASE_URL};
  4. the embedded PostgreSQL in C{KL_DATA_DIR}, default C{./kilolock-data}.

The key file is C{--encryption-keys} or C{KL_ENCRYPTION_KEYS}.

Exit codes (L{ExitCode}):

  - 0: done (the schema is current; a job left nothing to do);
  - 1: the database is newer than this Kilolock (nothing was changed);
  - 2: usage error (bad options, a malformed URL, an unusable key file);
  - 3: the database cannot be reached, or the embedded PostgreSQL does not start;
  - 4: the upgrade failed (rolled back: the database is as it was);
  - 5: a job left rows to do (busy, or written meanwhile), or rows could not
    be read (each named on stderr), or C{vacuum-purged} could not lock a
    table: run it again, or see why.

Blocking code: a command-line tool, never imported by the server.  Nothing
printed repeats a password, a key or a state's bytes.
"""

from __future__ import annotations

import argparse
import enum
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import psycopg2

from kilolock.atrest.errors import KeyFileError
from kilolock.atrest.keyfile import load_key_file
from kilolock.atrest.keyring import KeyRing
from kilolock.migrate.jobs import (
    recover_from_database,
    recover_from_dump,
    row_job,
    status,
    vacuum_purged,
)
from kilolock.migrate.rows import JOBS
from kilolock.store.postgres.dsn import connect_failure, connection_string, describe
from kilolock.store.schema.upgrade import SCHEMA_VERSION, SchemaTooNew, ensure_schema_blocking

__all__ = ["ExitCode", "main", "run"]

#: Seconds to wait for the database to accept a connection.
CONNECT_TIMEOUT = 10

DEFAULT_DATA_DIR = "./kilolock-data"

#: Seconds C{vacuum-purged} waits for a table's lock: while it waits, every
#: request that needs the table waits behind it.
DEFAULT_LOCK_TIMEOUT = 10.0


class ExitCode(enum.IntEnum):
    """What C{kilolock-migrate} exits with."""

    CURRENT = 0
    DATABASE_TOO_NEW = 1
    USAGE = 2
    UNREACHABLE = 3
    UPGRADE_FAILED = 4
    INCOMPLETE = 5


_EPILOG = ("Exit codes: 0 current, 1 database newer than this Kilolock, 2 usage error,"
           " 3 database unreachable, 4 upgrade failed (rolled back), 5 rows left to do or"
           " unreadable, or a table it could not lock (after a job, 0 means done).  See"
           " docs/at-rest.md.")


def _where(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The C{WHERE} options: on the top parser, and again on each command."""
    default = argparse.SUPPRESS if suppress else None
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--database", metavar="URL", default=default,
                       help="PostgreSQL URL or libpq connection string [KL_DATABASE_URL]")
    where.add_argument("--data-dir", metavar="DIR", default=default,
                       help="data directory of the embedded PostgreSQL"
                            f" [KL_DATA_DIR, default {DEFAULT_DATA_DIR}]")


def _command(commands: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(name, help=help_text,
                                                          description=help_text, epilog=_EPILOG)
    parser.set_defaults(command=name)
    return parser


def _keys_option(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument("--encryption-keys", metavar="FILE", default=argparse.SUPPRESS,
                        help="the key file" + (" (required)" if required else "")
                             + " [KL_ENCRYPTION_KEYS]")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kilolock-migrate",
        description="Bring a Kilolock database's schema up to date (this Kilolock knows"
                    f" schema version {SCHEMA_VERSION}), and maintain its version rows.",
        epilog=_EPILOG)
    _where(parser, suppress=False)
    parser.set_defaults(command="upgrade")
    commands = parser.add_subparsers(metavar="COMMAND")
    _where(_command(commands, "upgrade", "bring the schema up to date (the default)"), True)
    _where(_command(commands, "status", "count the version rows by codec and key id"), True)
    for name, text in (
            ("rotate-keys", "rewrap every data key under the key file's active key"),
            ("encrypt-versions", "encrypt the versions stored unencrypted"),
            ("decrypt-versions", "decrypt the versions stored encrypted"),
            ("compress-versions", "compress the versions stored before compression")):
        job = _command(commands, name, text + " (online, resumable)")
        _keys_option(job, required=name != "compress-versions")
        job.add_argument("--batch", type=int, default=None, metavar="N",
                         help=f"rows per transaction (default {JOBS[name].batch})")
        _where(job, True)
    vacuum = _command(commands, "vacuum-purged",
                      "rewrite the tables that hold state bytes, so that the bytes of purged"
                      " and pruned versions leave PostgreSQL's data files (each table is"
                      " locked while it is rewritten)")
    vacuum.add_argument("--lock-timeout", type=float, default=DEFAULT_LOCK_TIMEOUT,
                        metavar="SECONDS",
                        help="give up on a table whose lock is not had within this time"
                             f" (default {DEFAULT_LOCK_TIMEOUT:g})")
    _where(vacuum, True)
    recover = _command(commands, "recover", "write every version out of a pg_dump file or"
                                            " the database, each checked against its sha256")
    recover.add_argument("--out", required=True, metavar="DIR",
                         help="where to write OUT/<tenant>/<state path>/v<N>.tfstate")
    _keys_option(recover, required=False)
    recover.add_argument("--tenant", help="only this tenant's states (its id)")
    recover.add_argument("--state", help="only this state (its path)")
    recover.add_argument("--dump", metavar="FILE",
                         help="a pg_dump file (plain SQL or custom format) instead of a"
                              " database")
    _where(recover, True)
    return parser


def _connection_string(database_url: str) -> str:
    """C{database_url} with a connect timeout and no statement timeout (a
    long upgrade is not a stuck request)."""
    return connection_string(database_url, statement_timeout=0,
                             connect_timeout=CONNECT_TIMEOUT)


def connected(database_url: str, out: TextIO,
              action: Callable[[Any], ExitCode]) -> ExitCode:
    """Run C{action(connection)} on the database at C{database_url}."""
    try:
        dsn = _connection_string(database_url)
    except ValueError as error:
        print(f"kilolock-migrate: {error}", file=sys.stderr)
        return ExitCode.USAGE
    print(f"kilolock-migrate: {describe(dsn)}", file=out)
    try:
        connection = psycopg2.connect(dsn)
    except psycopg2.Error as error:
        print(f"kilolock-migrate: cannot connect: {connect_failure(error)}", file=sys.stderr)
        return ExitCode.UNREACHABLE
    try:
        return action(connection)
    except psycopg2.OperationalError as error:
        print(f"kilolock-migrate: the database went away: {_first_line(error)}",
              file=sys.stderr)
        return ExitCode.UNREACHABLE
    finally:
        connection.close()


def upgrade_schema(connection: Any, out: TextIO, quiet: bool = False) -> ExitCode:
    """Upgrade the schema in one transaction, reporting on C{out}."""
    try:
        with connection, connection.cursor() as cursor:
            found, now = ensure_schema_blocking(cursor)
    except SchemaTooNew as error:
        print(f"schema version before: {error.found}", file=out)
        print(f"kilolock-migrate: {error}", file=sys.stderr)
        return ExitCode.DATABASE_TOO_NEW
    except psycopg2.OperationalError:
        raise
    except psycopg2.Error as error:
        print(f"kilolock-migrate: the upgrade failed and was rolled back:"
              f" {_first_line(error)}", file=sys.stderr)
        return ExitCode.UPGRADE_FAILED
    if not quiet or now != found:
        print(f"schema version before: {found}", file=out)
        print(f"schema version after: {now}"
              + (" (upgraded)" if now != found else " (already current)"), file=out)
    return ExitCode.CURRENT


def upgrade(database_url: str, out: TextIO) -> ExitCode:
    """Upgrade the database at C{database_url}, reporting on C{out}."""
    return connected(database_url, out, lambda connection: upgrade_schema(connection, out))


def embedded(data_dir: str, out: TextIO, action: Callable[[str], ExitCode]) -> ExitCode:
    """Run C{action(dsn)} on the embedded PostgreSQL in C{data_dir} (started
    for it, stopped afterwards unless another process uses it)."""
    from kilolock.store.postgres.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(data_dir)
    print(f"kilolock-migrate: embedded PostgreSQL in {server.pgdata}", file=out)
    try:
        try:
            dsn = server.start_blocking()
        except Exception as error:
            print(f"kilolock-migrate: the embedded PostgreSQL did not start:"
                  f" {type(error).__name__}: {_first_line(error)}", file=sys.stderr)
            return ExitCode.UNREACHABLE
        return action(dsn)
    finally:
        server.stop_blocking()


def upgrade_embedded(data_dir: str, out: TextIO) -> ExitCode:
    """Upgrade the embedded PostgreSQL in C{data_dir}."""
    return embedded(data_dir, out, lambda dsn: upgrade(dsn, out))


def _keys(args: argparse.Namespace, environ: Mapping[str, str],
          required: bool) -> KeyRing | None:
    """The key file's ring (None when none is given and none is required).

    @raise KeyFileError: an unusable file, or none when one is required."""
    path = getattr(args, "encryption_keys", None) or environ.get("KL_ENCRYPTION_KEYS")
    if not path:
        if required:
            raise KeyFileError(f"{args.command} needs the key file: --encryption-keys FILE"
                               " (KL_ENCRYPTION_KEYS)")
        return None
    return load_key_file(path)


def _action(args: argparse.Namespace, keys: KeyRing | None,
            out: TextIO) -> Callable[[Any], ExitCode]:
    """What the command does once connected."""
    command = args.command

    def act(connection: Any) -> ExitCode:
        if command == "recover":
            return ExitCode(recover_from_database(connection, keys, Path(args.out),
                                                  args.tenant, args.state, out))
        upgraded = upgrade_schema(connection, out, quiet=command != "upgrade")
        if command == "upgrade" or upgraded is not ExitCode.CURRENT:
            return upgraded
        if command == "status":
            return ExitCode(status(connection, out))
        if command == "vacuum-purged":
            return ExitCode(vacuum_purged(connection, out, args.lock_timeout))
        return ExitCode(row_job(connection, command, keys, out, args.batch))

    return act


def run(argv: Sequence[str], environ: Mapping[str, str] = os.environ,
        out: TextIO = sys.stdout) -> ExitCode:
    """The command with C{argv} (without the program name)."""
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as exit_:
        return ExitCode.CURRENT if exit_.code == 0 else ExitCode.USAGE
    try:
        keys = _keys(args, environ, required=args.command in (
            "rotate-keys", "encrypt-versions", "decrypt-versions"))
    except KeyFileError as error:
        print(f"kilolock-migrate: {error}", file=sys.stderr)
        return ExitCode.USAGE
    if getattr(args, "batch", None) is not None and args.batch < 1:
        print("kilolock-migrate: --batch must be a whole number from 1", file=sys.stderr)
        return ExitCode.USAGE
    if not 0 < getattr(args, "lock_timeout", 1) < 86400:
        print("kilolock-migrate: --lock-timeout must be a number of seconds above 0",
              file=sys.stderr)
        return ExitCode.USAGE
    if args.command == "recover" and args.dump:
        return ExitCode(recover_from_dump(Path(args.dump), keys, Path(args.out), args.tenant,
                                          args.state, out))
    act = _action(args, keys, out)
    database = getattr(args, "database", None) or (
        None if getattr(args, "data_dir", None) else environ.get("KL_DATABASE_URL"))
    if database:
        return connected(database, out, act)
    data_dir = getattr(args, "data_dir", None) or environ.get("KL_DATA_DIR") or DEFAULT_DATA_DIR
    return embedded(data_dir, out, lambda dsn: connected(dsn, out, act))


def main() -> None:
    """The console script."""
    sys.exit(int(run(sys.argv[1:])))


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


if __name__ == "__main__":
    main()
