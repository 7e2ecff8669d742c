"""The one async base resource: twisted.web's own dispatch, errors as JSON,
cancellation when the client goes away; and the error pages routing hands out.

A resource answers a method with C{render_<METHOD>} (C{render_LOCK} and
C{render_UNLOCK} among them), dispatched by L{Resource.render} itself: a
method the resource lacks raises L{UnsupportedMethod} with the resource's
C{allowedMethods}, which L{kilolock.web.request.KilolockRequest} answers with
Kilolock's JSON 405.  Handlers are coroutines under L{render_async}: it runs
them, turns what they answer or raise into the response, and returns
C{NOT_DONE_YET}.

Everything that can go wrong is a L{KilolockError}, which carries its status
and code; anything else is logged without its message (which might quote
data) and answered as an opaque 500 with an incident id.
"""

from __future__ import annotations

import json
import traceback
import uuid
from collections.abc import Callable, Coroutine
from functools import wraps
from typing import Any, ClassVar, TypeVar

from attrs import field, frozen
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.reflect import prefixedMethodNames
from twisted.web.error import UnsupportedMethod
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from kilolock.core.errors import Denied, InvalidPath, KilolockError, LockConflict, NotFound
from kilolock.rules.paths import validate_segment
from kilolock.server.metrics import Metrics
from kilolock.web.context import UNMATCHED, note_denial

log = Logger()

_REASONS = {423: b"Locked", 413: b"Payload Too Large", 429: b"Too Many Requests"}

JSON = b"application/json"

#: What every path Kilolock does not serve answers.
NO_SUCH_ROUTE = "no such route"


@frozen
class Response:
    """What a handler answers: status, body bytes and extra headers."""

    status: int = 200
    body: bytes = field(default=b"", repr=lambda body: f"<{len(body)} bytes>")
    content_type: bytes | None = None
    headers: dict[bytes, bytes] = field(factory=dict)


def error_body(code: str, message: str, **details: Any) -> bytes:
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
        request.write(response.body)  # twisted.web drops it for HEAD
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


#: How a part of the tree words its errors: the response an error becomes.
ErrorDialect = Callable[[KilolockError], Response]

#: The dialects of the parts of the tree that answer errors in their own
#: words, by path prefix (registered by those parts); elsewhere
#: L{response_for_error}.  Consulted where no resource answers: the body
#: limit's 413, sent before the request is routed.
_PATH_DIALECTS: dict[bytes, ErrorDialect] = {}


def register_error_dialect(prefix: bytes, dialect: ErrorDialect) -> None:
    """Answer the errors of requests under C{prefix} with C{dialect} where
    no resource answers them."""
    _PATH_DIALECTS[prefix] = dialect


def error_dialect_for(path: bytes) -> ErrorDialect:
    """The dialect of the errors of a request for C{path}."""
    for prefix, dialect in _PATH_DIALECTS.items():
        if path.startswith(prefix):
            return dialect
    return response_for_error


def response_for_failure(failure: Failure, metrics: Metrics | None,
                         dialect: ErrorDialect = response_for_error) -> Response:
    """The answer to a handler's failure: a L{KilolockError}'s own response
    in C{dialect} (a lock conflict counted), anything else a logged, opaque
    500."""
    error = failure.value
    if isinstance(error, KilolockError):
        if isinstance(error, LockConflict) and metrics is not None:
            metrics.lock_conflicts.inc()
        return dialect(error)
    incident = log_unexpected(failure)
    return dialect(KilolockError(f"internal error (incident {incident}); see the server log"))


class KilolockResource(Resource):
    """A resource of Kilolock's tree: it names its route for the access log
    and the metrics (L{kilolock.web.context.RequestContext.route}), and
    words its errors (L{error_response}: Kilolock's JSON error document,
    unless a part of the tree speaks another dialect)."""

    route: str = UNMATCHED

    def error_response(self, error: KilolockError) -> Response:
        """The response C{error} becomes on this resource."""
        return response_for_error(error)


R = TypeVar("R", bound="AsyncResource")


