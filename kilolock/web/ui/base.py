"""What every dashboard page shares: its collaborators (L{Dashboard}), who is
looking (L{Viewer}), the layout every page is drawn in (L{Layout}), and the
resource class of pages (L{UiResource}), which signs the viewer in and turns
every failure into an HTML page (never JSON, never a traceback)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import quote

from attrs import define, evolve, field, frozen
from twisted.internet.defer import CancelledError
from twisted.python.failure import Failure
from twisted.python.filepath import FilePath
from twisted.web.iweb import ITemplateLoader
from twisted.web.server import Request
from twisted.web.template import Element, Tag, XMLFile, flattenString, renderer, tags

from kilolock.core.errors import Forbidden, KilolockError, Unauthorized
from kilolock.core.model import DEFAULT_TENANT, Principal, UiSession
from kilolock.store.interfaces.tenants import ITenantStore
from kilolock.web.context import context_of
from kilolock.web.lane import StateLane
from kilolock.web.request import client_address
from kilolock.web.resource import AsyncResource, Response, log_unexpected, render_async
from kilolock.web.ui import BASE_PATH
from kilolock.web.ui.assets import Assets
from kilolock.web.ui.headers import page_response, redirect
from kilolock.web.ui.sessions import SessionKeeper
from kilolock.web.ui.throttle import SignInThrottle

#: The sections of the navigation: (path, label).
SECTIONS = ((BASE_PATH + "/", "States"), (BASE_PATH + "/audit", "Audit trail"),
            (BASE_PATH + "/search", "Search"))

#: A template's loader, read once per process.
_LOADERS: dict[str, ITemplateLoader] = {}


def template(name: str) -> ITemplateLoader:
    """The loader of C{templates/NAME.xml} (package data)."""
    loader = _LOADERS.get(name)
    if loader is None:
        path = resources.files("kilolock.web.ui") / "templates" / f"{name}.xml"
        loader = _LOADERS[name] = XMLFile(FilePath(str(path)))
    return loader


@frozen
class Dashboard:
    """The dashboard's collaborators: the state lane (store, portal, reactor),
    the sessions, the static files, the auth mode, the tenant store in
    hosted mode (for workspace and environment names), and the sign-in
    throttle (None: none)."""

    lane: StateLane
    sessions: SessionKeeper
    assets: Assets
    auth_mode: str
    tenants: ITenantStore | None = None
    throttle: SignInThrottle | None = None
    #: What each version changed, by (tenant, path, number, SHA-256 of the
    #: version, SHA-256 of the one before): versions never change, so a
    #: history page computes each count once per process.
    change_counts: dict[tuple[str, str, int, str, str], Any] = field(factory=dict)
    #: Versions parsed, and their instance fingerprints, by (tenant, path,
    #: number, SHA-256): bounded caches (L{kilolock.web.ui.version_reads}).
    parsed_versions: OrderedDict[tuple[str, str, int, str], Any] = field(factory=OrderedDict)
    fingerprints: OrderedDict[tuple[str, str, int, str], Any] = field(factory=OrderedDict)

    @property
    def open(self) -> bool:
        return self.auth_mode == "open"


@frozen
class Viewer:
    """Who is looking: the principal (with the client's address, for the
    audit trail) and the session."""

    principal: Principal
    session: UiSession


class SignInNeeded(Exception):
    """No live session: the browser is sent to the sign-in page."""


@define(slots=False, eq=False)
class Layout(Element):
    """The page around every page's content."""

    loader = template("layout")

    dashboard: Dashboard
    viewer: Viewer | None
    title: str
    body: Any
    section: str | None = None
    #: The page's heading (None: its title).
    heading: str | None = None

    @renderer
    def page(self, request: Request, tag: Tag) -> Tag:
        return tag.fillSlots(title=self.title,
                             heading=self.title if self.heading is None else self.heading)

    @renderer
    def stylesheet(self, request: Request, tag: Tag) -> Tag:
        return tag(href=self.dashboard.assets.url("ui.css"))

    @renderer
    def icon(self, request: Request, tag: Tag) -> Tag:
        return tag(href=self.dashboard.assets.url("favicon.svg"))

    @renderer
    def script(self, request: Request, tag: Tag) -> Tag:
        return tag(src=self.dashboard.assets.url("ui.js"))

    @renderer
    def sections(self, request: Request, tag: Tag) -> Tag:
        items = []
        for path, label in SECTIONS:
            link = tags.a(label, href=path)
            if path == self.section:
                link(**{"aria-current": "page"})
            items.append(tags.li(link))
        return tag(tags.ul(*items)) if self.viewer is not None else tag

    @renderer
    def account(self, request: Request, tag: Tag) -> Tag:
        viewer = self.viewer
        if viewer is None or self.dashboard.open:
            return tag
        return tag(tags.span("Signed in as ", tags.strong(viewer.principal.name)),
                   tags.form(tags.input(type="hidden", name="csrf", value=viewer.session.csrf),
                             tags.button("Sign out", type="submit"),
                             method="post", action=BASE_PATH + "/sign-out"))

    @renderer
    def banner(self, request: Request, tag: Tag) -> Tag | str:
        if not self.dashboard.open:
            return ""
        return tag(tags.strong("Authentication is off"),
                   " (KL_AUTH_MODE=open): anyone who can reach this server sees every state"
                   " and can force-unlock it.", class_="banner",
                   **{"aria-label": "Authentication is off"})

    @renderer
    def content(self, request: Request, tag: Tag) -> Any:
        return self.body


