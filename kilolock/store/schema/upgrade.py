"""The PostgreSQL schema: numbered SQL files and the one upgrader that applies them.

The files are package data (C{kilolock/store/schema/upgrade/NNN_name.sql}).  A
database records the files applied so far in C{schema_version}; L{ensure_schema}
applies the missing ones, in order, in the caller's transaction.  It runs on
every start of the PostgreSQL store (L{kilolock.store.postgres.runner}) and
from the explicit C{kilolock-migrate} command (L{kilolock.migrate.main}), so
applying it twice, or from two processes at once, is harmless: a
transaction-scoped advisory lock (released by the commit, so it cannot leak
behind a connection pooler) serialises concurrent upgraders.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from attrs import frozen
from twisted.internet.defer import Deferred

__all__ = [
    "OWNER_GONE_SQLSTATE",
    "SCHEMA_VERSION",
    "SchemaTooNew",
    "ensure_schema",
    "ensure_schema_blocking",
    "migrations",
    "schema_version",
]

_FILE_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")

#: Key of the transaction-scoped advisory lock taken while upgrading
#: (the ASCII bytes of "kilolock").
_UPGRADE_LOCK_KEY = 0x6B696C6F6C6F636B

_CREATE_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


#: The SQLSTATE the schema's event trigger raises for a state event of a
#: deleted tenant or environment (see C{002_hosted.sql}): the request's token
#: was revoked with it after the request was let in.
OWNER_GONE_SQLSTATE = "KL401"


class SchemaTooNew(RuntimeError):
    """The database was upgraded by a newer Kilolock than this one."""

    def __init__(self, found: int, known: int) -> None:
        super().__init__(
            f"the database schema is at version {found} but this Kilolock knows only"
            f" versions up to {known}; run a Kilolock at least as new as the one that"
            " upgraded the database"
        )
        self.found = found
        self.known = known


@frozen
class Migration:
    """One numbered SQL file."""

    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """Every schema file shipped with this Kilolock, oldest first."""
    found = []
    for entry in (resources.files("kilolock.store") / "schema").iterdir():
        match = _FILE_NAME.match(entry.name)
        if match is not None:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda migration: migration.version)
    versions = [migration.version for migration in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"schema files must be numbered 001, 002, ... without gaps: {versions}")
    return found


#: The schema version this Kilolock writes and expects.
SCHEMA_VERSION = len(migrations())


async def _execute(cursor: Any, sql: str, params: Any = None) -> None:
    """Run C{sql} on a txpostgres cursor (whose C{execute} returns a Deferred)
    or on a plain DB-API cursor (which runs synchronously)."""
    pending = cursor.execute(sql, params)
    if isinstance(pending, Deferred):
        await pending


async def schema_version(cursor: Any) -> int:
    """The version recorded in the database: 0 for a database never upgraded.

    @param cursor: a txpostgres or DB-API cursor.
    """
    await _execute(cursor, "SELECT to_regclass('schema_version') IS NOT NULL")
    (exists,) = cursor.fetchone()
    if not exists:
        return 0
    await _execute(cursor, "SELECT coalesce(max(version), 0) FROM schema_version")
    (version,) = cursor.fetchone()
    return int(version)


async def ensure_schema(cursor: Any) -> tuple[int, int]:
    """Bring the database up to L{SCHEMA_VERSION} inside the caller's transaction.

    @param cursor: a txpostgres cursor inside C{runInteraction}, or a DB-API
        cursor of a connection not in autocommit mode; the caller commits.
    @return: (version found, version now).
    @raise SchemaTooNew: the database is newer than this code.
    """
    await _execute(cursor, "SELECT pg_advisory_xact_lock(%s)", (_UPGRADE_LOCK_KEY,))
    await _execute(cursor, _CREATE_VERSION_TABLE)
    found = await schema_version(cursor)
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(found, SCHEMA_VERSION)
    for migration in migrations()[found:]:
        await _execute(cursor, migration.sql)
        await _execute(
            cursor,
            "INSERT INTO schema_version (version, name) VALUES (%s, %s)",
            (migration.version, migration.name),
        )
    return found, SCHEMA_VERSION


def ensure_schema_blocking(cursor: Any) -> tuple[int, int]:
    """L{ensure_schema} on a plain DB-API cursor (command-line tools, test
    fixtures; never on the reactor thread).  The caller commits.

    @return: (version found, version now).
    """
    upgrade = ensure_schema(cursor)
    try:
        upgrade.send(None)
    except StopIteration as done:
        result: tuple[int, int] = done.value
        return result
    upgrade.close()
    raise TypeError("ensure_schema_blocking needs a cursor that runs synchronously")
