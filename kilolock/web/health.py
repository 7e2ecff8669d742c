"""C{/healthz}: unauthenticated liveness that reveals nothing about tenants."""

from __future__ import annotations

from twisted.web.server import Request

from kilolock.errors import NotFound
from kilolock.web._base import JSON, AsyncResource, Response


class HealthResource(AsyncResource):
    """Answers 200 C{{"status": "ok"}} while the process serves requests."""

    async def do_GET(self, request: Request) -> Response:
        if request.postpath:
            raise NotFound("no such route")
        return Response(200, b'{"status": "ok"}', JSON)
