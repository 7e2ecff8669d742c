"""The PostgreSQL L{IStateStore}: txpostgres (asynchronous psycopg2) on the reactor.

Every public method is one transaction (C{runInteraction}) made of small
C{_x_txn} coroutines; nothing blocks the reactor thread.  The behaviour is
exactly L{kilolock.store.memory.MemoryStateStore}'s; what PostgreSQL adds is
durability and correctness across processes sharing one database:

  - A write locks its state row (C{SELECT ... FOR UPDATE}, after creating it
    with C{INSERT ... ON CONFLICT DO NOTHING}) so writers of one state are
    serialised, then reads the lock with a fresh snapshot: a LOCK cannot slip
    in between, because inserting a lock row needs a key-share lock on the
    state row.  Lock check, serial check, the raw bytes, the projection (one
    statement for all three tables, rows passed as one JSON document) and the
    audit event commit together.
  - Locks are taken and released with single statements
    (C{INSERT ... ON CONFLICT (state_id) DO NOTHING RETURNING},
    C{DELETE ... RETURNING}); there are no advisory locks.
  - Audit events are chained per tenant: the chain head (last seq and hash)
    is kept on the tenant row, which an append locks; hashes are
    L{kilolock.audit.event_hash}, the memory store's.
  - The current version of a state is its highest-numbered one.

Resilience: each pooled connection carries a dead-connection detector that
reconnects in the background after PostgreSQL restarts; a pool that failed to
start is rebuilt by the next call; connection failures, the statement timeout
and an overall deadline per call all surface as L{ServiceUnavailable} (503 with
Retry-After) instead of hanging.  Nothing here logs state bytes, query
parameters or the connection string.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii as _encode_json_string
from typing import Any, TypeVar, cast

import psycopg2
from attrs import define, evolve, field
from psycopg2.extensions import (
    ISQLQuote,
    TransactionRollbackError,
    make_dsn,
    new_type,
    parse_dsn,
    register_type,
)
from twisted.internet.defer import (
    CancelledError,
    Deferred,
    DeferredLock,
    FirstError,
    ensureDeferred,
    gatherResults,
    maybeDeferred,
)
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from txpostgres.reconnection import ConnectionDead, DeadConnectionDetector
from txpostgres.retrying import simpleBackoffIterator
from txpostgres.txpostgres import Connection, ConnectionPool, RollbackFailed, _PollingMixin
from zope.interface import implementer

from kilolock.audit import (
    delete_detail,
    event_hash_template,
    lock_detail,
    unchained_event,
    write_detail,
)
from kilolock.errors import (
    KilolockError,
    LockConflict,
    LockNotHeld,
    SerialConflict,
    ServiceUnavailable,
    StateNotFound,
    Unauthorized,
)
from kilolock.interfaces import IHealthCheck, IStateStore, ITenantStore
from kilolock.model import (
    LOCK_ACQUIRE,
    LOCK_FORCE_RELEASE,
    LOCK_RELEASE,
    STATE_DELETE,
    STATE_WRITE,
    AuditEvent,
    DependencyRow,
    HeldLock,
    LockInfo,
    OutputRow,
    Principal,
    Projection,
    ResourceMatch,
    ResourceQuery,
    ResourceRow,
    StateKey,
    StateSummary,
    StateUpload,
    StateVersion,
    WriteOutcome,
    utcnow,
)
from kilolock.resource_query import attribute_steps, check_query, like_pattern
from kilolock.store.embedded import EmbeddedPostgres
from kilolock.store.postgres_bulk import BlockingSession, binary_copy, register_casters, text_copy
from kilolock.store.postgres_hosted import OWNER_GONE_SQLSTATE, HostedPostgresStore
from kilolock.store.postgres_prepared import PreparedSQL, prepare_statements_sql
from kilolock.store.postgres_read import read_raw_state_txn
from kilolock.store.schema import SCHEMA_VERSION, SchemaTooNew, ensure_schema, schema_version

__all__ = ["PostgresStateStore", "postgres_store_from_settings"]

log = Logger()

T = TypeVar("T")

#: Connections per store (per process).
DEFAULT_POOL_SIZE = 6
#: Seconds to open one connection before giving up on it.
CONNECT_TIMEOUT = 5.0
#: Seconds one SQL statement may run (PostgreSQL's statement_timeout).
STATEMENT_TIMEOUT = 30.0
#: Seconds one store call may take in all, waiting for a connection included.
OPERATION_TIMEOUT = 60.0
#: Seconds a readiness probe waits for the database.
PROBE_TIMEOUT = 3.0
#: Seconds after a failed attempt to open the pool before the next call tries
#: again (calls in between fail at once).
POOL_RETRY_INTERVAL = 1.0
#: The Retry-After of a 503 while the database is unreachable.
RETRY_AFTER = 5
#: Attempts of a transaction PostgreSQL aborted for a deadlock or
#: serialisation failure (both are safe to retry).
TRANSACTION_ATTEMPTS = 3
#: Rounds of "take the lock, else read the holder" before giving up (the
#: holder can release between the two statements).
_ACQUIRE_ATTEMPTS = 10
#: Uploads at least this big are prepared for the database in a thread.
LARGE_UPLOAD_BYTES = 1 << 20
#: Projections with more rows than this are decoded in a thread.
LARGE_PROJECTION_ROWS = 2000
#: Writes of states at least this big, and reads of them, run on a blocking
#: connection in a thread (see L{kilolock.store.postgres_bulk}).
LARGE_TRANSFER_BYTES = 8 << 20

#: Seconds between attempts of a call refused by a reconnecting connection.
_REFUSAL_PAUSE = 0.05

#: Failures that mean "the database cannot be reached right now".
_UNREACHABLE = (
    psycopg2.OperationalError,
    psycopg2.InterfaceError,
    ConnectionDead,
    RollbackFailed,
    ConnectionDone,
    ConnectionLost,
    CancelledError,  # txpostgres's form of statement_timeout
)


#: libpq's CONNECTION_OK (PQstatus).
_LIBPQ_CONNECTION_OK = 0


#: bytea values come back as their hex text ("\\x..."), decoded by
#: L{_bytes_from_hex}, in a thread when large, instead of by psycopg2 on the
#: reactor thread.
_BYTEA_AS_HEX = new_type((17,), "KILOLOCK_BYTEA_AS_HEX", lambda value, cursor: value)


def _sleep(reactor: Any, seconds: float) -> Deferred[None]:
    pause: Deferred[None] = Deferred()
    reactor.callLater(seconds, pause.callback, None)
    return pause


class _ConnectTimeout(Exception):
    """Opening a connection took longer than the connect timeout."""


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


# ---------------------------------------------------------------------------
# The pool: reconnecting connections, bounded connects, retirement


class _ReconnectingDetector(DeadConnectionDetector):  # type: ignore[misc]
    """A txpostgres dead-connection detector that reconnects with a short
    backoff (at most 3 s between attempts) and can be retired with its pool.

    Only failures that mean the connection is gone count as death: a deadlock
    or a cancelled statement (also C{OperationalError}s) leave the connection
    usable.
    """

    def __init__(self, reactor: Any) -> None:
        super().__init__(deathChecker=self._connection_died, reactor=reactor)
        self.retired = False
        self._delays: Iterator[float] = iter(())
        self._pending: Any = None

    def _connection_died(self, failure: Any) -> bool:
        if self.retired:
            return False
        if failure.check(psycopg2.InterfaceError, RollbackFailed, ConnectionDone,
                         ConnectionLost, _ConnectTimeout):
            return True
        if failure.check(psycopg2.OperationalError):
            return not _session_usable(getattr(self.reconnectable, "_connection", None))
        return False

    def startReconnecting(self, failure: Any) -> None:
        self._delays = iter(simpleBackoffIterator(initialDelay=0.3, maxDelay=3.0, factor=2.0,
                                                  maxRetries=0, now=True))
        self._schedule_attempt()

    def _schedule_attempt(self) -> None:
        if not self.retired:
            self._pending = self.reactor.callLater(next(self._delays), self._attempt)

    def _attempt(self) -> None:
        self._pending = None
        if self.retired:
            return
        attempt = self.reconnect()
        attempt.addCallbacks(lambda _: self.connectionRecovered(),
                             lambda _: self._schedule_attempt())

    def retire(self) -> None:
        """Stop reconnecting, for good."""
        self.retired = True
        if self._pending is not None and self._pending.active():
            self._pending.cancel()
        self._pending = None


def _session_usable(raw: Any) -> bool:
    """Whether a psycopg2 connection still has a working session (psycopg2
    leaves C{closed} false when the server ends the session; libpq's status
    tells)."""
    if raw is None or raw.closed:
        return False
    try:
        return bool(raw.info.status == _LIBPQ_CONNECTION_OK)
    except psycopg2.Error:
        return False


class _BeginWithFirstStatement:
    """A txpostgres cursor whose first C{execute} starts the transaction:
    C{BEGIN; <statement>} is one simple query, answered with the statement's
    result.  C{execute(..., commit=True)} ends it the same way: C{<statement>;
    COMMIT} is one simple query (the statement's rows are not kept); if the
    statement fails, PostgreSQL skips the COMMIT and the transaction is
    rolled back as usual.  A transaction of one statement (the first
    statement sent with C{commit=True}) travels without either, and its rows
    are kept.  A L{PreparedSQL} runs as C{EXECUTE} on a session that
    prepared it (C{prepared})."""

    def __init__(self, cursor: Any, prepared: bool = False) -> None:
        self._cursor = cursor
        self._prepared = prepared
        self._begun = False
        self.committed = False

    def execute(self, query: str | tuple[str, ...], params: Any = None, *,
                commit: bool = False) -> Deferred[Any]:
        """Run C{query} (as C{EXECUTE} when it is a L{PreparedSQL} and the
        session prepared the state lane's statements).  A tuple of
        statements sharing the named C{params} is sent as one simple query
        (one round trip; the last statement's rows come back).

        @return: a Deferred firing when the statement has run."""
        if self.committed:
            raise RuntimeError("a statement after the transaction was committed")
        statements = query if isinstance(query, tuple) else (query,)
        if self._prepared and all(isinstance(part, PreparedSQL) for part in statements):
            named = params
            params = [value for part in statements
                      for value in cast(PreparedSQL, part).arguments(named)]
            query = "; ".join(cast(PreparedSQL, part).execute_sql for part in statements)
        else:
            query = "; ".join(statements)
        if not self._begun and commit:
            # The transaction's only statement: sent alone, it is its own
            # transaction (psycopg2's asynchronous sessions autocommit), and
            # its rows come back.
            self._begun = self.committed = True
        else:
            if not self._begun:
                self._begun = True
                query = "BEGIN; " + query
            if commit:
                self.committed = True
                query = query + "; COMMIT"
        result: Deferred[Any] = self._cursor.execute(query, params)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class _PooledConnection(Connection):  # type: ignore[misc]
    """A txpostgres connection whose connect attempt is abandoned after
    C{connect_timeout} seconds (libpq ignores C{connect_timeout} in
    asynchronous mode) and which can be closed in any state."""

    connect_timeout = CONNECT_TIMEOUT
    detector: _ReconnectingDetector
    #: The PREPARE statements every session runs once the schema is current
    #: (set by the pool after the upgrade; None before).
    prepare_sql: str | None = None
    #: Whether this session prepared them.
    prepared = False

    def connect(self, *args: Any, **kwargs: Any) -> Deferred[Any]:
        attempt: Deferred[Any] = super().connect(*args, **kwargs)
        attempt.addCallback(self._connected)
        if attempt.called:
            return attempt
        timer = self.reactor.callLater(self.connect_timeout, self._abandon_connect)

        def stop_timer(result: Any) -> Any:
            if timer.active():
                timer.cancel()
                return result
            # The timer fired and closed the connection: say why it failed.
            if isinstance(result, Failure):
                return Failure(_ConnectTimeout())
            return result

        return attempt.addBoth(stop_timer)

    def _connected(self, result: Any) -> Any:
        register_type(_BYTEA_AS_HEX, self._connection)
        self.prepared = False
        if self.prepare_sql is None:  # the first connect: the pool prepares later
            return result
        preparing = self.prepare_statements()
        return preparing.addCallback(lambda _: result)

    def prepare_statements(self) -> Deferred[None]:
        """Prepare the state lane's statements in this session (outside any
        transaction).  A failure is logged and leaves the session running
        the statements as text.

        @return: a Deferred firing with None."""
        assert self.prepare_sql is not None
        sql = self.prepare_sql
        # Not through runOperation: while reconnecting, the detector still
        # counts this session as dead and would refuse it.
        running: Deferred[Any] = self.lock.run(lambda: self.cursor().execute(sql))

        def prepared(_: object) -> None:
            self.prepared = True

        def not_prepared(failure: Failure) -> None:
            log.warn("could not prepare statements ({kind}); running them as text",
                     kind=failure.type.__name__ if failure.type else "?")

        return running.addCallbacks(prepared, not_prepared)

    def _abandon_connect(self) -> None:
        self.close()

    def _runInteraction(self, interaction: Callable[..., Any], *args: Any,
                        **kwargs: Any) -> Deferred[Any]:
        """txpostgres's transaction runner (begin, interaction, commit, or
        rollback and the original failure), except that BEGIN travels with
        the interaction's first statement and COMMIT may travel with its
        last (a round trip less each), and that a rollback on a connection that is already
        gone is expected, not logged as an unhandled error with a traceback."""
        cursor = self.cursor()
        statements = _BeginWithFirstStatement(cursor, self.prepared)
        running: Deferred[Any] = maybeDeferred(interaction, statements, *args, **kwargs)

        def commit(result: Any) -> Any:
            if statements.committed:  # COMMIT travelled with the last statement
                return result
            committing: Deferred[Any] = cursor.execute("commit")
            return committing.addCallback(lambda _: result)

        def roll_back(failure: Failure) -> Deferred[Any]:
            rolling_back: Deferred[Any] = maybeDeferred(cursor.execute, "rollback")

            def rollback_failed(rollback_failure: Failure) -> Failure:
                if _session_usable(self._connection):
                    log.warn("a rollback failed: {kind}",
                             kind=type(rollback_failure.value).__name__)
                return Failure(RollbackFailed(self, failure))

            rolling_back.addCallbacks(lambda _: failure, rollback_failed)
            return rolling_back

        running.addCallback(commit)
        running.addErrback(roll_back)
        return running

    def doRead(self) -> Exception | None:
        """Read from the socket; when the server has gone away (a restart
        ends idle sessions) hand the error back to the reactor, which calls
        C{connectionLost} and so the detector, instead of logging a traceback.

        txpostgres's own C{doRead}, except that a session libpq has given up
        on without an error (an immediate shutdown: the server's FATAL
        message read, then the socket closed, so C{fileno()} is -1) is lost
        too, instead of being watched again."""
        try:
            _PollingMixin.doRead(self)
            self.checkForNotifies()
        except psycopg2.Error as error:
            return cast(Exception, error)
        if not _session_usable(self._connection):
            return ConnectionLost("the database server ended the session")
        self.reactor.addReader(self)
        return None

    def close(self) -> None:
        if self._connection is None:
            return
        super().close()

    @property
    def alive(self) -> bool:
        return not self.detector.connectionIsDead and _session_usable(self._connection)


@define
class _Ticket:
    """Which connection a transaction got (None while it waits for one)."""

    connection: _PooledConnection | None = None


class _ResilientPool(ConnectionPool):  # type: ignore[misc]
    """A txpostgres pool of L{_PooledConnection}s, each with its own
    L{_ReconnectingDetector}; transactions prefer a live connection."""

    def __init__(self, reactor: Any, dsn: str, size: int, connect_timeout: float) -> None:
        self.reactor = reactor
        self._connect_timeout = connect_timeout
        super().__init__(None, dsn, min=size)
        self.every_connection: frozenset[_PooledConnection] = frozenset(self.connections)
        self.retired = False

    def connectionFactory(self, reactor: Any, cooperator: Any) -> _PooledConnection:
        connection = _PooledConnection(reactor, cooperator, detector=_ReconnectingDetector(reactor))
        connection.connect_timeout = self._connect_timeout
        return connection

    def run_transaction(self, interaction: Callable[[Any], Deferred[T]],
                        ticket: _Ticket) -> Deferred[T]:
        """Run C{interaction(cursor)} in a transaction on a pooled connection,
        noting the connection on C{ticket}.  @return: its Deferred."""
        return self._semaphore.run(self._run_on_a_connection, interaction, ticket)  # type: ignore[no-any-return]

    def _run_on_a_connection(self, interaction: Callable[[Any], Deferred[T]],
                             ticket: _Ticket) -> Deferred[T]:
        connection = next((c for c in self.connections if c.alive), None)
        if connection is None:
            connection = self.connections.pop()
        else:
            self.connections.remove(connection)
        ticket.connection = connection
        running: Deferred[T] = connection.runInteraction(interaction)
        return running.addBoth(self._putBackAndPassthrough, connection)

    def prepare_statements(self, sql: str) -> Deferred[Any]:
        """Have every session run C{sql} (PREPARE statements) now and after
        each reconnection.  @return: a Deferred firing when all have tried."""
        for connection in self.every_connection:
            connection.prepare_sql = sql
        return gatherResults([connection.prepare_statements()
                              for connection in self.every_connection if connection.alive])

    @property
    def any_alive(self) -> bool:
        return any(connection.alive for connection in self.every_connection)

    @property
    def alive_count(self) -> int:
        return sum(1 for connection in self.every_connection if connection.alive)

    def retire(self) -> None:
        """Close every connection and stop all reconnection attempts."""
        self.retired = True
        for connection in self.every_connection:
            connection.detector.retire()
            connection.close()


# ---------------------------------------------------------------------------
# The store


@implementer(IStateStore, ITenantStore, IHealthCheck)
class PostgresStateStore(HostedPostgresStore):
    """States, versions, locks, projection rows and audit events in PostgreSQL.

    With C{prepared_statements} (the default) every pooled session prepares
    the write cycle's statements (see L{kilolock.store.postgres_prepared});
    turn it off for a connection pooler that does not keep sessions (e.g.
    PgBouncer in transaction mode).

    @ivar reachable: True when the last contact with the database worked.
    @ivar schema_upgrade: (version found, version now) of the last schema
        check, or None before the first.
    """

    def __init__(self, database_url: str | None, reactor: Any, *,
                 pool_size: int = DEFAULT_POOL_SIZE,
                 connect_timeout: float = CONNECT_TIMEOUT,
                 statement_timeout: float = STATEMENT_TIMEOUT,
                 operation_timeout: float = OPERATION_TIMEOUT,
                 clock: Callable[[], datetime] = utcnow,
                 embedded: EmbeddedPostgres | None = None,
                 prepared_statements: bool = True) -> None:
        if database_url is None and embedded is None:
            raise ValueError("a database URL or an embedded PostgreSQL is needed")
        self._reactor = reactor
        self._embedded = embedded
        self._pool_size = pool_size
        self._prepared_statements = prepared_statements
        self._connect_timeout = connect_timeout
        self._statement_timeout = statement_timeout
        self._operation_timeout = operation_timeout
        self.clock = clock
        self._dsn = (None if database_url is None else
                     connection_string(database_url, statement_timeout=statement_timeout,
                                       connect_timeout=connect_timeout))
        self._pool: _ResilientPool | None = None
        self._pool_lock = DeferredLock()
        self._pool_attempts = 0
        self._pool_failed_at = float("-inf")
        self._connect_failure_logged_at: float | None = None
        self._stopped = False
        self._in_flight = 0
        self._idle_waiters: list[Deferred[None]] = []
        self.reachable = False
        self._outage_logged = False
        self.schema_upgrade: tuple[int, int] | None = None
        self._utf8_database = False

    @classmethod
    def embedded(cls, server: EmbeddedPostgres, reactor: Any,
                 **options: Any) -> PostgresStateStore:
        """A store on an embedded PostgreSQL that it starts and stops itself."""
        return cls(None, reactor, embedded=server, **options)

    # -- lifecycle --------------------------------------------------------

    def start(self) -> Deferred[None]:
        """Connect (starting the embedded server first if there is one) and
        bring the schema up to date.

        @return: a Deferred firing with None when the store can serve, or
            failing with L{ServiceUnavailable} when the database cannot be
            reached (the next call tries again).
        """
        self._stopped = False

        async def start() -> None:
            await self._ready_pool()

        return ensureDeferred(start())

    def stop(self) -> Deferred[None]:
        """Let running calls finish (for at most the operation timeout), close
        every connection, and stop the embedded server if this store started it.

        @return: a Deferred firing with None.
        """
        self._stopped = True
        return ensureDeferred(self._stop())

    async def _stop(self) -> None:
        if self._in_flight:
            idle: Deferred[None] = Deferred()
            self._idle_waiters.append(idle)
            await idle
        async with self._pool_lock:
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.retire()
            if self._embedded is not None and self._embedded.running:
                await self._embedded.stop(self._reactor)

    def probe(self) -> Deferred[Any]:
        """Check the database within L{PROBE_TIMEOUT} seconds; never fails.

        @return: a Deferred firing with a L{kilolock.model.StoreProbe}: whether
            the database answers, and the schema version it has and the one
            this code expects.
        """
        from kilolock.model import StoreProbe

        async def probe() -> StoreProbe:
            try:
                pool = await self._ready_pool()
                version = await self._bounded(
                    pool, lambda cursor: ensureDeferred(schema_version(cursor)),
                    timeout=PROBE_TIMEOUT)
            except Exception as error:
                if not isinstance(error, (*_UNREACHABLE, KilolockError)):
                    log.failure("the database probe failed unexpectedly")
                self._note_reachable(False, error)
                return StoreProbe(reachable=False, message="PostgreSQL does not answer",
                                  expected_schema_version=SCHEMA_VERSION)
            self._note_reachable(True)
            return StoreProbe(reachable=True, message="PostgreSQL answers",
                              schema_version=version, expected_schema_version=SCHEMA_VERSION,
                              connections_alive=pool.alive_count,
                              connections_total=len(pool.every_connection))

        return ensureDeferred(probe())

    async def _ready_pool(self) -> _ResilientPool:
        """The started pool; opens one (again) when there is none.

        Callers that queued while an attempt failed fail with it instead of
        each waiting for their own connect timeout.
        """
        if self._pool is not None:
            return self._pool
        if self._reactor.seconds() - self._pool_failed_at < POOL_RETRY_INTERVAL:
            raise ServiceUnavailable(retry_after=RETRY_AFTER)
        attempts_seen = self._pool_attempts
        async with self._pool_lock:
            if self._pool is not None:
                return self._pool
            if self._stopped:
                raise ServiceUnavailable("the state store is stopped", retry_after=RETRY_AFTER)
            if self._pool_attempts != attempts_seen:
                raise ServiceUnavailable(retry_after=RETRY_AFTER)
            self._pool_attempts += 1
            self._pool = await self._open_pool()
            return self._pool

    async def _open_pool(self) -> _ResilientPool:
        if self._embedded is not None:
            # (Re)start the embedded server: a no-op while it runs, a restart
            # after it stopped or died.
            try:
                dsn = await self._embedded.start(self._reactor)
            except Exception as error:
                log.error("the embedded PostgreSQL did not start: {kind}: {reason}",
                          kind=type(error).__name__,
                          reason=(str(error).strip().splitlines() or [""])[0])
                raise ServiceUnavailable(retry_after=RETRY_AFTER) from None
            self._dsn = connection_string(dsn, statement_timeout=self._statement_timeout,
                                          connect_timeout=self._connect_timeout)
        assert self._dsn is not None
        pool = _ResilientPool(self._reactor, self._dsn, self._pool_size, self._connect_timeout)
        try:
            try:
                await pool.start()
            except FirstError as first:
                first.subFailure.raiseException()
            (found, now), encoding = await self._bounded(
                pool, lambda cursor: ensureDeferred(_prepare_database_txn(cursor)))
            self.schema_upgrade = (found, now)
            self._utf8_database = encoding.upper() in ("UTF8", "UNICODE")
            if self._prepared_statements:
                await pool.prepare_statements(_PREPARE_STATEMENTS)
            if found != now:
                log.info("database schema upgraded from version {found} to {now}",
                         found=found, now=now)
        except Exception as error:
            pool.retire()
            self._pool_failed_at = self._reactor.seconds()
            self.reachable = False
            if isinstance(error, SchemaTooNew):
                log.error("{message}", message=str(error))
                raise
            if isinstance(error, (*_UNREACHABLE, _ConnectTimeout, ServiceUnavailable)):
                self._log_connect_failure(error)
                raise ServiceUnavailable(retry_after=RETRY_AFTER) from None
            raise
        self._connect_failure_logged_at = None
        self._note_reachable(True)
        return pool

    def _log_connect_failure(self, error: BaseException) -> None:
        """Log why connecting failed: at the first failure, then once a minute.
        libpq's first line says what was tried (host or socket, never the
        password)."""
        now = self._reactor.seconds()
        logged = self._connect_failure_logged_at
        if logged is None or now - logged >= 60:
            self._connect_failure_logged_at = now
            log.warn("cannot connect to the state database: {kind}: {reason}",
                     kind=type(error).__name__,
                     reason=(str(error).strip().splitlines() or [""])[0])

    # -- running transactions ---------------------------------------------

    def _transaction(self, txn: Callable[..., Coroutine[Any, Any, T]], *args: Any,
                     blocking: bool = False) -> Deferred[T]:
        """Run C{txn(cursor, *args)} as one transaction; with C{blocking}, on
        a blocking connection in a thread (for transactions that move many
        megabytes; the cursor then also has C{select_bytea} and C{copy_in}).

        @return: a Deferred firing with its result; database unavailability
            becomes L{ServiceUnavailable}; a deadlock is retried.
        """
        self._in_flight += 1

        def finished(result: Any) -> Any:
            self._in_flight -= 1
            if not self._in_flight:
                waiters, self._idle_waiters = self._idle_waiters, []
                for waiter in waiters:
                    waiter.callback(None)
            return result

        return ensureDeferred(self._run_transaction(txn, args, blocking)).addBoth(finished)

    async def _run_transaction(self, txn: Callable[..., Coroutine[Any, Any, T]],
                               args: tuple[Any, ...], blocking: bool = False) -> T:
        if self._stopped:
            raise ServiceUnavailable("the state store is stopped", retry_after=RETRY_AFTER)
        pool = await self._ready_pool()
        attempt = 1
        refusals = 0
        while True:
            try:
                result: T = await (
                    self._bounded_blocking(txn, args) if blocking
                    else self._bounded(pool, lambda cursor: ensureDeferred(txn(cursor, *args))))
            except TransactionRollbackError:
                if attempt >= TRANSACTION_ATTEMPTS:
                    raise ServiceUnavailable(retry_after=1) from None
                attempt += 1
                continue
            except ConnectionDead as error:
                # Refused before anything ran: that connection is still
                # reconnecting (after a database restart).  While others of
                # the pool are live, try again on one of them.
                if pool.any_alive and refusals < self._pool_size:
                    refusals += 1
                    await _sleep(self._reactor, _REFUSAL_PAUSE)
                    continue
                self._note_reachable(False, error)
                raise ServiceUnavailable(retry_after=RETRY_AFTER) from None
            except KilolockError:
                self._note_reachable(True)
                raise
            except _UNREACHABLE as error:
                self._note_reachable(False, error)
                raise ServiceUnavailable(retry_after=RETRY_AFTER) from None
            except psycopg2.Error as error:
                # Hosted mode: a state of a tenant or environment deleted
                # while the request was on its way (see 002_hosted.sql).
                if error.pgcode != OWNER_GONE_SQLSTATE:
                    raise
                self._note_reachable(True)
                raise Unauthorized("the token's tenant, workspace or environment no longer"
                                   " exists") from None
            self._note_reachable(True)
            return result

    def _note_reachable(self, reachable: bool, error: BaseException | None = None) -> None:
        """Track whether the database answers; log the changes, not every call."""
        if reachable and self._outage_logged:
            log.info("the state database answers again")
            self._outage_logged = False
        elif not reachable and self.reachable:
            log.warn("the state database stopped answering ({kind}); answering 503 until"
                     " it is back", kind=type(error).__name__)
            self._outage_logged = True
        self.reachable = reachable

    def _bounded(self, pool: _ResilientPool, interaction: Callable[[Any], Deferred[T]],
                 timeout: float | None = None) -> Deferred[T]:
        """Run C{interaction} on C{pool}, failing with L{ServiceUnavailable}
        after C{timeout} seconds (default: the operation timeout).  A
        transaction still waiting for a connection is dropped from the queue;
        one that is stuck on its connection gets that connection closed (its
        detector reconnects)."""
        ticket = _Ticket()
        running = pool.run_transaction(interaction, ticket)

        def stop_running() -> None:
            if ticket.connection is None:
                running.cancel()
            else:
                ticket.connection.close()

        seconds = self._operation_timeout if timeout is None else timeout
        return self._with_deadline(running, seconds, stop_running)

    def _bounded_blocking(self, txn: Callable[..., Coroutine[Any, Any, T]],
                          args: tuple[Any, ...]) -> Deferred[T]:
        """Run C{txn} on a L{BlockingSession} in a thread, failing with
        L{ServiceUnavailable} after the operation timeout (the running
        statement is cancelled, so the transaction rolls back)."""
        assert self._dsn is not None
        session = BlockingSession(self._dsn, register_casters(_BYTEA_AS_HEX))
        running = self._in_thread(session.run, txn, args)
        return self._with_deadline(running, self._operation_timeout, session.cancel)

    def _with_deadline(self, running: Deferred[T], seconds: float,
                       stop_running: Callable[[], None]) -> Deferred[T]:
        """C{running}'s result, or L{ServiceUnavailable} once C{seconds} have
        passed (then C{stop_running} is called, and a late result of
        C{running} is dropped: that failure is expected)."""
        outcome: Deferred[T] = Deferred()

        def give_up() -> None:
            stop_running()
            if not outcome.called:
                log.warn("a state database call exceeded {seconds} s", seconds=seconds)
                outcome.errback(ServiceUnavailable(retry_after=RETRY_AFTER))

        timer = self._reactor.callLater(seconds, give_up)

        def settle(result: Any) -> None:
            if timer.active():
                timer.cancel()
            if outcome.called:
                return
            if isinstance(result, Failure):
                outcome.errback(result)
            else:
                outcome.callback(result)

        running.addBoth(settle)
        return outcome

    def _in_thread(self, function: Callable[..., T], *args: Any) -> Deferred[T]:
        return deferToThreadPool(self._reactor, self._reactor.getThreadPool(), function, *args)

    # -- the state lane -------------------------------------------------

    def read_current(self, key: StateKey) -> Deferred[bytes | None]:
        """@return: a Deferred firing with the current version's exact bytes,
        or None when the state has no version."""
        return self._state_bytes(self._read_current_txn, key)

    async def _read_current_txn(self, cursor: Any, key: StateKey) -> str | int | None:
        await cursor.execute(
            f"SELECT {_small_raw_state()}, v.id FROM state_versions v"  # noqa: S608 - constant
            " JOIN states s ON s.id = v.state_id"
            " WHERE s.tenant_id = %s AND s.path = %s ORDER BY v.number DESC LIMIT 1",
            (key.tenant, key.path))
        return _small_raw_or_version_id(cursor.fetchone())

    def _state_bytes(self, txn: Callable[..., Coroutine[Any, Any, str | int | None]],
                     *args: Any) -> Deferred[bytes | None]:
        """Run C{txn}, which selects one version's bytea as hex text when it
        is small, else the version's id (see L{_small_raw_state}); decode the
        hex (in a thread when it is big), or read a large version with a
        binary result on a blocking psycopg 3 connection in a thread (see
        L{kilolock.store.postgres_read}).  @return: a Deferred firing with
        the bytes (None: no such version)."""

        async def read() -> bytes | None:
            found = await self._transaction(txn, *args)
            if found is None:
                return None
            if isinstance(found, int):
                return await self._transaction(read_raw_state_txn, found, blocking=True)
            if len(found) >= 2 * LARGE_UPLOAD_BYTES:
                return await self._in_thread(_bytes_from_hex, found)
            return _bytes_from_hex(found)

        return ensureDeferred(read())

    def write_state(self, key: StateKey, upload: StateUpload, lock_id: str | None,
                    principal: Principal, event_kind: str = STATE_WRITE,
                    event_detail: Mapping[str, Any] | None = None) -> Deferred[WriteOutcome]:
        """Store C{upload} as the new current version (see L{IStateStore});
        the event is C{event_kind}, its detail extended by C{event_detail}.

        @return: a Deferred firing with a L{WriteOutcome}; failing with
            L{LockNotHeld}, L{LockConflict} (423) or L{SerialConflict}.
        """

        async def write() -> WriteOutcome:
            await self._ready_pool()  # learns whether the database is UTF-8
            prepared: _WriteParameters | _BulkWrite
            if len(upload.raw) >= LARGE_TRANSFER_BYTES:
                prepared = _BulkWrite.of(upload)
            elif len(upload.raw) >= LARGE_UPLOAD_BYTES:
                prepared = await self._in_thread(_WriteParameters.of, upload,
                                                 self._utf8_database)
            else:
                prepared = _WriteParameters.of(upload, self._utf8_database)
            return await self._transaction(self._write_txn, key, upload, lock_id,
                                           principal, prepared, event_kind, event_detail,
                                           blocking=len(upload.raw) >= LARGE_TRANSFER_BYTES)

        return ensureDeferred(write())

    async def _write_txn(self, cursor: Any, key: StateKey, upload: StateUpload,
                         lock_id: str | None, principal: Principal,
                         prepared: _WriteParameters | _BulkWrite,
                         event_kind: str = STATE_WRITE,
                         event_detail: Mapping[str, Any] | None = None) -> WriteOutcome:
        now = self.clock()
        state_id = await self._lock_state_row_txn(cursor, key, now, create=True)
        assert state_id is not None
        serial = upload.parsed.serial
        held, candidates, digests = await self._lock_and_candidates_txn(cursor, state_id,
                                                                          serial)
        _check_held_lock(held, lock_id)
        for version in candidates:
            if version.serial == serial and version.sha256 == upload.sha256:
                return WriteOutcome(version=version, created=False)
        current = candidates[-1] if candidates else None
        if current is not None and current.serial == serial:
            raise SerialConflict(serial)
        version = StateVersion(
            number=current.number + 1 if current is not None else 1,
            serial=serial,
            lineage=upload.parsed.lineage,
            sha256=upload.sha256,
            size=len(upload.raw),
            created_at=now,
            principal=principal.name,
            projected=upload.parsed.projection is not None,
        )
        detail = {**write_detail(version.number, version.size, principal), **(event_detail or {})}
        if isinstance(prepared, _BulkWrite):
            version_id = await _copy_version_txn(cursor, state_id, version, prepared)
            await _copy_projection_txn(cursor, state_id, version_id, prepared)
            await self._append_event_txn(cursor, key.tenant, event_kind, principal.name,
                                         key.path, now, lock_id=lock_id, serial=serial,
                                         sha256=upload.sha256, detail=detail)
        else:
            _, params = _event_parameters(key.tenant, event_kind, principal.name, key.path, now,
                                          lock_id=lock_id, serial=serial, sha256=upload.sha256,
                                          detail=detail)
            # The event's statement locks the tenant's chain head until the
            # COMMIT: it comes last, so that the version and projection are
            # written before that lock is taken (writes of other states of
            # the tenant wait only for an append and a commit).
            await cursor.execute((_WRITE_VERSION, _APPEND_EVENT), {
                **params, "state": state_id, "number": version.number,
                "lineage": version.lineage, "size": version.size, "raw": prepared.raw_state,
                "projected": version.projected, "resource_count": prepared.resource_count,
                **prepared.projection_parameters(digests)}, commit=True)
        return WriteOutcome(version=version, created=True)

    def delete_state(self, key: StateKey, lock_id: str | None,
                     principal: Principal) -> Deferred[None]:
        """Delete the state, its versions, projection and lock; keep its events
        and add a C{state_delete} event.

        @return: a Deferred firing with None; failing with L{StateNotFound},
            L{LockNotHeld} or L{LockConflict} (423).
        """
        return self._transaction(self._delete_txn, key, lock_id, principal)

    async def _delete_txn(self, cursor: Any, key: StateKey, lock_id: str | None,
                          principal: Principal) -> None:
        now = self.clock()
        state_id = await self._lock_state_row_txn(cursor, key, now, create=False)
        if state_id is None:
            raise StateNotFound("no such state")
        await self._check_lock_txn(cursor, state_id, lock_id)
        await cursor.execute("SELECT count(*) FROM state_versions WHERE state_id = %s",
                             (state_id,))
        (version_count,) = cursor.fetchone()
        await cursor.execute("DELETE FROM states WHERE id = %s", (state_id,))
        await self._append_event_and_commit_txn(cursor, key.tenant, STATE_DELETE,
                                                principal.name, key.path, now, lock_id=lock_id,
                                                detail=delete_detail(version_count, principal))

    def acquire_lock(self, key: StateKey, info: LockInfo,
                     principal: Principal) -> Deferred[bool]:
        """Lock C{key}, creating its state row if needed.

        @return: a Deferred firing with True when newly acquired, False when
            C{info.id} already held it; failing with L{LockConflict} (423,
            the holder's bytes) when another ID holds it.
        """
        async def acquire() -> bool:
            if await self._transaction(self._take_lock_at_once_txn, key, info, principal):
                return True
            return await self._transaction(self._acquire_txn, key, info, principal)

        return ensureDeferred(acquire())

    async def _take_lock_at_once_txn(self, cursor: Any, key: StateKey, info: LockInfo,
                                     principal: Principal) -> bool:
        """The usual LOCK (the state exists and is unlocked) in one statement
        and one round trip: the lock row and its audit event.  @return:
        whether the lock was taken (if not, nothing was written)."""
        now = self.clock()
        _, params = _event_parameters(key.tenant, LOCK_ACQUIRE, principal.name, key.path, now,
                                      lock_id=info.id, detail=lock_detail(info, principal))
        await cursor.execute(_TAKE_LOCK_AND_RECORD,
                             {**params, "info": info.raw, "now": now}, commit=True)
        return cursor.fetchone() is not None

    async def _acquire_txn(self, cursor: Any, key: StateKey, info: LockInfo,
                           principal: Principal) -> bool:
        now = self.clock()
        for _attempt in range(_ACQUIRE_ATTEMPTS):
            await cursor.execute(_TAKE_LOCK, {
                "tenant": key.tenant, "path": key.path, "lock_id": info.id,
                "info": info.raw, "now": now, "principal": principal.name,
            })
            if cursor.fetchone() is not None:
                await self._append_event_and_commit_txn(cursor, key.tenant, LOCK_ACQUIRE,
                                                        principal.name, key.path, now,
                                                        lock_id=info.id,
                                                        detail=lock_detail(info, principal))
                return True
            # Not taken: the state does not exist yet, or a lock is held (or
            # was, and has just been released: then simply try again).
            await cursor.execute(
                "SELECT s.id, l.lock_id, l.info FROM states s"
                " LEFT JOIN locks l ON l.state_id = s.id"
                " WHERE s.tenant_id = %s AND s.path = %s", (key.tenant, key.path))
            row = cursor.fetchone()
            if row is None:
                await self._create_state_row_txn(cursor, key, now)
            elif row[1] is not None:
                if row[1] == info.id:
                    return False
                raise LockConflict(_bytes_from_hex(row[2]), status=423)
        raise ServiceUnavailable("the lock kept changing hands; retry", retry_after=1)

    def release_lock(self, key: StateKey, lock_id: str | None,
                     principal: Principal) -> Deferred[HeldLock | None]:
        """Owner release (C{lock_id} a str) or force release (None).

        @return: a Deferred firing with the released L{HeldLock}, or None when
            nothing was held; failing with L{LockConflict} (409, the holder's
            bytes) when an owner release names another ID.
        """
        return self._transaction(self._release_txn, key, lock_id, principal)

    async def _release_txn(self, cursor: Any, key: StateKey, lock_id: str | None,
                           principal: Principal) -> HeldLock | None:
        await cursor.execute(_RELEASE_LOCK,
                             {"tenant": key.tenant, "path": key.path, "lock_id": lock_id})
        row = cursor.fetchone()
        if row is None:
            if lock_id is not None:
                holder = await self._lock_holder_txn(cursor, key)
                if holder is not None:
                    raise LockConflict(holder.info.raw, status=409)
            return None
        released = _held_lock(row)
        kind = LOCK_RELEASE if lock_id is not None else LOCK_FORCE_RELEASE
        await self._append_event_and_commit_txn(cursor, key.tenant, kind, principal.name,
                                                key.path, self.clock(),
                                                lock_id=released.info.id,
                                                detail=lock_detail(released.info, principal))
        return released

    def get_lock(self, key: StateKey) -> Deferred[HeldLock | None]:
        """@return: a Deferred firing with the L{HeldLock} on C{key} or None."""
        return self._transaction(self._lock_holder_txn, key)

    async def _lock_holder_txn(self, cursor: Any, key: StateKey) -> HeldLock | None:
        await cursor.execute(
            "SELECT l.info, l.acquired_at, l.principal FROM locks l"
            " JOIN states s ON s.id = l.state_id WHERE s.tenant_id = %s AND s.path = %s",
            (key.tenant, key.path))
        row = cursor.fetchone()
        return None if row is None else _held_lock(row)

    # -- inspection -----------------------------------------------------

    def get_summary(self, key: StateKey) -> Deferred[StateSummary | None]:
        """@return: a Deferred firing with the L{StateSummary} of C{key}, or
        None when the state does not exist."""

        async def summary(cursor: Any) -> StateSummary | None:
            summaries = await self._summaries_txn(cursor, key.tenant, key.path)
            return summaries[0] if summaries else None

        return self._transaction(summary)

    def list_states(self, tenant: str) -> Deferred[list[StateSummary]]:
        """@return: a Deferred firing with the tenant's L{StateSummary} list,
        ordered by path (by code point, as Python sorts)."""
        return self._transaction(self._summaries_txn, tenant, None)

    async def _summaries_txn(self, cursor: Any, tenant: str,
                             path: str | None) -> list[StateSummary]:
        await cursor.execute(_SUMMARIES + (" AND s.path = %(path)s" if path is not None else "")
                             + ' ORDER BY s.path COLLATE "C"', {"tenant": tenant, "path": path})
        summaries = []
        for row in cursor.fetchall():
            (state_path, updated_at, version_count, info, acquired_at,
             lock_principal, resource_count, *version_columns) = row
            summaries.append(StateSummary(
                key=StateKey(tenant, state_path),
                current=None if version_columns[0] is None else _version(version_columns),
                version_count=version_count,
                resource_count=resource_count or 0,
                lock=None if info is None else _held_lock((info, acquired_at, lock_principal)),
                updated_at=_utc(updated_at),
            ))
        return summaries

    def list_versions(self, key: StateKey) -> Deferred[list[StateVersion]]:
        """@return: a Deferred firing with the versions of C{key}, oldest first
        (empty when the state does not exist)."""
        return self._transaction(self._list_versions_txn, key)

    async def _list_versions_txn(self, cursor: Any, key: StateKey) -> list[StateVersion]:
        await cursor.execute(
            f"SELECT {_VERSION_COLUMNS} FROM state_versions v"  # noqa: S608 - constant columns
            " JOIN states s ON s.id = v.state_id"
            " WHERE s.tenant_id = %s AND s.path = %s ORDER BY v.number", (key.tenant, key.path))
        return [_version(row) for row in cursor.fetchall()]

    def read_version(self, key: StateKey, number: int) -> Deferred[bytes | None]:
        """@return: a Deferred firing with the bytes of version C{number}, or
        None when the state has no such version."""
        return self._state_bytes(self._read_version_txn, key, number)

    async def _read_version_txn(self, cursor: Any, key: StateKey,
                                number: int) -> str | int | None:
        await cursor.execute(
            f"SELECT {_small_raw_state()}, v.id FROM state_versions v"  # noqa: S608 - constant
            " JOIN states s ON s.id = v.state_id"
            " WHERE s.tenant_id = %s AND s.path = %s AND v.number = %s",
            (key.tenant, key.path, number))
        return _small_raw_or_version_id(cursor.fetchone())

    def get_projection(self, key: StateKey) -> Deferred[Projection | None]:
        """@return: a Deferred firing with the L{Projection} of the current
        version, or None when there is none or it was not projected.

        JSON columns come back in the parser's canonical form (compact,
        key-sorted, ASCII); PostgreSQL's jsonb keeps their values, not their
        spelling, so a float such as C{1e+16} comes back as C{10000000000000000}.
        """

        async def projection() -> Projection | None:
            rows = await self._transaction(self._projection_rows_txn, key)
            if rows is None:
                return None
            if sum(len(part) for part in rows) > LARGE_PROJECTION_ROWS:
                return await self._in_thread(_projection_from_rows, *rows)
            return _projection_from_rows(*rows)

        return ensureDeferred(projection())

    async def _projection_rows_txn(self, cursor: Any, key: StateKey) -> Any:
        await cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        await cursor.execute(
            "SELECT s.id, v.projected FROM state_versions v JOIN states s ON s.id = v.state_id"
            " WHERE s.tenant_id = %s AND s.path = %s ORDER BY v.number DESC LIMIT 1",
            (key.tenant, key.path))
        row = cursor.fetchone()
        if row is None or not row[1]:
            return None
        state_id = row[0]
        rows = []
        for query in (_SELECT_RESOURCES, _SELECT_DEPENDENCIES, _SELECT_OUTPUTS):
            await cursor.execute(query, (state_id,))
            rows.append(cursor.fetchall())
        return rows

    def query_resources(self, tenant: str,
                        query: ResourceQuery) -> Deferred[list[ResourceMatch]]:
        """The current resource rows of C{tenant}'s states matching C{query},
        answered from the C{resources} table (see L{IStateStore}).

        @return: a Deferred firing with a list of L{ResourceMatch}; failing
            with L{kilolock.errors.BadRequest} for an unusable query.
        """
        conditions = ["s.tenant_id = %(tenant)s"]
        params: dict[str, Any] = {"tenant": tenant, "limit": query.limit}
        if query.type is not None:
            conditions.append("r.type = %(type)s")
            params["type"] = query.type
        if query.module is not None:
            conditions.append("r.module = %(module)s")
            params["module"] = query.module
        if query.address is not None:
            conditions.append("r.address LIKE %(address)s ESCAPE '\\'")
            params["address"] = like_pattern(query.address)
        if query.state_path is not None:
            conditions.append("s.path = %(state)s")
            params["state"] = query.state_path
        if query.path_prefix is not None:
            conditions.append("starts_with(s.path, %(prefix)s)")
            params["prefix"] = query.path_prefix
        if query.attribute is not None:
            conditions.append(
                "jsonb_typeof(r.attributes #> %(steps)s::text[]) IN ('string', 'number', 'boolean')"
                " AND r.attributes #>> %(steps)s::text[] = %(value)s")
            params["steps"] = attribute_steps(query.attribute[0])
            params["value"] = query.attribute[1]
        # Only constant fragments are joined; every value is a parameter.
        statement = (_SELECT_MATCHES + " WHERE " + " AND ".join(conditions)
                     + ' ORDER BY s.path COLLATE "C", r.ordinal LIMIT %(limit)s')

        async def select(cursor: Any) -> Any:
            await cursor.execute(statement, params)
            return cursor.fetchall()

        async def matches() -> list[ResourceMatch]:
            check_query(query)
            rows = await self._transaction(select)
            if len(rows) > LARGE_PROJECTION_ROWS:
                return await self._in_thread(_matches_from_rows, rows)
            return _matches_from_rows(rows)

        return ensureDeferred(matches())

    def list_events(self, tenant: str, state_path: str | None = None,
                    kinds: Iterable[str] | None = None, since: datetime | None = None,
                    until: datetime | None = None) -> Deferred[list[AuditEvent]]:
        """@return: a Deferred firing with the tenant's events in chain order,
        filtered by state path, kinds and the time range [since, until)."""
        conditions = ["tenant_id = %(tenant)s"]
        if state_path is not None:
            conditions.append("state_path = %(path)s")
        if kinds is not None:
            kinds = list(kinds)
            conditions.append("kind = ANY(%(kinds)s::text[])")
        if since is not None:
            conditions.append("at >= %(since)s")
        if until is not None:
            conditions.append("at < %(until)s")
        # Only constant fragments are joined; every value is a parameter.
        query = (f"SELECT {_EVENT_COLUMNS} FROM events"  # noqa: S608
                 f" WHERE {' AND '.join(conditions)} ORDER BY seq")
        params = {"tenant": tenant, "path": state_path, "kinds": kinds,
                  "since": since, "until": until}

        async def select(cursor: Any) -> list[AuditEvent]:
            await cursor.execute(query, params)
            return [_event(row) for row in cursor.fetchall()]

        return self._transaction(select)

    def record_event(self, tenant: str, kind: str, principal: str,
                     state_path: str | None = None,
                     detail: dict[str, Any] | None = None) -> Deferred[AuditEvent]:
        """Append a control-plane event to the tenant's chain.

        @return: a Deferred firing with the new L{AuditEvent}."""

        async def record(cursor: Any) -> AuditEvent:
            return await self._append_event_txn(cursor, tenant, kind, principal, state_path,
                                                self.clock(), detail=detail or {})

        return self._transaction(record)

    # -- transaction steps ----------------------------------------------

    async def _lock_state_row_txn(self, cursor: Any, key: StateKey, now: datetime, *,
                                  create: bool) -> int | None:
        """Lock the state's row until the transaction ends, creating it (and
        its tenant) first when C{create}.  @return: its id, or None."""
        params = {"tenant": key.tenant, "path": key.path}
        await cursor.execute(_LOCK_STATE_ROW, params)
        row = cursor.fetchone()
        if row is None and create:
            await self._create_state_row_txn(cursor, key, now)
            await cursor.execute(_LOCK_STATE_ROW, params)
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    async def _create_state_row_txn(self, cursor: Any, key: StateKey, now: datetime) -> None:
        await cursor.execute(
            "INSERT INTO tenants (id) VALUES (%(tenant)s) ON CONFLICT (id) DO NOTHING;"
            " INSERT INTO states (tenant_id, path, created_at, updated_at)"
            " VALUES (%(tenant)s, %(path)s, %(now)s, %(now)s)"
            " ON CONFLICT (tenant_id, path) DO NOTHING",
            {"tenant": key.tenant, "path": key.path, "now": now})

    async def _check_lock_txn(self, cursor: Any, state_id: int, lock_id: str | None) -> None:
        """The lock matrix for writes and deletes, on a state row this
        transaction has locked (so no lock can be taken until it ends)."""
        await cursor.execute("SELECT lock_id, info FROM locks WHERE state_id = %s FOR SHARE",
                             (state_id,))
        _check_held_lock(cursor.fetchone(), lock_id)

    async def _lock_and_candidates_txn(
            self, cursor: Any, state_id: int, serial: int,
    ) -> tuple[Any, list[StateVersion], list[str | None] | None]:
        """What a write checks, in one statement, on a state row this
        transaction has locked: the lock held (its id and info, or None; FOR
        SHARE, as L{_check_lock_txn}), the versions with C{serial} plus the
        current one, oldest first (so the current version, if any, is last),
        and the digests of the state's projection rows (or None)."""
        await cursor.execute(_LOCK_AND_CANDIDATES, {"state": state_id, "serial": serial})
        rows = cursor.fetchall()
        held = None if rows[0][0] is None else rows[0][:2]
        return (held, [_version(row[3:]) for row in rows if row[3] is not None],
                rows[0][2])

    async def _append_event_and_commit_txn(self, cursor: Any, tenant: str, kind: str,
                                           principal: str, state_path: str | None,
                                           at: datetime, *, lock_id: str | None = None,
                                           serial: int | None = None,
                                           sha256: str | None = None,
                                           detail: dict[str, Any] | None = None) -> None:
        """L{_append_event_txn} as a transaction's last statement, with the
        COMMIT in the same round trip.  Only for a tenant that exists: one
        with a state row (a foreign key), as every state-lane event has."""
        _, params = _event_parameters(tenant, kind, principal, state_path, at,
                                      lock_id=lock_id, serial=serial, sha256=sha256,
                                      detail=detail)
        await cursor.execute(_APPEND_EVENT, params, commit=True)

    async def _append_event_txn(self, cursor: Any, tenant: str, kind: str, principal: str,
                                state_path: str | None, at: datetime, *,
                                lock_id: str | None = None, serial: int | None = None,
                                sha256: str | None = None,
                                detail: dict[str, Any] | None = None) -> AuditEvent:
        """Append an event to the tenant's chain in one statement: lock the
        chain head on the tenant row, link, hash (L{event_hash_template}:
        PostgreSQL's sha256() over the text L{event_hash} hashes), insert,
        move the head.  A missing tenant is created first."""
        event, params = _event_parameters(tenant, kind, principal, state_path, at,
                                          lock_id=lock_id, serial=serial, sha256=sha256,
                                          detail=detail)
        await cursor.execute(_APPEND_EVENT, params)
        row = cursor.fetchone()
        if row is None:  # no such tenant yet
            await cursor.execute(
                "INSERT INTO tenants (id) VALUES (%s) ON CONFLICT (id) DO NOTHING", (tenant,))
            await cursor.execute(_APPEND_EVENT, params)
            row = cursor.fetchone()
        seq, prev_hash, hash_ = row
        return evolve(event, seq=seq, prev_hash=prev_hash, hash=hash_)


