"""What every resource of the TFE lane works with (L{TFELane}): the state
lane's authentication and scope rule, organizations, workspaces by name and
by id, the base URL of the URLs the lane hands out, and the record of
unimplemented routes.

Who may address what is decided by the state lane's rule
(L{kilolock.web.lane.StateLane}, L{kilolock.rules.scope}): a workspace named
C{NAME} is the state C{/v1/states/NAME} with the same credentials.  The
organization is the caller's tenant: C{default} in the open and static
auth modes, the tenant's slug (or id) in the database mode; any other is
not found.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from attrs import field, frozen
from twisted.logger import Logger
from twisted.web.server import Request

from kilolock.core.errors import NotFound
from kilolock.core.model import DEFAULT_TENANT, Access, Principal, StateKey, utcnow
from kilolock.rules.scope import scope_prefix, state_key
from kilolock.tfe.model import TFEWorkspace
from kilolock.tfe.names import (
    InvalidName,
    check_workspace_name,
    is_workspace_id,
    workspace_name_of,
)
from kilolock.web.context import context_of
from kilolock.web.lane import StateLane

log = Logger()

#: What a route this lane does not serve is logged as (once per route).
UNIMPLEMENTED_LOG = "the TFE lane does not serve {tfe_route}: answered 404"
#: The most unimplemented route templates remembered (and logged).
MAX_LOGGED_ROUTES = 1000
_LITERAL = re.compile(r"^[a-z][a-z_-]{0,39}$")
#: Collection segments whose next segment is not an id.
_NOT_COLLECTIONS = {"actions", "relationships"}
_HOST = re.compile(r"^[A-Za-z0-9.\-]+(?::[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?$")


def route_template(path: bytes, limit: int = 8) -> str:
    """The TFE route template of a request path: ids and names replaced by
    C{{id}} (a segment after a collection, or not shaped like a word), at
    most C{limit} segments after C{/api/v2}."""
    text = path.decode("utf-8", "replace").split("?", 1)[0]
    segments = text.split("/")[3:]
    shown = []
    previous = ""
    for segment in segments[:limit]:
        literal = (_LITERAL.match(segment) is not None
                   and not (previous.endswith("s") and previous not in _NOT_COLLECTIONS))
        shown.append(segment if literal else "{id}")
        previous = segment if literal else ""
    return "/api/v2/" + "/".join(shown) + ("/..." if len(segments) > limit else "")


class UnimplementedRoutes:
    """Logs each TFE route (method and template) this lane does not serve,
    once, so that what a new Terraform release calls shows up in the log."""

    def __init__(self, limit: int = MAX_LOGGED_ROUTES) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def note(self, method: bytes | None, path: bytes) -> None:
        """A request for C{path} no resource serves."""
        self.note_route(method, route_template(path))

    def note_route(self, method: bytes | None, template: str) -> None:
        """A request with C{method} for a route whose template is C{template}."""
        route = f"{(method or b'?').decode('ascii', 'replace')} {template}"
        if route in self.seen or len(self.seen) >= self.limit:
            return
        self.seen.add(route)
        log.warn(UNIMPLEMENTED_LOG, tfe_route=route)


def visible_to(principal: Principal, path: str) -> bool:
    """Whether C{principal} may know of the workspace of the state at
    C{path} at all (otherwise every answer about it is the 404 of an id that
    never existed): the state is inside the token's workspace/environment and
    addressable as a TFE workspace, and a CI token's grants let it read at
    least the state's outputs."""
    if workspace_name_of(path, scope_prefix(principal)) is None:
        return False
    return principal.oidc is None or principal.oidc.allows(path, Access.OUTPUTS_ONLY)


