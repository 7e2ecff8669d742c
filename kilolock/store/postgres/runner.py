"""Running transactions: the pool's life, deadlines, retries and the 503.

L{TransactionRunner.run_interaction} has the shape of synapse's
C{DatabasePool.runInteraction}: it runs C{txn(cursor, *args)} -- an C{async}
function whose every statement is C{await cursor.execute(...)} -- as one
transaction and fires with its result.  The same C{txn} runs on one of two
paths behind that one call:

  - on the pool (the default): txpostgres on the reactor thread, BEGIN and
    COMMIT travelling with the first and last statements
    (L{kilolock.store.postgres.connection});
  - with C{blocking=True}: on a short-lived blocking connection in a thread
    of the reactor's pool, for transactions that move many megabytes
    (L{kilolock.store.postgres.blocking}).

Either way the call is bounded by an overall deadline; a deadlock or
serialisation failure is retried; a database that cannot be reached (no
pool, a dead session, the statement timeout, the deadline) is
L{ServiceUnavailable}, a 503 with Retry-After, never a hang.  A pool that
failed to start is rebuilt by the next call; opening one (re)starts the
embedded server when there is one, brings the schema up to date and has
every session prepare the statements it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import psycopg2
from attrs import frozen
from psycopg2.extensions import TransactionRollbackError
from twisted.internet.defer import Deferred, DeferredLock, FirstError, ensureDeferred
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from txpostgres.reconnection import ConnectionDead

from kilolock.core.errors import (
    EncryptionKeysRefused,
    KilolockError,
    ServiceUnavailable,
    Unauthorized,
)
from kilolock.core.model import StoreProbe
from kilolock.store.postgres.blocking import BlockingSession, register_casters
from kilolock.store.postgres.connection import BYTEA_AS_HEX, UNREACHABLE, ConnectTimeout
from kilolock.store.postgres.dsn import (
    CONNECT_TIMEOUT,
    STATEMENT_TIMEOUT,
    connect_failure,
    connection_string,
    describe,
    without_places,
)
from kilolock.store.postgres.embedded import EmbeddedPostgres
from kilolock.store.postgres.pool import ResilientPool, Ticket
from kilolock.store.postgres.refusals import INPUT_ERRORS, input_refusal
from kilolock.store.schema.upgrade import (
    OWNER_GONE_SQLSTATE,
    SCHEMA_VERSION,
    SchemaTooNew,
    ensure_schema,
    schema_version,
)

__all__ = ["RunnerSettings", "TransactionRunner"]

log = Logger()

T = TypeVar("T")

#: Connections per store (per process).
DEFAULT_POOL_SIZE = 6
#: Seconds one store call may take in all, waiting for a connection included.
OPERATION_TIMEOUT = 60.0
#: Seconds a readiness probe waits for the database.
PROBE_TIMEOUT = 3.0
#: Seconds after a failed attempt to open the pool before the next call tries
#: again (calls in between fail at once).
POOL_RETRY_INTERVAL = 1.0
#: The Retry-After of a 503 while the database is unreachable.
RETRY_AFTER = 5
#: Seconds between attempts of a transaction PostgreSQL aborted for a
#: deadlock or a serialisation failure (both safe to retry): they are retried
#: until the operation timeout, never answered 503 on their own (a 503 means
#: the database cannot be reached, not that Kilolock contended with itself).
_ROLLBACK_PAUSE = 0.01
#: Seconds between attempts of a call refused by a reconnecting connection.
_REFUSAL_PAUSE = 0.05

Transaction = Callable[..., Coroutine[Any, Any, T]]

#: What the runner logs when the store's start-up check refuses its keys.
KEYS_REFUSED = "the state store cannot serve: {detail}"


@frozen
class RunnerSettings:
    """How a runner connects, and how long it waits."""

    pool_size: int = DEFAULT_POOL_SIZE
    connect_timeout: float = CONNECT_TIMEOUT
    statement_timeout: float = STATEMENT_TIMEOUT
    operation_timeout: float = OPERATION_TIMEOUT
    #: The C{PREPARE} statements every session runs once the schema is
    #: current (None: none).
    prepare_sql: str | None = None

    def connection_string(self, database_url: str) -> str:
        """C{database_url} with Kilolock's session settings and these timeouts."""
        return connection_string(database_url, statement_timeout=self.statement_timeout,
                                 connect_timeout=self.connect_timeout)


