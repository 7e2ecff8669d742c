"""Kilolock on a PostgreSQL reached over TCP with a password, as an external
or managed server is: every form of database URL docs/postgres.md shows,
through Kilolock's real start path (a C{twist kilolock} process: the store
starts, C{/readyz} answers 200, a write and a read succeed).

The servers are clusters of this module's own (L{tcp_postgres}) with
C{scram-sha-256} and C{md5} roles on 127.0.0.1, a hot standby for the
multi-host forms, and -- for the C{sslmode}s -- a server with C{ssl = on}
and a throw-away CA (a PostgreSQL built with OpenSSL: the embedded wheel's
is not).  A URL naming no usable server, or a wrong password, is a 503 with
Retry-After and the reason in C{/readyz} and the log, never a password.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kilolock.migrate.main import ExitCode
from kilolock.store.schema.upgrade import SCHEMA_VERSION
from tests.support.fixtures_server import (
    DEFAULT_LISTEN,
    KilolockServer,
    clean_environment,
    poll_until,
    server_command,
)
from tests.support.tcp_postgres import (
    TcpCluster,
    postgres_bindir,
    tcp_cluster,
    tls_postgres_bindir,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SCRAM_PASSWORD = "scram-Pa55-of-the-tests"
MD5_PASSWORD = "md5-Pa55-of-the-tests"
WRONG_PASSWORD = "not-the-Pa55-of-the-tests"

#: Every password a log, a page or an error must never show.
PASSWORDS = (SCRAM_PASSWORD, MD5_PASSWORD, WRONG_PASSWORD)

#: Password roles on 127.0.0.1; nobody else over TCP.
HBA = (
    "host all kl_scram 127.0.0.1/32 scram-sha-256",
    "host all kl_md5 127.0.0.1/32 md5",
    "host all all 127.0.0.1/32 reject",
)
SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
            "password_encryption": "'scram-sha-256'", "max_connections": "60"}

#: Seconds a store may take to become ready, or to say why it is not.
READY_TIMEOUT = 30.0


def add_roles(cluster: TcpCluster) -> None:
    """C{kl_scram} (a SCRAM secret) and C{kl_md5} (an MD5 hash), each owning
    a database of its name."""
    cluster.sql("CREATE ROLE kl_scram LOGIN PASSWORD %s", (SCRAM_PASSWORD,))
    cluster.sql("CREATE DATABASE kl_scram OWNER kl_scram")
    cluster.sql("SET password_encryption = 'md5'; CREATE ROLE kl_md5 LOGIN PASSWORD %s",
                (MD5_PASSWORD,))
    cluster.sql("CREATE DATABASE kl_md5 OWNER kl_md5")


@pytest.fixture(scope="module")
def tcp_postgres() -> Iterator[TcpCluster]:
    """A cluster of the embedded wheel's PostgreSQL on 127.0.0.1 with the
    password roles (no TLS: that build has none)."""
    with tcp_cluster(postgres_bindir(), HBA, SETTINGS) as cluster:
        add_roles(cluster)
        yield cluster


@pytest.fixture(scope="module")
def standby(tcp_postgres: TcpCluster) -> TcpCluster:
    """A hot standby of L{tcp_postgres}, read-only as a replica after a
    failover is, with Kilolock's schema (replicated: applied on the
    primary)."""
    migrated = run_migrate("--database", scram_url(tcp_postgres.port))
    assert migrated.returncode == 0, migrated.stderr
    return tcp_postgres.standby()


@pytest.fixture(scope="module")
def tls_postgres() -> Iterator[TcpCluster]:
    """A cluster with C{ssl = on}: a server certificate for 127.0.0.1 signed
    by a throw-away CA (C{cluster.directory / "tls" / "ca.pem"})."""
    from tests.support.tls_material import make_certificates

    def certificates(cluster: TcpCluster) -> None:
        tls = make_certificates(cluster.directory / "tls")
        cluster.own(tls.key_path)
        with (cluster.pgdata / "postgresql.conf").open("a") as conf:
            conf.write(f"ssl = on\nssl_cert_file = '{tls.cert_path}'\n"
                       f"ssl_key_file = '{tls.key_path}'\n")

    with tcp_cluster(tls_postgres_bindir(), HBA, SETTINGS, prepare=certificates) as cluster:
        add_roles(cluster)
        yield cluster


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A port of 127.0.0.1 held by a socket that does not listen: a
    connection to it is refused, as to a stopped PostgreSQL."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port of 127.0.0.1 that takes connections and never answers (a
    listening socket nobody accepts from): a server whose machine hangs, or
    whose packets are dropped."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        yield int(listening.getsockname()[1])


def scram_url(port: int) -> str:
    return f"postgresql://kl_scram:{SCRAM_PASSWORD}@127.0.0.1:{port}/kl_scram"


# -- a Kilolock on a database URL ----------------------------------------------


def start_kilolock(request: pytest.FixtureRequest, tmp_path: Path, database: str,
                   env: Mapping[str, str] | None = None,
                   name: str = "kilolock") -> KilolockServer:
    """A C{twist kilolock} on the PostgreSQL store at C{database} with C{env}
    added; listening (C{/healthz} 200), stopped after the test, its log
    attached to a failure report."""
    directory = tmp_path / name
    server = KilolockServer(
        server_command("--listen", DEFAULT_LISTEN, "--store", "postgres",
                       "--database", database),
        clean_environment(env), cwd=directory, log_path=directory / "server.log")
    request.node.__dict__.setdefault("kilolock_servers", []).append(server)
    request.addfinalizer(server.stop)
    return server.start()


def readiness(server: KilolockServer) -> tuple[int, Any, bytes | None]:
    """(status, body, Retry-After) of C{GET /readyz}."""
    reply = server.request("GET", "/readyz")
    retry_after = reply.headers.get(b"retry-after")
    return reply.status, json.loads(reply.body), retry_after[0] if retry_after else None


def database_condition(body: Any) -> Any:
    (condition,) = [c for c in body["conditions"] if c["type"] == "DatabaseReachable"]
    return condition


def wait_unready(server: KilolockServer, reason: str) -> tuple[int, Any, bytes | None]:
    """C{GET /readyz}'s (status, body, Retry-After) once its
    C{DatabaseReachable} message has C{reason} (the store's first attempt
    to connect has failed)."""
    def answer() -> tuple[int, Any, bytes | None] | None:
        answered = readiness(server)
        return answered if reason in database_condition(answered[1])["message"] else None

    found: tuple[int, Any, bytes | None] = poll_until(
        answer, READY_TIMEOUT, f"{reason!r} in /readyz\n--- server log ---\n{server.log_text()}")
    return found


def wait_ready(server: KilolockServer) -> None:
    """Wait for C{/readyz} to answer 200 (the store started)."""
    poll_until(lambda: readiness(server)[0] == 200, READY_TIMEOUT,
               f"/readyz to answer 200\n--- server log ---\n{server.log_text()}")


def state_body(serial: int, payload: str = "") -> bytes:
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": "tcp-lineage", "outputs": {"blob": {
                           "value": payload, "type": "string"}},
                       "resources": [], "check_results": None}).encode()


def assert_serves(server: KilolockServer, name: str, body: bytes | None = None) -> None:
    """A write of state C{name} answers 200 and a read gives its bytes back."""
    body = body or state_body(1)
    assert server.with_body("POST", f"/v1/states/{name}", body).status == 200
    read = server.request("GET", f"/v1/states/{name}")
    assert (read.status, read.body) == (200, body)


def assert_no_secrets(text: str) -> None:
    """No password, no traceback, no 500 in C{text}."""
    for secret in PASSWORDS:
        assert secret not in text, f"a password in:\n{text[-3000:]}"
    for needle in ("Traceback", "Unhandled", '" 500 '):
        assert needle not in text, f"{needle!r} in:\n{text[-3000:]}"


def kilolock_ssl_use(cluster: TcpCluster, database: str) -> set[bool]:
    """Whether each of Kilolock's sessions on C{database} uses TLS."""
    rows = cluster.sql("SELECT s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)"
                       " WHERE a.application_name = 'kilolock' AND a.datname = %s",
                       (database,))
    return {bool(ssl) for (ssl,) in rows}


