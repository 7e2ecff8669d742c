"""L{IOidcPolicyStore} in memory: the hosted tenants' OIDC policies, next to
L{kilolock.store.memory.tenants.MemoryTenants} (whose tenants, workspaces
and environments they belong to) and sharing the store's audit chain.
Each method runs synchronously and completes or raises before changing
anything, like one database transaction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from attrs import define, field
from twisted.internet.defer import Deferred, maybeDeferred
from zope.interface import implementer

from kilolock.auth.oidc.model import OidcPolicyRecord, OidcTenant
from kilolock.core.audit import control_detail, oidc_policy_detail
from kilolock.core.events import OIDC_POLICY_DELETE, OIDC_POLICY_SET
from kilolock.core.model import Principal
from kilolock.store.interfaces.oidc import IOidcPolicyStore
from kilolock.store.memory.part import MemoryPart
from kilolock.store.memory.tenants import AppendEvent, MemoryTenants


@implementer(IOidcPolicyStore)
@define
class MemoryOidcPolicies(MemoryPart):
    """Policies by tenant id."""

    _tenants: MemoryTenants
    _append_event: AppendEvent
    clock: Callable[[], datetime]
    _policies: dict[str, OidcPolicyRecord] = field(factory=dict, init=False)

    def get_oidc_policy(self, tenant: str) -> Deferred[OidcPolicyRecord | None]:
        return maybeDeferred(lambda: self._policies.get(self._tenants.known_tenant(tenant).id))

    def put_oidc_policy(self, tenant: str, document: str,
                        actor: Principal) -> Deferred[OidcPolicyRecord]:
        def put() -> OidcPolicyRecord:
            found = self._tenants.live_tenant(tenant)
            now = self.clock()
            record = self._policies[found.id] = OidcPolicyRecord(found.id, document, now)
            self._append_event(found.id, OIDC_POLICY_SET, actor.name, None, now,
                               detail=oidc_policy_detail(document, actor))
            return record

        return maybeDeferred(put)

    def delete_oidc_policy(self, tenant: str,
                           actor: Principal) -> Deferred[OidcPolicyRecord | None]:
        def delete() -> OidcPolicyRecord | None:
            found = self._tenants.live_tenant(tenant)
            record = self._policies.pop(found.id, None)
            if record is not None:
                self._append_event(found.id, OIDC_POLICY_DELETE, actor.name, None,
                                   self.clock(), detail=control_detail(actor))
            return record

        return maybeDeferred(delete)

    def oidc_tenant_of_workspace(self, workspace_id: str) -> Deferred[OidcTenant | None]:
        def find() -> OidcTenant | None:
            places = self._tenants.places_of_workspace(workspace_id)
            if places is None:
                return None
            tenant, workspaces, environments = places
            record = self._policies.get(tenant.id)
            return OidcTenant(tenant.id, None if record is None else record.document,
                              tuple(workspaces), tuple(environments))

        return maybeDeferred(find)
