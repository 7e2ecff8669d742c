"""A tenant's workspaces and their environments on the control API.

  /v1/api/tenants/{tenant}/workspaces                L{WorkspacesResource}
    {ws}                                             L{WorkspaceResource}
      environments                                   L{EnvironmentsResource}
        {env}                                        L{EnvironmentResource}
"""

from __future__ import annotations

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import EnvironmentNotFound
from kilolock.web.control.api import ControlAPI, ControlResource, json_object
from kilolock.web.control.documents import environment_document, workspace_document
from kilolock.web.documents import json_response
from kilolock.web.resource import Response, render_async


class WorkspacesResource(ControlResource):
    """The tenant's workspaces with their environments; POST creates one
    (with a C{default} environment)."""

    route = "/v1/api/tenants/{tenant}/workspaces"

    def child(self, segment: str) -> Resource:
        return WorkspaceResource(self.api, self.tenant, segment)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        tenant = await self.api.tenant(self.tenant)
        workspaces = await self.api.store.list_workspaces(tenant.id)
        environments = await self.api.store.list_environments(tenant.id)
        return json_response({"workspaces": [workspace_document(w, environments)
                                             for w in workspaces]})

    @render_async
    async def render_POST(self, request: Request) -> Response:
        body = await json_object(request, self.api.reactor, {"name": True})
        workspace = await self.api.store.create_workspace(self.tenant, body["name"],
                                                          self.api.actor(request))
        environments = await self.api.store.list_environments(workspace.tenant_id,
                                                              workspace.id)
        return json_response(workspace_document(workspace, environments), 201)


class _InWorkspace(ControlResource):
    """A resource of one workspace (an id or a name) of the tenant."""

    def __init__(self, api: ControlAPI, tenant: str, workspace: str) -> None:
        super().__init__(api, tenant)
        self.workspace = workspace


class WorkspaceResource(_InWorkspace):
    """One workspace with its environments; DELETE deletes it."""

    route = "/v1/api/tenants/{tenant}/workspaces/{workspace}"

    def __init__(self, api: ControlAPI, tenant: str, workspace: str) -> None:
        super().__init__(api, tenant, workspace)
        self.putChild(b"environments", EnvironmentsResource(api, tenant, workspace))

    @render_async
    async def render_GET(self, request: Request) -> Response:
        tenant = await self.api.tenant(self.tenant)
        workspace = await self.api.workspace(tenant, self.workspace)
        environments = await self.api.store.list_environments(tenant.id, workspace.id)
        return json_response(workspace_document(workspace, environments))

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        workspace = await self.api.store.delete_workspace(self.tenant, self.workspace,
                                                          self.api.actor(request))
        return json_response(workspace_document(workspace))


class EnvironmentsResource(_InWorkspace):
    """The workspace's environments; POST creates one."""

    route = "/v1/api/tenants/{tenant}/workspaces/{workspace}/environments"

    def child(self, segment: str) -> Resource:
        return EnvironmentResource(self.api, self.tenant, self.workspace, segment)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        tenant = await self.api.tenant(self.tenant)
        environments = await self.api.store.list_environments(tenant.id, self.workspace)
        return json_response({"environments": [environment_document(e)
                                               for e in environments]})

    @render_async
    async def render_POST(self, request: Request) -> Response:
        body = await json_object(request, self.api.reactor, {"name": True})
        environment = await self.api.store.create_environment(
            self.tenant, self.workspace, body["name"], self.api.actor(request))
        return json_response(environment_document(environment), 201)


class EnvironmentResource(_InWorkspace):
    """One environment (an id or a name); DELETE deletes it."""

    route = "/v1/api/tenants/{tenant}/workspaces/{workspace}/environments/{environment}"

    def __init__(self, api: ControlAPI, tenant: str, workspace: str,
                 environment: str) -> None:
        super().__init__(api, tenant, workspace)
        self.environment = environment

    @render_async
    async def render_GET(self, request: Request) -> Response:
        tenant = await self.api.tenant(self.tenant)
        for environment in await self.api.store.list_environments(tenant.id, self.workspace):
            if self.environment in (environment.id, environment.name):
                return json_response(environment_document(environment))
        raise EnvironmentNotFound("the workspace has no such environment")

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        environment = await self.api.store.delete_environment(
            self.tenant, self.workspace, self.environment, self.api.actor(request))
        return json_response(environment_document(environment))
