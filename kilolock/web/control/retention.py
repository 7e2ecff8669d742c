"""A tenant's retention and the purge of one version, on the control API
(the operator acts as the tenant's admin).

  GET     /v1/api/tenants/{tenant}/retention[?state=PATH]   the policy that applies
  PUT     /v1/api/tenants/{tenant}/retention[?state=PATH]   {"versions": N|null, "days": D|null}
  DELETE  /v1/api/tenants/{tenant}/retention[?state=PATH]   remove the override
  POST    /v1/api/tenants/{tenant}/version-purges           {"state", "version", "reason"}

Without C{state} it is the tenant's default; with it, one state's (the
state's path: C{name} or C{workspace_id/env_public_id/name}).  A purge
answers the tombstone (200); the current version is 409
(C{version_is_current}), a tombstone 410, a missing state or version 404.
"""

from __future__ import annotations

from typing import Any

from twisted.web.server import Request

from kilolock.core.errors import InvalidField, InvalidPath
from kilolock.core.model import StateKey
from kilolock.rules.hosted import Tenant
from kilolock.rules.paths import state_segments
from kilolock.web.body import read_body
from kilolock.web.control.api import ControlResource, query_text
from kilolock.web.documents import json_response
from kilolock.web.native.documents import version_document
from kilolock.web.resource import Response, render_async
from kilolock.web.retention import policy_body, purge_body, retention_answer


def state_path(value: Any, field: str) -> str:
    """A state's path from a query parameter or a body member.

    @raise InvalidField: naming C{field}."""
    if not isinstance(value, str) or not value:
        raise InvalidField(field, f"{field} must be a state's path: NAME or"
                                  " WORKSPACE_ID/ENV_PUBLIC_ID/NAME")
    try:
        segments = state_segments(value)
    except InvalidPath as error:
        raise InvalidField(field, f"{field}: {error.message}") from None
    if segments is None:
        raise InvalidField(field, f"{field} is NAME or WORKSPACE_ID/ENV_PUBLIC_ID/NAME")
    return "/".join(segments)


class RetentionControl(ControlResource):
    """The tenant's retention policy, or one state's (C{?state=})."""

    route = "/v1/api/tenants/{tenant}/retention"

    async def _target(self, request: Request) -> tuple[Tenant, str | None]:
        tenant = await self.api.tenant(self.tenant)
        text = query_text(request, "state")
        if text is None:
            return tenant, None
        path = state_path(text, "state")
        workspace, _, rest = path.partition("/")
        environment = rest.partition("/")[0]
        if not any(env.workspace_id == workspace and env.id == environment
                   for env in await self.api.store.list_environments(tenant.id)):
            raise InvalidField("state", "a hosted tenant's state is WORKSPACE_ID/ENV_PUBLIC_ID/"
                                        "NAME, in one of its environments")
        return tenant, path

    async def _answer(self, tenant: Tenant, path: str | None) -> Response:
        document = await retention_answer(self.api.store, self.api.retention, tenant.id, path)
        return json_response({"tenant": tenant.id, **document})

    @render_async
    async def render_GET(self, request: Request) -> Response:
        return await self._answer(*await self._target(request))

    @render_async
    async def render_PUT(self, request: Request) -> Response:
        tenant, path = await self._target(request)
        policy = policy_body(await read_body(request, self.api.reactor))
        await self.api.store.set_retention(tenant.id, path, policy, self.api.actor(request))
        return await self._answer(tenant, path)

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        tenant, path = await self._target(request)
        await self.api.store.clear_retention(tenant.id, path, self.api.actor(request))
        return await self._answer(tenant, path)


class VersionPurgesResource(ControlResource):
    """C{POST}: purge one version of one of the tenant's states."""

    route = "/v1/api/tenants/{tenant}/version-purges"

    @render_async
    async def render_POST(self, request: Request) -> Response:
        tenant = await self.api.tenant(self.tenant)
        body = purge_body(await read_body(request, self.api.reactor),
                          ("state", "version", "reason"))
        path = state_path(body.get("state"), "state")
        number = body.get("version")
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number < 2**31:
            raise InvalidField("version", "version must be a version number (1, 2, ...)")
        tombstone = await self.api.store.purge_version(StateKey(tenant.id, path), number,
                                                       body["reason"], self.api.actor(request))
        return json_response({"tenant": tenant.id, "state": path,
                              "version": version_document(tombstone)})
