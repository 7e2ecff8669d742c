"""Structured logs: one JSON object per line (C{--log-format json})."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import IO, Any

from twisted.logger import ILogObserver, LogEvent, formatEvent
from zope.interface import implementer

_PLAIN = (str, int, float, bool, type(None))


def event_record(event: LogEvent) -> dict[str, Any]:
    """The JSON record of a log event: time, level, namespace, the formatted
    message, and every plain (text, number, boolean) field of the event.

    Access events (namespace C{kilolock.access}) carry C{request_id},
    C{tenant}, C{route}, C{path}, C{method}, C{status}, C{duration_ms},
    C{client} and C{scheme}.  Kilolock never logs a body, a token or a
    password, so no field holds one.
    """
    level = event.get("log_level")
    record: dict[str, Any] = {
        "time": datetime.fromtimestamp(event.get("log_time", 0), UTC).isoformat(
            timespec="milliseconds").replace("+00:00", "Z"),
        "level": getattr(level, "name", "info"),
        "namespace": event.get("log_namespace"),
        "message": formatEvent(event),
    }
    for key, value in event.items():
        if not key.startswith("log_") and key not in record and isinstance(value, _PLAIN):
            record[key] = value
    failure = event.get("log_failure")
    if failure is not None:
        record["error"] = getattr(failure.type, "__qualname__", "error")
    return record


@implementer(ILogObserver)
class JSONLineObserver:
    """Writes each event as one line of JSON."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out

    def __call__(self, event: LogEvent) -> None:
        self.out.write(json.dumps(event_record(event), default=str) + "\n")
        self.out.flush()


def json_log_observer(out: IO[str] | None = None) -> ILogObserver:
    """The observer of C{--log-format json}: JSON lines on stdout."""
    return JSONLineObserver(out or sys.stdout)
