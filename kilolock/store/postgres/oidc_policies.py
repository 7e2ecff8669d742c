"""L{IOidcPolicyStore} in PostgreSQL: hosted tenants' OIDC policies (table
C{oidc_policies}, schema version 5).

Every public method is one transaction.  A change locks its tenant's row
first (as every control-plane change does: see
L{kilolock.store.postgres.tenants}), writes with one statement
(C{INSERT ... ON CONFLICT DO UPDATE}, C{DELETE ... RETURNING}) and appends
its event before committing.  The lookup a CI token's login makes
(L{PostgresOidcPolicies.oidc_tenant_of_workspace}) is three short
statements by primary key or tenant.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from zope.interface import implementer

from kilolock.auth.oidc.model import OidcPolicyRecord, OidcTenant
from kilolock.core.audit import control_detail, oidc_policy_detail
from kilolock.core.errors import TenantNotFound
from kilolock.core.events import OIDC_POLICY_DELETE, OIDC_POLICY_SET
from kilolock.core.model import Principal
from kilolock.store.interfaces.oidc import IOidcPolicyStore
from kilolock.store.postgres import rows
from kilolock.store.postgres.events import append_event_txn
from kilolock.store.postgres.part import StorePart
from kilolock.store.postgres.rows import ENVIRONMENT_COLUMNS, WORKSPACE_COLUMNS

__all__ = ["PostgresOidcPolicies"]

_TENANT = ("SELECT id, deleted_at IS NOT NULL FROM tenants WHERE slug IS NOT NULL AND"
           " (id = %(tenant)s OR (slug = %(tenant)s AND deleted_at IS NULL))")

_PUT = """
INSERT INTO oidc_policies (tenant_id, document, updated_at) VALUES (%s, %s, %s)
ON CONFLICT (tenant_id) DO UPDATE SET document = excluded.document,
                                      updated_at = excluded.updated_at
RETURNING tenant_id, document, updated_at
"""

# The live tenant owning the workspace, and its policy (NULL: none).
_OF_WORKSPACE = """
SELECT t.id, p.document FROM workspaces w
JOIN tenants t ON t.id = w.tenant_id AND t.deleted_at IS NULL
LEFT JOIN oidc_policies p ON p.tenant_id = t.id
WHERE w.id = %(workspace)s
"""

_WORKSPACES = (f"SELECT {WORKSPACE_COLUMNS} FROM workspaces"  # noqa: S608 - constants
               " WHERE tenant_id = %s ORDER BY id")
_ENVIRONMENTS = (f"SELECT {ENVIRONMENT_COLUMNS} FROM environments"  # noqa: S608 - constants
                 " WHERE tenant_id = %s ORDER BY id")


def _record(row: Any) -> OidcPolicyRecord:
    tenant_id, document, updated_at = row
    return OidcPolicyRecord(tenant_id, document, rows.utc(updated_at))


@implementer(IOidcPolicyStore)
class PostgresOidcPolicies(StorePart):
    """Hosted tenants' OIDC policies, run by C{runner}."""

    async def _tenant_txn(self, cursor: Any, tenant: str, *, live: bool) -> str:
        """The id of the tenant a slug or id names (a live one, its row
        locked, with C{live}).  @raise TenantNotFound."""
        await cursor.execute(_TENANT + (" FOR UPDATE" if live else ""), {"tenant": tenant})
        row = cursor.fetchone()
        if row is None or (live and row[1]):
            raise TenantNotFound("no such tenant")
        return str(row[0])

    def get_oidc_policy(self, tenant: str) -> Deferred[OidcPolicyRecord | None]:
        async def get(cursor: Any) -> OidcPolicyRecord | None:
            tenant_id = await self._tenant_txn(cursor, tenant, live=False)
            await cursor.execute("SELECT tenant_id, document, updated_at FROM oidc_policies"
                                 " WHERE tenant_id = %s", (tenant_id,))
            row = cursor.fetchone()
            return None if row is None else _record(row)

        return self._runner.run_interaction(get)

    def put_oidc_policy(self, tenant: str, document: str,
                        actor: Principal) -> Deferred[OidcPolicyRecord]:
        async def put(cursor: Any) -> OidcPolicyRecord:
            tenant_id = await self._tenant_txn(cursor, tenant, live=True)
            now = self._clock()
            await cursor.execute(_PUT, (tenant_id, document, now))
            record = _record(cursor.fetchone())
            await append_event_txn(cursor, tenant_id, OIDC_POLICY_SET, actor.name, None, now,
                                   detail=oidc_policy_detail(document, actor))
            return record

        return self._runner.run_interaction(put)

    def delete_oidc_policy(self, tenant: str,
                           actor: Principal) -> Deferred[OidcPolicyRecord | None]:
        async def delete(cursor: Any) -> OidcPolicyRecord | None:
            tenant_id = await self._tenant_txn(cursor, tenant, live=True)
            await cursor.execute("DELETE FROM oidc_policies WHERE tenant_id = %s"
                                 " RETURNING tenant_id, document, updated_at", (tenant_id,))
            row = cursor.fetchone()
            if row is None:
                return None
            await append_event_txn(cursor, tenant_id, OIDC_POLICY_DELETE, actor.name, None,
                                   self._clock(), detail=control_detail(actor))
            return _record(row)

        return self._runner.run_interaction(delete)

    def oidc_tenant_of_workspace(self, workspace_id: str) -> Deferred[OidcTenant | None]:
        async def find(cursor: Any) -> OidcTenant | None:
            await cursor.execute(_OF_WORKSPACE, {"workspace": workspace_id})
            row = cursor.fetchone()
            if row is None:
                return None
            tenant_id, document = row
            await cursor.execute(_WORKSPACES, (tenant_id,))
            workspaces = tuple(rows.workspace(each) for each in cursor.fetchall())
            await cursor.execute(_ENVIRONMENTS, (tenant_id,))
            environments = tuple(rows.environment(each) for each in cursor.fetchall())
            return OidcTenant(tenant_id, document, workspaces, environments)

        return self._runner.run_interaction(find)