@frozen
class TFELane:
    """The collaborators of the TFE resources.  C{states} authenticates and
    holds the store (an L{kilolock.store.interfaces.states.IStateStore} that also
    provides L{kilolock.store.interfaces.tfe.ITFEStore}, and
    L{kilolock.store.interfaces.states.ITenantStore} in the database mode);
    C{public_url} is the base of the URLs handed out (None: the request's
    own scheme and host); C{clock} times grants."""

    states: StateLane
    auth_mode: str = "open"
    public_url: str | None = None
    clock: Callable[[], datetime] = utcnow
    unimplemented: UnimplementedRoutes = field(factory=UnimplementedRoutes)

    @property
    def store(self) -> Any:
        return self.states.store

    @property
    def reactor(self) -> Any:
        return self.states.reactor

    # -- callers and organizations ------------------------------------------

    async def caller(self, request: Request, write: bool = False,
                     outputs: bool = False) -> Principal:
        """The authenticated caller, allowed by the scope rule.

        @raise Unauthorized: (401) no valid credentials.
        @raise Forbidden: (403) the scope refuses.
        """
        return await self.states.authorize(request, write, outputs)

    async def in_organization(self, request: Request, organization: str,
                              write: bool = False, outputs: bool = False) -> Principal:
        """The caller of a request under C{organizations/{organization}}.

        @raise NotFound: the organization is not the caller's.
        """
        principal = await self.caller(request, write, outputs)
        await self.check_organization(principal, organization)
        return principal

    async def check_organization(self, principal: Principal, organization: str) -> None:
        """@raise NotFound: C{organization} does not name the caller's tenant."""
        if self.auth_mode != "database":
            if organization != DEFAULT_TENANT or principal.tenant != DEFAULT_TENANT:
                raise NotFound("no such organization")
            return
        tenant = await self.store.find_tenant(organization)
        if tenant is None or tenant.id != principal.tenant or tenant.deleted_at is not None:
            raise NotFound("no such organization")

    async def organization_name(self, principal: Principal) -> str:
        """The name of the caller's organization (its tenant's slug)."""
        if self.auth_mode != "database":
            return DEFAULT_TENANT
        tenant = await self.store.find_tenant(principal.tenant)
        if tenant is None or not tenant.slug:
            raise NotFound("no such organization")
        return str(tenant.slug)

    # -- workspaces --------------------------------------------------------

    async def named(self, request: Request, organization: str, name: str,
                    write: bool = False, outputs: bool = False) -> tuple[Principal, StateKey]:
        """The caller and the state of the workspace C{name} of
        C{organization} (which may not exist yet).

        @raise NotFound: another organization, or a name no workspace can have.
        """
        principal = await self.in_organization(request, organization, write, outputs)
        return principal, self.key_of(request, principal, name, write, outputs)

    def key_of(self, request: Request, principal: Principal, name: str,
               write: bool = False, outputs: bool = False) -> StateKey:
        """The state of the caller's workspace C{name} (the state lane's
        scope rule: L{kilolock.rules.scope.state_key}).

        @raise NotFound: a name no workspace can have.
        @raise Forbidden: the scope refuses.
        """
        try:
            check_workspace_name(name)
        except InvalidName:
            raise NotFound("no such workspace") from None
        key = state_key(principal, (name,), write, outputs=outputs)
        context_of(request).key = key
        return key

    async def by_name(self, request: Request, organization: str, name: str,
                      write: bool = False,
                      outputs: bool = False) -> tuple[Principal, TFEWorkspace]:
        """The caller and the existing workspace C{name} of C{organization}.

        @raise NotFound: no such workspace (or organization).
        """
        principal, key = await self.named(request, organization, name, write, outputs)
        workspace = await self.store.tfe_find_workspace(key)
        if workspace is None:
            raise NotFound("no such workspace")
        assert isinstance(workspace, TFEWorkspace)
        return principal, workspace

    async def by_id(self, request: Request, workspace_id: str, write: bool = False,
                    outputs: bool = False) -> tuple[Principal, TFEWorkspace]:
        """The caller and the workspace with C{workspace_id}.

        @raise NotFound: no such id, another tenant's, or outside the
            caller's scope (one answer for all).
        """
        principal = await self.caller(request, write, outputs)
        workspace = await self.workspace_of(principal, workspace_id, write, outputs)
        context_of(request).key = workspace.key
        return principal, workspace

    async def workspace_of(self, principal: Principal, workspace_id: str,
                           write: bool = False, outputs: bool = False) -> TFEWorkspace:
        """The workspace with C{workspace_id} as C{principal} may see it, for
        a request that writes (C{write}) or reads only outputs (C{outputs}).

        @raise NotFound: no such id, another tenant's, or one the caller may
            not see (see L{visible_to}): one answer for all.
        @raise Forbidden: the caller sees it but may not do this (the scope
            rule of L{kilolock.rules.scope.state_key}: a read-only token or grant
            writing, an outputs-only one reading more than outputs).
        """
        found = None
        if is_workspace_id(workspace_id):
            found = await self.store.tfe_workspace_by_id(principal.tenant, workspace_id)
        if not isinstance(found, TFEWorkspace) or not visible_to(principal, found.key.path):
            raise NotFound("no such workspace")
        state_key(principal, tuple(found.key.path.split("/")), write, outputs=outputs)
        return found

    # -- URLs ---------------------------------------------------------------

    def base_url(self, request: Request) -> str:
        """Where clients reach this server: C{--public-url}, or the request's
        own scheme (forwarded ones honoured from trusted proxies) and host."""
        if self.public_url:
            return self.public_url.rstrip("/")
        origin = getattr(request, "origin", None)
        scheme = origin().scheme if callable(origin) else (
            "https" if request.isSecure() else "http")
        host = (request.getHeader(b"host") or b"").decode("ascii", "replace")
        if not _HOST.match(host):
            address = request.getHost()
            host = f"{getattr(address, 'host', '127.0.0.1')}:{getattr(address, 'port', 80)}"
        return f"{scheme}://{host}"
