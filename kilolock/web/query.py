"""Query parameters, read the same way by every lane: the last value of a
parameter wins, repeatable parameters also split on commas, and a value
that is not UTF-8 or not the expected kind is a 400."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from twisted.web.server import Request

from kilolock.errors import BadRequest, InvalidField
from kilolock.model import parse_created

__all__ = ["field_error", "plain_error", "query_id", "query_time", "query_value",
           "query_values"]

#: How a lane words a bad parameter: (parameter name, message) -> the error.
ErrorFor = Callable[[str, str], BadRequest]


def field_error(name: str, message: str) -> BadRequest:
    """A 400 that names the parameter (C{"field"} in the JSON error)."""
    return InvalidField(name, message)


def plain_error(name: str, message: str) -> BadRequest:
    """A plain 400 whose message names the parameter."""
    return BadRequest(message)


def query_value(request: Request, name: str, error: ErrorFor) -> str | None:
    """The last value of parameter C{name}, or None when it is absent."""
    values = (request.args or {}).get(name.encode())
    if not values:
        return None
    try:
        return str(values[-1].decode("utf-8"))
    except UnicodeDecodeError:
        raise error(name, f"the query parameter {name} is not valid UTF-8") from None


def query_id(request: Request) -> str | None:
    """The lock ID in C{?ID=} (None when absent or empty), on every route that
    takes one: writes and deletes fenced by a lock, unlocks, rollbacks."""
    return query_value(request, "ID", plain_error) or None


def query_values(request: Request, name: str) -> list[str]:
    """Every value of a repeatable parameter; commas separate values too."""
    found: list[str] = []
    for value in (request.args or {}).get(name.encode(), []):
        found.extend(part for part in value.decode("utf-8", "replace").split(",") if part)
    return found


def query_time(request: Request, name: str, error: ErrorFor) -> datetime | None:
    """Parameter C{name} as an RFC 3339 time, or None when absent or empty."""
    text = query_value(request, name, error)
    if not text:
        return None
    moment = parse_created(text)
    if moment is None:
        raise error(name, f"{name} must be an RFC 3339 time, e.g. 2026-01-02T03:04:05Z")
    return moment
