"""C{ITenantStore}: hosted mode's tenants, workspaces, environments and tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zope.interface import Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from kilolock.core.model import (
        Principal,
    )
    from kilolock.rules.hosted import (
        ApiToken,
        Environment,
        IssuedToken,
        Tenant,
        TenantDeletion,
        Workspace,
    )


class ITenantStore(Interface):
    """Hosted mode (C{KL_AUTH_MODE=database}): tenants, their workspaces and
    environments, and API tokens.  Both stores provide it next to
    L{IStateStore} (the same object).

    Every method is one transaction, and every mutation appends its event
    (C{tenant_create}, C{workspace_create}, C{token_revoke}, ...) to the
    tenant's audit chain in that transaction.  Events never hold a token's
    secret or hash.

    C{tenant} arguments name a tenant by its slug (live tenants only) or by
    its id (C{tn_...}, deleted tenants too; mutating a deleted tenant is
    L{kilolock.core.errors.NotFound}).  C{workspace} and C{environment} arguments
    take an id (C{ws_...}, C{env_...}) or a name.  C{actor} is the
    L{Principal} recorded in the events.  Unknown tenants, workspaces,
    environments and tokens named by the caller are L{kilolock.core.errors.NotFound};
    a name that is taken is L{kilolock.core.errors.AlreadyExists}.
    """

    def create_tenant(slug: str, name: str, actor: Principal) -> Deferred[Tenant]:
        """Create a tenant with a workspace C{default} holding an environment
        C{default}.  @return: a Deferred firing with the new L{Tenant}."""

    def list_tenants(include_deleted: bool = False) -> Deferred[list[Tenant]]:
        """@return: a Deferred firing with the tenants (live ones, plus the
        deleted ones with C{include_deleted}), by slug, then oldest first."""

    def find_tenant(tenant: str) -> Deferred[Tenant | None]:
        """@return: a Deferred firing with the L{Tenant} or None."""

    def delete_tenant(tenant: str, actor: Principal,
                      delete_states: bool = False) -> Deferred[TenantDeletion]:
        """Delete a live tenant: revoke its tokens, delete its workspaces and
        environments, free its slug, mark it deleted and append
        C{tenant_delete} (its row and its whole audit chain are kept).

        While it has states this is L{kilolock.core.errors.NotEmpty}, unless
        C{delete_states}: then its states are deleted first (one
        C{state_delete} event each), and it is still C{NotEmpty} while any of
        them is locked.

        @return: a Deferred firing with a L{TenantDeletion}."""

    def create_workspace(tenant: str, name: str, actor: Principal) -> Deferred[Workspace]:
        """Create a workspace with an environment C{default}.
        @return: a Deferred firing with the new L{Workspace}."""

    def list_workspaces(tenant: str) -> Deferred[list[Workspace]]:
        """@return: a Deferred firing with the tenant's workspaces, by name."""

    def delete_workspace(tenant: str, workspace: str, actor: Principal) -> Deferred[Workspace]:
        """Delete a workspace and its environments, revoking their tokens;
        L{kilolock.core.errors.NotEmpty} while any state lives under it.
        @return: a Deferred firing with the deleted L{Workspace}."""

    def create_environment(tenant: str, workspace: str, name: str,
                           actor: Principal) -> Deferred[Environment]:
        """@return: a Deferred firing with the new L{Environment}."""

    def list_environments(tenant: str,
                          workspace: str | None = None) -> Deferred[list[Environment]]:
        """@return: a Deferred firing with the environments of one workspace
        (or of the whole tenant), by name."""

    def delete_environment(tenant: str, workspace: str, environment: str,
                           actor: Principal) -> Deferred[Environment]:
        """Delete an environment, revoking its tokens; L{kilolock.core.errors.NotEmpty}
        while any state lives under it.
        @return: a Deferred firing with the deleted L{Environment}."""

    def create_token(tenant: str, name: str, workspace: str | None, environment: str,
                     scope: str, actor: Principal) -> Deferred[IssuedToken]:
        """Create a token for one environment (of C{workspace}, or of the
        workspace C{default} when None).  A workspace or environment that
        does not exist is L{kilolock.core.errors.InvalidField} naming the field;
        a name used by another live token of the tenant is AlreadyExists.

        @return: a Deferred firing with the L{IssuedToken} (its secret is
            shown this once and stored only as SHA-256)."""

    def list_tokens(tenant: str) -> Deferred[list[ApiToken]]:
        """@return: a Deferred firing with the tenant's tokens, revoked ones
        included, oldest first (never a secret)."""

    def revoke_token(tenant: str, token_id: str, actor: Principal) -> Deferred[ApiToken]:
        """Revoke a token from now on (revoking a revoked token changes
        nothing and appends no event).
        @return: a Deferred firing with the L{ApiToken}."""

    def authenticate_token(token_hash: str) -> Deferred[ApiToken | None]:
        """The live token whose secret has SHA-256 C{token_hash} (hex), of a
        live tenant; None for an unknown or revoked one.  Records
        C{last_used_at}, at most once per
        L{kilolock.rules.hosted.LAST_USED_INTERVAL} seconds per token (so a busy
        token does not make every request a write).

        @return: a Deferred firing with the L{ApiToken} or None."""

    def refused_token_reason(token_hash: str) -> Deferred[str]:
        """Why L{authenticate_token} found no live token with this hash, for
        the access log (asked only after a refusal).

        @return: a Deferred firing with C{"unknown_token"},
            C{"revoked_token"} or C{"tenant_deleted"}."""
