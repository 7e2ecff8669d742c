"""The edge of every Kilolock listener: the limits a connection, a request
head and a request body are held to before any resource sees them (their
options are L{kilolock.server.settings.Settings}'s), and the answers that
refuse them.

Every refusal is a complete HTTP/1.1 response with a JSON error body
(C{{"error": {"code": ..., "message": ...}}}, the code naming the limit and
the message its setting) and C{Connection: close}; the connection is closed
after it (see L{kilolock.web.channel}).
"""

from __future__ import annotations

from attrs import frozen
from twisted.web.http import RESPONSES

from kilolock.core.errors import KilolockError
from kilolock.web.resource import ErrorDialect, response_for_error

#: The request line (method, target, version) at most, in bytes.
DEFAULT_MAX_REQUEST_LINE = 8192
#: The request line and every header line together at most, in bytes
#: (line ends not counted), as twisted.web's own default.
DEFAULT_MAX_HEAD_BYTES = 16384
DEFAULT_MAX_HEADERS = 100
DEFAULT_HEADER_TIMEOUT = 20.0
DEFAULT_BODY_MIN_RATE = 500
DEFAULT_BODY_RATE_GRACE = 10.0
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 64
DEFAULT_LISTEN_BACKLOG = 511
DEFAULT_LARGE_BODY_BYTES = 1 << 20
DEFAULT_BODY_BUDGET_BYTES = 1 << 30
DEFAULT_PARSE_BUDGET_BYTES = 128 << 20


@frozen
class EdgeLimits:
    """The limits of one listener's connections and requests.  A zero
    turns off the limits documented as "0: off"."""

    max_request_line: int = DEFAULT_MAX_REQUEST_LINE
    max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES
    max_headers: int = DEFAULT_MAX_HEADERS
    #: Seconds from a request's first byte to the end of its head.
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    #: Bytes per second a body must average once its grace period is over
    #: (0: off).
    body_min_rate: int = DEFAULT_BODY_MIN_RATE
    body_rate_grace: float = DEFAULT_BODY_RATE_GRACE
    #: Open connections from one TCP peer address (0: off); trusted
    #: proxies are exempt.
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    listen_backlog: int = DEFAULT_LISTEN_BACKLOG
    #: Bodies at least this large count against the budgets below.
    large_body_bytes: int = DEFAULT_LARGE_BODY_BYTES
    #: Bytes of large bodies admitted at once: receiving, waiting or being
    #: processed (0: no budget).
    body_budget_bytes: int = DEFAULT_BODY_BUDGET_BYTES
    #: Bytes of large bodies read into memory and processed at once
    #: (0: no budget).
    parse_budget_bytes: int = DEFAULT_PARSE_BUDGET_BYTES


#: The limits when none are given.
DEFAULT_LIMITS = EdgeLimits()


# -- refusals ---------------------------------------------------------------


@frozen
class Refusal:
    """A request refused at the edge: its status, its JSON error code (also
    the C{reason} label of C{kilolock_http_refusals_total}) and message."""

    status: int
    phrase: bytes
    code: str
    message: str
    retry_after: int | None = None

    def response(self, dialect: ErrorDialect = response_for_error) -> bytes:
        """The whole HTTP/1.1 response, its error worded in C{dialect} (the
        one of the part of the tree the request was for: Kilolock's JSON
        error by default)."""
        answer = dialect(EdgeRefusal(self))
        headers = {b"Content-Type": answer.content_type or b"application/json",
                   **answer.headers, b"Connection": b"close",
                   b"Content-Length": b"%d" % len(answer.body)}
        phrase = self.phrase if answer.status == self.status \
            else RESPONSES.get(answer.status, b"Error")
        head = [b"HTTP/1.1 %d %s" % (answer.status, phrase)]
        head += [name + b": " + value for name, value in headers.items()]
        return b"\r\n".join(head) + b"\r\n\r\n" + answer.body


class EdgeRefusal(KilolockError):
    """A L{Refusal} as the error an error dialect words."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.status = refusal.status  # type: ignore[misc]  # the refusal's own
        self.code = refusal.code  # type: ignore[misc]
        self.retry_after = refusal.retry_after

    def headers(self) -> dict[bytes, bytes]:
        if self.retry_after is None:
            return {}
        return {b"Retry-After": b"%d" % self.retry_after}


#: The reason phrase of each status the edge refuses with.
_PHRASES = {408: b"Request Timeout", 413: b"Payload Too Large", 414: b"URI Too Long",
            429: b"Too Many Requests", 431: b"Request Header Fields Too Large",
            503: b"Service Unavailable"}


def _refusal(status: int, code: str, message: str, env: str,
             retry_after: int | None = None) -> Refusal:
    """A refusal whose message ends naming the setting C{env} it broke."""
    return Refusal(status, _PHRASES[status], code, f"{message} ({env})", retry_after)


@frozen
class LimitRefusal:
    """How the edge refuses a request or connection past one of its
    L{EdgeLimits}: the message names the limit's value and its setting."""

    status: int
    code: str
    #: What went past the limit, C{{}} standing for the limit's value.
    words: str
    #: The L{EdgeLimits} field of the limit.
    field: str
    #: The environment variable that sets it.
    setting: str
    retry_after: int | None = None

    def refusal(self, limits: EdgeLimits) -> Refusal:
        """The refusal under C{limits}."""
        return _refusal(self.status, self.code, self.words.format(getattr(limits, self.field)),
                        self.setting, self.retry_after)


REQUEST_LINE_TOO_LONG = LimitRefusal(414, "request_line_too_long",
                                     "the request line is longer than {} bytes",
                                     "max_request_line", "KL_MAX_REQUEST_LINE")
HEAD_TOO_LARGE = LimitRefusal(431, "headers_too_large",
                              "the request head is larger than {} bytes", "max_head_bytes",
                              "KL_MAX_HEAD_BYTES")
TOO_MANY_HEADERS = LimitRefusal(431, "too_many_headers",
                                "the request has more than {} header fields", "max_headers",
                                "KL_MAX_HEADERS")
HEAD_TOO_SLOW = LimitRefusal(408, "header_timeout",
                             "the request head was not complete within {:g} s",
                             "header_timeout", "KL_HEADER_TIMEOUT")
BODY_TOO_SLOW = LimitRefusal(408, "body_too_slow",
                             "the request body arrived slower than {} bytes/s", "body_min_rate",
                             "KL_BODY_MIN_RATE")
TOO_MANY_CONNECTIONS = LimitRefusal(429, "too_many_connections",
                                    "this address already has {} open connections",
                                    "max_connections_per_client",
                                    "KL_MAX_CONNECTIONS_PER_CLIENT", retry_after=1)


def payload_too_large(limit: int) -> Refusal:
    return _refusal(413, "payload_too_large",
                    f"the request body is larger than the limit of {limit} bytes",
                    "KL_MAX_BODY_BYTES")


def over_budget(retry_after: int) -> Refusal:
    return _refusal(503, "uploads_over_budget",
                    f"too many large uploads are in progress; retry after {retry_after} s",
                    "KL_BODY_BUDGET_BYTES", retry_after=retry_after)
