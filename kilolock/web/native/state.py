"""One state on the native API: its summary at C{/v1/native/states/{state}},
and what belongs to it below the segment C{-}.

The tree below C{/v1/native/states}, one segment at a time:

  {name}                      L{StateSummaryResource} of C{name}
    -                         a branch: what belongs to the state
      versions, diff, ...     L{SUBRESOURCES}
    {env_public_id}           a branch (404)
      {state_name}            L{StateSummaryResource} of C{name/env_public_id/state_name}
        -                     what belongs to that state

A one-segment state may itself be named C{-}; C{{name}/-} is always the
branch, so the three-segment form never has C{-} in the middle.
"""

from __future__ import annotations

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import NotFound
from kilolock.core.model import utcnow
from kilolock.web.documents import json_response, lock_document
from kilolock.web.native import BASE_PATH, MARKER
from kilolock.web.native.documents import summary_document
from kilolock.web.native.events import events_response
from kilolock.web.native.history import (
    DiffResource,
    OutputsResource,
    RollbackResource,
    VersionListResource,
)
from kilolock.web.native.resource import NO_ROUTE, StateSubresource, no_route
from kilolock.web.native.retention import StateRetentionResource
from kilolock.web.native.search import StateResourcesResource
from kilolock.web.native.slice import SliceResource
from kilolock.web.resource import Branch, Response, render_async


class LockStatusResource(StateSubresource):
    """C{GET .../-/lock}: whether the state is locked, by whom, for how long."""

    route = BASE_PATH + "/states/{state}/-/lock"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        key, summary = await self.read(request)
        lock = summary.lock
        return json_response({"state": key.path, "locked": lock is not None,
                              "lock": None if lock is None else lock_document(lock, utcnow())})


class StateEventsResource(StateSubresource):
    """C{GET .../-/events}: the state's audit events (see L{events_response})."""

    route = BASE_PATH + "/states/{state}/-/events"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal, key = await self.key(request)
        return await events_response(self.lane, request, principal, key.path)


#: What follows C{{state}/-/}.
SUBRESOURCES: dict[str, type[StateSubresource]] = {
    "versions": VersionListResource,
    "diff": DiffResource,
    "outputs": OutputsResource,
    "resources": StateResourcesResource,
    "lock": LockStatusResource,
    "events": StateEventsResource,
    "rollback": RollbackResource,
    "retention": StateRetentionResource,
    "slice": SliceResource,
}


class StateSummaryResource(StateSubresource):
    """C{GET /v1/native/states/{state}}: the state's summary and conditions."""

    route = BASE_PATH + "/states/{state}"

    def child(self, segment: str) -> Resource:
        if segment == MARKER:
            return Branch(NotFound(NO_ROUTE), child=self.subresource)
        if len(self.segments) != 1:
            return no_route()
        first = self.segments[0]
        return Branch(NotFound(NO_ROUTE), child=lambda name: StateSummaryResource(
            self.lane, (first, segment, name)))

    def subresource(self, name: str) -> Resource:
        kind = SUBRESOURCES.get(name)
        return no_route() if kind is None else kind(self.lane, self.segments)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        key, summary = await self.read(request)
        released = await self.unlocked_since(key.tenant, key.path)
        return json_response(summary_document(summary, utcnow(), released.get(key.path)))
