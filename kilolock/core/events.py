"""Audit events: the record of one mutation, and every kind of event.

Each kind is named here once; the stores append them in the transaction of
the mutation they record, and the audit chain (L{kilolock.core.audit})
links them per tenant.
"""

from __future__ import annotations

from datetime import datetime

from attrs import frozen


@frozen
class AuditEvent:
    """One mutation, hash-chained per tenant.  Never holds state bytes or secrets."""

    seq: int  # position in the tenant's chain, from 1
    tenant: str
    kind: str
    state_path: str | None
    principal: str
    at: datetime
    lock_id: str | None = None
    serial: int | None = None
    sha256: str | None = None
    detail: str = "{}"  # JSON text
    prev_hash: str = ""
    hash: str = ""


#: The state lane: a version written or a state deleted, a lock taken,
#: released by its owner or released by force.
STATE_WRITE = "state_write"
STATE_DELETE = "state_delete"
LOCK_ACQUIRE = "lock_acquire"
LOCK_RELEASE = "lock_release"
LOCK_FORCE_RELEASE = "lock_force_release"

#: The native lane: an older version restored as a new one, and a version
#: written by a state operation (C{kl state mv/rm/split/import}; the detail
#: names the operation).
STATE_ROLLBACK = "state_rollback"
STATE_OPERATION = "state_operation"

#: Hosted mode's control plane.
TENANT_CREATE = "tenant_create"
TENANT_DELETE = "tenant_delete"
WORKSPACE_CREATE = "workspace_create"
WORKSPACE_DELETE = "workspace_delete"
ENVIRONMENT_CREATE = "environment_create"
ENVIRONMENT_DELETE = "environment_delete"
TOKEN_CREATE = "token_create"  # noqa: S105 - an event kind
TOKEN_REVOKE = "token_revoke"  # noqa: S105 - an event kind

#: CI identity: a hosted tenant's OIDC policy set or removed.
OIDC_POLICY_SET = "oidc_policy_set"
OIDC_POLICY_DELETE = "oidc_policy_delete"

#: State at rest: versions pruned by retention, one version purged, a
#: retention override set or removed.
VERSIONS_PRUNE = "versions_prune"
VERSION_PURGE = "version_purge"
RETENTION_SET = "retention_set"
RETENTION_CLEAR = "retention_clear"
