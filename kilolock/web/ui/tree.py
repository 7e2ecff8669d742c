"""The dashboard's resource tree (C{/ui/...}), and the root that sends a
browser asking for C{/} there."""

from __future__ import annotations

from typing import Any

from attrs import frozen
from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import NotFound
from kilolock.store.interfaces.sessions import ISessionStore
from kilolock.store.interfaces.tenants import ITenantStore
from kilolock.web.lane import StateLane
from kilolock.web.resource import Directory, Response, render_async
from kilolock.web.ui import BASE_PATH
from kilolock.web.ui.assets import Assets, StaticFolder
from kilolock.web.ui.audit_page import AuditPage
from kilolock.web.ui.base import Dashboard, UiResource, Viewer
from kilolock.web.ui.headers import redirect
from kilolock.web.ui.search_page import SearchPage
from kilolock.web.ui.sessions import DEFAULT_SESSION_SECONDS, CredentialCheck, SessionKeeper
from kilolock.web.ui.signin import SignInPage, SignOutPage
from kilolock.web.ui.state_access import NotFoundPage, PagesBelow
from kilolock.web.ui.state_page import StatePage
from kilolock.web.ui.states_page import StatesPage
from kilolock.web.ui.throttle import DEFAULT_SIGN_IN_FAILURES, SignInThrottle


@frozen
class UiOptions:
    """How the dashboard is set up: the static token (to check the sessions
    of the static mode again), how long a session lasts, how many failed
    sign-ins one client address may make per window
    (L{kilolock.web.ui.throttle}), and the clock sessions and the throttle
    are timed by (None: the lane's reactor)."""

    static_token: str = ""
    session_seconds: float = DEFAULT_SESSION_SECONDS
    clock: Any = None
    sign_in_failures: int = DEFAULT_SIGN_IN_FAILURES


class UiRoot(UiResource):
    """C{/ui}: the dashboard's pages below; C{/ui} itself goes to C{/ui/}."""

    route = BASE_PATH

    def __init__(self, dashboard: Dashboard) -> None:
        super().__init__(dashboard)
        self.putChild(b"", StatesPage(dashboard))
        self.putChild(b"states", PagesBelow(dashboard, lambda name: StatePage(
            dashboard, (name,))))
        self.putChild(b"audit", AuditPage(dashboard))
        self.putChild(b"search", SearchPage(dashboard))
        self.putChild(b"sign-in", SignInPage(dashboard))
        self.putChild(b"sign-out", SignOutPage(dashboard))
        self.putChild(b"static", StaticFolder(dashboard.assets))

    def getChild(self, path: bytes, request: Request) -> Resource:
        return NotFoundPage(self.dashboard)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        return redirect(BASE_PATH + "/")

    async def show(self, request: Request, viewer: Viewer) -> Response:
        return redirect(BASE_PATH + "/")


def build_dashboard(lane: StateLane, auth_mode: str, options: UiOptions) -> UiRoot:
    """The dashboard over C{lane}'s store (which keeps the sessions)."""
    store = lane.store
    tenants = ITenantStore(store, None)
    clock = options.clock if options.clock is not None else lane.reactor
    if clock is None:
        from twisted.internet import reactor as clock
    keeper = SessionKeeper(ISessionStore(store), clock,
                           CredentialCheck(auth_mode, options.static_token, tenants),
                           options.session_seconds)
    metrics = lane.metrics
    throttle = SignInThrottle(clock, options.sign_in_failures,
                              counter=None if metrics is None else metrics.ui_sign_in_refusals)
    return UiRoot(Dashboard(lane, keeper, Assets(), auth_mode, tenants, throttle))


def wants_html(request: Request) -> bool:
    """Whether a browser asks: a GET or HEAD whose C{Accept} names HTML."""
    accept = (request.getHeader(b"Accept") or b"").lower()
    return request.method in (b"GET", b"HEAD") and b"text/html" in accept


#: What a client that is not a browser is told at C{/}: there is nothing
#: there, and where things are.
ROOT_HINT = ("no such route; the dashboard is /ui/, Terraform's http backend"
             " /v1/states/{name}, the TFE lane /api/v2/ (/.well-known/terraform.json)")


class RootDirectory(Directory):
    """The state listener's root: fixed children, a JSON 404 for anything
    else; but a browser's C{GET /} goes to the dashboard, and any other
    request for C{/} is told where things are."""

    def response_for(self, request: Request) -> Response:
        if request.path == b"/":
            if wants_html(request):
                return redirect(BASE_PATH + "/")
            return self.error_response(NotFound(ROOT_HINT))
        return super().response_for(request)