def _check_held_lock(held: Any, lock_id: str | None) -> None:
    """The lock matrix for writes and deletes: C{held} is the (lock_id, info)
    of the lock on the state, or None."""
    if lock_id is not None:
        if held is None:
            raise LockNotHeld()
        if held[0] != lock_id:
            raise LockConflict(_bytes_from_hex(held[1]), status=423)
    elif held is not None:
        raise LockConflict(_bytes_from_hex(held[1]), status=423)


def _event_parameters(tenant: str, kind: str, principal: str, state_path: str | None,
                      at: datetime, *, lock_id: str | None = None, serial: int | None = None,
                      sha256: str | None = None,
                      detail: Mapping[str, Any] | None = None) -> tuple[AuditEvent, dict[str, Any]]:
    """An event (seq and hashes still to come) and the parameters of
    L{_APPEND_EVENT_STEPS} that append it."""
    event = unchained_event(tenant, kind, principal, state_path, at, lock_id=lock_id,
                            serial=serial, sha256=sha256, detail=detail)
    prefix, suffix = event_hash_template(event)
    return event, {
        "tenant": tenant, "kind": kind, "path": state_path, "principal": principal,
        "at": at, "lock_id": lock_id, "serial": serial, "sha256": sha256,
        "detail": event.detail, "prefix": prefix, "suffix": suffix,
    }


