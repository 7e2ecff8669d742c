"""The libpq connection string of every session Kilolock opens.

Kilolock's session settings are part of it, so a session is set up before
its first statement: the server, the pool, the blocking path and
C{kilolock-migrate} all rely on the same ones.  Nothing here imports Twisted.
"""

from __future__ import annotations

import re

import psycopg2
from psycopg2.extensions import make_dsn, parse_dsn

__all__ = ["CONNECT_TIMEOUT", "STATEMENT_TIMEOUT", "connect_failure", "connection_string",
           "describe", "without_places"]

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


def describe(dsn: str) -> str:
    """Where a connection string points, without its password: the database
    and every host libpq tries, in order (C{host:port}, a unix socket
    directory as it is), e.g. C{database kl on 10.0.0.5:5432, 10.0.0.6:5432}.
    """
    params = parse_dsn(dsn)
    hosts = (params.get("host") or params.get("hostaddr") or "localhost").split(",")
    ports = (params.get("port") or "").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)  # one port: every host's
    places = []
    for index, host in enumerate(hosts):
        host = host or "localhost"
        port = ports[index] if index < len(ports) else ""
        places.append(host if host.startswith("/") or not port else f"{host}:{port}")
    return f"database {params.get('dbname') or params.get('user') or '?'} on {', '.join(places)}"


def connect_failure(error: BaseException) -> str:
    """Why opening a connection failed, on one line: libpq's reason for each
    host it tried (libpq's indented hint lines left out), joined with
    C{"; "}.  libpq never repeats a password."""
    lines = [line.strip() for line in str(error).splitlines()
             if line.strip() and not line[:1].isspace()]
    return "; ".join(lines) or type(error).__name__


#: The "which server" prefix of each of libpq's connection failure lines.
_PLACE = re.compile(r'connection to server (?:at "[^"]*"(?: \([^)]*\))?, port \d+'
                    r'|on socket "[^"]*") failed: ')


def without_places(reason: str) -> str:
    """A L{connect_failure} without the hosts, ports and sockets it names
    (for an unauthenticated page; the log has them)."""
    return _PLACE.sub("", reason)