class TransactionRunner:
    """Runs a store's transactions on its pool, or on the blocking path.

    @ivar reachable: True when the last contact with the database worked.
    @ivar schema_upgrade: (version found, version now) of the last schema
        check, or None before the first.
    @ivar utf8_database: whether the server encoding is UTF-8 (known once the
        pool is open).
    @ivar embedded: the embedded PostgreSQL this runner starts and stops, or
        None for a database of its own.
    """

    def __init__(self, database_url: str | None, reactor: Any,
                 settings: RunnerSettings = RunnerSettings(), *,
                 embedded: EmbeddedPostgres | None = None,
                 check: Transaction[Any] | None = None) -> None:
        if database_url is None and embedded is None:
            raise ValueError("a database URL or an embedded PostgreSQL is needed")
        self._reactor = reactor
        self._settings = settings
        #: Run once the schema is current, each time a pool opens: the store
        #: serves only when it passes (L{EncryptionKeysRefused} when not).
        self._check = check
        self.embedded = embedded
        self._dsn = None if database_url is None else settings.connection_string(database_url)
        self._pool: ResilientPool | None = None
        self._pool_lock = DeferredLock()
        self._pool_attempts = 0
        self._pool_failed_at = float("-inf")
        self._connect_failure_logged_at: float | None = None
        self._refusal_logged_at: float | None = None
        #: Why the last pool was refused (answered until the next attempt).
        self._refusal: EncryptionKeysRefused | None = None
        #: Why the last attempt to open a pool could not connect (None
        #: once one connects).
        self._connect_failure: str | None = None
        self._stopped = False
        self._in_flight = 0
        self._idle_waiters: list[Deferred[None]] = []
        self.reachable = False
        self._outage_logged = False
        self.schema_upgrade: tuple[int, int] | None = None
        self.utf8_database = False

    # -- the pool's life ------------------------------------------------

    def start(self) -> Deferred[None]:
        """Open the pool (see L{ready_pool}).

        @return: a Deferred firing with None when transactions can run, or
            failing with L{ServiceUnavailable} when the database cannot be
            reached (the next call tries again).
        """
        self._stopped = False

        async def start() -> None:
            await self.ready_pool()

        return ensureDeferred(start())

    def stop(self) -> Deferred[None]:
        """Let running transactions finish (for at most the operation
        timeout), close every connection, and stop the embedded server if
        this runner started it.

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
            if self.embedded is not None and self.embedded.running:
                await self.embedded.stop(self._reactor)

    def probe(self) -> Deferred[StoreProbe]:
        """Check the database within L{PROBE_TIMEOUT} seconds; never fails.

        @return: a Deferred firing with a L{StoreProbe}: whether the database
            answers, and the schema version it has and the one this code
            expects.
        """

        async def probe() -> StoreProbe:
            try:
                pool = await self.ready_pool()
                version = await self._bounded(
                    pool, lambda cursor: ensureDeferred(schema_version(cursor)),
                    timeout=PROBE_TIMEOUT)
            except Exception as error:
                if not isinstance(error, (*UNREACHABLE, KilolockError)):
                    log.failure("the database probe failed unexpectedly")
                self._note_reachable(False, error)
                if isinstance(error, EncryptionKeysRefused):
                    message = "the encryption keys do not open the stored versions"
                elif self._connect_failure is not None:
                    message = ("cannot connect to PostgreSQL:"
                               f" {without_places(self._connect_failure)}")
                else:
                    message = "PostgreSQL does not answer"
                return StoreProbe(reachable=False, message=message,
                                  expected_schema_version=SCHEMA_VERSION)
            self._note_reachable(True)
            return StoreProbe(reachable=True, message="PostgreSQL answers",
                              schema_version=version, expected_schema_version=SCHEMA_VERSION,
                              connections_alive=pool.alive_count,
                              connections_total=len(pool.every_connection))

        return ensureDeferred(probe())

    async def ready_pool(self) -> ResilientPool:
        """The started pool; opens one (again) when there is none.

        Callers that queued while an attempt failed fail with it instead of
        each waiting for their own connect timeout.
        """
        if self._pool is not None:
            return self._pool
        if self._reactor.seconds() - self._pool_failed_at < POOL_RETRY_INTERVAL:
            raise self._refusal or ServiceUnavailable(retry_after=RETRY_AFTER)
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

    async def _open_pool(self) -> ResilientPool:
        if self.embedded is not None:
            # (Re)start the embedded server: a no-op while it runs, a restart
            # after it stopped or died.
            try:
                dsn = await self.embedded.start(self._reactor)
            except Exception as error:
                log.error("the embedded PostgreSQL did not start: {kind}: {reason}",
                          kind=type(error).__name__,
                          reason=(str(error).strip().splitlines() or [""])[0])
                raise ServiceUnavailable(retry_after=RETRY_AFTER) from None
            self._dsn = self._settings.connection_string(dsn)
        assert self._dsn is not None
        pool = ResilientPool(self._reactor, self._dsn, self._settings.pool_size,
                             self._settings.connect_timeout)
        try:
            try:
                await pool.start()
            except FirstError as first:
                first.subFailure.raiseException()
            (found, now), encoding = await self._bounded(
                pool, lambda cursor: ensureDeferred(_prepare_database_txn(cursor)))
            self.schema_upgrade = (found, now)
            self.utf8_database = encoding.upper() in ("UTF8", "UNICODE")
            if self._check is not None:
                check = self._check
                await self._bounded(pool, lambda cursor: ensureDeferred(check(cursor)))
            if self._settings.prepare_sql is not None:
                await pool.prepare_statements(self._settings.prepare_sql)
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
            if isinstance(error, EncryptionKeysRefused):
                self._refusal = error
                self._log_refusal(error)
                raise
            if isinstance(error, (*UNREACHABLE, ConnectTimeout, ServiceUnavailable)):
                self._connect_failure = connect_failure(error)
                self._log_connect_failure(error)
                raise ServiceUnavailable(retry_after=RETRY_AFTER) from None
            raise
        self._connect_failure_logged_at = None
        self._connect_failure = None
        self._refusal = None
        self._note_reachable(True)
        return pool

    def _log_refusal(self, error: EncryptionKeysRefused) -> None:
        """Log why the keys were refused: at the first refusal, then once a
        minute (each call tries to open the pool again)."""
        now = self._reactor.seconds()
        if self._refusal_logged_at is None or now - self._refusal_logged_at >= 60:
            self._refusal_logged_at = now
            log.error(KEYS_REFUSED, detail=error.detail)

    def _log_connect_failure(self, error: BaseException) -> None:
        """Log why connecting failed: at the first failure, then once a minute.
        The line says where (every host tried) and libpq's reason for each
        (never the password)."""
        now = self._reactor.seconds()
        logged = self._connect_failure_logged_at
        if logged is None or now - logged >= 60:
            self._connect_failure_logged_at = now
            assert self._dsn is not None
            log.warn("cannot connect to the state database ({where}): {kind}: {reason}",
                     where=describe(self._dsn), kind=type(error).__name__,
                     reason=connect_failure(error))

    # -- running transactions ---------------------------------------------

    def run_interaction(self, txn: Transaction[T], *args: Any,
                        blocking: bool = False) -> Deferred[T]:
        """Run C{txn(cursor, *args)} as one transaction; with C{blocking}, on
        a blocking connection in a thread (for transactions that move many
        megabytes; the cursor then also has C{select_bytea} and C{copy_in}).

        @return: a Deferred firing with its result; database unavailability
            becomes L{ServiceUnavailable}; a deadlock is retried; a state of a
            tenant or environment deleted meanwhile is L{Unauthorized}; a
            value the database refuses is a 400 (L{input_refusal}).
        """
        self._in_flight += 1

        def finished(result: Any) -> Any:
            self._in_flight -= 1
            if not self._in_flight:
                waiters, self._idle_waiters = self._idle_waiters, []
                for waiter in waiters:
                    waiter.callback(None)
            return result

        return ensureDeferred(self._run(txn, args, blocking)).addBoth(finished)

    async def _run(self, txn: Transaction[T], args: tuple[Any, ...], blocking: bool) -> T:
        if self._stopped:
            raise ServiceUnavailable("the state store is stopped", retry_after=RETRY_AFTER)
        pool = await self.ready_pool()
        started = self._reactor.seconds()
        refusals = 0
        while True:
            try:
                result: T = await (
                    self._bounded_blocking(txn, args) if blocking
                    else self._bounded(pool, lambda cursor: ensureDeferred(txn(cursor, *args))))
            except TransactionRollbackError:
                if self._reactor.seconds() - started >= self._settings.operation_timeout:
                    log.warn("a state database call exceeded {seconds} s",
                             seconds=self._settings.operation_timeout)
                    raise ServiceUnavailable(retry_after=RETRY_AFTER) from None
                await deferLater(self._reactor, _ROLLBACK_PAUSE, lambda: None)
                continue
            except ConnectionDead as error:
                # Refused before anything ran: that connection is still
                # reconnecting (after a database restart).  While others of
                # the pool are live, try again on one of them.
                if pool.any_alive and refusals < self._settings.pool_size:
                    refusals += 1
                    await deferLater(self._reactor, _REFUSAL_PAUSE, lambda: None)
                    continue
                self._note_reachable(False, error)
                raise ServiceUnavailable(retry_after=RETRY_AFTER) from None
            except KilolockError:
                self._note_reachable(True)
                raise
            except INPUT_ERRORS as error:
                # A value the database refused: a 400, not an outage.
                refusal = input_refusal(error)
                if refusal is None:
                    raise
                self._note_reachable(True)
                raise refusal from None
            except UNREACHABLE as error:
                self._note_reachable(False, error)
                raise ServiceUnavailable(retry_after=RETRY_AFTER) from None
            except psycopg2.Error as error:
                # Hosted mode: a state of a tenant or environment deleted
                # while the request was on its way (the schema's trigger).
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

    def _bounded(self, pool: ResilientPool, interaction: Callable[[Any], Deferred[T]],
                 timeout: float | None = None) -> Deferred[T]:
        """Run C{interaction} on C{pool}, failing with L{ServiceUnavailable}
        after C{timeout} seconds (default: the operation timeout).  A
        transaction still waiting for a connection is dropped from the queue;
        one that is stuck on its connection gets that connection closed (its
        detector reconnects)."""
        ticket = Ticket()
        running = pool.run_transaction(interaction, ticket)

        def stop_running() -> None:
            if ticket.connection is None:
                running.cancel()
            else:
                ticket.connection.close()

        seconds = self._settings.operation_timeout if timeout is None else timeout
        return self._with_deadline(running, seconds, stop_running)

    def _bounded_blocking(self, txn: Transaction[T], args: tuple[Any, ...]) -> Deferred[T]:
        """Run C{txn} on a L{BlockingSession} in a thread, failing with
        L{ServiceUnavailable} after the operation timeout (the running
        statement is cancelled, so the transaction rolls back)."""
        assert self._dsn is not None
        session = BlockingSession(self._dsn, register_casters(BYTEA_AS_HEX))
        running = self.in_thread(session.run, txn, args)
        return self._with_deadline(running, self._settings.operation_timeout, session.cancel)

    def _with_deadline(self, running: Deferred[T], seconds: float,
                       stop_running: Callable[[], None]) -> Deferred[T]:
        """C{running}'s result, or L{ServiceUnavailable} once C{seconds} have
        passed (then C{stop_running} is called, and a late result of
        C{running} is dropped: that failure is expected)."""
        outcome: Deferred[T] = Deferred()

        def give_up() -> None:
            # Answer before stopping the call: stopping it (closing a hung
            # connection) fails it at once, and that failure must not stand
            # in for the deadline's 503 and its log line.
            if not outcome.called:
                log.warn("a state database call exceeded {seconds} s", seconds=seconds)
                outcome.errback(ServiceUnavailable(retry_after=RETRY_AFTER))
            stop_running()

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

    def in_thread(self, function: Callable[..., T], *args: Any) -> Deferred[T]:
        """Call C{function(*args)} in a thread of the reactor's pool (CPU work
        on large values: decoding, quoting).

        @return: a Deferred firing with its result."""
        return deferToThreadPool(self._reactor, self._reactor.getThreadPool(), function, *args)


async def _prepare_database_txn(cursor: Any) -> tuple[tuple[int, int], str]:
    """Bring the schema up to date and read the server encoding.

    @return: ((schema version found, version now), server encoding)."""
    upgrade = await ensure_schema(cursor)
    await cursor.execute("SHOW server_encoding")
    (encoding,) = cursor.fetchone()
    return upgrade, str(encoding)
