"""The values of CI identity in hosted mode: a tenant's stored OIDC policy,
and what verifying a token for a hosted state needs of its tenant."""

from __future__ import annotations

from datetime import datetime

from attrs import frozen

from kilolock.rules.hosted import Environment, Workspace


@frozen
class OidcPolicyRecord:
    """A hosted tenant's stored OIDC policy: the canonical JSON text of a
    validated document (L{kilolock.auth.oidc.validation.validate_policy})."""

    tenant_id: str
    document: str
    updated_at: datetime


@frozen
class OidcTenant:
    """What verifying a CI token for a hosted state needs of the tenant that
    owns the workspace: the tenant, its policy (None: it has none), and its
    workspaces and environments (grants may name them by id or by name)."""

    tenant_id: str
    document: str | None
    workspaces: tuple[Workspace, ...] = ()
    environments: tuple[Environment, ...] = ()
