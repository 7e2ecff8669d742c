"""Query parameters, read the same way by every lane: the last value of a
parameter wins, repeatable parameters also split on commas, a value that
is not UTF-8 or holds a NUL is a 400 naming the text rule it breaks
(L{kilolock.core.text}), and one that is not the expected kind a 400 too."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from twisted.web.server import Request

from kilolock.core.errors import BadRequest, InvalidField
from kilolock.core.model import parse_created
from kilolock.core.text import check_text, decode_utf8

__all__ = ["field_error", "plain_error", "query_each", "query_id", "query_time",
           "query_value", "query_values"]

#: How a lane words a bad parameter: (parameter name, message) -> the error.
ErrorFor = Callable[[str, str], BadRequest]


def field_error(name: str, message: str) -> BadRequest:
    """A 400 that names the parameter (C{"field"} in the JSON error)."""
    return InvalidField(name, message)


def plain_error(name: str, message: str) -> BadRequest:
    """A plain 400 whose message names the parameter."""
    return BadRequest(message)


def _text(raw: bytes, name: str) -> str:
    """A parameter's value under the text rules (L{kilolock.core.text}):
    UTF-8 without NUL.  @raise InvalidText: naming the parameter."""
    what = f"the query parameter {name}"
    return check_text(decode_utf8(raw, what, name), what, name)


def query_value(request: Request, name: str, error: ErrorFor) -> str | None:
    """The last value of parameter C{name}, or None when it is absent."""
    values = (request.args or {}).get(name.encode())
    if not values:
        return None
    return _text(values[-1], name)


def query_id(request: Request) -> str | None:
    """The lock ID in C{?ID=} (None when absent or empty), on every route that
    takes one: writes and deletes fenced by a lock, unlocks, rollbacks."""
    return query_value(request, "ID", plain_error) or None


def query_values(request: Request, name: str) -> list[str]:
    """Every value of a repeatable parameter; commas separate values too."""
    found: list[str] = []
    for value in (request.args or {}).get(name.encode(), []):
        found.extend(part for part in _text(value, name).split(",") if part)
    return found


def query_each(request: Request, name: str, limit: int) -> list[str]:
    """Every non-empty value of a repeatable parameter whose values may hold
    commas (Terraform addresses: C{aws_instance.web["a,b"]}), as given.

    @raise InvalidField: more than C{limit} values.
    @raise InvalidText: a value breaks a text rule (naming the parameter)."""
    values = (request.args or {}).get(name.encode(), [])
    if len(values) > limit:
        raise InvalidField(name, f"at most {limit} values of {name}")
    return [text for text in (_text(value, name) for value in values) if text]


def query_time(request: Request, name: str, error: ErrorFor) -> datetime | None:
    """Parameter C{name} as an RFC 3339 time, or None when absent or empty."""
    text = query_value(request, name, error)
    if not text:
        return None
    moment = parse_created(text)
    if moment is None:
        raise error(name, f"{name} must be an RFC 3339 time, e.g. 2026-01-02T03:04:05Z")
    return moment
