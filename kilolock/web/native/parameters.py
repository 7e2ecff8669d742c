"""The query parameters of the native API (read by L{kilolock.web.query}:
the last value wins; a bad value is a plain 400 naming the parameter)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from twisted.web.server import Request

from kilolock.core.errors import BadRequest, InvalidField, InvalidPath
from kilolock.core.model import Principal, StateKey
from kilolock.core.text import MAX_WHOLE_NUMBER, whole_number
from kilolock.rules.paths import state_segments
from kilolock.rules.resources import ResourceQuery
from kilolock.rules.scope import state_key
from kilolock.web.query import plain_error, query_time, query_value

#: Resources answered per search unless C{limit} says otherwise, and at most.
DEFAULT_RESOURCE_PAGE = 1000
MAX_RESOURCE_PAGE = 10000


def text_arg(request: Request, name: str) -> str | None:
    return query_value(request, name, plain_error)


def number_arg(request: Request, name: str, minimum: int = 1,
               maximum: int | None = None) -> int | None:
    """A whole number from C{minimum} to C{maximum}, or None when absent or empty."""
    text = text_arg(request, name)
    if text is None or text == "":
        return None
    number = whole_number(text)
    top = MAX_WHOLE_NUMBER if maximum is None else maximum
    if number is None or not minimum <= number <= top:
        raise BadRequest(f"{name} must be a whole number from {minimum} to {top}")
    return number


def time_arg(request: Request, name: str) -> datetime | None:
    return query_time(request, name, plain_error)


def state_arg(request: Request, principal: Principal) -> StateKey | None:
    """The state C{?state=} names (C{name} or C{ws/env/name}), under the
    scope rule; None when absent or empty."""
    text = text_arg(request, "state")
    if not text:
        return None
    try:
        segments = state_segments(text)
    except InvalidPath as error:
        raise BadRequest(f"state: {error.message}") from None
    if segments is None:
        raise BadRequest("state is NAME or WORKSPACE_ID/ENV_PUBLIC_ID/NAME")
    return state_key(principal, segments, write=False)


def body_state(principal: Principal, name: str, write: bool = False) -> StateKey:
    """The state a request body names (C{name} or C{ws/env/name}), under the
    scope rule (403 outside the caller's scope).

    @raise InvalidField: (400, C{state}) not a state name."""
    try:
        segments = state_segments(name)
    except InvalidPath as error:
        raise InvalidField("state", f"state: {error.message}") from None
    if segments is None:
        raise InvalidField("state", "a state is NAME or WORKSPACE_ID/ENV_PUBLIC_ID/NAME")
    return state_key(principal, segments, write=write)


def resource_query(request: Request, **scope: Any) -> ResourceQuery:
    """C{?type=&address=&module=&attribute=PATH=VALUE&limit=}, with C{scope}
    (the state path, or the token's path prefix)."""
    attribute = None
    text = text_arg(request, "attribute")
    if text is not None:
        path, separator, value = text.partition("=")
        if not separator or not path:
            raise BadRequest("attribute is PATH=VALUE, e.g. attribute=tags.Name=web")
        attribute = (path, value)
    limit = number_arg(request, "limit", maximum=MAX_RESOURCE_PAGE)
    return ResourceQuery(type=text_arg(request, "type") or None,
                         address=text_arg(request, "address"),
                         module=text_arg(request, "module"), attribute=attribute,
                         limit=limit or DEFAULT_RESOURCE_PAGE, **scope)
