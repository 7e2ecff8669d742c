"""The control API of hosted mode (C{KL_AUTH_MODE=database}), on its own
listener (C{--control-listen}, default C{tcp:8090}).

Every route but C{/healthz} needs C{Authorization: Bearer <KL_CONTROL_TOKEN>}
(compared in constant time); anything else is 401 before the path is even
looked at.  Answers are JSON; errors are the JSON error document, and a bad
field of a body or query names it (C{"field"}).

  GET     /v1/api/tenants[?deleted=true]
  POST    /v1/api/tenants                              {"slug", "name"}
  GET     /v1/api/tenants/{tenant}
  DELETE  /v1/api/tenants/{tenant}[?states=delete]
  GET     /v1/api/tenants/{tenant}/states
  GET     /v1/api/tenants/{tenant}/workspaces
  POST    /v1/api/tenants/{tenant}/workspaces          {"name"}
  GET     /v1/api/tenants/{tenant}/workspaces/{ws}
  DELETE  /v1/api/tenants/{tenant}/workspaces/{ws}
  GET     /v1/api/tenants/{tenant}/workspaces/{ws}/environments
  POST    /v1/api/tenants/{tenant}/workspaces/{ws}/environments   {"name"}
  GET     /v1/api/tenants/{tenant}/workspaces/{ws}/environments/{env}
  DELETE  /v1/api/tenants/{tenant}/workspaces/{ws}/environments/{env}
  GET     /v1/api/tenants/{tenant}/tokens
  POST    /v1/api/tenants/{tenant}/tokens
          {"name", "environment", "workspace"?, "scope"?, "state"?}
  GET     /v1/api/tenants/{tenant}/tokens/{token_id}
  DELETE  /v1/api/tenants/{tenant}/tokens/{token_id}   (revoke)
  GET     /v1/api/tenants/{tenant}/events[?state=&kind=&since=&until=]
  GET     /v1/api/tenants/{tenant}/events/verify

C{{tenant}} is a live tenant's slug or any tenant's id (C{tn_...}: deleted
tenants stay readable, their audit trail above all); C{{ws}} and C{{env}} are
ids or names.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

from attrs import frozen
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from kilolock import hosted
from kilolock.audit import verify_chain
from kilolock.errors import (
    ControlUnauthorized,
    EnvironmentNotFound,
    InvalidField,
    KilolockError,
    MethodNotAllowed,
    NotFound,
    TenantNotFound,
    TokenNotFound,
    WorkspaceNotFound,
)
from kilolock.model import (
    DEFAULT_TENANT,
    ApiToken,
    Environment,
    Principal,
    Tenant,
    Workspace,
    rfc3339,
    utcnow,
)
from kilolock.web._base import AsyncResource, Response, response_for_error, write_response
from kilolock.web.body import read_body
from kilolock.web.health import HealthResource
from kilolock.web.native import event_document, json_response, lock_document
from kilolock.web.paths import validate_segment
from kilolock.web.query import field_error, query_time, query_value, query_values
from kilolock.web.request import client_address
from kilolock.web.site import KilolockSite, _Branch

#: The name control-plane events record as their principal.
CONTROL_PRINCIPAL = "control"
#: Largest control request body (they are small JSON objects).
MAX_CONTROL_BODY_BYTES = 64 * 1024


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else rfc3339(moment)


# -- documents ---------------------------------------------------------------------


def tenant_document(tenant: Tenant) -> dict[str, Any]:
    return {
        "id": tenant.id,
        "slug": tenant.slug,
        "name": tenant.name,
        "created_at": rfc3339(tenant.created_at),
        "deleted_at": _time(tenant.deleted_at),
    }


def environment_document(environment: Environment) -> dict[str, Any]:
    return {
        "id": environment.id,
        "name": environment.name,
        "workspace_id": environment.workspace_id,
        "created_at": rfc3339(environment.created_at),
    }


def workspace_document(workspace: Workspace,
                       environments: list[Environment] | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "id": workspace.id,
        "name": workspace.name,
        "created_at": rfc3339(workspace.created_at),
    }
    if environments is not None:
        document["environments"] = [environment_document(e) for e in environments
                                    if e.workspace_id == workspace.id]
    return document


def token_document(token: ApiToken) -> dict[str, Any]:
    """A token as listed: never its secret, never its hash."""
    return {
        "id": token.id,
        "name": token.name,
        "scope": token.scope,
        "workspace_id": token.workspace_id,
        "env_public_id": token.env_public_id,
        "created_at": rfc3339(token.created_at),
        "last_used_at": _time(token.last_used_at),
        "revoked_at": _time(token.revoked_at),
        "active": token.revoked_at is None,
    }


# -- requests ------------------------------------------------------------------------


def _query(request: Request, name: str) -> str | None:
    return query_value(request, name, field_error)


def _query_time(request: Request, name: str) -> datetime | None:
    return query_time(request, name, field_error)


def _query_flag(request: Request, name: str, meaning: str) -> bool:
    """A parameter that is absent, or exactly C{meaning}."""
    value = _query(request, name)
    if value is None:
        return False
    if value != meaning:
        raise InvalidField(name, f"{name} can only be {meaning!r}")
    return True


async def _json_object(request: Request, reactor: Any, allowed: dict[str, bool]) -> dict[str, Any]:
    """The request body as a JSON object with only the C{allowed} members
    (name -> required), every one a string."""
    raw = await read_body(request, reactor)
    if len(raw) > MAX_CONTROL_BODY_BYTES:
        raise InvalidField("body", f"the body is larger than {MAX_CONTROL_BODY_BYTES} bytes")
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise InvalidField("body", "the body must be a JSON object") from None
    if not isinstance(document, dict):
        raise InvalidField("body", "the body must be a JSON object")
    for name in document:
        if name not in allowed:
            raise InvalidField(name, f"unknown field {name!r}; expected: "
                                     + ", ".join(sorted(allowed)))
    for name, required in allowed.items():
        if required and name not in document:
            raise InvalidField(name, f"the field {name!r} is required")
        if name in document and not isinstance(document[name], str):
            raise InvalidField(name, f"the field {name!r} must be a string")
    return document


# -- the API -------------------------------------------------------------------------

Params = dict[str, str]


@frozen
class _Route:
    pattern: tuple[str, ...]  # literal segments, or "{name}" placeholders
    template: str
    methods: dict[bytes, str]  # method -> name of the ControlAPI coroutine

    def match(self, segments: list[str]) -> Params | None:
        if len(segments) != len(self.pattern):
            return None
        params: Params = {}
        for part, segment in zip(self.pattern, segments, strict=True):
            if part.startswith("{"):
                params[part[1:-1]] = segment
            elif part != segment:
                return None
        return params


def _routes() -> list[_Route]:
    tenant = ("tenants", "{tenant}")
    workspace = (*tenant, "workspaces", "{workspace}")
    specs: list[tuple[tuple[str, ...], dict[bytes, str]]] = [
        (("tenants",), {b"GET": "list_tenants", b"POST": "create_tenant"}),
        (tenant, {b"GET": "get_tenant", b"DELETE": "delete_tenant"}),
        ((*tenant, "states"), {b"GET": "list_states"}),
        ((*tenant, "workspaces"), {b"GET": "list_workspaces", b"POST": "create_workspace"}),
        (workspace, {b"GET": "get_workspace", b"DELETE": "delete_workspace"}),
        ((*workspace, "environments"), {b"GET": "list_environments",
                                        b"POST": "create_environment"}),
        ((*workspace, "environments", "{environment}"), {b"GET": "get_environment",
                                                         b"DELETE": "delete_environment"}),
        ((*tenant, "tokens"), {b"GET": "list_tokens", b"POST": "create_token"}),
        ((*tenant, "tokens", "{token}"), {b"GET": "get_token", b"DELETE": "revoke_token"}),
        ((*tenant, "events"), {b"GET": "list_events"}),
        ((*tenant, "events", "verify"), {b"GET": "verify_events"}),
    ]
    return [_Route(pattern, "/v1/api/" + "/".join(pattern), methods)
            for pattern, methods in specs]


_ROUTES = _routes()


class ControlAPI:
    """The handlers.  C{store} provides L{ITenantStore} and L{IStateStore};
    C{public_url} gives the base URL of the state lane for backend blocks."""

    def __init__(self, store: Any, control_token: str, reactor: Any,
                 public_url: Callable[[Request], str]) -> None:
        if not control_token:
            raise ValueError("the control API needs KL_CONTROL_TOKEN")
        self.store = store
        self._token = control_token.encode()
        self.reactor = reactor
        self.public_url = public_url

    def authorized(self, request: Request) -> bool:
        scheme, _, value = (request.getHeader(b"Authorization") or b"").strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self._token)

    def actor(self, request: Request) -> Principal:
        return Principal(tenant=DEFAULT_TENANT, name=CONTROL_PRINCIPAL,
                         address=client_address(request))

    async def tenant(self, reference: str) -> Tenant:
        found = await self.store.find_tenant(reference)
        if found is None:
            raise TenantNotFound("no such tenant")
        assert isinstance(found, Tenant)
        return found

    # -- tenants --------------------------------------------------------

    async def list_tenants(self, request: Request, params: Params) -> Response:
        deleted = _query_flag(request, "deleted", "true")
        tenants = await self.store.list_tenants(include_deleted=deleted)
        return json_response({"tenants": [tenant_document(t) for t in tenants]})

    async def create_tenant(self, request: Request, params: Params) -> Response:
        body = await _json_object(request, self.reactor, {"slug": True, "name": True})
        tenant = await self.store.create_tenant(body["slug"], body["name"], self.actor(request))
        return json_response(await self._tenant_detail(tenant), 201)

    async def get_tenant(self, request: Request, params: Params) -> Response:
        tenant = await self.tenant(params["tenant"])
        return json_response(await self._tenant_detail(tenant))

    async def _tenant_detail(self, tenant: Tenant) -> dict[str, Any]:
        workspaces = await self.store.list_workspaces(tenant.id)
        environments = await self.store.list_environments(tenant.id)
        states = await self.store.list_states(tenant.id)
        return {**tenant_document(tenant), "state_count": len(states),
                "workspaces": [workspace_document(w, environments) for w in workspaces]}

    async def delete_tenant(self, request: Request, params: Params) -> Response:
        delete_states = _query_flag(request, "states", "delete")
        deletion = await self.store.delete_tenant(params["tenant"], self.actor(request),
                                                  delete_states=delete_states)
        return json_response({**tenant_document(deletion.tenant),
                              "deleted_states": list(deletion.deleted_states),
                              "revoked_tokens": list(deletion.revoked_tokens)})

    async def list_states(self, request: Request, params: Params) -> Response:
        tenant = await self.tenant(params["tenant"])
        now = utcnow()
        summaries = await self.store.list_states(tenant.id)
        return json_response({"states": [{
            "path": summary.key.path,
            "serial": None if summary.current is None else summary.current.serial,
            "version_count": summary.version_count,
            "resource_count": summary.resource_count,
            "updated_at": rfc3339(summary.updated_at),
            "lock": None if summary.lock is None else lock_document(summary.lock, now),
        } for summary in summaries]})

    # -- workspaces and environments -------------------------------------

    async def list_workspaces(self, request: Request, params: Params) -> Response:
        tenant = await self.tenant(params["tenant"])
        workspaces = await self.store.list_workspaces(tenant.id)
        environments = await self.store.list_environments(tenant.id)
        return json_response({"workspaces": [workspace_document(w, environments)
                                             for w in workspaces]})

    async def create_workspace(self, request: Request, params: Params) -> Response:
        body = await _json_object(request, self.reactor, {"name": True})
        workspace = await self.store.create_workspace(params["tenant"], body["name"],
                                                      self.actor(request))
        environments = await self.store.list_environments(workspace.tenant_id, workspace.id)
        return json_response(workspace_document(workspace, environments), 201)

    async def get_workspace(self, request: Request, params: Params) -> Response:
        tenant = await self.tenant(params["tenant"])
        workspace = await self._workspace(tenant, params["workspace"])
        environments = await self.store.list_environments(tenant.id, workspace.id)
        return json_response(workspace_document(workspace, environments))

    async def _workspace(self, tenant: Tenant, reference: str) -> Workspace:
        for workspace in await self.store.list_workspaces(tenant.id):
            if reference in (workspace.id, workspace.name):
                assert isinstance(workspace, Workspace)
                return workspace
        raise WorkspaceNotFound("the tenant has no such workspace")

    async def delete_workspace(self, request: Request, params: Params) -> Response:
        workspace = await self.store.delete_workspace(params["tenant"], params["workspace"],
                                                      self.actor(request))
        return json_response(workspace_document(workspace))

    async def list_environments(self, request: Request, params: Params) -> Response:
        tenant = await self.tenant(params["tenant"])
        environments = await self.store.list_environments(tenant.id, params["workspace"])
        return json_response({"environments": [environment_document(e)
                                               for e in environments]})

    async def create_environment(self, request: Request, params: Params) -> Response:
        body = await _json_object(request, self.reactor, {"name": True})
        environment = await self.store.create_environment(
            params["tenant"], params["workspace"], body["name"], self.actor(request))
        return json_response(environment_document(environment), 201)

    async def get_environment(self, request: Request, params: Params) -> Response:
        tenant = await self.tenant(params["tenant"])
        for environment in await self.store.list_environments(tenant.id, params["workspace"]):
            if params["environment"] in (environment.id, environment.name):
                return json_response(environment_document(environment))
        raise EnvironmentNotFound("the workspace has no such environment")

    async def delete_environment(self, request: Request, params: Params) -> Response:
        environment = await self.store.delete_environment(
            params["tenant"], params["workspace"], params["environment"], self.actor(request))
        return json_response(environment_document(environment))

    # -- tokens ---------------------------------------------------------

    async def list_tokens(self, request: Request, params: Params) -> Response:
        tokens = await self.store.list_tokens(params["tenant"])
        return json_response({"tokens": [token_document(t) for t in tokens]})

    async def create_token(self, request: Request, params: Params) -> Response:
        body = await _json_object(request, self.reactor, {
            "name": True, "environment": True, "workspace": False, "scope": False,
            "state": False})
        state = hosted.check_name(body.get("state", hosted.DEFAULT_NAME), "state")
        issued = await self.store.create_token(
            params["tenant"], body["name"], body.get("workspace"), body["environment"],
            body.get("scope", hosted.WRITE_SCOPE), self.actor(request))
        token = issued.token
        base = self.public_url(request)
        address = hosted.state_address(base, token.workspace_id, token.env_public_id, state)
        document = {
            **token_document(token),
            "token_secret": issued.secret,
            "username": token.workspace_id,
            "state_address": address,
            "unlock_address": hosted.unlock_address(base, token.workspace_id,
                                                    token.env_public_id, state),
            "remote_state_block": hosted.remote_state_block(base, token.workspace_id,
                                                            token.env_public_id, state),
        }
        if token.scope == hosted.WRITE_SCOPE:
            document["backend_block"] = hosted.backend_block(base, token.workspace_id,
                                                             token.env_public_id, state)
        return json_response(document, 201)

    async def get_token(self, request: Request, params: Params) -> Response:
        for token in await self.store.list_tokens(params["tenant"]):
            if token.id == params["token"]:
                return json_response(token_document(token))
        raise TokenNotFound("the tenant has no such token")

    async def revoke_token(self, request: Request, params: Params) -> Response:
        token = await self.store.revoke_token(params["tenant"], params["token"],
                                              self.actor(request))
        return json_response(token_document(token))

    # -- the audit trail ------------------------------------------------

    async def list_events(self, request: Request, params: Params) -> Response:
        tenant = await self.tenant(params["tenant"])
        kinds = query_values(request, "kind") or None
        events = await self.store.list_events(
            tenant.id, state_path=_query(request, "state") or None, kinds=kinds,
            since=_query_time(request, "since"), until=_query_time(request, "until"))
        return json_response({"tenant": tenant.id,
                              "events": [event_document(e) for e in events]})

    async def verify_events(self, request: Request, params: Params) -> Response:
        tenant = await self.tenant(params["tenant"])
        events = await self.store.list_events(tenant.id)
        broken = verify_chain(events)
        document: dict[str, Any] = {
            "ok": broken is None,
            "tenant": tenant.id,
            "events": len(events),
            "head_seq": events[-1].seq if events else 0,
            "head_hash": events[-1].hash if events else None,
        }
        if broken is not None:
            document["first_broken"] = {"seq": broken.seq, "kind": broken.event.kind,
                                        "at": rfc3339(broken.event.at),
                                        "reason": broken.reason()}
        return json_response(document)


class ControlResource(AsyncResource):
    """C{/v1/api/...}: authenticates, then routes the remaining segments."""

    route = "/v1/api"

    def __init__(self, api: ControlAPI) -> None:
        super().__init__()
        self.api = api

    def render(self, request: Request) -> Any:
        request.route = self.route  # type: ignore[attr-defined]
        try:
            if not self.api.authorized(request):
                raise ControlUnauthorized(
                    "the control API needs Authorization: Bearer <KL_CONTROL_TOKEN>")
            route, params = self._match(request)
            name = route.methods.get(request.method.upper())
            if name is None:
                raise MethodNotAllowed(sorted(route.methods))
        except KilolockError as error:
            write_response(request, response_for_error(error))
            return NOT_DONE_YET
        request.route = route.template  # type: ignore[attr-defined]
        method: Callable[[Request, Params], Coroutine[Any, Any, Response]] = getattr(
            self.api, name)
        self.run(request, lambda req: method(req, params), request.method == b"GET")
        return NOT_DONE_YET

    def _match(self, request: Request) -> tuple[_Route, Params]:
        segments = [validate_segment(raw) for raw in request.postpath or []]
        for route in _ROUTES:
            params = route.match(segments)
            if params is not None:
                return route, params
        raise NotFound("no such control API route; see docs/hosting.md")


class ControlSite(KilolockSite):
    """The control listener's site: a Kilolock site (body limit, deadlines,
    request ids, access events) whose log lines say C{ControlSite}, e.g.
    C{ControlSite starting on 8090}."""


def build_control_root(api: ControlAPI) -> Resource:
    """The control listener's tree: C{/v1/api/...} and C{/healthz}."""
    root = _Branch()
    v1 = _Branch()
    root.putChild(b"v1", v1)
    root.putChild(b"healthz", HealthResource())
    v1.putChild(b"api", ControlResource(api))
    return root
