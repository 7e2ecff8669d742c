"""Force-unlock from the dashboard, the one thing it changes: a confirmation
page showing the lock, then a form post carrying the session's CSRF token
and the lock ID confirmed.  The store's force release (C{release_lock} with
no lock ID) records C{lock_force_release} with C{"via": "dashboard"} in its
detail, in the viewer's name."""

from __future__ import annotations

from urllib.parse import urlsplit

from attrs import define
from twisted.web.server import Request
from twisted.web.template import Element, Tag, renderer

from kilolock.core.errors import Conflict, Forbidden
from kilolock.web.resource import Response, render_async
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.base import Viewer, error_content, render_page, template
from kilolock.web.ui.headers import redirect
from kilolock.web.ui.params import form, state_url
from kilolock.web.ui.sessions import same_token
from kilolock.web.ui.state_access import StatePart

#: What the force release adds to its audit event's detail.
UI_DETAIL = {"via": "dashboard"}


def check_form_post(request: Request, viewer: Viewer) -> dict[str, str]:
    """The fields of a form the dashboard itself served.

    @raise Forbidden: an C{Origin} that is not this server, or a missing or
        wrong CSRF token."""
    origin = request.getHeader(b"Origin")
    host = (request.getHeader(b"Host") or b"").decode("ascii", "replace")
    if origin is not None and urlsplit(origin.decode("ascii", "replace")).netloc != host:
        raise Forbidden("the form was not sent from this dashboard")
    fields = form(request)
    if not same_token(viewer.session.csrf, fields.get("csrf")):
        raise Forbidden("the form is out of date or was not sent from this dashboard;"
                        " reload the page and try again")
    return fields


@define(slots=False, eq=False)
class UnlockConfirmation(Element):
    loader = template("unlock")

    slots: dict[str, str]
    state_link: str

    @renderer
    def page(self, request: Request, tag: Tag) -> Tag:
        return tag.fillSlots(**self.slots)

    @renderer
    def cancel(self, request: Request, tag: Tag) -> Tag:
        return tag(href=self.state_link)


class UnlockPage(StatePart):
    """C{GET /ui/states/{state}/-/unlock}: the confirmation;
    C{POST}: the force release."""

    route = BASE_PATH + "/states/{state}/-/unlock"
    cancel_on_disconnect = frozenset({b"GET", b"HEAD"})

    async def show(self, request: Request, viewer: Viewer) -> Response:
        key = self.key(request, viewer, write=True)
        summary = await self.summary(key)
        lock = summary.lock
        title = f"Force-unlock {key.path}"
        if lock is None:
            return await render_page(request, self.dashboard, viewer, title, error_content(
                "The state is not locked: there is nothing to release."))
        now = self.dashboard.sessions.now()
        slots = {"state": key.path, "who": lock.info.who or lock.principal,
                 "operation": lock.info.operation or "an operation",
                 "since": format.when(lock.acquired_at),
                 "age": format.age(format.lock_age(lock, now)), "lock_id": lock.info.id,
                 "csrf": viewer.session.csrf, "action": state_url(key.path, "unlock")}
        return await render_page(request, self.dashboard, viewer, title,
                                 UnlockConfirmation(slots, state_url(key.path)),
                                 section=BASE_PATH + "/")

    @render_async
    async def render_POST(self, request: Request) -> Response:
        return await self.answer(request, self.release)

    async def release(self, request: Request, viewer: Viewer) -> Response:
        fields = check_form_post(request, viewer)
        key = self.key(request, viewer, write=True)
        held = await self.lane.store.get_lock(key)
        if held is None:
            await self.summary(key)  # a missing state is a 404
            return await render_page(request, self.dashboard, viewer, "Not locked",
                                     error_content("The state is no longer locked."))
        if held.info.id != fields.get("lock_id"):
            raise Conflict("the state is now locked by another holder than the one you"
                           " confirmed; look again before releasing it")
        released = await self.lane.store.release_lock(key, None, viewer.principal,
                                                      event_detail=UI_DETAIL)
        if released is not None and self.metrics is not None:
            self.metrics.lock_force_releases.inc()
        return redirect(state_url(key.path))