async def render_page(request: Request, dashboard: Dashboard, viewer: Viewer | None,
                      title: str, content: Any, status: int = 200,
                      section: str | None = None, heading: str | None = None) -> Response:
    """C{content} in the layout, as a response."""
    layout = Layout(dashboard, viewer, title, content, section, heading)
    return page_response(await flattenString(request, layout), status)


def fragment(name: str, **slots: Any) -> Tag:
    """The first element of C{templates/NAME.xml}, a fresh copy, its slots
    filled with C{slots} (escaped when rendered)."""
    tag = next(item for item in template(name).load() if isinstance(item, Tag))
    return tag.clone().fillSlots(**slots)


def page_count(total: int, per: int) -> int:
    """How many pages C{total} items take, C{per} a page (one when none)."""
    return max(1, math.ceil(total / per))


def pager(tag: Tag, current: int, pages: int, earlier: str, later: str,
          href: Callable[[int], str]) -> Tag:
    """C{tag} holding a listing's pager: "Page C{current} of C{pages}", after
    a link to the page before (labelled C{earlier}) and before a link to the
    page after (C{later}) where there are such pages; C{href(n)} is page
    C{n}'s address."""
    parts: list[Any] = []
    if current > 1:
        parts.append(tags.a(earlier, rel="prev", href=href(current - 1)))
    parts.append(tags.span(f"Page {current} of {pages}"))
    if current < pages:
        parts.append(tags.a(later, rel="next", href=href(current + 1)))
    return tag(parts)


def error_content(message: str) -> Tag:
    return fragment("error", message=message)


#: What a page shows for each status, whatever the error said (a foreign
#: state is exactly a missing one).
_TITLES = {400: "Bad request", 403: "Not allowed", 404: "Not found",
           409: "Conflict", 410: "Gone", 423: "Locked", 502: "Unreadable version",
           503: "Unavailable"}


class UiResource(AsyncResource):
    """A page of the dashboard.  Subclasses answer GET with L{show} (and
    may answer POST, through L{answer})."""

    section: str | None = None

    def __init__(self, dashboard: Dashboard) -> None:
        super().__init__()
        self.dashboard = dashboard
        self.metrics = dashboard.lane.metrics

    @property
    def lane(self) -> StateLane:
        return self.dashboard.lane

    async def show(self, request: Request, viewer: Viewer) -> Response:
        raise NotImplementedError

    @render_async
    async def render_GET(self, request: Request) -> Response:
        return await self.answer(request, self.show)

    async def answer(self, request: Request,
                     handler: Callable[[Request, Viewer], Awaitable[Response]]) -> Response:
        """C{handler}'s page for the signed-in viewer; a sign-in redirect
        without one; an HTML error page for any failure."""
        try:
            viewer = await self.viewer(request)
        except SignInNeeded:
            return redirect(f"{BASE_PATH}/sign-in?next={quote(next_path(request), safe='/')}")
        try:
            return await handler(request, viewer)
        except CancelledError:
            raise
        except Unauthorized:
            await self.dashboard.sessions.end(request)
            return redirect(f"{BASE_PATH}/sign-in")
        except KilolockError as error:
            return await self.error_page(request, viewer, error)
        except Exception:
            incident = log_unexpected(Failure())
            return await render_page(request, self.dashboard, viewer, "Internal error",
                                     error_content(f"Something went wrong (incident"
                                                   f" {incident}); see the server log."), 500)

    async def error_page(self, request: Request, viewer: Viewer,
                         error: KilolockError) -> Response:
        status = error.status if error.status in _TITLES else 400
        message = error.message
        if status == 404:
            message = "There is nothing here, or nothing you may see."
        if isinstance(error, Forbidden):
            message = f"Not allowed: {error.message}."
        return await render_page(request, self.dashboard, viewer, _TITLES[status],
                                 error_content(message), status)

    async def viewer(self, request: Request) -> Viewer:
        """The signed-in viewer (in the open mode, anyone: an anonymous
        session kept in its cookie only).  @raise SignInNeeded: no live
        session."""
        session: UiSession | None
        if self.dashboard.open:
            session = self.dashboard.sessions.anonymous(
                request, Principal(tenant=DEFAULT_TENANT, name="anonymous"))
        else:
            session = await self.dashboard.sessions.find(request)
        if session is None:
            raise SignInNeeded()
        principal = evolve(session.principal, address=client_address(request))
        context_of(request).principal = principal
        return Viewer(principal, session)


def next_path(request: Request) -> str:
    """The path and query the browser asked for (to come back after sign-in)."""
    uri: bytes = request.uri
    return uri.decode("utf-8", "replace")
