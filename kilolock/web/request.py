"""The request class of a Kilolock site: body limit, large-body admission,
request id, client origin, Kilolock's JSON 405, and one metrics observation
and access-log event per request.  (Its connection, with the deadlines and
head limits: L{kilolock.web.channel}.)
"""

from __future__ import annotations

import io
import os
import time
from typing import Any

from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.error import UnsupportedMethod
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET, Request

from kilolock.core.errors import MethodNotAllowed
from kilolock.web.admission import Admission, UploadBudget
from kilolock.web.channel import count_on
from kilolock.web.context import context_of
from kilolock.web.edge import Refusal, over_budget, payload_too_large
from kilolock.web.forwarded import ClientOrigin, client_origin
from kilolock.web.resource import KilolockResource, response_for_error, write_response

log = Logger(namespace="kilolock.access")

DEFAULT_MAX_BODY_BYTES = 256 * 1024 * 1024


class _Discard(io.RawIOBase):
    """Where the bytes of a refused body go."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return len(data)


class KilolockRequest(Request):
    """A request that refuses bodies over the site's C{max_body_bytes},
    admits large bodies within the site's L{UploadBudget}, and is observed
    once (metrics and an access event).

    The body limit is checked against C{Content-Length} before any byte is
    read, and against the running count of a chunked body.  So is the body
    budget (L{kilolock.web.admission}): a large body past it is answered 503
    with C{Retry-After}; an admitted one is processed when the parse budget
    lets it.  A refused request is answered at once with C{Connection:
    close} (413 or 503); the rest of its body is read and dropped for a
    short while (so the client sees the answer instead of a reset), then
    the connection is closed.  Nothing reaches a resource or a store.
    """

    _received = 0
    _chunked = False
    _refused = False
    _peer = "unknown"
    _secure = False
    _admission: Admission | None = None

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
            self._refuse(payload_too_large(self._limit()))
            return
        if length is not None and not self._admit(length):
            return
        self._chunked = length is None
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        self._received += len(data)
        if self._received > self._limit():
            self._refuse(payload_too_large(self._limit()))
            return
        if self._chunked and not self._admit(self._received):
            return
        super().handleContentChunk(data)

    def _admit(self, size: int) -> bool:
        """Whether a body of C{size} bytes (so far) is within the body
        budget; refuses the request (503) when it is not."""
        budget: UploadBudget | None = self._site_setting("budget", None)
        if budget is None or size < budget.large_body_bytes:
            return True
        if self._admission is None:
            self._admission = budget.admit(size)
            admitted = self._admission is not None
        else:
            admitted = budget.grow(self._admission, size)
        if not admitted:
            self._refuse(over_budget(budget.refuse(size)))
        return admitted

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

    def connectionLost(self, reason: Failure) -> None:
        self._release()
        super().connectionLost(reason)

    def _count_in_flight(self, change: int) -> None:
        count_on(self._kilolock_site, "in_flight", change)
        metrics = self._site_setting("metrics", None)
        if metrics is not None:
            metrics.in_flight.set(self._site_setting("in_flight", 0))

    def _limit(self) -> int:
        return int(self._site_setting("max_body_bytes", DEFAULT_MAX_BODY_BYTES))

    def _refuse(self, refusal: Refusal) -> None:
        self._refused = True
        self._release()
        if self.content is not None:
            self.content.close()
        self.content = _Discard()
        # An C{Expect: 100-continue} must not be answered after the refusal.
        self.requestHeaders.removeHeader(b"Expect")
        channel: Any = self.channel
        channel.refuse(refusal, drop_input=False)

    def _release(self) -> None:
        budget: UploadBudget | None = self._site_setting("budget", None)
        if self._admission is not None and budget is not None:
            budget.release(self._admission)
            self._admission = None

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
        """Process the request, a large body once the parse budget lets it."""
        self.setHeader(b"X-Request-Id", self.request_id.encode())
        budget: UploadBudget | None = self._site_setting("budget", None)
        if self._admission is None or budget is None:
            super().process()
            return
        budget.process(self._admission).addCallback(self._process_admitted)

    def _process_admitted(self, _: object) -> None:
        if self.channel is not None:  # else the client left while it waited
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
        self._release()
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

