"""Awaiting Deferreds and conditions in tests that run on the real reactor."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from twisted.internet.defer import Deferred


async def failure_of(pending: Deferred[Any], kind: type[Exception]) -> Any:
    """Await C{pending}, which must fail with C{kind}; return the error."""
    try:
        result = await pending
    except kind as error:
        return error
    pytest.fail(f"expected {kind.__name__}, got the result {result!r}")


async def eventually(condition: Callable[[], Any], what: str, timeout: float = 30.0,
                     interval: float = 0.02) -> Any:
    """Check C{condition} every C{interval} seconds of the running reactor
    until it returns something true (returned); fail naming C{what} after
    C{timeout} seconds.  For conditions of real sockets, processes or
    databases; code that takes a clock is tested with
    L{twisted.internet.task.Clock} instead."""
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        await deferLater(reactor, interval, lambda: None)
