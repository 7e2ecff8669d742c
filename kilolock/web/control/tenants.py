"""Tenants on the control API: the list, one tenant, its states and its
audit trail.

  /v1/api/tenants                      L{TenantsResource}
    {tenant}                           L{TenantResource}
      states                           L{TenantStatesResource}
      workspaces                       L{kilolock.web.control.workspaces}
      tokens                           L{kilolock.web.control.tokens}
      oidc-policy                      L{kilolock.web.control.oidc}
      terraform-workspaces             L{kilolock.web.control.terraform_workspaces}
      events                           L{TenantEventsResource}
        verify                         L{TenantChainResource} (?head=SEQ:HASH)
      retention                        L{kilolock.web.control.retention}
      version-purges                   L{kilolock.web.control.retention}
"""

from __future__ import annotations

from typing import Any

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.model import rfc3339, utcnow
from kilolock.rules.hosted import Tenant
from kilolock.web.chain import check_tenant_chain, pinned_head
from kilolock.web.control.api import (
    ControlAPI,
    ControlResource,
    json_object,
    query_flag,
    query_moment,
    query_text,
)
from kilolock.web.control.documents import tenant_document, workspace_document
from kilolock.web.control.oidc import OidcPolicyResource
from kilolock.web.control.retention import RetentionControl, VersionPurgesResource
from kilolock.web.control.terraform_workspaces import TerraformWorkspacesResource
from kilolock.web.control.tokens import TokensResource
from kilolock.web.control.workspaces import WorkspacesResource
from kilolock.web.documents import event_document, json_response, lock_document
from kilolock.web.query import query_values
from kilolock.web.resource import Response, render_async


class TenantsResource(ControlResource):
    """Every tenant (C{?deleted=true}: deleted ones too); POST creates one."""

    route = "/v1/api/tenants"

    def child(self, segment: str) -> Resource:
        return TenantResource(self.api, segment)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        deleted = query_flag(request, "deleted", "true")
        tenants = await self.api.store.list_tenants(include_deleted=deleted)
        return json_response({"tenants": [tenant_document(t) for t in tenants]})

    @render_async
    async def render_POST(self, request: Request) -> Response:
        body = await json_object(request, self.api.reactor, {"slug": True, "name": True})
        tenant = await self.api.store.create_tenant(body["slug"], body["name"],
                                                    self.api.actor(request))
        return json_response(await tenant_detail(self.api, tenant), 201)


async def tenant_detail(api: ControlAPI, tenant: Tenant) -> dict[str, Any]:
    """A tenant with its workspaces, their environments, and its state count."""
    workspaces = await api.store.list_workspaces(tenant.id)
    environments = await api.store.list_environments(tenant.id)
    states = await api.store.list_states(tenant.id)
    return {**tenant_document(tenant), "state_count": len(states),
            "workspaces": [workspace_document(w, environments) for w in workspaces]}


class TenantResource(ControlResource):
    """One tenant; DELETE deletes it (C{?states=delete}: with its states)."""

    route = "/v1/api/tenants/{tenant}"

    def __init__(self, api: ControlAPI, tenant: str) -> None:
        super().__init__(api, tenant)
        self.putChild(b"states", TenantStatesResource(api, tenant))
        self.putChild(b"workspaces", WorkspacesResource(api, tenant))
        self.putChild(b"tokens", TokensResource(api, tenant))
        self.putChild(b"oidc-policy", OidcPolicyResource(api, tenant))
        self.putChild(b"terraform-workspaces", TerraformWorkspacesResource(api, tenant))
        self.putChild(b"events", TenantEventsResource(api, tenant))
        self.putChild(b"retention", RetentionControl(api, tenant))
        self.putChild(b"version-purges", VersionPurgesResource(api, tenant))

    @render_async
    async def render_GET(self, request: Request) -> Response:
        tenant = await self.api.tenant(self.tenant)
        return json_response(await tenant_detail(self.api, tenant))

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        delete_states = query_flag(request, "states", "delete")
        deletion = await self.api.store.delete_tenant(self.tenant, self.api.actor(request),
                                                      delete_states=delete_states)
        return json_response({**tenant_document(deletion.tenant),
                              "deleted_states": list(deletion.deleted_states),
                              "revoked_tokens": list(deletion.revoked_tokens)})


class TenantStatesResource(ControlResource):
    """The tenant's states: path, serial, counts, lock."""

    route = "/v1/api/tenants/{tenant}/states"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        tenant = await self.api.tenant(self.tenant)
        now = utcnow()
        summaries = await self.api.store.list_states(tenant.id)
        return json_response({"states": [{
            "path": summary.key.path,
            "serial": None if summary.current is None else summary.current.serial,
            "version_count": summary.version_count,
            "resource_count": summary.resource_count,
            "updated_at": rfc3339(summary.updated_at),
            "lock": None if summary.lock is None else lock_document(summary.lock, now),
        } for summary in summaries]})


class TenantEventsResource(ControlResource):
    """The tenant's audit events (C{?state=&kind=&since=&until=})."""

    route = "/v1/api/tenants/{tenant}/events"

    def __init__(self, api: ControlAPI, tenant: str) -> None:
        super().__init__(api, tenant)
        self.putChild(b"verify", TenantChainResource(api, tenant))

    @render_async
    async def render_GET(self, request: Request) -> Response:
        tenant = await self.api.tenant(self.tenant)
        kinds = query_values(request, "kind") or None
        events = await self.api.store.list_events(
            tenant.id, state_path=query_text(request, "state") or None, kinds=kinds,
            since=query_moment(request, "since"), until=query_moment(request, "until"))
        return json_response({"tenant": tenant.id,
                              "events": [event_document(e) for e in events]})


class TenantChainResource(ControlResource):
    """The tenant's hash chain, checked link by link against the head the
    store recorded and a head pinned with C{?head=SEQ:HASH}."""

    route = "/v1/api/tenants/{tenant}/events/verify"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        tenant = await self.api.tenant(self.tenant)
        check = await check_tenant_chain(self.api.store, tenant.id, pinned_head(request))
        broken = check.broken
        document: dict[str, Any] = {
            "ok": broken is None,
            "tenant": tenant.id,
            "events": len(check.events),
            "head_seq": check.head.seq,
            "head_hash": check.head.hash if check.head.seq else None,
            "last_seq": check.last_seq,
            "truncated": check.truncated,
            "pinned_head": None if check.pinned is None else str(check.pinned),
        }
        if broken is not None:
            event = None if check.truncated else broken.event
            document["first_broken"] = {
                "seq": broken.seq, "problem": broken.problem, "head": check.broken_head,
                "kind": None if event is None else event.kind,
                "at": None if event is None else rfc3339(event.at),
                "reason": broken.reason()}
        return json_response(document)