def run_migrate(*args: str, env: Mapping[str, str] | None = None,
                ) -> subprocess.CompletedProcess[str]:
    """The installed C{kilolock-migrate ARGS}."""
    script = Path(sys.executable).parent / "kilolock-migrate"
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=120,
                          env=clean_environment(env), stdin=subprocess.DEVNULL, check=False)


# -- passwords, and where they come from ---------------------------------------


@pytest.mark.parametrize("form", ["scram-url", "md5-url", "keywords", "pgpass", "PGPASSWORD"])
def test_a_password_database_url_starts_and_serves(
        request: pytest.FixtureRequest, tmp_path: Path, tcp_postgres: TcpCluster,
        form: str) -> None:
    """Each way of giving the password of a role on a TCP server (in the URL
    for SCRAM and MD5 authentication, in a keyword string, in a C{.pgpass}
    file named by C{PGPASSFILE}, in C{PGPASSWORD}): the store starts,
    C{/readyz} is ready, a state is written and read back, and no password
    reaches the log."""
    port = tcp_postgres.port
    env: dict[str, str] = {}
    if form == "scram-url":
        database = scram_url(port)
    elif form == "md5-url":
        (stored,) = tcp_postgres.sql(
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'kl_md5'")
        assert stored[0].startswith("md5")  # so the server asks for MD5
        database = f"postgresql://kl_md5:{MD5_PASSWORD}@127.0.0.1:{port}/kl_md5"
    elif form == "keywords":
        database = (f"host=127.0.0.1 port={port} user=kl_scram password={SCRAM_PASSWORD}"
                    " dbname=kl_scram")
    elif form == "pgpass":
        passfile = tmp_path / "pgpass"
        passfile.write_text(f"127.0.0.1:{port}:kl_scram:kl_scram:{SCRAM_PASSWORD}\n")
        passfile.chmod(0o600)
        env["PGPASSFILE"] = str(passfile)
        database = f"postgresql://kl_scram@127.0.0.1:{port}/kl_scram"
    else:
        env["PGPASSWORD"] = SCRAM_PASSWORD
        database = f"postgresql://kl_scram@127.0.0.1:{port}/kl_scram"
    server = start_kilolock(request, tmp_path, database, env)
    wait_ready(server)
    assert_serves(server, f"password-{form}")
    assert_no_secrets(server.log_text())


def test_a_wrong_password_is_a_503_with_the_reason(
        request: pytest.FixtureRequest, tmp_path: Path, tcp_postgres: TcpCluster) -> None:
    """A password the server refuses: Kilolock stays up, C{/readyz} and state
    requests answer 503 with Retry-After, C{/readyz} and the log say the
    password was refused, and neither shows a password."""
    database = f"postgresql://kl_scram:{WRONG_PASSWORD}@127.0.0.1:{tcp_postgres.port}/kl_scram"
    server = start_kilolock(request, tmp_path, database)
    status, body, retry_after = wait_unready(server, "password authentication failed")
    assert (status, retry_after) == (503, b"5")
    condition = database_condition(body)
    assert condition["status"] == "False"
    assert "127.0.0.1" not in condition["message"]  # the page names no host; the log does
    request_reply = server.request("GET", "/v1/states/any")
    assert request_reply.status == 503
    log = poll_until(lambda: "cannot connect to the state database" in server.log_text()
                     and server.log_text(), READY_TIMEOUT, "the connect failure in the log")
    assert "password authentication failed" in log
    assert f"127.0.0.1:{tcp_postgres.port}" in log
    assert_no_secrets(log + json.dumps(body) + request_reply.body.decode())


# -- several hosts: the first one down, or a read-only standby ---------------


def test_a_multi_host_url_skips_a_stopped_server(
        request: pytest.FixtureRequest, tmp_path: Path, tcp_postgres: TcpCluster,
        refusing_port: int) -> None:
    """C{postgresql://user:pw@host:dead,host:live/db}: the first server
    refuses the connection (stopped), Kilolock connects to the second."""
    database = (f"postgresql://kl_scram:{SCRAM_PASSWORD}@127.0.0.1:{refusing_port},"
                f"127.0.0.1:{tcp_postgres.port}/kl_scram")
    server = start_kilolock(request, tmp_path, database)
    wait_ready(server)
    assert_serves(server, "multi-host-dead-first")
    assert_no_secrets(server.log_text())


def test_a_multi_host_url_leaves_a_silent_server_after_the_connect_timeout(
        request: pytest.FixtureRequest, tmp_path: Path, tcp_postgres: TcpCluster,
        silent_port: int) -> None:
    """The first host takes the connection and never answers: after the
    connect timeout (5 s) Kilolock moves on to the second host, as libpq
    does when it connects blocking, and starts."""
    database = (f"host=127.0.0.1,127.0.0.1 port={silent_port},{tcp_postgres.port}"
                f" user=kl_scram password={SCRAM_PASSWORD} dbname=kl_scram")
    server = start_kilolock(request, tmp_path, database)
    wait_ready(server)
    assert_serves(server, "multi-host-silent-first")
    assert_no_secrets(server.log_text())


def test_a_read_write_url_skips_a_standby_listed_first(
        request: pytest.FixtureRequest, tmp_path: Path, tcp_postgres: TcpCluster,
        standby: TcpCluster) -> None:
    """C{host=a,b port=standby,primary target_session_attrs=read-write}: libpq
    logs in to the standby, finds it read-only and moves on to the primary;
    Kilolock starts on the primary, and a large state (the blocking path,
    and psycopg 3's binary read after a restart) travels the same URL."""
    database = (f"host=127.0.0.1,127.0.0.1 port={standby.port},{tcp_postgres.port}"
                f" user=kl_scram password={SCRAM_PASSWORD} dbname=kl_scram"
                " target_session_attrs=read-write")
    first = start_kilolock(request, tmp_path, database, name="first")
    wait_ready(first)
    assert_serves(first, "standby-first")
    # Random bytes do not compress: the stored payload stays above the
    # 8 MB of the blocking path.
    large = state_body(1, base64.b64encode(os.urandom(9 << 20)).decode())
    assert first.with_body("POST", "/v1/states/standby-first-large", large).status == 200
    first.stop()
    assert_no_secrets(first.log_text())

    second = start_kilolock(request, tmp_path, database, name="second")
    wait_ready(second)
    read = second.request("GET", "/v1/states/standby-first-large")
    assert (read.status, read.body == large) == (200, True)
    assert_no_secrets(second.log_text())


def test_only_unusable_hosts_is_a_503_naming_each(
        request: pytest.FixtureRequest, tmp_path: Path, tcp_postgres: TcpCluster,
        standby: TcpCluster, refusing_port: int) -> None:
    """A URL whose every host is unusable -- one refuses connections, one is
    a read-only standby: C{/readyz} is 503 with Retry-After and gives both
    reasons, the log names each host and its reason, no password."""
    database = (f"host=127.0.0.1,127.0.0.1 port={refusing_port},{standby.port}"
                f" user=kl_scram password={SCRAM_PASSWORD} dbname=kl_scram"
                " target_session_attrs=read-write")
    server = start_kilolock(request, tmp_path, database)
    status, body, retry_after = wait_unready(server, "read-only")
    assert (status, retry_after) == (503, b"5")
    assert "Connection refused" in database_condition(body)["message"]
    log = poll_until(lambda: "cannot connect to the state database" in server.log_text()
                     and server.log_text(), READY_TIMEOUT, "the connect failure in the log")
    assert f"127.0.0.1:{refusing_port}" in log
    assert f"127.0.0.1:{standby.port}" in log
    assert "read-only" in log
    assert_no_secrets(log + json.dumps(body))


def test_kilolock_migrate_takes_a_multi_host_url(
        tcp_postgres: TcpCluster, standby: TcpCluster, refusing_port: int) -> None:
    """C{kilolock-migrate} on a multi-host URL whose first hosts are a stopped
    server and a standby: it finds the primary, and says where it looked
    without the password; with a wrong password it exits 3 and says why for
    each host it tried (libpq tries no further host once one refused the
    password)."""
    hosts = (f"host=127.0.0.1,127.0.0.1,127.0.0.1"
             f" port={refusing_port},{standby.port},{tcp_postgres.port}"
             " user=kl_scram dbname=kl_scram target_session_attrs=read-write")
    done = run_migrate("--database", f"{hosts} password={SCRAM_PASSWORD}")
    assert done.returncode == ExitCode.CURRENT, done.stderr
    assert f"schema version after: {SCHEMA_VERSION}" in done.stdout
    assert f"127.0.0.1:{tcp_postgres.port}" in done.stdout
    refused = run_migrate("--database", f"{hosts} password={WRONG_PASSWORD}")
    assert refused.returncode == ExitCode.UNREACHABLE
    assert f'port {refusing_port} failed: Connection refused' in refused.stderr
    assert (f'port {standby.port} failed: FATAL:  password authentication failed'
            in refused.stderr)
    assert_no_secrets(done.stdout + done.stderr + refused.stdout + refused.stderr)


# -- TLS: sslmode -----------------------------------------------------------------


@pytest.mark.parametrize("sslmode, uses_tls", [
    ("disable", False), ("prefer", True), ("require", True),
    ("verify-full", True), ("verify-full-env", True)])
def test_each_sslmode_starts_and_serves(
        request: pytest.FixtureRequest, tmp_path: Path, tls_postgres: TcpCluster,
        sslmode: str, uses_tls: bool) -> None:
    """On a server with TLS: C{sslmode=disable} connects in the clear,
    C{prefer} and C{require} with TLS, C{verify-full} with TLS after checking
    the server's certificate against the CA named by C{sslrootcert} (or by
    C{PGSSLROOTCERT}); each starts, serves, and keeps no password in the
    log."""
    ca = tls_postgres.directory / "tls" / "ca.pem"
    env: dict[str, str] = {}
    database = scram_url(tls_postgres.port)
    if sslmode == "verify-full":
        database += f"?sslmode=verify-full&sslrootcert={ca}"
    elif sslmode == "verify-full-env":
        database += "?sslmode=verify-full"
        env["PGSSLROOTCERT"] = str(ca)
    else:
        database += f"?sslmode={sslmode}"
    server = start_kilolock(request, tmp_path, database, env)
    wait_ready(server)
    assert_serves(server, f"tls-{sslmode}")
    assert kilolock_ssl_use(tls_postgres, "kl_scram") == {uses_tls}
    assert_no_secrets(server.log_text())


def test_verify_full_with_another_ca_is_a_503_with_the_reason(
        request: pytest.FixtureRequest, tmp_path: Path, tls_postgres: TcpCluster) -> None:
    """C{sslmode=verify-full} with a CA that did not sign the server's
    certificate: no connection, a 503 whose C{/readyz} reason and log line
    say the certificate was not verified."""
    from tests.support.tls_material import make_certificates

    other = make_certificates(tmp_path / "other-ca")
    database = f"{scram_url(tls_postgres.port)}?sslmode=verify-full&sslrootcert={other.ca_path}"
    server = start_kilolock(request, tmp_path, database)
    status, body, retry_after = wait_unready(server, "certificate verify failed")
    assert (status, retry_after) == (503, b"5")
    log = poll_until(lambda: "cannot connect to the state database" in server.log_text()
                     and server.log_text(), READY_TIMEOUT, "the connect failure in the log")
    assert "certificate verify failed" in log
    assert_no_secrets(log + json.dumps(body))
