"""What every page of one state shares: the state's segments, and the scope
rule (L{kilolock.rules.scope}) deciding whether the viewer may see it.  A state
outside the viewer's scope is a 404, exactly like a missing one."""

from __future__ import annotations

from collections.abc import Callable

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import Forbidden, InvalidPath, KilolockError, StateNotFound
from kilolock.core.model import StateKey, StateSummary
from kilolock.rules.paths import validate_segment
from kilolock.rules.scope import state_key
from kilolock.web.context import context_of
from kilolock.web.resource import Response
from kilolock.web.ui.base import Dashboard, UiResource, Viewer


class StatePart(UiResource):
    """A page of the state at C{segments} (one or three validated segments).
    Below it, by default, nothing (a 404 page)."""

    def __init__(self, dashboard: Dashboard, segments: tuple[str, ...]) -> None:
        super().__init__(dashboard)
        self.segments = segments

    def getChild(self, path: bytes, request: Request) -> Resource:
        return page_named(self.dashboard, path, self.child)

    def child(self, segment: str) -> Resource:
        return NotFoundPage(self.dashboard)

    def key(self, request: Request, viewer: Viewer, write: bool = False) -> StateKey:
        """The state's key under the viewer's scope.

        @raise StateNotFound: the state is outside the viewer's scope (the
            same page as a missing state).
        @raise Forbidden: a write with a read-only token.
        """
        try:
            key = state_key(viewer.principal, self.segments, write=False)
        except Forbidden:
            raise StateNotFound("no such state") from None
        state_key(viewer.principal, self.segments, write=write)  # the read-only rule
        context_of(request).key = key
        return key

    async def summary(self, key: StateKey) -> StateSummary:
        """@raise StateNotFound: no such state."""
        summary = await self.lane.store.get_summary(key)
        if summary is None:
            raise StateNotFound("no such state")
        return summary


class NotFoundPage(UiResource):
    """Whatever names nothing under C{/ui/}: the 404 page (once signed in)."""

    def getChild(self, path: bytes, request: Request) -> Resource:
        return self

    async def show(self, request: Request, viewer: Viewer) -> Response:
        raise StateNotFound("no such page")


class PagesBelow(NotFoundPage):
    """A path segment below which pages are named: itself a 404 page; the
    next segment (checked by the path rules) goes to C{child}."""

    def __init__(self, dashboard: Dashboard, child: Callable[[str], Resource]) -> None:
        super().__init__(dashboard)
        self.child = child

    def getChild(self, path: bytes, request: Request) -> Resource:
        return page_named(self.dashboard, path, self.child)


class ErrorPageOf(NotFoundPage):
    """A page answering one error (as an HTML page, once signed in)."""

    def __init__(self, dashboard: Dashboard, error: KilolockError) -> None:
        super().__init__(dashboard)
        self.error = error

    async def show(self, request: Request, viewer: Viewer) -> Response:
        raise self.error


def page_named(dashboard: Dashboard, path: bytes,
               child: Callable[[str], Resource]) -> Resource:
    """The page a path segment names: C{child(segment)}, or the HTML 400
    page of the path rule the segment breaks (L{validate_segment}: too
    long, a control character, C{..})."""
    try:
        segment = validate_segment(path)
    except InvalidPath as error:
        return ErrorPageOf(dashboard, error)
    return child(segment)
