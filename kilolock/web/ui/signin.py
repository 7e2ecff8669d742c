"""Signing in and out.

Sign-in takes a Kilolock token (the static token, or a tenant's C{kl_}
token) and checks it through the same portal and checkers as every API
request (L{kilolock.auth.portal.authenticate}); the browser then gets a session
(L{kilolock.web.ui.sessions}).  Sign-out ends the session everywhere."""

from __future__ import annotations

from attrs import define, evolve
from twisted.web.server import Request
from twisted.web.template import Element, Tag, renderer, tags

from kilolock.auth.portal import authenticate
from kilolock.core.errors import BadRequest, Unauthorized
from kilolock.web.request import client_address
from kilolock.web.resource import Response, render_async
from kilolock.web.ui import BASE_PATH
from kilolock.web.ui.base import UiResource, Viewer, error_content, render_page, template
from kilolock.web.ui.headers import redirect
from kilolock.web.ui.params import form, text
from kilolock.web.ui.unlock import check_form_post

#: The longest token accepted in the form.
MAX_TOKEN_CHARS = 512


def safe_next(value: str) -> str:
    """Where to go after signing in: a path of the dashboard, else its start."""
    if (value.startswith(BASE_PATH + "/") and not value.startswith("//")
            and "\\" not in value and all(ord(char) > 31 for char in value)):
        return value
    return BASE_PATH + "/"


@define(slots=False, eq=False)
class SignInForm(Element):
    loader = template("signin")

    next_path: str
    problem_text: str | None

    @renderer
    def page(self, request: Request, tag: Tag) -> Tag:
        return tag.fillSlots(next=self.next_path)

    @renderer
    def problem(self, request: Request, tag: Tag) -> Tag | str:
        if self.problem_text is None:
            return ""
        return tag(tags.strong(self.problem_text), class_="problem", role="alert")


class SignInPage(UiResource):
    """C{GET /ui/sign-in}: the form; C{POST}: check the token, start a session."""

    route = BASE_PATH + "/sign-in"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        next_path = safe_next(text(request, "next"))
        if self.dashboard.open or await self.dashboard.sessions.find(request) is not None:
            return redirect(next_path)
        return await self.form_page(request, next_path, None)

    async def form_page(self, request: Request, next_path: str, problem: str | None,
                        status: int = 200) -> Response:
        return await render_page(request, self.dashboard, None, "Sign in",
                                 SignInForm(next_path, problem), status)

    @render_async
    async def render_POST(self, request: Request) -> Response:
        origin = request.getHeader(b"Origin")
        host = request.getHeader(b"Host") or b""
        if origin is not None and origin.split(b"://", 1)[-1] != host:
            return await render_page(request, self.dashboard, None, "Not allowed",
                                     error_content("The form was not sent from this"
                                                   " dashboard."), 403)
        try:
            fields = form(request)
        except BadRequest as error:
            return await self.form_page(request, BASE_PATH + "/", error.message, 400)
        next_path = safe_next(fields.get("next", ""))
        token = fields.get("token", "").strip()
        if self.dashboard.open:
            return redirect(next_path)
        if not token or len(token) > MAX_TOKEN_CHARS or not token.isprintable():
            return await self.form_page(request, next_path, "Enter a token.", 400)
        throttle = self.dashboard.throttle
        address = client_address(request) or "unknown"
        if throttle is not None and (wait := throttle.retry_after(address)) is not None:
            page = await self.form_page(
                request, next_path, f"Too many failed sign-ins from your address ({address})."
                f" Try again in {wait} seconds.", 429)
            return evolve(page, headers={**page.headers, b"Retry-After": b"%d" % wait})
        try:
            principal = await authenticate(self.lane.portal, b"Bearer " + token.encode())
        except Unauthorized:
            if throttle is not None:
                throttle.failed(address)
            return await self.form_page(request, next_path,
                                        "That token was not accepted.", 401)
        await self.dashboard.sessions.start(request, principal, token.encode())
        return redirect(next_path)


class SignOutPage(UiResource):
    """C{POST /ui/sign-out}: end the session (its CSRF token required)."""

    route = BASE_PATH + "/sign-out"

    @render_async
    async def render_POST(self, request: Request) -> Response:
        return await self.answer(request, self.sign_out)

    async def show(self, request: Request, viewer: Viewer) -> Response:
        return redirect(BASE_PATH + "/")

    async def sign_out(self, request: Request, viewer: Viewer) -> Response:
        check_form_post(request, viewer)
        await self.dashboard.sessions.end(request)
        return redirect(BASE_PATH + "/sign-in")
