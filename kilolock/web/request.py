"""The request class of a Kilolock site: body limit, deadlines, request id,
client origin, Kilolock's JSON 405, and one metrics observation and
access-log event per request.
"""

from __future__ import annotations

import io
import os
import time
from typing import Any

from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.error import UnsupportedMethod
from twisted.web.http import HTTPChannel
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET, Request

from kilolock.errors import MethodNotAllowed, PayloadTooLarge
from kilolock.web._base import (
    KilolockResource,
    error_dialect_for,
    response_for_error,
    write_response,
)
from kilolock.web.context import context_of
from kilolock.web.forwarded import ClientOrigin, client_origin

log = Logger(namespace="kilolock.access")

DEFAULT_MAX_BODY_BYTES = 256 * 1024 * 1024


class _Discard(io.RawIOBase):
    """Where the bytes of a refused body go."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return len(data)


def _count(site: Any, counter: str, change: int) -> None:
    """Move one of a L{KilolockSite}'s request counters (other sites have none)."""
    if site is not None and hasattr(site, counter):
        setattr(site, counter, getattr(site, counter) + change)


class KilolockChannel(HTTPChannel):
    """An HTTP/1.1 channel that gives each request C{request_timeout} seconds
    (the site's) from its first byte to its last: a client trickling its
    head or its body is disconnected then.  (The idle timeout alone would
    not do: every byte received resets it.)"""

    #: Set by the site that builds the channel.
    site: Any = None
    _deadline: IDelayedCall | None = None
    _receiving = False

    _host: Any = None

    def getHost(self) -> Any:
        """The connection's local address, asked of the socket once (every
        request's constructor asks for it: a getsockname call each time)."""
        if self._host is None:
            self._host = super().getHost()
        return self._host

    def connectionMade(self) -> None:
        super().connectionMade()
        connections = getattr(self.site, "connections", None)
        if connections is not None:
            connections.add(self)

    def dataReceived(self, data: bytes) -> None:
        if not self._receiving and not self._handlingRequest:
            # The first byte of a request: it counts as in flight from now
            # on (a graceful shutdown waits for it), and its deadline starts.
            self._receiving = True
            _count(self.site, "receiving", +1)
            timeout = getattr(self.site, "request_timeout", None)
            if timeout:
                self._deadline = self.callLater(timeout, self._too_slow)
        super().dataReceived(data)

    def allContentReceived(self) -> None:
        self._end_receiving()
        super().allContentReceived()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._end_receiving()
        connections = getattr(self.site, "connections", None)
        if connections is not None:
            connections.discard(self)
        super().connectionLost(reason)

    def _end_receiving(self) -> None:
        if self._receiving:
            self._receiving = False
            _count(self.site, "receiving", -1)
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        log.info("dropped a client that did not send its request within {timeout} s",
                 timeout=getattr(self.site, "request_timeout", None))
        transport: Any = self.transport
        if transport is not None:
            transport.abortConnection()


