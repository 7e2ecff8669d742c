"""The pool of PostgreSQL sessions a store runs its transactions on.

A txpostgres pool of L{PooledConnection}s, each with its own reconnecting
detector; a transaction prefers a live session, notes which one it got (so a
deadline can close it), and the whole pool can be retired for good.  No
domain imports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from attrs import define
from twisted.internet.defer import Deferred, gatherResults
from txpostgres.txpostgres import ConnectionPool

from kilolock.store.postgres.connection import PooledConnection, ReconnectingDetector

__all__ = ["ResilientPool", "Ticket"]

T = TypeVar("T")


@define
class Ticket:
    """Which connection a transaction got (None while it waits for one)."""

    connection: PooledConnection | None = None


class ResilientPool(ConnectionPool):  # type: ignore[misc]
    """A txpostgres pool of L{PooledConnection}s, each with its own
    L{ReconnectingDetector}; transactions prefer a live connection."""

    def __init__(self, reactor: Any, dsn: str, size: int, connect_timeout: float) -> None:
        self.reactor = reactor
        self._connect_timeout = connect_timeout
        super().__init__(None, dsn, min=size)
        self.every_connection: frozenset[PooledConnection] = frozenset(self.connections)
        self.retired = False

    def connectionFactory(self, reactor: Any, cooperator: Any) -> PooledConnection:
        connection = PooledConnection(reactor, cooperator, detector=ReconnectingDetector(reactor))
        connection.connect_timeout = self._connect_timeout
        return connection

    def run_transaction(self, interaction: Callable[[Any], Deferred[T]],
                        ticket: Ticket) -> Deferred[T]:
        """Run C{interaction(cursor)} in a transaction on a pooled connection,
        noting the connection on C{ticket}.  @return: its Deferred."""
        return self._semaphore.run(self._run_on_a_connection, interaction, ticket)  # type: ignore[no-any-return]

    def _run_on_a_connection(self, interaction: Callable[[Any], Deferred[T]],
                             ticket: Ticket) -> Deferred[T]:
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
