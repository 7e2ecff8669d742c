"""The one async base resource: method dispatch, errors as JSON, cancellation.

A subclass defines C{async def do_GET(self, request) -> Response} (and so on
for every method it answers, custom ones like LOCK included).  Everything
that can go wrong is a L{KilolockError}; anything else is logged without its
message (which might quote data) and answered as an opaque 500.
"""

from __future__ import annotations

import json
import traceback
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

from attrs import field, frozen
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from kilolock.errors import KilolockError, LockConflict, MethodNotAllowed
from kilolock.web.request import site_metrics

log = Logger()

_REASONS = {423: b"Locked", 413: b"Payload Too Large", 429: b"Too Many Requests"}

JSON = b"application/json"


@frozen
class Response:
    """What a handler answers: status, body bytes and extra headers."""

    status: int = 200
    body: bytes = field(default=b"", repr=lambda body: f"<{len(body)} bytes>")
    content_type: bytes | None = None
    headers: dict[bytes, bytes] = field(factory=dict)


def error_body(code: str, message: str, **details: str) -> bytes:
    """The JSON error document every failure (but lock conflicts) answers with."""
    return json.dumps({"error": {"code": code, "message": message, **details}}).encode()


def response_for_error(error: KilolockError) -> Response:
    if isinstance(error, LockConflict):
        # The holder's LockInfo exactly as it arrived on LOCK: Terraform parses it.
        return Response(error.status, error.holder, JSON)
    return Response(error.status, error_body(error.code, error.message, **error.details()),
                    JSON, error.headers())


def write_response(request: Request, response: Response) -> None:
    request.setResponseCode(response.status, _REASONS.get(response.status))
    if response.content_type is not None:
        request.setHeader(b"Content-Type", response.content_type)
    for name, value in response.headers.items():
        request.setHeader(name, value)
    request.setHeader(b"Content-Length", str(len(response.body)).encode())
    if response.body:
        request.write(response.body)
    request.finish()


def log_unexpected(failure: Failure) -> str:
    """Log an unexpected failure by type and frames only (its message may quote
    state bytes or credentials); return the incident id that goes to the client."""
    incident = uuid.uuid4().hex[:12]
    frames = traceback.extract_tb(failure.getTracebackObject()) if failure.tb else []
    where = " <- ".join(f"{frame.name}@{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
                        for frame in reversed(frames[-6:]))
    log.error("internal error {incident}: {kind} at {where}", incident=incident,
              kind=failure.type.__qualname__ if failure.type else "?", where=where or "?")
    return incident


Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class AsyncResource(Resource):
    """Dispatches C{METHOD} to C{do_METHOD}; answers unknown methods with 405."""

    isLeaf = True
    #: Methods whose work is cancelled when the client goes away.  Writes are
    #: never cancelled: a write that started is committed or rolled back by
    #: the store, never abandoned half-way by a dropped connection.
    cancel_on_disconnect: ClassVar[frozenset[bytes]] = frozenset({b"GET", b"HEAD"})
    #: The route template metrics and access logs name this resource by.
    route: ClassVar[str] = "other"

    def allowed_methods(self) -> list[bytes]:
        methods = {name[3:].encode() for name in dir(self) if name.startswith("do_")}
        if b"GET" in methods:
            methods.add(b"HEAD")
        return sorted(methods)

    def render(self, request: Request) -> Any:
        request.route = self.route  # type: ignore[attr-defined]
        method = request.method.upper()
        handler: Handler | None = getattr(self, "do_" + method.decode("ascii", "replace"),
                                          None)
        if handler is None and method == b"HEAD":
            handler = getattr(self, "do_GET", None)
        if handler is None:
            write_response(request,
                           response_for_error(MethodNotAllowed(self.allowed_methods())))
            return NOT_DONE_YET
        self.run(request, handler, method in self.cancel_on_disconnect)
        return NOT_DONE_YET

    def run(self, request: Request, handler: Handler, cancellable: bool) -> Deferred[None]:
        finished = [False]
        pending: list[Deferred[Response]] = []

        def gone(_: object) -> None:
            finished[0] = True
            if cancellable and pending:
                pending[0].cancel()

        def answer(response: Response) -> None:
            if not finished[0]:
                write_response(request, response)

        def failed(failure: Failure) -> None:
            if failure.check(CancelledError) and finished[0]:
                return
            if failure.check(KilolockError):
                if failure.check(LockConflict):
                    metrics = site_metrics(request)
                    if metrics is not None:
                        metrics.lock_conflicts.inc()
                error = failure.value
                assert isinstance(error, KilolockError)
                answer(response_for_error(error))
                return
            incident = log_unexpected(failure)
            answer(Response(500, error_body(
                "internal_error", f"internal error (incident {incident}); see the server log"),
                JSON))

        def unexpected(failure: Failure) -> None:
            log_unexpected(failure)

        request.notifyFinish().addBoth(gone)
        work: Deferred[Response] = ensureDeferred(handler(request))
        pending.append(work)
        finishing: Deferred[None] = work.addCallbacks(answer, failed)
        return finishing.addErrback(unexpected)


class NotFoundResource(AsyncResource):
    """A JSON 404 for every method on paths Kilolock does not serve."""

    def render(self, request: Request) -> Any:
        from kilolock.errors import NotFound

        write_response(request, response_for_error(NotFound("no such route")))
        return NOT_DONE_YET