def _small_raw_state() -> str:
    """The SQL for the raw state of a version row C{v} when it is small
    (hex text), else NULL (the caller then reads it by id with
    L{read_raw_state_txn})."""
    return f"CASE WHEN v.size < {int(LARGE_TRANSFER_BYTES)} THEN v.raw_state END"


def _small_raw_or_version_id(row: Any) -> str | int | None:
    """From a (L{_small_raw_state}, id) row: the hex text, or the version id
    of a large state, or None when there is no row."""
    if row is None:
        return None
    raw, version_id = row
    return int(version_id) if raw is None else str(raw)


@define
class _BulkWrite:
    """What a write on the blocking path sends with COPY: the state's bytes
    as they are and the projection's rows (see L{kilolock.store.postgres_bulk})."""

    raw: bytes
    projection: Projection
    resource_count: int

    @classmethod
    def of(cls, upload: StateUpload) -> _BulkWrite:
        projection = upload.parsed.projection or Projection()
        return cls(upload.raw, projection, len(projection.resources))


_COPY_VERSION = (
    "COPY state_versions (id, state_id, number, serial, lineage, sha256, size, raw_state,"
    " created_at, principal, projected, resource_count) FROM STDIN (FORMAT binary)"
)


async def _copy_version_txn(cursor: Any, state_id: int, version: StateVersion,
                            prepared: _BulkWrite) -> int:
    """Insert a version with a binary COPY (a blocking transaction's
    cursor): the bytes go in as they are.  @return: the new row's id."""
    await cursor.execute(
        "WITH touched AS (UPDATE states SET updated_at = %(now)s WHERE id = %(state)s)"
        " SELECT nextval(pg_get_serial_sequence('state_versions', 'id'))",
        {"state": state_id, "now": version.created_at})
    (version_id,) = cursor.fetchone()
    cursor.copy_in(_COPY_VERSION, binary_copy([(
        ("int8", version_id), ("int8", state_id), ("int4", version.number),
        ("int8", version.serial), ("text", version.lineage), ("text", version.sha256),
        ("int8", version.size), ("bytea", prepared.raw), ("timestamptz", version.created_at),
        ("text", version.principal), ("bool", version.projected),
        ("int4", prepared.resource_count),
    )]))
    return int(version_id)


