"""The TFE lane's tree, one segment at a time (C{getChild}), and its
organizations and ping.

  /api/v2                                L{api_root}
    ping                                 L{PingResource}
    organizations                        L{OrganizationsResource}
      {org}                              L{OrganizationResource}
        entitlement-set                  L{EntitlementResource}
        workspaces                       L{kilolock.web.tfe.workspaces}
    workspaces                           a directory
      {ws-id}                            L{kilolock.web.tfe.workspaces.WorkspaceResource}
        actions/{lock,unlock,force-unlock,safe-delete}
        current-state-version, state-versions        L{kilolock.web.tfe.versions}
        current-state-version-outputs                L{kilolock.web.tfe.outputs}
        tag-bindings, relationships/tags             L{kilolock.web.tfe.workspaces}
    state-versions/{sv-id}[/download]    L{kilolock.web.tfe.versions}
    state-version-outputs/{wsout-id}     L{kilolock.web.tfe.outputs}
    state-version-uploads/{sv-id}/{state,json-state}   L{kilolock.web.tfe.uploads}

Anything else is a JSON:API 404, logged once per route template.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.tfe.model import JSON_PART, STATE_PART
from kilolock.web.resource import Response, register_error_dialect, render_async
from kilolock.web.tfe import API_PATH
from kilolock.web.tfe.actions import LockActionResource
from kilolock.web.tfe.base import InOrganization, TFEDirectory, TFEResource
from kilolock.web.tfe.documents import Page, entitlement_resource, organization_resource
from kilolock.web.tfe.jsonapi import api_headers, jsonapi_error_response, jsonapi_response
from kilolock.web.tfe.lane import TFELane
from kilolock.web.tfe.outputs import CurrentOutputsResource, OutputResource
from kilolock.web.tfe.uploads import UploadResource
from kilolock.web.tfe.versions import (
    CreateVersionResource,
    CurrentVersionResource,
    VersionResource,
)
from kilolock.web.tfe.workspaces import (
    OrganizationWorkspacesResource,
    SafeDeleteResource,
    TagBindingsResource,
    TagsResource,
    WorkspaceResource,
)

# Errors the TFE lane answers before any resource does (the body limit's 413).
register_error_dialect(API_PATH.encode(), jsonapi_error_response)


class PingResource(TFEResource):
    """C{GET /api/v2/ping}: no credentials needed; its C{TFP-API-Version}
    header is what Terraform checks."""

    route = "/api/v2/ping"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        return Response(204, headers=api_headers())


class OrganizationsResource(TFEResource):
    """The caller's organization (one: its tenant)."""

    route = "/api/v2/organizations"

    def child(self, segment: str) -> Resource:
        return OrganizationResource(self.lane, segment)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal = await self.lane.caller(request, outputs=True)
        name = await self.lane.organization_name(principal)
        return jsonapi_response({"data": [organization_resource(name)],
                                 "meta": Page().meta(1)})


class OrganizationResource(InOrganization):
    """One organization (the caller's, else 404)."""

    route = "/api/v2/organizations/{org}"

    def __init__(self, lane: TFELane, organization: str) -> None:
        super().__init__(lane, organization)
        self.putChild(b"entitlement-set", EntitlementResource(lane, organization))
        self.putChild(b"workspaces", OrganizationWorkspacesResource(lane, organization))

    @render_async
    async def render_GET(self, request: Request) -> Response:
        await self.lane.in_organization(request, self.organization, outputs=True)
        return jsonapi_response({"data": organization_resource(self.organization)})


class EntitlementResource(InOrganization):
    """What the organization may use: state storage, never operations."""

    route = "/api/v2/organizations/{org}/entitlement-set"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        await self.lane.in_organization(request, self.organization, outputs=True)
        return jsonapi_response({"data": entitlement_resource(self.organization)})


def workspace_tree(lane: TFELane, workspace_id: str) -> Resource:
    """C{/api/v2/workspaces/{ws-id}} and what is below it."""
    workspace = WorkspaceResource(lane, workspace_id)
    actions = TFEDirectory(lane, f"{WorkspaceResource.route}/actions")
    for action in ("lock", "unlock", "force-unlock"):
        actions.putChild(action.encode(), LockActionResource(lane, workspace, action))
    actions.putChild(b"safe-delete", SafeDeleteResource(lane, workspace))
    relationships = TFEDirectory(lane, f"{WorkspaceResource.route}/relationships")
    relationships.putChild(b"tags", TagsResource(lane, workspace))
    for name, child in ((b"actions", actions), (b"relationships", relationships),
                        (b"current-state-version", CurrentVersionResource(lane, workspace)),
                        (b"current-state-version-outputs",
                         CurrentOutputsResource(lane, workspace)),
                        (b"state-versions", CreateVersionResource(lane, workspace)),
                        (b"tag-bindings", TagBindingsResource(lane, workspace))):
        workspace.putChild(name, child)
    return workspace


def upload_tree(lane: TFELane, identifier: str) -> Resource:
    """C{/api/v2/state-version-uploads/{sv-id}}: its two upload URLs."""
    uploads = TFEDirectory(lane, "/api/v2/state-version-uploads/{state-version}")
    for part in (STATE_PART, JSON_PART):
        uploads.putChild(part.encode(), UploadResource(lane, identifier, part))
    return uploads


class Collection(TFEResource):
    """A segment whose next segment is an id, handed to C{child_of}."""

    def __init__(self, lane: TFELane, route: str,
                 child_of: Callable[[TFELane, str], Resource]) -> None:
        super().__init__(lane)
        self.route = route
        self.child_of = child_of

    def child(self, segment: str) -> Resource:
        return self.child_of(self.lane, segment)


def api_root(lane: TFELane) -> Resource:
    """C{/api/v2}: the TFE lane."""
    root = TFEDirectory(lane, "/api/v2")
    root.putChild(b"ping", PingResource(lane))
    root.putChild(b"organizations", OrganizationsResource(lane))
    for name, child_of in (("workspaces", workspace_tree),
                           ("state-versions", VersionResource),
                           ("state-version-outputs", OutputResource),
                           ("state-version-uploads", upload_tree)):
        root.putChild(name.encode(), Collection(lane, f"/api/v2/{name}", child_of))
    return root
