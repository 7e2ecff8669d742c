"""What Kilolock makes of a database URL without connecting: the session
settings it adds (L{connection_string}), where it says the URL points
(L{describe}), and how it reports a failed connect (L{connect_failure},
L{without_places}) -- never with the password."""

from __future__ import annotations

import string

import psycopg2
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg2.extensions import make_dsn, parse_dsn

from kilolock.store.postgres.dsn import (
    connect_failure,
    connection_string,
    describe,
    host_attempts,
    without_places,
)

host_names = st.text(string.ascii_lowercase + string.digits + ".-", min_size=1, max_size=20)
ports = st.integers(min_value=1, max_value=65535).map(str)
#: Passwords with any printable character; the "@" keeps one from being a
#: substring of a host name by chance.
passwords = st.text(string.ascii_letters + string.digits + "!#$%&()*+,-./:;<=>?@[]^_{|}~ '\\\"",
                    min_size=6, max_size=30).map(lambda text: "@" + text)


@given(hosts=st.lists(host_names, min_size=1, max_size=4), port=ports,
       password=passwords, extra_ports=st.booleans())
def test_describe_names_every_host_and_never_the_password(
        hosts: list[str], port: str, password: str, extra_ports: bool) -> None:
    """A keyword string with one or several hosts (one port for all, or one
    each): C{describe} lists each C{host:port} in order, the database, and
    not the password."""
    host_ports = [str(int(port) + index) if extra_ports else port
                  for index in range(len(hosts))]
    dsn = make_dsn(host=",".join(hosts), port=",".join(host_ports) if extra_ports else port,
                   dbname="kl", user="kl", password=password)
    described = describe(dsn)
    assert described == "database kl on " + ", ".join(
        f"{host}:{host_port}" for host, host_port in zip(hosts, host_ports, strict=True))
    assert password not in described


@given(password=passwords, sslmode=st.sampled_from(
    ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]))
def test_connection_string_passes_the_urls_own_settings_through(
        password: str, sslmode: str) -> None:
    """The URL's hosts, ports, password, C{sslmode}, C{sslrootcert} and
    C{target_session_attrs} reach libpq as given; Kilolock adds its session
    settings and a connect timeout only where the URL has none."""
    url = make_dsn(host="a.example,b.example", port="5432,5433", user="kl", password=password,
                   dbname="kl", sslmode=sslmode, sslrootcert="/etc/ca.pem",
                   target_session_attrs="read-write", connect_timeout="9")
    params = parse_dsn(connection_string(url))
    for name in ("host", "port", "password", "sslmode", "sslrootcert",
                 "target_session_attrs", "connect_timeout"):
        assert params[name] == parse_dsn(url)[name]
    assert "statement_timeout=" in params["options"]
    assert params["application_name"] == "kilolock"


def test_a_url_that_is_no_connection_string_is_refused_without_repeating_it() -> None:
    """A malformed URL: C{ValueError}, whose message does not repeat the URL
    (it may hold a password)."""
    with pytest.raises(ValueError, match="not a valid PostgreSQL connection string") as raised:
        connection_string("host=a password='s3cret-pw")
    assert "s3cret-pw" not in str(raised.value)


def test_connect_failure_gives_each_hosts_reason_on_one_line() -> None:
    """libpq's message for a multi-host attempt (a reason per host, hint
    lines indented): one line, a reason per host, hints left out; the page's
    version names no host."""
    error = psycopg2.OperationalError(
        'connection to server at "10.0.0.5", port 5432 failed: Connection refused\n'
        "\tIs the server running on that host and accepting TCP/IP connections?\n"
        'connection to server at "db.internal" (10.0.0.6), port 5433 failed:'
        " session is read-only\n"
        'connection to server on socket "/run/postgresql/.s.PGSQL.5432" failed:'
        " No such file or directory\n")
    reason = connect_failure(error)
    assert reason == (
        'connection to server at "10.0.0.5", port 5432 failed: Connection refused; '
        'connection to server at "db.internal" (10.0.0.6), port 5433 failed:'
        " session is read-only; "
        'connection to server on socket "/run/postgresql/.s.PGSQL.5432" failed:'
        " No such file or directory")
    assert without_places(reason) == (
        "Connection refused; session is read-only; No such file or directory")


@given(host=host_names, port=ports, reason=st.text(
    string.ascii_letters + " :-", min_size=1, max_size=40))
def test_without_places_drops_any_host(host: str, port: str, reason: str) -> None:
    """Whatever the host and port, the page's reason keeps libpq's reason
    and drops where it was tried."""
    line = f'connection to server at "{host}", port {port} failed: {reason}'
    assert without_places(line) == reason


@given(hosts=st.lists(host_names, min_size=2, max_size=4), port=ports, password=passwords,
       one_port=st.booleans())
def test_host_attempts_name_one_host_each_in_order(
        hosts: list[str], port: str, password: str, one_port: bool) -> None:
    """A multi-host string becomes one string per host, in order, each with
    that host and its port (or the one port of all) and every other setting
    of the original (password, target_session_attrs) unchanged."""
    host_ports = [port if one_port else str(1000 + index) for index in range(len(hosts))]
    dsn = make_dsn(host=",".join(hosts), port=port if one_port else ",".join(host_ports),
                   user="kl", password=password, dbname="kl",
                   target_session_attrs="read-write")
    attempts = host_attempts(dsn)
    assert [parse_dsn(attempt.dsn)["host"] for attempt in attempts] == hosts
    assert [parse_dsn(attempt.dsn)["port"] for attempt in attempts] == host_ports
    for attempt, host, host_port in zip(attempts, hosts, host_ports, strict=True):
        params = parse_dsn(attempt.dsn)
        assert (params["password"], params["target_session_attrs"]) == (password,
                                                                         "read-write")
        assert attempt.place == f'connection to server at "{host}", port {host_port}'
        assert password not in attempt.place


@pytest.mark.parametrize("dsn", [
    "host=db.example port=5432 dbname=kl",
    "postgresql://kl@db.example/kl",
    "host=a,b port=1,2,3 dbname=kl",  # libpq refuses it and says why
])
def test_one_host_or_unmatched_lists_are_left_whole(dsn: str) -> None:
    """One host, or host and port lists libpq cannot pair: one attempt, the
    string as it is."""
    assert [attempt.dsn for attempt in host_attempts(dsn)] == [dsn]