async def _copy_projection_txn(cursor: Any, state_id: int, version_id: int,
                               prepared: _BulkWrite) -> None:
    """Replace the state's projection rows with one COPY per table
    (a blocking transaction's cursor); ordinals count from 1 like the
    statement's WITH ORDINALITY."""
    await cursor.execute(
        "DELETE FROM resources WHERE state_id = %(state)s;"
        " DELETE FROM resource_dependencies WHERE state_id = %(state)s;"
        " DELETE FROM outputs WHERE state_id = %(state)s;"
        " UPDATE states SET projection_digests = NULL WHERE id = %(state)s",
        {"state": state_id})
    projection = prepared.projection
    cursor.copy_in(
        "COPY resources (state_id, version_id, ordinal, address, module, mode, type, name,"
        " provider, index_key, deposed, attributes) FROM STDIN",
        text_copy((state_id, version_id, ordinal, row.address, row.module, row.mode, row.type,
                   row.name, row.provider,
                   None if row.index_key is None else _jsonb_safe(row.index_key),
                   row.deposed, _jsonb_safe(row.attributes))
                  for ordinal, row in enumerate(projection.resources, 1)))
    cursor.copy_in(
        "COPY resource_dependencies (state_id, version_id, ordinal, address, depends_on)"
        " FROM STDIN",
        text_copy((state_id, version_id, ordinal, row.address, row.depends_on)
                  for ordinal, row in enumerate(projection.dependencies, 1)))
    cursor.copy_in(
        "COPY outputs (state_id, version_id, ordinal, name, type, value, sensitive) FROM STDIN",
        text_copy((state_id, version_id, ordinal, row.name,
                   None if row.type is None else _jsonb_safe(row.type),
                   None if row.value is None else _jsonb_safe(row.value), row.sensitive)
                  for ordinal, row in enumerate(projection.outputs, 1)))


