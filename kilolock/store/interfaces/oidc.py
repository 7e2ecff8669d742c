"""C{IOidcPolicyStore}: hosted tenants' OIDC policies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zope.interface import Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from kilolock.auth.oidc.model import OidcPolicyRecord, OidcTenant
    from kilolock.core.model import (
        Principal,
    )


class IOidcPolicyStore(Interface):
    """Hosted mode: each tenant's OIDC policy (trusted issuers and rules for
    CI tokens).  Both stores provide it next to L{IStateStore}.

    The store keeps the document as text; the control API validates it
    (L{kilolock.auth.oidc.validation}).  Setting and removing a policy append
    C{oidc_policy_set} / C{oidc_policy_delete} to the tenant's chain in the
    same transaction.  C{tenant} names a tenant by slug or id, as in
    L{ITenantStore}; an unknown (or, for changes, deleted) one is
    L{kilolock.core.errors.TenantNotFound}.
    """

    def get_oidc_policy(tenant: str) -> Deferred[OidcPolicyRecord | None]:
        """@return: a Deferred firing with the tenant's L{OidcPolicyRecord},
        or None when it has none."""

    def put_oidc_policy(tenant: str, document: str,
                        actor: Principal) -> Deferred[OidcPolicyRecord]:
        """Set (or replace) the tenant's policy: C{document} is the canonical
        JSON text of a validated policy.

        @return: a Deferred firing with the stored L{OidcPolicyRecord}."""

    def delete_oidc_policy(tenant: str, actor: Principal) -> Deferred[OidcPolicyRecord | None]:
        """Remove the tenant's policy (no event when it had none).

        @return: a Deferred firing with the removed record, or None."""

    def oidc_tenant_of_workspace(workspace_id: str) -> Deferred[OidcTenant | None]:
        """What verifying a CI token for a state of workspace C{workspace_id}
        needs: the live tenant owning it, its policy, its workspaces and
        environments.

        @return: a Deferred firing with the L{OidcTenant}, or None when no
            live tenant has that workspace."""
