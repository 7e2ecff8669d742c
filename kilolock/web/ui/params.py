"""The query parameters and form fields of the dashboard's pages (the rule of
L{kilolock.web.query}: the last value wins; a bad value is a 400 page)."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qs, quote, urlencode

from twisted.web.server import Request

from kilolock.core.errors import BadRequest
from kilolock.web.query import plain_error, query_value
from kilolock.web.ui import BASE_PATH

#: The largest urlencoded form the dashboard reads (sign-in, force-unlock).
MAX_FORM_BYTES = 16 * 1024


def text(request: Request, name: str) -> str:
    """A parameter's text, stripped; empty when absent."""
    return (query_value(request, name, plain_error) or "").strip()


def choice(request: Request, name: str, allowed: tuple[str, ...]) -> str:
    """One of C{allowed} (the first when absent). @raise BadRequest: another value."""
    value = text(request, name) or allowed[0]
    if value not in allowed:
        raise BadRequest(f"{name} must be one of {', '.join(allowed)}")
    return value


def number(request: Request, name: str, default: int, maximum: int) -> int:
    """A whole number from 1 to C{maximum}. @raise BadRequest: anything else."""
    value = text(request, name)
    if not value:
        return default
    if not value.isdigit() or not 1 <= int(value) <= maximum:
        raise BadRequest(f"{name} must be a whole number from 1 to {maximum}")
    return int(value)


def form(request: Request) -> dict[str, str]:
    """The fields of an urlencoded form body (the last value of each).

    @raise BadRequest: a body over L{MAX_FORM_BYTES} or not UTF-8."""
    content = request.content
    body = content.read(MAX_FORM_BYTES + 1) if content is not None else b""
    if len(body) > MAX_FORM_BYTES:
        raise BadRequest("the form is too large")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True,
                          max_num_fields=32, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("the form is not valid") from None
    return {name: values[-1] for name, values in fields.items()}


def state_url(path: str, below: str = "") -> str:
    """The dashboard's page of the state at C{path} (and what is C{below} it)."""
    url = f"{BASE_PATH}/states/{quote(path, safe='/')}"
    return f"{url}/-/{below}" if below else url


def with_query(path: str, parameters: Mapping[str, object]) -> str:
    """C{path} with the parameters that are set."""
    kept = {name: str(value) for name, value in parameters.items()
            if value not in (None, "")}
    return f"{path}?{urlencode(kept)}" if kept else path


def resource_url(path: str, address: str, version: int | None = None) -> str:
    """The page of the resource (instance) at C{address} of the state at
    C{path}: in the current version, or in C{version}."""
    return with_query(state_url(path, "resource"), {"address": address, "version": version})
