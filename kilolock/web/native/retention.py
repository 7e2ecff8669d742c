"""Retention and purges on the native API.

  GET     /v1/native/retention                           the tenant's policy
  PUT     /v1/native/retention                           {"versions": N|null, "days": D|null}
  DELETE  /v1/native/retention                           back to the server's
  GET     /v1/native/states/{state}/-/retention          a state's policy
  PUT     /v1/native/states/{state}/-/retention          its own override
  DELETE  /v1/native/states/{state}/-/retention          back to its tenant's
  POST    /v1/native/states/{state}/-/versions/{n}/purge {"reason": "..."}

Reading a policy needs read access to what it is about; changing one, and
purging, need a tenant admin (L{kilolock.rules.scope.check_admin}): 403
C{not_admin} otherwise.  A purge answers the tombstone (200); the current
version is refused (409 C{version_is_current}: roll back first), a
tombstone is 410, a missing version 404.
"""

from __future__ import annotations

from typing import Any

from twisted.web.server import Request

from kilolock.rules.scope import check_admin
from kilolock.store.interfaces.retention import IRetentionStore
from kilolock.web.body import read_body
from kilolock.web.documents import json_response
from kilolock.web.lane import StateLane
from kilolock.web.native import BASE_PATH
from kilolock.web.native.documents import version_document
from kilolock.web.native.resource import Collection, StateSubresource
from kilolock.web.resource import Response, render_async
from kilolock.web.retention import policy_body, purge_body, retention_answer


def _retention(lane: StateLane) -> Any:
    return IRetentionStore(lane.store)


class TenantRetentionResource(Collection):
    """C{/v1/native/retention}: the caller's tenant's default policy."""

    route = BASE_PATH + "/retention"

    async def _answer(self, tenant: str, status: int = 200) -> Response:
        document = await retention_answer(_retention(self.lane), self.lane.retention,
                                          tenant, None)
        return json_response({"tenant": tenant, **document}, status)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal = await self.lane.authorize(request)
        return await self._answer(principal.tenant)

    @render_async
    async def render_PUT(self, request: Request) -> Response:
        principal = await self.lane.authorize(request, write=True)
        check_admin(principal, tenant_wide=True)
        policy = policy_body(await read_body(request, self.lane.reactor))
        await _retention(self.lane).set_retention(principal.tenant, None, policy, principal)
        return await self._answer(principal.tenant)

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        principal = await self.lane.authorize(request, write=True)
        check_admin(principal, tenant_wide=True)
        await _retention(self.lane).clear_retention(principal.tenant, None, principal)
        return await self._answer(principal.tenant)


class StateRetentionResource(StateSubresource):
    """C{.../-/retention}: one state's policy and its override."""

    route = BASE_PATH + "/states/{state}/-/retention"

    async def _answer(self, tenant: str, path: str) -> Response:
        return json_response(await retention_answer(_retention(self.lane),
                                                    self.lane.retention, tenant, path))

    @render_async
    async def render_GET(self, request: Request) -> Response:
        _, key = await self.key(request)
        return await self._answer(key.tenant, key.path)

    @render_async
    async def render_PUT(self, request: Request) -> Response:
        principal, key = await self.key(request, write=True)
        check_admin(principal)
        policy = policy_body(await read_body(request, self.lane.reactor))
        await _retention(self.lane).set_retention(key.tenant, key.path, policy, principal)
        return await self._answer(key.tenant, key.path)

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        principal, key = await self.key(request, write=True)
        check_admin(principal)
        await _retention(self.lane).clear_retention(key.tenant, key.path, principal)
        return await self._answer(key.tenant, key.path)


class PurgeResource(StateSubresource):
    """C{POST .../-/versions/{n}/purge}: delete version n's bytes, leaving its
    tombstone (a leaked secret)."""

    route = BASE_PATH + "/states/{state}/-/versions/{n}/purge"

    def __init__(self, lane: StateLane, segments: tuple[str, ...], number: int) -> None:
        super().__init__(lane, segments)
        self.number = number

    @render_async
    async def render_POST(self, request: Request) -> Response:
        principal, key = await self.key(request, write=True)
        check_admin(principal)
        reason = purge_body(await read_body(request, self.lane.reactor))["reason"]
        await self.summary(key)  # a missing state is "no such state"
        tombstone = await _retention(self.lane).purge_version(key, self.number, reason,
                                                              principal)
        return json_response({"state": key.path, "version": version_document(tombstone)})
