"""C{GET /.well-known/kilolock}: the lanes this server offers.

Unauthenticated and cacheable.  Every advertised path is plain ASCII path
segments: nothing in it is percent-encoded (names travel as ordinary
segments), which a test checks by comparing each path with its escaped form.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.web.server import Request

import kilolock
from kilolock.web.native import BASE_PATH, LANE_NAME, LANE_VERSION, MARKER
from kilolock.web.resource import JSON, AsyncResource, Response, render_async
from kilolock.web.tfe import API_PATH as TFE_API_PATH

#: Version of the discovery document's own shape.
DISCOVERY_VERSION = 1


def native_lane_entry() -> dict[str, Any]:
    """The KL-native lane (L{kilolock.web.native}): C{kl}'s read API and rollback."""
    return {
        "name": LANE_NAME,
        "version": LANE_VERSION,
        "basePath": BASE_PATH,
        "statesPath": f"{BASE_PATH}/states",
        "resourcesPath": f"{BASE_PATH}/resources",
        "eventsPath": f"{BASE_PATH}/events",
        "subresourceSegment": MARKER,
        "stateAddressing": ["{name}", "{workspace_id}/{env_public_id}/{state_name}"],
    }


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
            native_lane_entry(),
            {
                "name": "tfe",
                "version": "v2",
                "basePath": TFE_API_PATH,
                "terraformDiscovery": "/.well-known/terraform.json",
            },
        ],
        "health": {"liveness": "/healthz", "readiness": "/readyz", "metrics": "/metrics"},
    }


class DiscoveryResource(AsyncResource):
    """The discovery document, identical for every caller."""

    route = "/.well-known/kilolock"
    #: Whatever follows in the path is ignored.
    isLeaf = True

    def __init__(self, auth_mode: str) -> None:
        super().__init__()
        self.body = json.dumps(discovery_document(auth_mode), indent=2).encode() + b"\n"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        return Response(200, self.body, JSON, {b"Cache-Control": b"public, max-age=300"})
