"""Workspaces on the TFE lane: an organization's list (with the filters and
pagination Terraform uses), creation, one workspace by name or id, its
update (accepted, ignored but for the name), its deletion and safe deletion,
and its tags.

  /api/v2/organizations/{org}/workspaces          L{OrganizationWorkspacesResource}
    {name}                                        L{NamedWorkspaceResource}
      actions/safe-delete                         L{SafeDeleteResource}
  /api/v2/workspaces/{ws-id}                      L{WorkspaceResource}
    actions/safe-delete                           L{SafeDeleteResource}
    tag-bindings                                  L{TagBindingsResource}
    relationships/tags                            L{TagsResource}
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import BadRequest, StateNotFound
from kilolock.core.model import Principal
from kilolock.rules.scope import scope_prefix
from kilolock.tfe.errors import InvalidAttribute, NotSafeToDelete, WorkspaceLocked
from kilolock.tfe.model import Tag, TFEWorkspace
from kilolock.tfe.outputs import view_of_row
from kilolock.tfe.requests import (
    parse_tag_bindings,
    parse_tags,
    parse_workspace_create,
    parse_workspace_update,
)
from kilolock.tfe.tags import WorkspaceFilter
from kilolock.web.body import read_body
from kilolock.web.query import plain_error, query_value, query_values
from kilolock.web.resource import Response, render_async
from kilolock.web.tfe.base import InOrganization, TFEDirectory, TFEResource
from kilolock.web.tfe.documents import (
    Page,
    output_entries,
    tag_binding_resources,
    tag_resources,
    workspace_output_resource,
    workspace_resource,
)
from kilolock.web.tfe.jsonapi import jsonapi_response
from kilolock.web.tfe.lane import TFELane, visible_to

_TAGGED = re.compile(r"^filter\[tagged\]\[(\d{1,3})\]\[(key|value)\]$")
MAX_PAGE_SIZE = 100


async def workspace_answer(lane: TFELane, request: Request, principal: Principal,
                           workspace: TFEWorkspace, status: int = 200) -> Response:
    """The document of one workspace as C{principal} sees it, its outputs
    C{included} with C{?include=outputs} (what C{tfe_outputs} reads)."""
    organization = await lane.organization_name(principal)
    summary = await lane.store.get_summary(workspace.key)
    entries = None
    if "outputs" in query_values(request, "include"):
        projection = await lane.store.get_projection(workspace.key)
        current = summary.current if summary is not None else None
        entries = [] if projection is None or current is None else output_entries(
            workspace.id, current.number, [view_of_row(row) for row in projection.outputs])
    document: dict[str, Any] = {"data": workspace_resource(workspace, organization, summary,
                                                           principal, entries)}
    if entries is not None:
        document["included"] = [workspace_output_resource(identifier, view)
                                for identifier, view in entries]
    return jsonapi_response(document, status)


async def delete_workspace(lane: TFELane, principal: Principal, workspace: TFEWorkspace,
                           safe: bool) -> Response:
    """Delete a workspace and its state (the state's events are kept).
    Refused (409) while the state is locked, and, when C{safe}, while it
    manages resources or cannot be looked into (an encrypted envelope)."""
    summary = await lane.store.get_summary(workspace.key)
    if summary is not None:
        if summary.lock is not None:
            raise WorkspaceLocked("the workspace is locked; unlock it before deleting it")
        if safe and summary.resource_count:
            raise NotSafeToDelete(f"the workspace still manages {summary.resource_count}"
                                  " resource(s); destroy them first, or delete with force")
        if safe and summary.current is not None and not summary.current.projected:
            raise NotSafeToDelete("the workspace's state is encrypted, so the server cannot"
                                  " tell whether it manages resources; delete with force")
        with contextlib.suppress(StateNotFound):
            await lane.store.delete_state(workspace.key, None, principal)
    await lane.store.tfe_delete_workspace(workspace.key.tenant, workspace.id, principal)
    return Response(204, headers=jsonapi_response(None).headers)


def workspace_filter(request: Request) -> WorkspaceFilter:
    """The filters of a listing's query."""
    bindings: dict[int, dict[str, str]] = {}
    for raw in request.args or {}:
        match = _TAGGED.match(raw.decode("latin-1"))
        if match is not None:
            value = query_value(request, match.group(0), plain_error) or ""
            bindings.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return WorkspaceFilter(
        name=query_value(request, "search[name]", plain_error) or None,
        tags=tuple(query_values(request, "search[tags]")),
        exclude_tags=tuple(query_values(request, "search[exclude-tags]")),
        wildcard=query_value(request, "search[wildcard-name]", plain_error) or None,
        bindings=tuple(Tag(binding.get("key", ""), binding.get("value", ""))
                       for _, binding in sorted(bindings.items())))


def page_of(request: Request) -> Page:
    """C{page[number]} (from 1) and C{page[size]} (1-100, default 20)."""
    def number(name: str, default: int, highest: int) -> int:
        text = query_value(request, name, plain_error)
        if not text:
            return default
        if not text.isdigit() or not 1 <= int(text) <= highest:
            raise BadRequest(f"{name} must be a whole number from 1 to {highest}")
        return int(text)

    return Page(number("page[number]", 1, 10**6), number("page[size]", 20, MAX_PAGE_SIZE))


class OrganizationWorkspacesResource(InOrganization):
    """An organization's workspaces; POST creates one."""

    route = "/api/v2/organizations/{org}/workspaces"

    def child(self, segment: str) -> Resource:
        return NamedWorkspaceResource(self.lane, self.organization, segment)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal = await self.lane.in_organization(request, self.organization, outputs=True)
        chosen = workspace_filter(request)
        page = page_of(request)
        found = [workspace for workspace in await self.lane.store.tfe_list_workspaces(
            principal.tenant, scope_prefix(principal))
            if chosen.keeps(workspace) and visible_to(principal, workspace.key.path)]
        summaries = {summary.key: summary
                     for summary in await self.lane.store.list_states(principal.tenant)}
        return jsonapi_response({
            "data": [workspace_resource(workspace, self.organization,
                                        summaries.get(workspace.key), principal)
                     for workspace in page.of(found)],
            "meta": page.meta(len(found)),
        })

    @render_async
    async def render_POST(self, request: Request) -> Response:
        principal = await self.lane.in_organization(request, self.organization, write=True)
        create = parse_workspace_create(await read_body(request, self.lane.reactor))
        key = self.lane.key_of(request, principal, create.name, write=True)
        workspace = await self.lane.store.tfe_create_workspace(key, create.tags, principal)
        return await workspace_answer(self.lane, request, principal, workspace, 201)


class NamedWorkspaceResource(InOrganization):
    """A workspace by its organization and name: read it, delete it."""

    route = "/api/v2/organizations/{org}/workspaces/{name}"

    def __init__(self, lane: TFELane, organization: str, name: str) -> None:
        super().__init__(lane, organization)
        self.name = name
        actions = TFEDirectory(lane, f"{self.route}/actions")
        actions.putChild(b"safe-delete", SafeDeleteResource(lane, self))
        self.putChild(b"actions", actions)

    async def find(self, request: Request, write: bool = False,
                   outputs: bool = False) -> tuple[Principal, TFEWorkspace]:
        return await self.lane.by_name(request, self.organization, self.name, write, outputs)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal, workspace = await self.find(request, outputs=True)
        return await workspace_answer(self.lane, request, principal, workspace)

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        principal, workspace = await self.find(request, write=True)
        return await delete_workspace(self.lane, principal, workspace, safe=False)


class WorkspaceResource(TFEResource):
    """A workspace by its id: read, update (the name only; everything else
    is accepted and ignored), delete; its actions, versions and tags below
    (see L{kilolock.web.tfe.tree})."""

    route = "/api/v2/workspaces/{workspace}"

    def __init__(self, lane: TFELane, workspace_id: str) -> None:
        super().__init__(lane)
        self.workspace_id = workspace_id

    async def find(self, request: Request, write: bool = False,
                   outputs: bool = False) -> tuple[Principal, TFEWorkspace]:
        return await self.lane.by_id(request, self.workspace_id, write, outputs)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal, workspace = await self.find(request, outputs=True)
        return await workspace_answer(self.lane, request, principal, workspace)

    @render_async
    async def render_PATCH(self, request: Request) -> Response:
        principal, workspace = await self.find(request, write=True)
        name = parse_workspace_update(await read_body(request, self.lane.reactor))
        if name is not None and name != workspace.name:
            raise InvalidAttribute("renaming a workspace is not supported (it is the name"
                                   " of a state)", "/data/attributes/name")
        return await workspace_answer(self.lane, request, principal, workspace)

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        principal, workspace = await self.find(request, write=True)
        return await delete_workspace(self.lane, principal, workspace, safe=False)


class BelowWorkspace(TFEResource):
    """A resource below a workspace (by id, or by name): C{workspace} finds it."""

    def __init__(self, lane: TFELane,
                 workspace: NamedWorkspaceResource | WorkspaceResource) -> None:
        super().__init__(lane)
        self.workspace = workspace


class SafeDeleteResource(BelowWorkspace):
    """C{POST .../actions/safe-delete}: delete unless it manages resources."""

    def __init__(self, lane: TFELane,
                 workspace: NamedWorkspaceResource | WorkspaceResource) -> None:
        super().__init__(lane, workspace)
        self.route = f"{workspace.route}/actions/safe-delete"

    @render_async
    async def render_POST(self, request: Request) -> Response:
        principal, workspace = await self.workspace.find(request, write=True)
        return await delete_workspace(self.lane, principal, workspace, safe=True)


class TagBindingsResource(BelowWorkspace):
    """A workspace's tags as key/value bindings; PATCH adds or updates some."""

    route = "/api/v2/workspaces/{workspace}/tag-bindings"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        _, workspace = await self.workspace.find(request, outputs=True)
        return jsonapi_response({"data": tag_binding_resources(workspace)})

    @render_async
    async def render_PATCH(self, request: Request) -> Response:
        principal, workspace = await self.workspace.find(request, write=True)
        tags = parse_tag_bindings(await read_body(request, self.lane.reactor))
        updated = await self.lane.store.tfe_add_tags(principal.tenant, workspace.id, tags,
                                                     principal)
        return jsonapi_response({"data": tag_binding_resources(updated)})


class TagsResource(BelowWorkspace):
    """A workspace's tags (keys); POST adds some."""

    route = "/api/v2/workspaces/{workspace}/relationships/tags"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        _, workspace = await self.workspace.find(request, outputs=True)
        return jsonapi_response({"data": tag_resources(workspace.tags)})

    @render_async
    async def render_POST(self, request: Request) -> Response:
        principal, workspace = await self.workspace.find(request, write=True)
        tags = parse_tags(await read_body(request, self.lane.reactor))
        await self.lane.store.tfe_add_tags(principal.tenant, workspace.id, tags, principal)
        return Response(204, headers=jsonapi_response(None).headers)