async def _prepare_database_txn(cursor: Any) -> tuple[tuple[int, int], str]:
    """Bring the schema up to date and read the server encoding.

    @return: ((schema version found, version now), server encoding)."""
    upgrade = await ensure_schema(cursor)
    await cursor.execute("SHOW server_encoding")
    (encoding,) = cursor.fetchone()
    return upgrade, str(encoding)


def postgres_store_from_settings(settings: Any, reactor: Any) -> PostgresStateStore:
    """The store C{twistd kilolock} uses: the database at C{settings.database_url},
    or the embedded PostgreSQL in C{settings.data_dir} when there is no URL."""
    prepared = getattr(settings, "prepared_statements", "on") == "on"
    if settings.database_url:
        return PostgresStateStore(settings.database_url, reactor, prepared_statements=prepared)
    return PostgresStateStore.embedded(EmbeddedPostgres(settings.data_dir), reactor,
                                       prepared_statements=prepared)


# ---------------------------------------------------------------------------
# SQL

_LOCK_STATE_ROW = PreparedSQL(
    "kl_lock_state_row",
    "SELECT id FROM states WHERE tenant_id = %(tenant)s AND path = %(path)s FOR UPDATE")

# One statement: ON CONFLICT DO NOTHING makes it atomic against concurrent
# LOCKs in any process; no row comes back when the state is missing or locked.
_TAKE_LOCK = PreparedSQL("kl_take_lock", """
INSERT INTO locks (state_id, lock_id, info, acquired_at, principal)
SELECT id, %(lock_id)s, %(info)s, %(now)s, %(principal)s
FROM states WHERE tenant_id = %(tenant)s AND path = %(path)s
ON CONFLICT (state_id) DO NOTHING
RETURNING state_id
""")

