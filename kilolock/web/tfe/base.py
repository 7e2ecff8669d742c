"""The base of every TFE-lane resource: JSON:API errors, the routing of one
named segment at a time, and the answer to routes this lane does not serve.

A path this lane does not serve (or a method a served path does not take)
is a JSON:API 404, and its route template is logged once
(L{kilolock.web.tfe.lane.UnimplementedRoutes}): what a new Terraform
release starts calling shows up in the log.
"""

from __future__ import annotations

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import InvalidPath, KilolockError, MethodNotAllowed, NotFound
from kilolock.rules.paths import validate_segment
from kilolock.web.resource import AsyncResource, ErrorPage, Response
from kilolock.web.tfe import UNIMPLEMENTED_ROUTE
from kilolock.web.tfe.jsonapi import jsonapi_error_response, not_found
from kilolock.web.tfe.lane import TFELane


class TFEErrorPage(ErrorPage):
    """An error page of the TFE lane: its error as a JSON:API document."""

    def error_response(self, error: KilolockError) -> Response:
        return jsonapi_error_response(error)


def unimplemented(lane: TFELane, request: Request) -> Resource:
    """What a path this lane does not serve answers (logged once per route)."""
    lane.unimplemented.note(request.method, request.path)
    return TFEErrorPage(NotFound("this route of the TFE API is not served"),
                        UNIMPLEMENTED_ROUTE)


class TFEResource(AsyncResource):
    """A resource of the TFE lane.  Fixed children are C{putChild}ren; a
    named child comes from L{child} (its segment checked against the path
    rules first); nothing else is below."""

    def __init__(self, lane: TFELane) -> None:
        super().__init__()
        self.lane = lane
        self.metrics = lane.states.metrics

    def error_response(self, error: KilolockError) -> Response:
        if isinstance(error, MethodNotAllowed):
            self.lane.unimplemented.note_route(error.method, self.route)
            return not_found()
        return jsonapi_error_response(error)

    def getChild(self, path: bytes, request: Request) -> Resource:
        try:
            segment = validate_segment(path)
        except InvalidPath as error:
            return TFEErrorPage(error, UNIMPLEMENTED_ROUTE)
        found = self.child(segment)
        return found if found is not None else unimplemented(self.lane, request)

    def child(self, segment: str) -> Resource | None:
        """The resource a segment below names (None: nothing served)."""
        return None


class InOrganization(TFEResource):
    """A resource below C{organizations/{org}}."""

    def __init__(self, lane: TFELane, organization: str) -> None:
        super().__init__(lane)
        self.organization = organization


class TFEDirectory(TFEResource):
    """A segment of the TFE API with only fixed children below (C{route}:
    its template, as an unimplemented method on it is logged)."""

    def __init__(self, lane: TFELane, route: str) -> None:
        super().__init__(lane)
        self.route = route
