"""Health and readiness.

C{/healthz}: unauthenticated liveness that reveals nothing about tenants.
C{/readyz}: the server's conditions (C{DatabaseReachable}, C{SchemaCurrent});
503 while any is not C{True}.  C{ready} is derived from the list.
"""

from __future__ import annotations

import json

from twisted.web.server import Request

from kilolock.core.conditions import FALSE, TRUE, ConditionTracker, is_ready
from kilolock.core.errors import NotFound
from kilolock.core.model import Condition, StoreProbe
from kilolock.store.interfaces.states import IStateStore
from kilolock.web.resource import JSON, NO_SUCH_ROUTE, AsyncResource, Response, render_async

#: C{observedGeneration} of server conditions: the schema generation this
#: build of Kilolock expects (1 for a store without a schema).
NO_SCHEMA_GENERATION = 1


class HealthResource(AsyncResource):
    """Answers 200 C{{"status": "ok"}} while the process serves requests."""

    route = "/healthz"
    #: A probe path has nothing below it; GET of one is a 404.
    isLeaf = True

    @render_async
    async def render_GET(self, request: Request) -> Response:
        if request.postpath:
            raise NotFound(NO_SUCH_ROUTE)
        return Response(200, b'{"status": "ok"}', JSON)


def server_conditions(probe: StoreProbe, tracker: ConditionTracker) -> list[Condition]:
    """The readiness conditions a store probe implies."""
    generation = probe.expected_schema_version or NO_SCHEMA_GENERATION
    if probe.reachable:
        reachable = tracker.observe("DatabaseReachable", TRUE, "Connected", probe.message,
                                    generation)
    else:
        reachable = tracker.observe("DatabaseReachable", FALSE, "ConnectionFailed",
                                    probe.message, generation)
    if probe.expected_schema_version is None:
        schema = tracker.observe("SchemaCurrent", TRUE, "NoSchema",
                                 "the in-memory store has no schema", generation)
    elif not probe.reachable:
        schema = tracker.observe("SchemaCurrent", "Unknown", "DatabaseUnreachable",
                                 "the schema version cannot be read", generation)
    elif probe.schema_current:
        schema = tracker.observe("SchemaCurrent", TRUE, "UpToDate",
                                 f"schema version {probe.schema_version}", generation)
    else:
        schema = tracker.observe(
            "SchemaCurrent", FALSE, "SchemaOutdated",
            f"schema version {probe.schema_version}, expected"
            f" {probe.expected_schema_version}", generation)
    return [reachable, schema]


class ReadinessResource(AsyncResource):
    """C{GET /readyz}: the conditions; 200 when ready, else 503."""

    route = "/readyz"
    isLeaf = True
    cancel_on_disconnect = frozenset()

    def __init__(self, store: IStateStore, tracker: ConditionTracker | None = None) -> None:
        super().__init__()
        self.store = store
        self.tracker = tracker or ConditionTracker()

    @render_async
    async def render_GET(self, request: Request) -> Response:
        if request.postpath:
            raise NotFound(NO_SUCH_ROUTE)
        probe = await self.store.probe()
        conditions = server_conditions(probe, self.tracker)
        ready = is_ready(conditions)
        body = json.dumps({"ready": ready,
                           "conditions": [c.to_json() for c in conditions]}).encode()
        headers = {b"Cache-Control": b"no-store"}
        if not ready:
            headers[b"Retry-After"] = b"5"
        return Response(200 if ready else 503, body, JSON, headers)
