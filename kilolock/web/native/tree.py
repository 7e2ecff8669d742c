"""The root of the native API, C{/v1/native}, and its list of states.

  /v1/native                  L{NativeRoot}: which lane this is
    states                    L{StateListResource}; a state below (L{kilolock.web.native.state})
    resources                 L{ResourceSearchResource}
    events                    L{EventListResource}
      verify                  L{EventVerifyResource}
      head                    L{EventHeadResource}
    operations                L{OperationListResource}; an operation below
    uploads                   L{UploadListResource}; an upload session below
    blobs                     L{BlobListResource}; version bytes by digest below
    retention                 L{TenantRetentionResource}

Each list answers with a trailing slash too (C{/v1/native/states/}).
"""

from __future__ import annotations

import json

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.model import utcnow
from kilolock.rules.scope import in_scope
from kilolock.stateops.runner import OperationRunner
from kilolock.web.documents import json_response
from kilolock.web.lane import StateLane
from kilolock.web.native import BASE_PATH, LANE_NAME, LANE_VERSION
from kilolock.web.native.blobs import BlobListResource
from kilolock.web.native.documents import summary_document
from kilolock.web.native.events import EventListResource
from kilolock.web.native.operations import OperationListResource
from kilolock.web.native.options import NativeOptions
from kilolock.web.native.resource import Collection
from kilolock.web.native.retention import TenantRetentionResource
from kilolock.web.native.search import ResourceSearchResource
from kilolock.web.native.state import StateSummaryResource
from kilolock.web.native.uploads import UploadListResource
from kilolock.web.resource import JSON, Response, named_child, render_async


class StateListResource(Collection):
    """C{GET /v1/native/states}: the states the caller may see, summarised."""

    route = BASE_PATH + "/states"

    def item(self, path: bytes) -> Resource:
        return named_child(path, lambda name: StateSummaryResource(self.lane, (name,)))

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal = await self.lane.authorize(request)
        summaries = [summary for summary in await self.lane.store.list_states(principal.tenant)
                     if in_scope(principal, summary.key.path)]
        released = await self.unlocked_since(principal.tenant, None) if summaries else {}
        now = utcnow()
        return json_response({"states": [summary_document(s, now, released.get(s.key.path))
                                         for s in summaries]})


class NativeRoot(Collection):
    """C{GET /v1/native}: which lane this is (no credentials needed, no tenant
    data), and the lists below it."""

    route = BASE_PATH

    def __init__(self, lane: StateLane, options: NativeOptions | None = None) -> None:
        super().__init__(lane)
        options = options if options is not None else NativeOptions()
        #: Runs this process's state operations.
        self.runner = options.runner if options.runner is not None else OperationRunner(
            lane.store, lane.reactor, now=options.now)
        self.putChild(b"states", StateListResource(lane))
        self.putChild(b"resources", ResourceSearchResource(lane))
        self.putChild(b"events", EventListResource(lane))
        self.putChild(b"retention", TenantRetentionResource(lane))
        self.putChild(b"operations", OperationListResource(lane, options, self.runner))
        self.putChild(b"uploads", UploadListResource(lane, options))
        self.putChild(b"blobs", BlobListResource(lane))

    @render_async
    async def render_GET(self, request: Request) -> Response:
        return Response(200, json.dumps({"lane": LANE_NAME, "version": LANE_VERSION,
                                         "basePath": BASE_PATH}).encode(), JSON)
