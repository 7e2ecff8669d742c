"""One PostgreSQL session on the reactor: a txpostgres connection that
reconnects by itself, gives up connecting after a timeout, sends BEGIN and
COMMIT with a transaction's first and last statements, and runs the
statements its session prepared as C{EXECUTE}.

The bottom layer of the store: no domain imports, nothing about states or
tenants.  Nothing here logs query parameters or the connection string.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import psycopg2
from psycopg2.extensions import new_type, register_type
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred, maybeDeferred
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.logger import Logger
from twisted.python.failure import Failure
from txpostgres.reconnection import ConnectionDead, DeadConnectionDetector
from txpostgres.retrying import simpleBackoffIterator
from txpostgres.txpostgres import Connection, RollbackFailed, _PollingMixin

from kilolock.store.postgres.dsn import (
    CONNECT_TIMEOUT,
    HostAttempt,
    connect_failure,
    host_attempts,
)
from kilolock.store.postgres.prepared import PreparedSQL

__all__ = ["BYTEA_AS_HEX", "UNREACHABLE", "ConnectTimeout", "PooledConnection",
           "ReconnectingDetector", "session_usable"]

log = Logger()

#: Failures that mean "the database cannot be reached right now".
UNREACHABLE = (
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
#: L{kilolock.store.postgres.codecs.bytes_from_hex}, in a thread when large,
#: instead of by psycopg2 on the reactor thread.
BYTEA_AS_HEX = new_type((17,), "KILOLOCK_BYTEA_AS_HEX", lambda value, cursor: value)


class ConnectTimeout(Exception):
    """Opening a connection took longer than the connect timeout."""


class ReconnectingDetector(DeadConnectionDetector):  # type: ignore[misc]
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
                         ConnectionLost, ConnectTimeout):
            return True
        if failure.check(psycopg2.OperationalError):
            return not session_usable(getattr(self.reconnectable, "_connection", None))
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


def session_usable(raw: Any) -> bool:
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


class PooledConnection(Connection):  # type: ignore[misc]
    """A txpostgres connection that tries the hosts of a multi-host URL one
    at a time, abandons each after C{connect_timeout} seconds (libpq ignores
    C{connect_timeout} in asynchronous mode), and can be closed in any
    state."""

    connect_timeout = CONNECT_TIMEOUT
    detector: ReconnectingDetector
    #: The PREPARE statements every session runs once the schema is current
    #: (set by the pool after the upgrade; None before).
    prepare_sql: str | None = None
    #: Whether this session prepared them.
    prepared = False

    def connect(self, dsn: str) -> Deferred[Any]:
        """Open the session on the first host of C{dsn} that takes it
        (L{host_attempts}: one at a time, C{connect_timeout} seconds each, as
        libpq gives each host when it connects blocking).

        @return: a Deferred firing when the session is open, or failing with
            the host's failure -- for several hosts, an C{OperationalError}
            with libpq's reason for each, one line per host."""
        attempts = host_attempts(dsn)
        if len(attempts) == 1:
            return self._connect_to(dsn)
        return ensureDeferred(self._connect_to_one_of(dsn, attempts))

    async def _connect_to_one_of(self, dsn: str, attempts: list[HostAttempt]) -> Any:
        failures = []
        try:
            for attempt in attempts:
                try:
                    return await self._connect_to(attempt.dsn)
                except (psycopg2.OperationalError, ConnectTimeout, ConnectionDone) as error:
                    failures.append(f"{attempt.place} failed: {connect_failure(error)}")
                    self._discard_attempt()
        finally:
            # Each attempt registered its own host's string; reconnecting
            # tries every host again.
            self.detector.setReconnectable(self, dsn)
        raise psycopg2.OperationalError("\n".join(failures))

    def _connect_to(self, dsn: str) -> Deferred[Any]:
        """One connect of libpq's, given up after C{connect_timeout} seconds."""
        attempt: Deferred[Any] = super().connect(dsn)
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
                return Failure(ConnectTimeout(
                    f"no answer within {self.connect_timeout:g} s"))
            return result

        return attempt.addBoth(stop_timer)

    def _connected(self, result: Any) -> Any:
        register_type(BYTEA_AS_HEX, self._connection)
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
        """Give up the connect under way: its poll cycle fails (the
        connect's outcome: a timed-out attempt is not a dead session for
        the detector, and the next host may follow)."""
        self._discard_attempt()
        if self._pollingD is not None:
            _PollingMixin.connectionLost(self, Failure(ConnectionDone()))

    def _discard_attempt(self) -> None:
        """Stop watching the socket of a connect attempt and close libpq's
        connection, without telling the detector."""
        self.reactor.removeReader(self)
        self.reactor.removeWriter(self)
        if self._connection is not None and not self._connection.closed:
            self._connection.close()

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
                if session_usable(self._connection):
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
        too, instead of being watched again.

        While the connect's poll cycle runs (C{_pollingD}), the session is
        not usable yet by design: TLS negotiation, each password round trip
        and libpq's move to the next host of a multi-host URL all take reads
        before libpq's status is CONNECTION_OK.  Then this read only moves
        the cycle on; the cycle itself says what it waits for next (reader
        or writer: the socket may be a new one) and fires the connect's
        Deferred, with libpq's own error when the attempt fails."""
        if self._pollingD is not None:
            _PollingMixin.doRead(self)
            return None
        try:
            _PollingMixin.doRead(self)
            self.checkForNotifies()
        except psycopg2.Error as error:
            return cast(Exception, error)
        if not session_usable(self._connection):
            return ConnectionLost("the database server ended the session")
        self.reactor.addReader(self)
        return None

    def connectionLost(self, reason: Failure) -> None:
        """The reactor saw the socket fail or hang up (or L{close} ran).

        During the connect's poll cycle, on a connection libpq still holds
        open, that is libpq's to read: a refused or reset host of a
        multi-host URL is where libpq moves on to the next one.  So the
        cycle is only moved on (it fires the connect's Deferred when libpq
        gives up) and the detector is not told of a death: the connect's
        outcome decides."""
        if self._pollingD is not None and not self._connection.closed:
            _PollingMixin.connectionLost(self, reason)
            return
        super().connectionLost(reason)

    def close(self) -> None:
        if self._connection is None:
            return
        super().close()

    @property
    def alive(self) -> bool:
        return not self.detector.connectionIsDead and session_usable(self._connection)
