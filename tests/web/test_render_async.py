"""The one async base resource (kilolock.web.resource): @render_async answers
what a handler returns or raises, once; a read whose client went away is
cancelled, a write is not; the methods a resource allows come from its
render_X methods."""

from __future__ import annotations

import json

import pytest
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure
from twisted.web.error import UnsupportedMethod
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from kilolock.core.errors import LockConflict, NotFound
from kilolock.server.metrics import Metrics
from kilolock.web.resource import AsyncResource, Response, render_async


class Waiting(AsyncResource):
    """GET and POST wait for C{work}, then answer 200."""

    def __init__(self, failure: Exception | None = None) -> None:
        super().__init__()
        self.work: Deferred[None] = Deferred()
        self.failure = failure
        self.cancelled = False
        self.metrics = Metrics.create()

    async def wait(self) -> Response:
        try:
            await self.work
        except CancelledError:
            self.cancelled = True
            raise
        if self.failure is not None:
            raise self.failure
        return Response(200, b"{}", b"application/json")

    @render_async
    async def render_GET(self, request: DummyRequest) -> Response:
        return await self.wait()

    @render_async
    async def render_POST(self, request: DummyRequest) -> Response:
        return await self.wait()


def rendered(resource: AsyncResource, method: bytes) -> DummyRequest:
    request = DummyRequest([b""])
    request.method = method
    assert resource.render(request) == NOT_DONE_YET
    return request


def test_an_answer_is_written_once_the_work_is_done() -> None:
    """The handler's Response is written, with its length, when it is ready."""
    resource = Waiting()
    request = rendered(resource, b"GET")
    assert request.finished == 0
    resource.work.callback(None)
    assert (request.responseCode, b"".join(request.written), request.finished) == (
        200, b"{}", 1)
    assert request.responseHeaders.getRawHeaders(b"content-length") == [b"2"]


@pytest.mark.parametrize(("method", "cancelled"), [(b"GET", True), (b"HEAD", True),
                                                   (b"POST", False)])
def test_a_read_is_cancelled_when_its_client_goes_away(method: bytes, cancelled: bool) -> None:
    """A GET or HEAD whose client disconnects is cancelled; a POST runs to its
    end (the store commits or rolls it back); neither writes to the dead
    connection."""
    resource = Waiting()
    request = rendered(resource, method)
    request.processingFailed(Failure(ConnectionDone()))
    assert resource.cancelled is cancelled
    if not cancelled:
        resource.work.callback(None)
    assert (request.written, request.finished) == ([], 0)


def test_an_error_is_answered_with_its_json_document() -> None:
    """A KilolockError becomes its status and JSON error document."""
    resource = Waiting(NotFound("no such thing"))
    request = rendered(resource, b"GET")
    resource.work.callback(None)
    assert request.responseCode == 404
    assert json.loads(b"".join(request.written)) == {
        "error": {"code": "not_found", "message": "no such thing"}}


def test_a_lock_conflict_answers_the_holder_and_is_counted() -> None:
    """A lock conflict answers the holder's LockInfo bytes with 423 Locked,
    and counts in the resource's metrics."""
    resource = Waiting(LockConflict(b'{"ID":"held"}'))
    request = rendered(resource, b"POST")
    resource.work.callback(None)
    assert (request.responseCode, request.responseMessage) == (423, b"Locked")
    assert b"".join(request.written) == b'{"ID":"held"}'
    assert resource.metrics is not None
    assert resource.metrics.registry.get_sample_value("kilolock_lock_conflicts_total") == 1


def test_an_unexpected_failure_is_an_opaque_500() -> None:
    """Anything else is a 500 with an incident id, never the exception's
    message (it might quote state bytes or credentials)."""
    resource = Waiting(RuntimeError("secret state bytes"))
    request = rendered(resource, b"GET")
    resource.work.callback(None)
    error = json.loads(b"".join(request.written))["error"]
    assert (request.responseCode, error["code"]) == (500, "internal_error")
    assert "incident" in error["message"] and "secret" not in error["message"]


class PostOnly(AsyncResource):
    @render_async
    async def render_POST(self, request: DummyRequest) -> Response:
        return Response(200)


class NoHead(Waiting):
    answers_head = False


def test_allowed_methods_come_from_the_render_methods() -> None:
    """allowedMethods lists the render_X methods, HEAD only beside GET (and
    not where a resource answers no HEAD); HEAD elsewhere is refused."""
    assert Waiting.allowedMethods == [b"GET", b"HEAD", b"POST"]
    assert PostOnly.allowedMethods == [b"POST"]
    assert NoHead.allowedMethods == [b"GET", b"POST"]
    for resource in (PostOnly(), NoHead()):
        request = DummyRequest([b""])
        request.method = b"HEAD"
        with pytest.raises(UnsupportedMethod) as refused:
            resource.render(request)
        assert refused.value.allowedMethods == type(resource).allowedMethods