# An owner release (lock_id given) or a force release (NULL), in one statement.
_RELEASE_LOCK = PreparedSQL(
    "kl_release_lock",
    "DELETE FROM locks l USING states s"
    " WHERE l.state_id = s.id AND s.tenant_id = %(tenant)s AND s.path = %(path)s"
    " AND (%(lock_id)s::text IS NULL OR l.lock_id = %(lock_id)s)"
    " RETURNING l.info, l.acquired_at, l.principal")

_VERSION_COLUMNS = (
    "v.number, v.serial, v.lineage, v.sha256, v.size, v.created_at, v.principal, v.projected"
)

_SUMMARIES = """
SELECT s.path, s.updated_at,
       (SELECT count(*) FROM state_versions c WHERE c.state_id = s.id),
       l.info, l.acquired_at, l.principal, v.resource_count,
       v.number, v.serial, v.lineage, v.sha256, v.size, v.created_at, v.principal, v.projected
FROM states s
LEFT JOIN LATERAL (
    SELECT * FROM state_versions WHERE state_id = s.id ORDER BY number DESC LIMIT 1
) v ON true
LEFT JOIN locks l ON l.state_id = s.id
WHERE s.tenant_id = %(tenant)s
"""

# The rows arrive as three JSON arrays of objects (see _WriteParameters);
# WITH ORDINALITY numbers them in state order.  %(version)s is the new
# version's id (an expression).
_PROJECTION_STEPS = """
dropped_resources AS (
    DELETE FROM resources WHERE state_id = %(state)s AND %(replace_resources)s),
dropped_dependencies AS (
    DELETE FROM resource_dependencies WHERE state_id = %(state)s AND %(replace_dependencies)s),
dropped_outputs AS (
    DELETE FROM outputs WHERE state_id = %(state)s AND %(replace_outputs)s),
new_resources AS (
    INSERT INTO resources (state_id, version_id, ordinal, address, module, mode, type, name,
                           provider, index_key, deposed, attributes)
    SELECT %(state)s, %(version)s, r.ordinal, r.address, r.module, r.mode, r.type, r.name,
           r.provider, r.index_key, r.deposed, r.attributes
    FROM ROWS FROM (jsonb_to_recordset(%(resources)s::jsonb) AS (
        address text, module text, mode text, type text, name text, provider text,
        index_key jsonb, deposed text, attributes jsonb
    )) WITH ORDINALITY AS r (address, module, mode, type, name, provider, index_key,
                             deposed, attributes, ordinal)
),
new_dependencies AS (
    INSERT INTO resource_dependencies (state_id, version_id, ordinal, address, depends_on)
    SELECT %(state)s, %(version)s, d.ordinal, d.address, d.depends_on
    FROM ROWS FROM (jsonb_to_recordset(%(dependencies)s::jsonb) AS (
        address text, depends_on text
    )) WITH ORDINALITY AS d (address, depends_on, ordinal)
),
new_outputs AS (
    INSERT INTO outputs (state_id, version_id, ordinal, name, type, value, sensitive)
    SELECT %(state)s, %(version)s, o.ordinal, o.name, o.type::jsonb, o.value::jsonb,
           o.sensitive
    FROM ROWS FROM (jsonb_to_recordset(%(outputs)s::jsonb) AS (
        name text, type text, value text, sensitive boolean
    )) WITH ORDINALITY AS o (name, type, value, sensitive, ordinal)
)
"""

