"""The JSON documents of the control API: tenants, workspaces, environments
and tokens (a token never with its secret or its hash)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kilolock.core.model import rfc3339
from kilolock.rules.hosted import ApiToken, Environment, Tenant, Workspace


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else rfc3339(moment)


def tenant_document(tenant: Tenant) -> dict[str, Any]:
    """A tenant: its id, slug and name; deleted ones say when."""
    return {"id": tenant.id, "slug": tenant.slug, "name": tenant.name,
            "created_at": rfc3339(tenant.created_at), "deleted_at": _time(tenant.deleted_at)}


def environment_document(environment: Environment) -> dict[str, Any]:
    """An environment, naming its workspace."""
    return {"id": environment.id, "name": environment.name,
            "workspace_id": environment.workspace_id,
            "created_at": rfc3339(environment.created_at)}


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

