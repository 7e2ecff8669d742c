"""Awaiting Deferreds in tests."""

from __future__ import annotations

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
