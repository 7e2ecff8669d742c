"""A tenant's API tokens on the control API.

  /v1/api/tenants/{tenant}/tokens             L{TokensResource}
    {token_id}                                L{TokenResource}

A new token's secret is answered once, with the backend block (or, for a
read token, the remote-state block) that uses it; an outputs-only token
(scope C{outputs}) reads TFE workspaces and non-sensitive outputs only
(docs/tfe-lane.md), so it comes with neither.
"""

from __future__ import annotations

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import TokenNotFound
from kilolock.rules import hosted
from kilolock.web.control.api import ControlAPI, ControlResource, json_object
from kilolock.web.control.documents import token_document
from kilolock.web.documents import json_response
from kilolock.web.resource import Response, render_async


class TokensResource(ControlResource):
    """The tenant's tokens (never their secrets); POST issues one."""

    route = "/v1/api/tenants/{tenant}/tokens"

    def child(self, segment: str) -> Resource:
        return TokenResource(self.api, self.tenant, segment)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        tokens = await self.api.store.list_tokens(self.tenant)
        return json_response({"tokens": [token_document(t) for t in tokens]})

    @render_async
    async def render_POST(self, request: Request) -> Response:
        body = await json_object(request, self.api.reactor, {
            "name": True, "environment": True, "workspace": False, "scope": False,
            "state": False})
        state = hosted.check_name(body.get("state", hosted.DEFAULT_NAME), "state")
        issued = await self.api.store.create_token(
            self.tenant, body["name"], body.get("workspace"), body["environment"],
            body.get("scope", hosted.WRITE_SCOPE), self.api.actor(request))
        token = issued.token
        base = self.api.public_url(request)
        where = (base, token.workspace_id, token.env_public_id, state)
        document = {
            **token_document(token),
            "token_secret": issued.secret,
            "username": token.workspace_id,
            "state_address": hosted.state_address(*where),
            "unlock_address": hosted.unlock_address(*where),
        }
        if token.scope != hosted.OUTPUTS_SCOPE:  # outputs-only tokens read no state
            document["remote_state_block"] = hosted.remote_state_block(*where)
        if token.scope in (hosted.WRITE_SCOPE, hosted.ADMIN_SCOPE):
            document["backend_block"] = hosted.backend_block(*where)
        return json_response(document, 201)


class TokenResource(ControlResource):
    """One token; DELETE revokes it."""

    route = "/v1/api/tenants/{tenant}/tokens/{token}"

    def __init__(self, api: ControlAPI, tenant: str, token: str) -> None:
        super().__init__(api, tenant)
        self.token = token

    @render_async
    async def render_GET(self, request: Request) -> Response:
        for token in await self.api.store.list_tokens(self.tenant):
            if token.id == self.token:
                return json_response(token_document(token))
        raise TokenNotFound("the tenant has no such token")

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        token = await self.api.store.revoke_token(self.tenant, self.token,
                                                  self.api.actor(request))
        return json_response(token_document(token))
