"""Large states read with psycopg 3, on a blocking connection in a worker thread.

A binary COPY through psycopg2 moves a 120 MB state several times over
(libpq's message buffer, the copy C{PQgetCopyData} hands out, psycopg2's
bytes, the slice without the COPY framing).  psycopg 3 asks for the result in
binary format: the server sends the bytea as it is stored (no hex text, no
COPY framing) and the value arrives as one Python C{bytes}, copied once out
of libpq's result (see L{select_single_bytea}).

L{kilolock.store.postgres.large.read_raw_state_txn} is a transaction of the
blocking path (L{kilolock.store.postgres.blocking.BlockingSession}); the
session runs its one statement here on a short-lived autocommit psycopg 3
connection opened with the store's own connection string (statement timeout,
connect timeout, socket, ...), which the session cancels at the store's
deadline.  psycopg 3's
errors are raised as the psycopg2 errors the store already maps (an
unreachable database is a 503 the same way on both paths).

Nothing here logs query parameters, the connection string or state bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg2
import psycopg2.extensions

__all__ = ["cancel_read", "open_read_connection", "psycopg2_errors", "select_single_bytea"]

#: Seconds a cancel request (sent from the reactor thread at the deadline)
#: may take to reach the server.
CANCEL_TIMEOUT = 2.0
#: PostgreSQL's type oid of bytea.
_BYTEA_OID = 17


def open_read_connection(dsn: str) -> psycopg.Connection[Any]:
    """A new blocking psycopg 3 connection in autocommit mode (a single
    SELECT is its own consistent snapshot: no BEGIN/COMMIT round trips)."""
    return psycopg.connect(dsn, autocommit=True)


def select_single_bytea(connection: psycopg.Connection[Any], query: str,
                        params: Any = None) -> bytes | None:
    """The single bytea column of the single row C{query} selects, with a
    binary result (None when it selects no row).

    Closes C{connection} as soon as the result has arrived: libpq keeps the
    whole message it read in its input buffer (a copy of the value) until
    then, and the value is copied once more, out of libpq's result into
    C{bytes}, which is then freed at once.  So the process holds at most two
    copies of a large value, not three.
    """
    with connection.cursor(binary=True) as cursor:
        cursor.execute(query, params)
        result = cursor.pgresult
        connection.close()
        if result is None or result.ntuples == 0:
            return None
        try:
            return _single_bytea(result)
        finally:
            result.clear()


def _single_bytea(result: psycopg.pq.abc.PGresult) -> bytes:
    """The value of a one-row, one-column, binary bytea result."""
    if result.nfields != 1 or result.ntuples != 1:
        raise ValueError(f"expected one bytea, got {result.ntuples} rows of"
                         f" {result.nfields} columns")
    if result.ftype(0) != _BYTEA_OID or result.fformat(0) != psycopg.pq.Format.BINARY:
        raise ValueError("expected a binary bytea column")
    raw = result.get_value(0, 0)
    if raw is None:
        raise ValueError("the bytea is NULL")
    return raw


def cancel_read(connection: psycopg.Connection[Any]) -> None:
    """Ask the server to cancel C{connection}'s running statement (from any
    thread; waits at most L{CANCEL_TIMEOUT}); errors are ignored (the
    statement timeout still bounds the statement)."""
    with contextlib.suppress(psycopg.Error):
        connection.cancel_safe(timeout=CANCEL_TIMEOUT)


@contextlib.contextmanager
def psycopg2_errors() -> Iterator[None]:
    """Raise psycopg 3's connection and cancellation errors as psycopg2's
    (C{QueryCanceledError}, C{OperationalError}, C{InterfaceError}), the
    classes the store maps to L{kilolock.core.errors.ServiceUnavailable}; other
    errors pass unchanged."""
    try:
        yield
    except psycopg.errors.QueryCanceled as error:
        raise psycopg2.extensions.QueryCanceledError(_first_line(error)) from error
    except psycopg.OperationalError as error:
        raise psycopg2.OperationalError(_first_line(error)) from error
    except psycopg.InterfaceError as error:
        raise psycopg2.InterfaceError(_first_line(error)) from error


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