_SELECT_RESOURCES = (
    "SELECT address, module, mode, type, name, provider, index_key::text, deposed,"
    " attributes::text FROM resources WHERE state_id = %s ORDER BY ordinal"
)
_SELECT_DEPENDENCIES = (
    "SELECT address, depends_on FROM resource_dependencies WHERE state_id = %s ORDER BY ordinal"
)
_SELECT_OUTPUTS = (
    "SELECT name, type::text, value::text, sensitive FROM outputs WHERE state_id = %s"
    " ORDER BY ordinal"
)

_SELECT_MATCHES = (
    "SELECT s.path, v.number, r.address, r.module, r.mode, r.type, r.name, r.provider,"
    " r.index_key::text, r.deposed, r.attributes::text FROM resources r"
    " JOIN states s ON s.id = r.state_id"
    " JOIN LATERAL (SELECT max(number) AS number FROM state_versions"
    " WHERE state_id = s.id) v ON true"
)

_EVENT_COLUMNS = (
    "seq, tenant_id, kind, state_path, principal, at, lock_id, serial, sha256, detail,"
    " prev_hash, hash"
)

# The chain head is locked (FOR NO KEY UPDATE, the lock an UPDATE of the
# row takes: it serialises appends but, unlike FOR UPDATE, not the
# foreign-key checks of rows inserted for the tenant meanwhile; only the
# last step modifies the row), the event linked and hashed, the head moved.
# Nothing is appended when the tenant does not exist.
_APPEND_EVENT_STEPS = """
head AS (
    SELECT chain_seq + 1 AS seq, chain_head AS prev FROM tenants
    WHERE id = %(tenant)s FOR NO KEY UPDATE
), appended AS (
    INSERT INTO events (tenant_id, seq, kind, state_path, principal, at, lock_id, serial,
                        sha256, detail, prev_hash, hash)
    SELECT %(tenant)s, head.seq, %(kind)s, %(path)s, %(principal)s, %(at)s, %(lock_id)s,
           %(serial)s, %(sha256)s, %(detail)s, head.prev,
           encode(sha256(convert_to(head.prev || %(prefix)s || head.seq || %(suffix)s,
                                    'UTF8')), 'hex')
    FROM head
    RETURNING seq, prev_hash, hash
), moved AS (
    UPDATE tenants SET chain_seq = appended.seq, chain_head = appended.hash
    FROM appended WHERE tenants.id = %(tenant)s
)
"""

# One statement for an event; no row comes back when the tenant does not exist.
_APPEND_EVENT = PreparedSQL(
    "kl_append_event",
    f"WITH {_APPEND_EVENT_STEPS} SELECT seq, prev_hash, hash FROM appended")  # noqa: S608

# A write after its checks, in one statement: the version and its
# projection (replacing the tables that changed).  Data-modifying steps all
# run, whatever the final SELECT reads.  The event follows in a statement of
# its own, sent in the same round trip (see _write_txn).
_WRITE_VERSION = PreparedSQL("kl_write_version", f"""
WITH touched AS (
    UPDATE states SET updated_at = %(at)s, projection_digests = %(digests)s
    WHERE id = %(state)s),
new_version AS (
    INSERT INTO state_versions (state_id, number, serial, lineage, sha256, size, raw_state,
                                created_at, principal, projected, resource_count)
    VALUES (%(state)s, %(number)s, %(serial)s, %(lineage)s, %(sha256)s, %(size)s, %(raw)s,
            %(at)s, %(principal)s, %(projected)s, %(resource_count)s)
    RETURNING id
),
{_PROJECTION_STEPS.replace("%(version)s", "(SELECT id FROM new_version)")}
SELECT id FROM new_version
""")  # noqa: S608 - constant fragments

# What a write checks once its state row is locked: the lock (FOR SHARE: an
# UNLOCK waits for the write) and the versions with the serial plus the
# current one; one row per version (or one row of NULLs), each with the lock
# and the digests of the state's projection rows.
_LOCK_AND_CANDIDATES = PreparedSQL("kl_lock_and_candidates", f"""
SELECT l.lock_id, l.info, d.projection_digests, {_VERSION_COLUMNS}
FROM (SELECT projection_digests FROM states WHERE id = %(state)s) AS d
LEFT JOIN LATERAL (
    SELECT lock_id, info FROM locks WHERE state_id = %(state)s FOR SHARE
) l ON true
LEFT JOIN LATERAL (
    SELECT * FROM state_versions
    WHERE state_id = %(state)s
      AND (serial = %(serial)s
           OR number = (SELECT max(number) FROM state_versions WHERE state_id = %(state)s))
) v ON true
ORDER BY v.number
""")  # noqa: S608 - constant fragments

# A LOCK of an existing, unlocked state and its event, in one statement: the
# event is appended (the tenant's chain head locked) only if the lock was
# taken; a row comes back only then.
_TAKE_LOCK_AND_RECORD = PreparedSQL("kl_take_lock_and_record", f"""
WITH taken AS ({_TAKE_LOCK}),
{_APPEND_EVENT_STEPS.replace(
    "WHERE id = %(tenant)s FOR NO KEY UPDATE",
    "WHERE id = %(tenant)s AND EXISTS (SELECT 1 FROM taken) FOR NO KEY UPDATE")}
SELECT state_id FROM taken
""")  # noqa: S608 - constant fragments

