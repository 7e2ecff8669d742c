"""L{ITenantStore} in memory: the hosted-mode half of L{MemoryStateStore}.

L{kilolock.store.memory.store.MemoryStateStore} holds a L{MemoryTenants} and
provides L{ITenantStore} by forwarding to it; the two share the dict of
states (a tenant is deleted with its states) and the audit chain, both handed
to L{MemoryTenants} when it is made.  Each method runs synchronously and
completes or raises before changing anything, like one database transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from attrs import define, evolve, field
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from zope.interface import implementer

from kilolock.core.audit import control_detail, delete_detail
from kilolock.core.errors import (
    AlreadyExists,
    EnvironmentNotFound,
    InvalidField,
    TenantNotFound,
    TokenNotFound,
    Unauthorized,
    WorkspaceNotFound,
)
from kilolock.core.events import (
    ENVIRONMENT_CREATE,
    ENVIRONMENT_DELETE,
    STATE_DELETE,
    TENANT_CREATE,
    TENANT_DELETE,
    TOKEN_CREATE,
    TOKEN_REVOKE,
    WORKSPACE_CREATE,
    WORKSPACE_DELETE,
)
from kilolock.core.model import Principal, StateKey
from kilolock.rules import hosted
from kilolock.rules.hosted import (
    ApiToken,
    Environment,
    IssuedToken,
    Tenant,
    TenantDeletion,
    Workspace,
)
from kilolock.store.interfaces.tenants import ITenantStore
from kilolock.store.memory.part import MemoryPart

if TYPE_CHECKING:
    from kilolock.core.events import AuditEvent
    from kilolock.store.memory.states import StoredState


class AppendEvent(Protocol):
    """Appends an event to a tenant's audit chain (the store's chain)."""

    def __call__(self, tenant: str, kind: str, principal: str, state_path: str | None,
                 at: datetime, *, serial: int | None = None, sha256: str | None = None,
                 detail: dict[str, Any] | None = None) -> AuditEvent: ...


@implementer(ITenantStore)
@define
class MemoryTenants(MemoryPart):
    """Tenants, workspaces, environments and tokens in dicts (by id).

    @ivar _states: the store's states (read and deleted here when a tenant,
        workspace or environment goes).
    @ivar _append_event: appends to the store's audit chain.
    """

    _states: dict[StateKey, StoredState]
    _append_event: AppendEvent
    clock: Callable[[], datetime]
    _tenants: dict[str, Tenant] = field(factory=dict, init=False)
    _workspaces: dict[str, Workspace] = field(factory=dict, init=False)
    _environments: dict[str, Environment] = field(factory=dict, init=False)
    _tokens: dict[str, ApiToken] = field(factory=dict, init=False)
    _token_hashes: dict[str, str] = field(factory=dict, init=False)

    # -- tenants --------------------------------------------------------

    def create_tenant(self, slug: str, name: str, actor: Principal) -> Deferred[Tenant]:
        def create() -> Tenant:
            hosted.check_slug(slug)
            hosted.check_display_name(name)
            if self._live_by_slug(slug) is not None:
                raise AlreadyExists("slug", f"a tenant with the slug {slug!r} exists")
            now = self.clock()
            tenant = Tenant(id=hosted.new_tenant_id(), slug=slug, name=name, created_at=now)
            workspace = Workspace(hosted.new_workspace_id(), tenant.id, hosted.DEFAULT_NAME, now)
            environment = Environment(hosted.new_environment_id(), workspace.id, tenant.id,
                                      hosted.DEFAULT_NAME, now)
            self._tenants[tenant.id] = tenant
            self._workspaces[workspace.id] = workspace
            self._environments[environment.id] = environment
            self._append_event(tenant.id, TENANT_CREATE, actor.name, None, now,
                               detail=control_detail(actor, slug=slug, name=name,
                                                     workspace_id=workspace.id,
                                                     env_public_id=environment.id))
            return tenant

        return maybeDeferred(create)

    def list_tenants(self, include_deleted: bool = False) -> Deferred[list[Tenant]]:
        return succeed(sorted(
            (tenant for tenant in self._tenants.values()
             if include_deleted or tenant.deleted_at is None),
            key=lambda tenant: (tenant.slug, tenant.created_at, tenant.id)))

    def find_tenant(self, tenant: str) -> Deferred[Tenant | None]:
        return succeed(self._find(tenant))

    def delete_tenant(self, tenant: str, actor: Principal,
                      delete_states: bool = False) -> Deferred[TenantDeletion]:
        def delete() -> TenantDeletion:
            found = self._live(tenant)
            keys = sorted((key for key in self._states if key.tenant == found.id),
                          key=lambda key: key.path)
            hosted.check_tenant_deletable(
                len(keys), [key.path for key in keys if self._states[key].lock is not None],
                delete_states)
            now = self.clock()
            for key in keys:
                state = self._states.pop(key)
                self._append_event(found.id, STATE_DELETE, actor.name, key.path, now,
                                   detail=delete_detail(len(state.versions), actor))
            revoked = self._revoke_where(lambda token: token.tenant_id == found.id, now)
            for environment in [e for e in self._environments.values()
                                if e.tenant_id == found.id]:
                del self._environments[environment.id]
            for workspace in [w for w in self._workspaces.values() if w.tenant_id == found.id]:
                del self._workspaces[workspace.id]
            deleted = self._tenants[found.id] = evolve(found, deleted_at=now)
            self._append_event(found.id, TENANT_DELETE, actor.name, None, now,
                               detail=control_detail(actor, slug=found.slug,
                                                     deleted_states=len(keys),
                                                     revoked_tokens=list(revoked)))
            return TenantDeletion(deleted, tuple(key.path for key in keys), revoked)

        return maybeDeferred(delete)

    # -- workspaces and environments -------------------------------------

    def create_workspace(self, tenant: str, name: str, actor: Principal) -> Deferred[Workspace]:
        def create() -> Workspace:
            found = self._live(tenant)
            hosted.check_name(name, "name")
            if any(w.tenant_id == found.id and w.name == name for w in self._workspaces.values()):
                raise AlreadyExists("name", f"the tenant has a workspace named {name!r}")
            now = self.clock()
            workspace = Workspace(hosted.new_workspace_id(), found.id, name, now)
            environment = Environment(hosted.new_environment_id(), workspace.id, found.id,
                                      hosted.DEFAULT_NAME, now)
            self._workspaces[workspace.id] = workspace
            self._environments[environment.id] = environment
            self._append_event(found.id, WORKSPACE_CREATE, actor.name, None, now,
                               detail=control_detail(actor, workspace_id=workspace.id,
                                                     name=name, env_public_id=environment.id))
            return workspace

        return maybeDeferred(create)

    def list_workspaces(self, tenant: str) -> Deferred[list[Workspace]]:
        def select() -> list[Workspace]:
            found = self._known(tenant)
            return sorted((w for w in self._workspaces.values() if w.tenant_id == found.id),
                          key=lambda w: w.name)

        return maybeDeferred(select)

    def delete_workspace(self, tenant: str, workspace: str,
                         actor: Principal) -> Deferred[Workspace]:
        def delete() -> Workspace:
            found, target = self._live_workspace(tenant, workspace)
            self._refuse_states_under(found.id, target.id + "/", "workspace")
            now = self.clock()
            revoked = self._revoke_where(lambda token: token.workspace_id == target.id, now)
            environments = [e for e in self._environments.values()
                            if e.workspace_id == target.id]
            for environment in environments:
                del self._environments[environment.id]
            del self._workspaces[target.id]
            self._append_event(found.id, WORKSPACE_DELETE, actor.name, None, now,
                               detail=control_detail(
                                   actor, workspace_id=target.id, name=target.name,
                                   env_public_ids=sorted(e.id for e in environments),
                                   revoked_tokens=list(revoked)))
            return target

        return maybeDeferred(delete)

    def create_environment(self, tenant: str, workspace: str, name: str,
                           actor: Principal) -> Deferred[Environment]:
        def create() -> Environment:
            found, parent = self._live_workspace(tenant, workspace)
            hosted.check_name(name, "name")
            if any(e.workspace_id == parent.id and e.name == name
                   for e in self._environments.values()):
                raise AlreadyExists("name", f"the workspace has an environment named {name!r}")
            now = self.clock()
            environment = Environment(hosted.new_environment_id(), parent.id, found.id, name,
                                      now)
            self._environments[environment.id] = environment
            self._append_event(found.id, ENVIRONMENT_CREATE, actor.name, None, now,
                               detail=control_detail(actor, workspace_id=parent.id,
                                                     env_public_id=environment.id, name=name))
            return environment

        return maybeDeferred(create)

    def list_environments(self, tenant: str,
                          workspace: str | None = None) -> Deferred[list[Environment]]:
        def select() -> list[Environment]:
            found = self._known(tenant)
            parent = None if workspace is None else self._workspace(found.id, workspace)
            return sorted((e for e in self._environments.values()
                           if e.tenant_id == found.id
                           and (parent is None or e.workspace_id == parent.id)),
                          key=lambda e: (e.name, e.workspace_id))

        return maybeDeferred(select)

    def delete_environment(self, tenant: str, workspace: str, environment: str,
                           actor: Principal) -> Deferred[Environment]:
        def delete() -> Environment:
            found, parent = self._live_workspace(tenant, workspace)
            target = self._environment(parent, environment)
            self._refuse_states_under(found.id, f"{parent.id}/{target.id}/", "environment")
            now = self.clock()
            revoked = self._revoke_where(lambda token: token.env_public_id == target.id, now)
            del self._environments[target.id]
            self._append_event(found.id, ENVIRONMENT_DELETE, actor.name, None, now,
                               detail=control_detail(actor, workspace_id=parent.id,
                                                     env_public_id=target.id, name=target.name,
                                                     revoked_tokens=list(revoked)))
            return target

        return maybeDeferred(delete)

    # -- tokens ---------------------------------------------------------

    def create_token(self, tenant: str, name: str, workspace: str | None, environment: str,
                     scope: str, actor: Principal) -> Deferred[IssuedToken]:
        def create() -> IssuedToken:
            found = self._live(tenant)
            hosted.check_name(name, "name")
            hosted.check_scope(scope)
            try:
                parent = self._workspace(found.id, workspace or hosted.DEFAULT_NAME)
            except WorkspaceNotFound:
                raise InvalidField("workspace", "the tenant has no such workspace") from None
            try:
                target = self._environment(parent, environment)
            except EnvironmentNotFound:
                raise InvalidField("environment",
                                   "the workspace has no such environment") from None
            if any(t.tenant_id == found.id and t.name == name and t.revoked_at is None
                   for t in self._tokens.values()):
                raise AlreadyExists("name", f"the tenant has a live token named {name!r}")
            now = self.clock()
            secret = hosted.new_token_secret()
            token = ApiToken(id=hosted.new_token_id(), tenant_id=found.id, name=name,
                             workspace_id=parent.id, env_public_id=target.id, scope=scope,
                             created_at=now)
            self._tokens[token.id] = token
            self._token_hashes[hosted.token_hash(secret)] = token.id
            self._append_event(found.id, TOKEN_CREATE, actor.name, None, now,
                               detail=control_detail(actor, token_id=token.id, name=name,
                                                     scope=scope, workspace_id=parent.id,
                                                     env_public_id=target.id))
            return IssuedToken(token, secret)

        return maybeDeferred(create)

    def list_tokens(self, tenant: str) -> Deferred[list[ApiToken]]:
        def select() -> list[ApiToken]:
            found = self._known(tenant)
            return sorted((t for t in self._tokens.values() if t.tenant_id == found.id),
                          key=lambda t: (t.created_at, t.id))

        return maybeDeferred(select)

    def revoke_token(self, tenant: str, token_id: str, actor: Principal) -> Deferred[ApiToken]:
        def revoke() -> ApiToken:
            found = self._live(tenant)
            token = self._tokens.get(token_id)
            if token is None or token.tenant_id != found.id:
                raise TokenNotFound("the tenant has no such token")
            if token.revoked_at is not None:
                return token
            now = self.clock()
            revoked = self._tokens[token.id] = evolve(token, revoked_at=now)
            self._append_event(found.id, TOKEN_REVOKE, actor.name, None, now,
                               detail=control_detail(actor, token_id=token.id, name=token.name))
            return revoked

        return maybeDeferred(revoke)

    def authenticate_token(self, token_hash: str) -> Deferred[ApiToken | None]:
        token_id = self._token_hashes.get(token_hash)
        token = self._tokens.get(token_id) if token_id is not None else None
        if token is None or token.revoked_at is not None:
            return succeed(None)
        tenant = self._tenants.get(token.tenant_id)
        if tenant is None or tenant.deleted_at is not None:
            return succeed(None)
        now = self.clock()
        if token.last_used_at is None or (
                now - token.last_used_at >= timedelta(seconds=hosted.LAST_USED_INTERVAL)):
            token = self._tokens[token.id] = evolve(token, last_used_at=now)
        return succeed(token)

    def refused_token_reason(self, token_hash: str) -> Deferred[str]:
        token_id = self._token_hashes.get(token_hash)
        token = self._tokens.get(token_id) if token_id is not None else None
        tenant = None if token is None else self._tenants.get(token.tenant_id)
        if token is None or tenant is None:
            return succeed("unknown_token")
        if tenant.deleted_at is not None:
            return succeed("tenant_deleted")
        return succeed("revoked_token" if token.revoked_at is not None else "unknown_token")

    # -- used by the state lane and the OIDC policies ---------------------

    def live_tenant(self, tenant: str) -> Tenant:
        """The live tenant a slug or id names.  @raise TenantNotFound."""
        return self._live(tenant)

    def known_tenant(self, tenant: str) -> Tenant:
        """The tenant (deleted ones too) a slug or id names.
        @raise TenantNotFound."""
        return self._known(tenant)

    def places_of_workspace(self, workspace_id: str,
                            ) -> tuple[Tenant, list[Workspace], list[Environment]] | None:
        """The live tenant owning the workspace, with all its workspaces and
        environments; None when no live tenant has it."""
        workspace = self._workspaces.get(workspace_id)
        tenant = None if workspace is None else self._tenants.get(workspace.tenant_id)
        if tenant is None or tenant.deleted_at is not None:
            return None
        return (tenant,
                sorted((w for w in self._workspaces.values() if w.tenant_id == tenant.id),
                       key=lambda w: w.id),
                sorted((e for e in self._environments.values() if e.tenant_id == tenant.id),
                       key=lambda e: e.id))

    def check_state_owner(self, key: StateKey) -> None:
        """Refuse to create a state of a hosted tenant that was deleted, or
        under an environment that does not exist (the token that authorised
        the request was revoked with it after the request was let in)."""
        tenant = self._tenants.get(key.tenant)
        if tenant is None:
            return  # not a hosted tenant (open and static modes)
        workspace_id, _, rest = key.path.partition("/")
        env_public_id = rest.partition("/")[0]
        environment = self._environments.get(env_public_id)
        if (tenant.deleted_at is not None or environment is None
                or environment.tenant_id != tenant.id
                or environment.workspace_id != workspace_id):
            raise Unauthorized("the token's tenant, workspace or environment no longer exists")

    # -- private --------------------------------------------------------

    def _find(self, tenant: str) -> Tenant | None:
        if hosted.is_public_id(tenant, hosted.TENANT_PREFIX):
            return self._tenants.get(tenant)
        return self._live_by_slug(tenant)

    def _live_by_slug(self, slug: str) -> Tenant | None:
        return next((t for t in self._tenants.values()
                     if t.slug == slug and t.deleted_at is None), None)

    def _known(self, tenant: str) -> Tenant:
        found = self._find(tenant)
        if found is None:
            raise TenantNotFound("no such tenant")
        return found

    def _live(self, tenant: str) -> Tenant:
        found = self._known(tenant)
        if found.deleted_at is not None:
            raise TenantNotFound("no such tenant")
        return found

    def _live_workspace(self, tenant: str, workspace: str) -> tuple[Tenant, Workspace]:
        """A live tenant and one of its workspaces."""
        found = self._live(tenant)
        return found, self._workspace(found.id, workspace)

    def _workspace(self, tenant_id: str, workspace: str) -> Workspace:
        for candidate in self._workspaces.values():
            if candidate.tenant_id == tenant_id and workspace in (candidate.id, candidate.name):
                return candidate
        raise WorkspaceNotFound("the tenant has no such workspace")

    def _environment(self, parent: Workspace, environment: str) -> Environment:
        for candidate in self._environments.values():
            if (candidate.workspace_id == parent.id
                    and environment in (candidate.id, candidate.name)):
                return candidate
        raise EnvironmentNotFound("the workspace has no such environment")

    def _refuse_states_under(self, tenant_id: str, prefix: str, what: str) -> None:
        hosted.check_no_states_under(what, sum(
            1 for key in self._states if key.tenant == tenant_id and key.path.startswith(prefix)))

    def _revoke_where(self, revoke: Callable[[ApiToken], bool],
                      now: datetime) -> tuple[str, ...]:
        revoked = []
        for token in sorted(self._tokens.values(), key=lambda t: (t.created_at, t.id)):
            if token.revoked_at is None and revoke(token):
                self._tokens[token.id] = evolve(token, revoked_at=now)
                revoked.append(token.id)
        return tuple(revoked)