class KilolockRequest(Request):
    """A request that refuses bodies over the site's C{max_body_bytes} and is
    observed once (metrics and an access event).

    The body limit is checked against C{Content-Length} before any byte is
    read, and against the running count of a chunked body.  A refused request
    is answered 413 at once with C{Connection: close}; the rest of its body is
    read and dropped for a short while (so the client sees the answer instead
    of a reset), then the connection is closed.  Nothing reaches a resource
    or a store.
    """

    #: Seconds to keep draining a refused body before closing the connection.
    linger_seconds = 5.0

    _received = 0
    _refused = False
    _peer = "unknown"
    _secure = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request_id = os.urandom(8).hex()
        self.arrived = time.monotonic()
        # The channel is gone once the request is finished; keep its site.
        self._kilolock_site = getattr(self.channel, "site", None)

    def _site_setting(self, name: str, default: Any) -> Any:
        return getattr(self._kilolock_site, name, default)

    # -- receiving --------------------------------------------------------

    def gotLength(self, length: int | None) -> None:
        if length is not None and length > self._limit():
            self._refuse()
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        self._received += len(data)
        if self._received > self._limit():
            if self.content is not None:
                self.content.close()
            self._refuse()
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self._refused:
            self.channel.loseConnection()
            return
        self._peer = getattr(self.getClientAddress(), "host", None) or "unknown"
        self._secure = self.isSecure()
        self._count_in_flight(+1)
        self.notifyFinish().addBoth(self._observe)
        # Kilolock has always matched methods whatever their case (C{get} is
        # GET); Resource.render looks up render_<METHOD> as sent.
        super().requestReceived(command.upper(), path, version)

    def _count_in_flight(self, change: int) -> None:
        _count(self._kilolock_site, "in_flight", change)
        metrics = self._site_setting("metrics", None)
        if metrics is not None:
            metrics.in_flight.set(self._site_setting("in_flight", 0))

    def _limit(self) -> int:
        return int(self._site_setting("max_body_bytes", DEFAULT_MAX_BODY_BYTES))

    def _refuse(self) -> None:
        self._refused = True
        self.content = _Discard()
        limit = self._limit()
        refusal = error_dialect_for(getattr(self.channel, "_path", None) or b"")(
            PayloadTooLarge(f"the request body is larger than the limit of {limit} bytes"
                            " (KL_MAX_BODY_BYTES)"))
        body = refusal.body
        head = b"".join((
            b"HTTP/1.1 413 Payload Too Large\r\n",
            b"Content-Type: " + (refusal.content_type or b"application/json") + b"\r\n",
            *(name + b": " + value + b"\r\n" for name, value in refusal.headers.items()),
            b"Connection: close\r\n",
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"))
        log.info("refused a request body over {limit} bytes", limit=limit)
        transport: Any = self.channel.transport
        transport.write(head + body)
        call_later = getattr(self.channel, "callLater", None)
        if call_later is not None:
            call_later(self.linger_seconds, transport.loseConnection)

    # -- who is calling -----------------------------------------------------

    def origin(self) -> ClientOrigin:
        """The client's address and scheme (forwarded headers honoured only
        from trusted proxies)."""
        return client_origin(
            self._peer,
            self.requestHeaders.getRawHeaders(b"X-Forwarded-For", []),
            self.getHeader(b"X-Forwarded-Proto"),
            self._secure,
            self._site_setting("trusted_proxies", ()),
        )

    # -- after the answer ---------------------------------------------------

    def process(self) -> None:
        self.setHeader(b"X-Request-Id", self.request_id.encode())
        super().process()

    def render(self, resrc: IResource) -> None:
        """Render C{resrc}, answering a method it refuses with Kilolock's JSON
        405 and its C{Allow} header.

        L{Resource.render} raises L{UnsupportedMethod} for a method a
        resource lacks; twisted.web's L{Request.render} answers it with an
        HTML page (405 for GET, HEAD and POST, 501 for every other method).
        This is the one place that answer is made instead: every resource of
        every Kilolock site gets it, and no resource re-implements dispatch.
        The rest is twisted.web's own: a resource answers later
        (C{NOT_DONE_YET}) or with bytes, and HEAD writes no body.
        """
        if isinstance(resrc, KilolockResource):
            context_of(self).route = resrc.route
        try:
            body = resrc.render(self)
        except UnsupportedMethod as refused:
            error = MethodNotAllowed(sorted(refused.allowedMethods), self.method)
            write_response(self, resrc.error_response(error)
                           if isinstance(resrc, KilolockResource)
                           else response_for_error(error))
            return
        if body is not NOT_DONE_YET:
            self.setHeader(b"Content-Length", str(len(body)).encode())
            self.write(body)
            self.finish()

    def _observe(self, result: object) -> None:
        self._count_in_flight(-1)
        duration = time.monotonic() - self.arrived
        method = self.method.decode("ascii", "replace") if self.method else "?"
        status = self.code if self.finished else 499
        context = context_of(self)
        metrics = self._site_setting("metrics", None)
        if metrics is not None:
            metrics.requests.labels(context.route, method, str(status)).inc()
            metrics.latency.labels(context.route, method).observe(duration)
        origin = self.origin()
        denied = f" denied={context.denied}" if context.denied else ""
        # The message is formatted here, once: a format string with one field
        # costs the log observers a third less than one with six.
        log.info(
            "{log_access_line}",
            log_access_line=f"{method} {context.route} {status} {duration * 1000:.1f}ms"
                            f" client={origin.address} request={self.request_id}{denied}",
            method=method, route=context.route, status=status,
            duration_ms=duration * 1000, client=origin.address, scheme=origin.scheme,
            request_id=self.request_id, tenant=context.tenant,
            path=self.path.decode("utf-8", "replace") if self.path else None,
            denied=context.denied, **context.denied_fields,
        )


def client_address(request: Request) -> str | None:
    """The client's address as the audit trail records it."""
    if isinstance(request, KilolockRequest):
        return request.origin().address
    return getattr(request.getClientAddress(), "host", None)

