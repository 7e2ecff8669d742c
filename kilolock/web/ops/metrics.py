"""C{GET /metrics}: Prometheus text exposition of the site's metrics."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from twisted.web.server import Request

from kilolock.server.metrics import Metrics
from kilolock.store.interfaces.states import IStateStore
from kilolock.web.resource import AsyncResource, Response, render_async


class MetricsResource(AsyncResource):
    """Every counter, histogram and gauge of this server."""

    route = "/metrics"
    #: Whatever follows in the path is ignored.
    isLeaf = True

    def __init__(self, metrics: Metrics, store: IStateStore) -> None:
        super().__init__()
        self.exported = metrics
        self.store = store

    @render_async
    async def render_GET(self, request: Request) -> Response:
        probe = await self.store.probe()
        self.exported.database_up.set(1 if probe.reachable else 0)
        if probe.connections_total is not None:
            connections = self.exported.database_connections
            connections.labels("alive").set(probe.connections_alive or 0)
            connections.labels("total").set(probe.connections_total)
        return Response(200, generate_latest(self.exported.registry),
                        CONTENT_TYPE_LATEST.encode())
