"""Capturing Twisted log events, to assert which mechanism produced an
outcome (e.g. that a deadline fired) instead of how long it took."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from twisted.logger import globalLogPublisher

#: What the PostgreSQL store logs when a call runs into its deadline.
DEADLINE_EXCEEDED = "a state database call exceeded {seconds} s"
#: What it logs when opening its pool fails (C{where}: the hosts tried;
#: C{kind}: the error's class).
CANNOT_CONNECT = "cannot connect to the state database ({where}): {kind}: {reason}"


@contextmanager
def logged(log_format: str) -> Iterator[list[dict[str, Any]]]:
    """The events with C{log_format} emitted while the block runs."""
    events: list[dict[str, Any]] = []

    def observe(event: dict[str, Any]) -> None:
        if event.get("log_format") == log_format:
            events.append(event)

    globalLogPublisher.addObserver(observe)
    try:
        yield events
    finally:
        globalLogPublisher.removeObserver(observe)
