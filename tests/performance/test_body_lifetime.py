"""When a request body's memory goes (L{kilolock.web.body}): a body in a
temporary file is closed as soon as it is read (not when twisted.web
finishes the request), and a large upload held for L{release_after_answer}
lives until the reactor has polled once more (so the answer written now is
sent first), and no longer."""

from __future__ import annotations

import gc
import io
import tempfile
import weakref

import pytest_twisted
from twisted.internet.selectreactor import SelectReactor
from twisted.web.test.requesthelper import DummyRequest

from kilolock.web.body import read_body, release_after_answer


@pytest_twisted.ensureDeferred
async def test_a_body_in_a_temporary_file_is_closed_once_read() -> None:
    from twisted.internet import reactor

    request = DummyRequest([b""])
    with tempfile.TemporaryFile() as content:
        content.write(b"x" * 300_000)
        request.content = content
        assert await read_body(request, reactor) == b"x" * 300_000
        assert content.closed


@pytest_twisted.ensureDeferred
async def test_a_body_in_memory_is_read_as_it_is() -> None:
    request = DummyRequest([b""])
    request.content = content = io.BytesIO(b"small")
    assert await read_body(request, None) == b"small"
    assert not content.closed


class Upload:
    """Stands for a large upload (bytes cannot be weakly referenced)."""


def test_held_objects_live_until_the_reactor_has_polled_once_more() -> None:
    """The answer is written from a thread's result (the store's), which
    the reactor runs with the delayed calls due now, before it polls and
    sends what was written; the upload is freed only in the turn after
    that poll.  A reactor that is never run (its own scheduling, no I/O)."""
    reactor = SelectReactor()
    try:
        held = Upload()
        alive = weakref.ref(held)
        reactor.callFromThread(release_after_answer, reactor, held, b"body")
        del held
        reactor.runUntilCurrent()  # the answer's turn: the poll comes next
        gc.collect()
        assert alive() is not None
        reactor.runUntilCurrent()  # the turn after the poll
        gc.collect()
        assert alive() is None
        assert reactor.getDelayedCalls() == []
    finally:
        reactor.waker.connectionLost(None)
