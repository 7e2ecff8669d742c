"""The libpq connection string of every session Kilolock opens.

Kilolock's session settings are part of it, so a session is set up before
its first statement: the server, the pool, the blocking path and
C{kilolock-migrate} all rely on the same ones.  Nothing here imports Twisted.
"""

from __future__ import annotations

import psycopg2
from psycopg2.extensions import make_dsn, parse_dsn

__all__ = ["CONNECT_TIMEOUT", "STATEMENT_TIMEOUT", "connection_string"]

#: Seconds to open one connection before giving up on it.
CONNECT_TIMEOUT = 5.0
#: Seconds one SQL statement may run (PostgreSQL's statement_timeout).
STATEMENT_TIMEOUT = 30.0


def connection_string(database_url: str, *, statement_timeout: float = STATEMENT_TIMEOUT,
                      connect_timeout: float = CONNECT_TIMEOUT) -> str:
    """C{database_url} (a C{postgresql://} URL or a libpq keyword string) with
    the session settings Kilolock relies on: UTF-8, UTC, standard-conforming
    strings, hex bytea output, the statement timeout, a limit on idling inside
    a transaction (a frozen Kilolock process cannot keep state rows locked
    for long), TCP keepalives and a connect timeout.

    @raise ValueError: the URL is not a connection string (the message never
        repeats it: it may hold a password).
    """
    try:
        params = parse_dsn(database_url)
    except psycopg2.ProgrammingError:
        raise ValueError("the database URL is not a valid PostgreSQL connection string") from None
    milliseconds = int(statement_timeout * 1000)
    settings = (
        f"-c statement_timeout={milliseconds}"
        f" -c idle_in_transaction_session_timeout={2 * milliseconds}"
        " -c timezone=UTC -c standard_conforming_strings=on -c bytea_output=hex"
    )
    # Later -c options win over the URL's own.
    params["options"] = f"{params.get('options', '')} {settings}".strip()
    params["client_encoding"] = "UTF8"  # the quoting of large values relies on it
    params.setdefault("connect_timeout", str(max(1, round(connect_timeout))))
    params.setdefault("application_name", "kilolock")
    for name, value in (("keepalives", "1"), ("keepalives_idle", "10"),
                        ("keepalives_interval", "5"), ("keepalives_count", "3")):
        params.setdefault(name, value)
    return str(make_dsn(**params))
