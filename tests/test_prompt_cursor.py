"""The pool's cursors hand a statement's outcome on in the reactor turn that
read it (txpostgres's own cursor waits one more turn): the same result or
failure, no timer, the same registrations of readers and writers."""

from __future__ import annotations

from typing import Any

import psycopg2
import pytest
from psycopg2.extensions import POLL_OK, POLL_READ, POLL_WRITE
from twisted.internet.task import Clock
from txpostgres.txpostgres import UnexpectedPollResult

from kilolock.store.postgres.connection import PooledConnection, PromptCursor


class FakeReactor(Clock):
    """A clock that records the descriptors added as readers and writers."""

    def __init__(self) -> None:
        super().__init__()
        self.readers: list[Any] = []
        self.writers: list[Any] = []

    def addReader(self, reader: Any) -> None:
        self.readers.append(reader)

    def addWriter(self, writer: Any) -> None:
        self.writers.append(writer)

    def removeReader(self, reader: Any) -> None:
        self.readers.remove(reader)

    def removeWriter(self, writer: Any) -> None:
        self.writers.remove(writer)


class FakeSession:
    """A psycopg2 connection whose poll() answers the given states in turn
    (an exception is raised)."""

    closed = False

    def __init__(self, *states: int | Exception) -> None:
        self.states = list(states)

    def poll(self) -> int:
        state = self.states.pop(0)
        if isinstance(state, Exception):
            raise state
        return state


class FakeConnection:
    def __init__(self, reactor: FakeReactor, session: FakeSession) -> None:
        self.reactor = reactor
        self.session = session

    def pollable(self) -> FakeSession:
        return self.session


def polling(*states: int | Exception) -> tuple[FakeReactor, PromptCursor, list[Any]]:
    reactor = FakeReactor()
    cursor = PromptCursor(object(), FakeConnection(reactor, FakeSession(*states)))
    outcomes: list[Any] = []
    cursor.poll().addBoth(outcomes.append)
    return reactor, cursor, outcomes


def test_the_pool_uses_it() -> None:
    assert PooledConnection.cursorFactory is PromptCursor


def test_a_result_is_handed_on_in_the_turn_that_read_it() -> None:
    reactor, cursor, outcomes = polling(POLL_READ, POLL_OK)
    assert (outcomes, reactor.readers) == ([], [cursor])
    cursor.doRead()
    assert (outcomes, reactor.readers, reactor.getDelayedCalls()) == ([cursor], [], [])


def test_a_cursor_waiting_to_write_is_a_writer_until_flushed() -> None:
    reactor, cursor, outcomes = polling(POLL_WRITE, POLL_READ, POLL_OK)
    assert reactor.writers == [cursor]
    cursor.doWrite()
    assert (reactor.writers, reactor.readers, outcomes) == ([], [cursor], [])
    cursor.doRead()
    assert outcomes == [cursor]


def test_a_statement_error_fails_the_statement_at_once() -> None:
    error = psycopg2.errors.UniqueViolation("duplicate key")
    reactor, cursor, outcomes = polling(POLL_READ, error)
    cursor.doRead()
    assert len(outcomes) == 1
    assert outcomes[0].value is error
    assert reactor.getDelayedCalls() == []


def test_an_unexpected_poll_state_fails_the_statement() -> None:
    _, cursor, outcomes = polling(POLL_READ, 99)
    cursor.doRead()
    assert len(outcomes) == 1
    assert outcomes[0].check(UnexpectedPollResult)


def test_nothing_to_hand_on_raises_unless_told_to_swallow_errors() -> None:
    reactor = FakeReactor()
    cursor = PromptCursor(object(), FakeConnection(reactor, FakeSession(
        psycopg2.OperationalError("gone"), psycopg2.OperationalError("gone"), 99, 99)))
    with pytest.raises(psycopg2.OperationalError):
        cursor.continuePolling()
    cursor.continuePolling(swallowErrors=True)
    with pytest.raises(UnexpectedPollResult):
        cursor.continuePolling()
    cursor.continuePolling(swallowErrors=True)
