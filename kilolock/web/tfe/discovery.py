"""C{GET /.well-known/terraform.json}: Terraform's service discovery.

The TFE API at C{/api/v2/} under the three names Terraform's clients look
for: C{tfe.v2} (the C{cloud {}} block), C{tfe.v2.1} (the C{remote} backend)
and C{tfe.v2.2} (the tfe provider).  Nothing else: C{login.v1} would
promise C{terraform login}, C{versions.v1} outbound version checks.
Unauthenticated and cacheable; Terraform asks for it over HTTPS only.
"""

from __future__ import annotations

import json

from twisted.web.server import Request

from kilolock.web.resource import JSON, AsyncResource, Response, render_async
from kilolock.web.tfe import API_PATH

SERVICES = {"tfe.v2": API_PATH, "tfe.v2.1": API_PATH, "tfe.v2.2": API_PATH}


class TerraformDiscoveryResource(AsyncResource):
    """The service discovery document, identical for every caller."""

    route = "/.well-known/terraform.json"

    def __init__(self) -> None:
        super().__init__()
        self.body = json.dumps(SERVICES).encode() + b"\n"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        return Response(200, self.body, JSON, {b"Cache-Control": b"public, max-age=300"})