#: What every pooled session prepares once the schema is current.
_PREPARE_STATEMENTS = prepare_statements_sql([
    _LOCK_STATE_ROW, _TAKE_LOCK, _RELEASE_LOCK, _APPEND_EVENT, _WRITE_VERSION,
    _LOCK_AND_CANDIDATES, _TAKE_LOCK_AND_RECORD])


# ---------------------------------------------------------------------------
# Rows <-> values


def _bytes_from_hex(hex_text: str) -> bytes:
    """Decode a bytea's hex text (C{\\x} and two digits a byte), a few MB at
    a time so that a decoding thread releases the GIL often."""
    if not hex_text.startswith("\\x"):
        raise ValueError("expected bytea in hex format")
    return b"".join(bytes.fromhex(hex_text[start:start + 2 * _QUOTING_CHUNK])
                    for start in range(2, len(hex_text), 2 * _QUOTING_CHUNK))


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


def _version(row: Any) -> StateVersion:
    number, serial, lineage, sha256, size, created_at, principal, projected = row
    return StateVersion(number=number, serial=serial, lineage=lineage, sha256=sha256,
                        size=size, created_at=_utc(created_at), principal=principal,
                        projected=projected)


def _held_lock(row: Any) -> HeldLock:
    info, acquired_at, principal = row
    return HeldLock(info=LockInfo.from_bytes(_bytes_from_hex(info)),
                    acquired_at=_utc(acquired_at),
                    principal=principal)


def _event(row: Any) -> AuditEvent:
    (seq, tenant, kind, state_path, principal, at, lock_id, serial, sha256, detail,
     prev_hash, hash_) = row
    return AuditEvent(seq=seq, tenant=tenant, kind=kind, state_path=state_path,
                      principal=principal, at=_utc(at), lock_id=lock_id, serial=serial,
                      sha256=sha256, detail=detail, prev_hash=prev_hash, hash=hash_)


def _canonical_json(text: str | None) -> str | None:
    """JSON text in the parser's form: compact, key-sorted, ASCII."""
    if text is None:
        return None
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def _projection_from_rows(resources: Any, dependencies: Any, outputs: Any) -> Projection:
    return Projection(
        resources=tuple(
            ResourceRow(address=address, module=module, mode=mode, type=type_, name=name,
                        provider=provider, index_key=_canonical_json(index_key),
                        deposed=deposed, attributes=_canonical_json(attributes) or "{}")
            for address, module, mode, type_, name, provider, index_key, deposed, attributes
            in resources),
        dependencies=tuple(DependencyRow(address=address, depends_on=depends_on)
                           for address, depends_on in dependencies),
        outputs=tuple(OutputRow(name=name, type=_canonical_json(type_),
                                value=_canonical_json(value), sensitive=sensitive)
                      for name, type_, value, sensitive in outputs),
    )


def _matches_from_rows(rows: Any) -> list[ResourceMatch]:
    return [
        ResourceMatch(state_path=path, version=number, resource=ResourceRow(
            address=address, module=module, mode=mode, type=type_, name=name,
            provider=provider, index_key=_canonical_json(index_key), deposed=deposed,
            attributes=_canonical_json(attributes) or "{}"))
        for (path, number, address, module, mode, type_, name, provider, index_key, deposed,
             attributes) in rows]


# PostgreSQL's jsonb refuses \u0000 and unpaired surrogate escapes, which a
# state may hold inside attribute values (they are valid JSON).
_JSONB_UNSAFE_ESCAPE = re.compile(r"\\u(0000|[dD][89a-fA-F][0-9a-fA-F]{2})")
_JSONB_UNSAFE_TEXT = re.compile("[\x00\ud800-\udfff]")


def _jsonb_safe(text: str) -> str:
    """C{text} (JSON) with NUL characters and unpaired surrogates replaced by
    U+FFFD, as jsonb requires; unchanged (and fast) in the usual case."""
    if _JSONB_UNSAFE_ESCAPE.search(text) is None:
        return text
    return json.dumps(_replace_unsafe_text(json.loads(text)), sort_keys=True,
                      separators=(",", ":"))


def _replace_unsafe_text(value: Any) -> Any:
    if isinstance(value, str):
        # A valid pair was already joined into one character by json.loads.
        return _JSONB_UNSAFE_TEXT.sub("\ufffd", value)
    if isinstance(value, list):
        return [_replace_unsafe_text(item) for item in value]
    if isinstance(value, dict):
        return {_replace_unsafe_text(k): _replace_unsafe_text(v) for k, v in value.items()}
    return value


class _SQLLiteral:
    """A query parameter already quoted as SQL, which psycopg2 splices in as
    it is.  Big values are quoted in a thread, so the reactor thread does not
    spend a second escaping a 100 MB state."""

    def __init__(self, quoted: bytes) -> None:
        self.quoted = quoted

    def __conform__(self, protocol: Any) -> _SQLLiteral | None:
        return self if protocol is ISQLQuote else None

    def getquoted(self) -> bytes:
        return self.quoted


#: Bytes quoted per step, so that a quoting thread releases the GIL often.
_QUOTING_CHUNK = 1 << 22


def _bytea_expression(raw: bytes, as_text: bool) -> _SQLLiteral:
    """C{raw} as an SQL expression of type bytea.

    With C{as_text} (a UTF-8 database), UTF-8 without NUL (every state body:
    it is JSON) travels as a text literal through C{convert_to}, half the
    size of hex and about twice as fast for the server to read; the session
    has standard_conforming_strings on, so only quotes need doubling (byte
    0x27 never occurs inside a UTF-8 multi-byte sequence).  Anything else
    travels as hex.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts = [b"convert_to('"]
    try:
        if not as_text:
            raise ValueError("hex")
        for start in range(0, len(raw), _QUOTING_CHUNK):
            chunk = raw[start:start + _QUOTING_CHUNK]
            if b"\x00" in chunk:
                raise ValueError("NUL")
            decoder.decode(chunk)
            parts.append(chunk.replace(b"'", b"''"))
        decoder.decode(b"", final=True)
    except ValueError:  # UnicodeDecodeError included
        hex_parts = [raw[start:start + _QUOTING_CHUNK].hex().encode()
                     for start in range(0, len(raw), _QUOTING_CHUNK)]
        return _SQLLiteral(b"'\\x" + b"".join(hex_parts) + b"'::bytea")
    parts.append(b"', 'UTF8')")
    return _SQLLiteral(b"".join(parts))


def _text_literal(parts: Iterable[str]) -> _SQLLiteral:
    """The concatenation of C{parts} (text without NUL, such as JSON) as an
    SQL string literal, quoted part by part."""
    quoted = [b"'"]
    quoted.extend(part.replace("'", "''").encode("utf-8") for part in parts)
    quoted.append(b"'")
    return _SQLLiteral(b"".join(quoted))


def _text(value: str | None) -> str:
    """C{json.dumps(value)} for text or None, without its per-call overhead."""
    return "null" if value is None else _encode_json_string(value)


@define
class _WriteParameters:
    """What a write sends besides small values: the state as a bytea
    expression and the projection as three JSON arrays of row objects (the
    parameters of L{_PROJECTION_STEPS}), all pre-quoted.  Attribute JSON is
    spliced in as it is (after L{_jsonb_safe}), never parsed again."""

    raw_state: _SQLLiteral
    resources: _SQLLiteral
    dependencies: _SQLLiteral
    outputs: _SQLLiteral
    resource_count: int = field(default=0)
    #: SHA-256 (hex) of the resources, dependencies and outputs JSON.
    digests: tuple[str, str, str] = field(default=("", "", ""))

    def projection_parameters(self, stored: Sequence[str | None] | None) -> dict[str, Any]:
        """The parameters of L{_PROJECTION_STEPS} given the digests stored
        on the state row: a table whose digest is unchanged is left alone
        (its JSON is not sent, its rows are not touched)."""
        stored = tuple(stored or ())
        params: dict[str, Any] = {"digests": list(self.digests)}
        for index, name in enumerate(("resources", "dependencies", "outputs")):
            unchanged = len(stored) == 3 and stored[index] == self.digests[index]
            params["replace_" + name] = not unchanged
            params[name] = None if unchanged else getattr(self, name)
        return params

    @classmethod
    def of(cls, upload: StateUpload, utf8_database: bool) -> _WriteParameters:
        """Quote C{upload}; C{utf8_database}: the server encoding is UTF-8
        (else the state travels as hex)."""
        projection = upload.parsed.projection or Projection()
        resources = [
            ("{" if index == 0 else ",{")
            + '"address":' + _text(row.address) + ',"module":' + _text(row.module)
            + ',"mode":' + _text(row.mode) + ',"type":' + _text(row.type)
            + ',"name":' + _text(row.name) + ',"provider":' + _text(row.provider)
            + ',"index_key":' + (_jsonb_safe(row.index_key) if row.index_key is not None
                                 else "null")
            + ',"deposed":' + _text(row.deposed)
            + ',"attributes":' + _jsonb_safe(row.attributes) + "}"
            for index, row in enumerate(projection.resources)]
        dependencies = json.dumps([{"address": row.address, "depends_on": row.depends_on}
                                   for row in projection.dependencies])
        outputs = json.dumps([
            {"name": row.name,
             "type": None if row.type is None else _jsonb_safe(row.type),
             "value": None if row.value is None else _jsonb_safe(row.value),
             "sensitive": row.sensitive}
            for row in projection.outputs])
        resource_parts = ["[", *resources, "]"]
        return cls(
            raw_state=_bytea_expression(upload.raw, as_text=utf8_database),
            resources=_text_literal(resource_parts),
            dependencies=_text_literal([dependencies]),
            outputs=_text_literal([outputs]),
            resource_count=len(projection.resources),
            digests=(_digest(resource_parts), _digest([dependencies]), _digest([outputs])),
        )


def _digest(parts: Iterable[str]) -> str:
    """SHA-256 (hex) of the concatenated C{parts}, UTF-8."""
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(part.encode("utf-8", "surrogatepass"))
    return hasher.hexdigest()
