"""The libpq connection string of every session Kilolock opens.

Kilolock's session settings are part of it, so a session is set up before
its first statement: the server, the pool, the blocking path and
C{kilolock-migrate} all rely on the same ones.  Nothing here imports Twisted.
"""

from __future__ import annotations

import random
import re

import psycopg2
from attrs import frozen
from psycopg2.extensions import make_dsn, parse_dsn

__all__ = ["CONNECT_TIMEOUT", "STATEMENT_TIMEOUT", "HostAttempt", "connect_failure",
           "connection_string", "describe", "host_attempts", "without_places"]

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


@frozen
class HostAttempt:
    """One host of a connection string to try on its own: where (as libpq
    names it in an error) and the connection string naming only it."""

    place: str
    dsn: str


def host_attempts(dsn: str) -> list[HostAttempt]:
    """The hosts of C{dsn} one at a time, in the order libpq tries them
    (shuffled with C{load_balance_hosts=random}), each a connection string of
    its own with that host (and its C{hostaddr} and port); C{dsn} alone when
    it names one host, or lists that libpq would refuse to pair up.

    libpq gives each host its own C{connect_timeout} only when it connects
    blocking; the asynchronous connect of Kilolock's pool cannot leave a
    host that never answers for the next one, so the pool tries the hosts
    one at a time with a timeout each.  C{target_session_attrs} stays in
    each: libpq checks the session of every host it is given.
    """
    params = parse_dsn(dsn)
    hosts = (params.get("host") or "").split(",")
    addresses = (params.get("hostaddr") or "").split(",")
    ports = (params.get("port") or "").split(",")
    count = max(len(hosts), len(addresses))
    if count == 1:
        return [HostAttempt(_place(params.get("host") or params.get("hostaddr") or "",
                                   params.get("port") or ""), dsn)]
    if any(len(values) not in (1, count) for values in (hosts, addresses, ports)):
        return [HostAttempt(describe(dsn), dsn)]  # libpq says what does not match

    def nth(values: list[str], index: int) -> str:
        return values[0] if len(values) == 1 else values[index]

    attempts = []
    for index in range(count):
        single = dict(params)
        for name, values in (("host", hosts), ("hostaddr", addresses), ("port", ports)):
            if name in params:
                single[name] = nth(values, index)
        single.pop("load_balance_hosts", None)
        place = _place(nth(hosts, index) or nth(addresses, index), nth(ports, index))
        attempts.append(HostAttempt(place, str(make_dsn(**single))))
    if params.get("load_balance_hosts") == "random":
        random.shuffle(attempts)
    return attempts


def _place(host: str, port: str) -> str:
    """A host as libpq's errors name it."""
    host = host or "localhost"
    if host.startswith("/"):
        return f'connection to server on socket "{host}"'
    return f'connection to server at "{host}", port {port or 5432}'


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