def render_async(handler: Callable[[R, Request], Coroutine[Any, Any, Response]],
                 ) -> Callable[[R, Request], int]:
    """Make C{async def render_X(self, request) -> Response} a twisted.web
    render method.

    The coroutine runs at once; its L{Response}, or the response its failure
    maps to (L{response_for_failure}), is written when it is done.  When the
    client disconnects first, the work of a method in the resource's
    C{cancel_on_disconnect} (reads) is cancelled, and nothing is written.

    @return: the render method, which returns C{NOT_DONE_YET}.
    """

    @wraps(handler)
    def render(resource: R, request: Request) -> int:
        disconnected = False
        work: Deferred[Response] | None = None

        def gone(reason: Failure) -> None:
            nonlocal disconnected
            disconnected = True
            if work is not None and request.method in resource.cancel_on_disconnect:
                work.cancel()

        def answer(response: Response) -> None:
            if not disconnected:
                write_response(request, response)

        def failed(failure: Failure) -> None:
            if disconnected and failure.check(CancelledError):
                return
            if isinstance(failure.value, Denied):
                note_denial(request, failure.value)
            answer(response_for_failure(failure, resource.metrics, resource.error_response))

        request.notifyFinish().addErrback(gone)
        work = ensureDeferred(handler(resource, request))
        work.addCallbacks(answer, failed).addErrback(log_unexpected)
        return NOT_DONE_YET

    return render


def allowed_methods(cls: type[AsyncResource]) -> list[bytes]:
    """The methods a resource class answers: its C{render_X} methods, and
    HEAD when it answers GET and C{answers_head}."""
    names = set(prefixedMethodNames(cls, "render_")) - {"HEAD"}
    if "GET" in names and cls.answers_head:
        names.add("HEAD")
    return sorted(name.encode("ascii") for name in names)


class AsyncResource(KilolockResource):
    """A resource whose methods are C{render_X} coroutines under
    L{render_async}.  Below it, by default, nothing: a JSON 404."""

    #: Methods whose work is cancelled when the client goes away.  Writes are
    #: never cancelled: a write that started is committed or rolled back by
    #: the store, never abandoned half-way by a dropped connection.
    cancel_on_disconnect: ClassVar[frozenset[bytes]] = frozenset({b"GET", b"HEAD"})
    #: Whether HEAD is answered as GET without the body.
    answers_head: ClassVar[bool] = True
    #: Where lock conflicts are counted (None: nowhere).
    metrics: Metrics | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # What Resource.render puts in UnsupportedMethod (and so in Allow).
        cls.allowedMethods = allowed_methods(cls)

    def render_HEAD(self, request: Request) -> Any:
        """GET without its body (twisted.web writes no body for HEAD), or a
        refusal like any other method the resource lacks."""
        if b"HEAD" not in self.allowedMethods:
            raise UnsupportedMethod(self.allowedMethods)
        return self.render_GET(request)  # type: ignore[attr-defined]  # allowed: it has one

    def getChild(self, path: bytes, request: Request) -> Resource:
        return ErrorPage(NotFound(NO_SUCH_ROUTE))


class ErrorPage(KilolockResource):
    """Answers every method with one error; every path below it is the same
    page.

    The one kind of Kilolock resource that overrides C{render}, as
    twisted.web's own error pages do: it has no method to dispatch.
    """

    def __init__(self, error: KilolockError, route: str = UNMATCHED) -> None:
        super().__init__()
        self.error = error
        self.route = route

    def render(self, request: Request) -> int:
        if isinstance(self.error, Denied):
            note_denial(request, self.error)
        write_response(request, self.response_for(request))
        return NOT_DONE_YET

    def response_for(self, request: Request) -> Response:
        """What this page answers C{request}: its error, in the document its
        subtree answers errors with (L{error_response})."""
        return self.error_response(self.error)

    def getChild(self, path: bytes, request: Request) -> Resource:
        return self


class Directory(ErrorPage):
    """Fixed children (C{putChild}); any other path below, or the path ending
    here, is a JSON 404."""

    def __init__(self) -> None:
        super().__init__(NotFound(NO_SUCH_ROUTE))


def named_child(path: bytes, child: Callable[[str], Resource],
                route: str = UNMATCHED) -> Resource:
    """The resource for one raw path segment that names something: a 400
    page naming the path rule the segment breaks (L{validate_segment}), or
    C{child(segment)}."""
    try:
        segment = validate_segment(path)
    except InvalidPath as error:
        return ErrorPage(error, route)
    return child(segment)


class Branch(ErrorPage):
    """A path segment below which names follow.

    The path ending here answers C{error} (a 404) to every method.  The next
    segment is checked against the path rules and handed to C{child}; without
    C{child} nothing is below, and every deeper path answers C{error} too,
    its segments still checked: a bad segment anywhere in a path is a 400,
    whether or not the path names anything.
    """

    def __init__(self, error: KilolockError, route: str = UNMATCHED,
                 child: Callable[[str], Resource] | None = None) -> None:
        super().__init__(error, route)
        self.child = child

    def getChild(self, path: bytes, request: Request) -> Resource:
        return named_child(path, self.child or (lambda segment: self), self.route)
