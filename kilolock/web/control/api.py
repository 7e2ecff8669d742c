"""What every resource of the control API works with: L{ControlAPI} (the
store, the control token, the reactor, the state lane's public URL), the
base resource, and how a request's body and query are read."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from datetime import datetime
from typing import Any

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import InvalidField, NotFound, TenantNotFound, WorkspaceNotFound
from kilolock.core.model import DEFAULT_TENANT, Principal
from kilolock.retention.policy import KEEP_EVERYTHING, RetentionPolicy
from kilolock.rules.hosted import Tenant, Workspace
from kilolock.web.body import read_body
from kilolock.web.control import API_ROUTE, MAX_CONTROL_BODY_BYTES
from kilolock.web.json_body import json_body_object, only_fields
from kilolock.web.query import field_error, query_time, query_value
from kilolock.web.request import client_address
from kilolock.web.resource import AsyncResource, Branch, named_child

#: The name control-plane events record as their principal.
CONTROL_PRINCIPAL = "control"
NO_CONTROL_ROUTE = "no such control API route; see docs/hosting.md"


def no_control_route() -> Resource:
    """What a control path that names nothing answers: a JSON 404 (its later
    segments still checked)."""
    return Branch(NotFound(NO_CONTROL_ROUTE), API_ROUTE)


class ControlAPI:
    """The collaborators of the control API.  C{store} provides
    L{ITenantStore}, L{IStateStore} and L{IRetentionStore}; C{public_url}
    gives the base URL of the state lane for backend blocks; C{retention}
    is the server's retention policy."""

    def __init__(self, store: Any, control_token: str, reactor: Any,
                 public_url: Callable[[Request], str],
                 retention: RetentionPolicy = KEEP_EVERYTHING) -> None:
        if not control_token:
            raise ValueError("the control API needs KL_CONTROL_TOKEN")
        self.store = store
        #: The server's retention policy.
        self.retention = retention
        self._token = control_token.encode()
        self.reactor = reactor
        self.public_url = public_url

    def authorized(self, request: Request) -> bool:
        """Whether the request carries C{Authorization: Bearer <control token>}."""
        scheme, _, value = (request.getHeader(b"Authorization") or b"").strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self._token)

    def actor(self, request: Request) -> Principal:
        """Who the audit trail says made a control-plane change."""
        return Principal(tenant=DEFAULT_TENANT, name=CONTROL_PRINCIPAL,
                         address=client_address(request))

    async def tenant(self, reference: str) -> Tenant:
        """The tenant a slug or id names.

        @raise TenantNotFound: when none does.
        """
        found = await self.store.find_tenant(reference)
        if found is None:
            raise TenantNotFound("no such tenant")
        assert isinstance(found, Tenant)
        return found

    async def workspace(self, tenant: Tenant, reference: str) -> Workspace:
        """The tenant's workspace an id or name names.

        @raise WorkspaceNotFound: when none does.
        """
        for workspace in await self.store.list_workspaces(tenant.id):
            if reference in (workspace.id, workspace.name):
                assert isinstance(workspace, Workspace)
                return workspace
        raise WorkspaceNotFound("the tenant has no such workspace")


class ControlResource(AsyncResource):
    """A resource of the control API, below C{/v1/api/tenants/{tenant}} (or
    the list of tenants itself, C{tenant} then empty).  Named children are
    checked against the path rules; by default nothing is below."""

    answers_head = False

    def __init__(self, api: ControlAPI, tenant: str = "") -> None:
        super().__init__()
        self.api = api
        self.tenant = tenant

    def getChild(self, path: bytes, request: Request) -> Resource:
        return named_child(path, self.child, API_ROUTE)

    def child(self, segment: str) -> Resource:
        return no_control_route()


def query_text(request: Request, name: str) -> str | None:
    return query_value(request, name, field_error)


def query_moment(request: Request, name: str) -> datetime | None:
    return query_time(request, name, field_error)


def query_flag(request: Request, name: str, meaning: str) -> bool:
    """A parameter that is absent, or exactly C{meaning}."""
    value = query_text(request, name)
    if value is None:
        return False
    if value != meaning:
        raise InvalidField(name, f"{name} can only be {meaning!r}")
    return True


async def json_object(request: Request, reactor: Any, allowed: dict[str, bool]) -> dict[str, Any]:
    """The request body as a JSON object with only the C{allowed} members
    (name -> required), every one a string, under the text rules of
    L{kilolock.core.text}.

    @return: (awaited) the object.
    @raise InvalidField: naming the body, or the member at fault.
    @raise InvalidText: a text rule is broken (naming the member at fault).
    """
    document = json_body_object(await read_body(request, reactor), MAX_CONTROL_BODY_BYTES)
    only_fields(document, allowed)
    for name, required in allowed.items():
        if required and name not in document:
            raise InvalidField(name, f"the field {name!r} is required")
        if name in document and not isinstance(document[name], str):
            raise InvalidField(name, f"the field {name!r} must be a string")
    return document
