"""Terraform resources, answered from the projection of each state's current
version: across the tenant (C{/v1/native/resources}) or in one state
(C{/v1/native/states/{state}/-/resources})."""

from __future__ import annotations

from twisted.web.server import Request

from kilolock.rules.resources import ResourceMatch, ResourceQuery
from kilolock.rules.scope import in_scope, scope_prefix
from kilolock.web.documents import json_response
from kilolock.web.native import BASE_PATH
from kilolock.web.native.documents import match_document
from kilolock.web.native.parameters import resource_query, state_arg
from kilolock.web.native.resource import Collection, StateSubresource
from kilolock.web.resource import Response, render_async


def found(matches: list[ResourceMatch], query: ResourceQuery) -> dict[str, object]:
    """The members every search answer has: the matches, and whether the
    limit cut them short."""
    return {"resources": [match_document(match) for match in matches],
            "truncated": len(matches) >= query.limit}


class ResourceSearchResource(Collection):
    """C{GET /v1/native/resources}: resources across the tenant's states (a
    scoped token's states only), or of one state (C{?state=})."""

    route = BASE_PATH + "/resources"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal = await self.lane.authorize(request)
        key = state_arg(request, principal)
        query = resource_query(request, state_path=None if key is None else key.path,
                               path_prefix=scope_prefix(principal))
        matches = await self.lane.store.query_resources(principal.tenant, query)
        if principal.oidc is not None:  # a CI token sees the states its grants let it read
            matches = [match for match in matches if in_scope(principal, match.state_path)]
        return json_response(found(matches, query))


class StateResourcesResource(StateSubresource):
    """C{GET .../-/resources}: the resources of one state's current version."""

    route = BASE_PATH + "/states/{state}/-/resources"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        key, summary = await self.read(request)
        query = resource_query(request, state_path=key.path)
        matches = await self.lane.store.query_resources(key.tenant, query)
        current = summary.current
        return json_response({"state": key.path,
                              "version": None if current is None else current.number,
                              "projected": current is not None and current.projected,
                              **found(matches, query)})
