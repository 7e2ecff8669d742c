"""The control listener's tree and site.

  /                       a directory (404)
    healthz               L{HealthResource}
    v1                    L{ControlGate}: 404, but below it
      api                 401 without the control token, else a branch (404)
        tenants           L{TenantsResource} (see L{kilolock.web.control.tenants})
"""

from __future__ import annotations

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import ControlUnauthorized, NotFound
from kilolock.web.control import API_ROUTE
from kilolock.web.control.api import NO_CONTROL_ROUTE, ControlAPI
from kilolock.web.control.tenants import TenantsResource
from kilolock.web.ops.health import HealthResource
from kilolock.web.resource import Branch, Directory, ErrorPage
from kilolock.web.site import KilolockSite


class ControlGate(Directory):
    """The control listener's C{/v1}: C{api} below it is let through only
    with the control token, checked before anything of the path after it
    is looked at (a caller without the token learns nothing from a 400 or
    a 404)."""

    def __init__(self, api: ControlAPI) -> None:
        super().__init__()
        self.api = api
        self.tree = Branch(NotFound(NO_CONTROL_ROUTE), API_ROUTE)
        self.tree.putChild(b"tenants", TenantsResource(api))

    def getChild(self, path: bytes, request: Request) -> Resource:
        if path != b"api":
            return super().getChild(path, request)
        if not self.api.authorized(request):
            return ErrorPage(ControlUnauthorized(
                "the control API needs Authorization: Bearer <KL_CONTROL_TOKEN>"), API_ROUTE)
        return self.tree


class ControlSite(KilolockSite):
    """The control listener's site: a Kilolock site (body limit, deadlines,
    request ids, access events) whose log lines say C{ControlSite}, e.g.
    C{ControlSite starting on 8090}."""


def build_control_root(api: ControlAPI) -> Resource:
    """The control listener's tree: C{/v1/api/...} and C{/healthz}."""
    root = Directory()
    root.putChild(b"v1", ControlGate(api))
    root.putChild(b"healthz", HealthResource())
    return root
