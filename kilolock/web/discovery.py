"""C{GET /.well-known/kilolock}: the lanes this server offers.

Unauthenticated and cacheable.  Every advertised path is plain ASCII path
segments: nothing in it is percent-encoded (ADR 0018 rule 1), which a test
checks by comparing each path with its escaped form.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.web.server import Request

import kilolock
from kilolock.web._base import JSON, AsyncResource, Response

#: Version of the discovery document's own shape.
DISCOVERY_VERSION = 1


def discovery_document(auth_mode: str) -> dict[str, Any]:
    return {
        "discoveryVersion": DISCOVERY_VERSION,
        "server": {"name": "kilolock", "version": kilolock.__version__},
        "authMode": auth_mode,
        "lanes": [
            {
                "name": "terraform-http",
                "version": "v1",
                "basePath": "/v1/states",
                "unlockPath": "/v1/state-unlock",
                "lockAliasSuffix": "/lock",
                "stateAddressing": ["{name}", "{workspace_id}/{env_public_id}/{state_name}"],
            },
        ],
        "health": {"liveness": "/healthz", "readiness": "/readyz", "metrics": "/metrics"},
    }


class DiscoveryResource(AsyncResource):
    """The discovery document, identical for every caller."""

    route = "/.well-known/kilolock"

    def __init__(self, auth_mode: str) -> None:
        super().__init__()
        self.body = json.dumps(discovery_document(auth_mode), indent=2).encode() + b"\n"

    async def do_GET(self, request: Request) -> Response:
        return Response(200, self.body, JSON, {b"Cache-Control": b"public, max-age=300"})
