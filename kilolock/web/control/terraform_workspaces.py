"""A tenant's TFE workspaces on the control API: created ahead of
C{terraform init -input=false} with the tags strategy (which cannot create
a first workspace itself), and listed.

  GET   /v1/api/tenants/{tenant}/terraform-workspaces?environment=E[&workspace=W]
  POST  /v1/api/tenants/{tenant}/terraform-workspaces
        {"name", "environment", "workspace"?, "tags"?: ["t", "k=v", ...]}

A TFE workspace C{NAME} of an environment is the state
C{{workspace_id}/{env_public_id}/NAME} (the one a token of that environment
addresses as C{NAME} on the TFE and HTTP lanes); C{workspace} defaults to
the tenant's C{default}.  A tag C{k=v} is a key/value binding, C{t} a plain
tag.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.web.server import Request

from kilolock.core.errors import EnvironmentNotFound, InvalidField
from kilolock.core.model import StateKey, rfc3339
from kilolock.rules.hosted import DEFAULT_NAME, Environment, Tenant
from kilolock.tfe.model import Tag, TFEWorkspace
from kilolock.tfe.names import InvalidName, check_tag_text, check_workspace_name
from kilolock.web.body import read_body
from kilolock.web.control import MAX_CONTROL_BODY_BYTES
from kilolock.web.control.api import ControlResource, query_text
from kilolock.web.documents import json_response
from kilolock.web.json_body import only_fields
from kilolock.web.resource import Response, render_async

_FIELDS = {"name", "environment", "workspace", "tags"}


def tag_of(text: object) -> Tag:
    """C{"t"} (a plain tag) or C{"k=v"} (a binding).  @raise InvalidField."""
    if not isinstance(text, str):
        raise InvalidField("tags", "tags must be strings")
    key, separator, value = text.partition("=")
    try:
        return Tag(check_tag_text(key, "tag key"),
                   check_tag_text(value, "tag value", empty=True) if separator else "")
    except InvalidName as error:
        raise InvalidField("tags", str(error)) from None


def terraform_workspace_document(workspace: TFEWorkspace) -> dict[str, Any]:
    workspace_id, env_public_id, _ = workspace.key.path.split("/", 2)
    return {"id": workspace.id, "name": workspace.name, "state_path": workspace.key.path,
            "workspace_id": workspace_id, "env_public_id": env_public_id,
            "tags": [tag.key + (f"={tag.value}" if tag.value else "")
                     for tag in workspace.tags],
            "created_at": rfc3339(workspace.created_at)}


class TerraformWorkspacesResource(ControlResource):
    """The tenant's TFE workspaces of one environment; POST creates one."""

    route = "/v1/api/tenants/{tenant}/terraform-workspaces"

    async def environment(self, tenant: Tenant, workspace: object,
                          environment: object) -> Environment:
        """The environment named (by id or name) in the workspace named.
        @raise InvalidField: not strings, or no such environment."""
        for field, value in (("workspace", workspace), ("environment", environment)):
            if not isinstance(value, str) or not value:
                raise InvalidField(field, f"{field} must be a name or an id")
        hosted = await self.api.workspace(tenant, str(workspace))
        for found in await self.api.store.list_environments(tenant.id, hosted.id):
            if environment in (found.id, found.name):
                assert isinstance(found, Environment)
                return found
        raise EnvironmentNotFound("the workspace has no such environment")

    @render_async
    async def render_GET(self, request: Request) -> Response:
        tenant = await self.api.tenant(self.tenant)
        environment = await self.environment(
            tenant, query_text(request, "workspace") or DEFAULT_NAME,
            query_text(request, "environment"))
        found = await self.api.store.tfe_list_workspaces(
            tenant.id, f"{environment.workspace_id}/{environment.id}/")
        return json_response({"terraform_workspaces": [terraform_workspace_document(w)
                                                       for w in found]})

    @render_async
    async def render_POST(self, request: Request) -> Response:
        raw = await read_body(request, self.api.reactor)
        try:
            body = json.loads(raw) if len(raw) <= MAX_CONTROL_BODY_BYTES else None
        except (ValueError, UnicodeDecodeError, RecursionError):
            body = None
        if not isinstance(body, dict):
            raise InvalidField("body", "the body must be a JSON object")
        only_fields(body, _FIELDS)
        try:
            name = check_workspace_name(body.get("name"))
        except InvalidName as error:
            raise InvalidField("name", str(error)) from None
        tags = body.get("tags", [])
        if not isinstance(tags, list):
            raise InvalidField("tags", "tags must be a list of strings")
        tenant = await self.api.tenant(self.tenant)
        environment = await self.environment(tenant, body.get("workspace", DEFAULT_NAME),
                                             body.get("environment"))
        key = StateKey(tenant.id, f"{environment.workspace_id}/{environment.id}/{name}")
        created = await self.api.store.tfe_create_workspace(
            key, [tag_of(tag) for tag in tags], self.api.actor(request))
        return json_response(terraform_workspace_document(created), 201)
