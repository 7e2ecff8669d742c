"""What the native and control APIs share about retention and purges: the
documents they answer, and the request bodies they read (a policy, a purge
with its reason).  Who may change either is L{kilolock.rules.scope.check_admin}'s
rule (the control API's token may, for any tenant)."""

from __future__ import annotations

from typing import Any

from kilolock.core.errors import InvalidField
from kilolock.core.model import StateVersion, rfc3339
from kilolock.retention.policy import (
    RetentionPolicy,
    RetentionSetting,
    effective_policy,
    parse_policy,
    policy_document,
)
from kilolock.store.interfaces.retention import IRetentionStore
from kilolock.web.json_body import json_body, only_fields

__all__ = ["MAX_REASON", "policy_body", "purge_body", "retention_answer",
           "tombstone_document"]

#: The longest reason a purge may give (characters).
MAX_REASON = 500


#: The largest body a policy or a purge request may have.
MAX_BODY = 64 * 1024


def policy_body(body: bytes) -> RetentionPolicy:
    """A policy from a request body: C{{"versions": N | null, "days": D | null}}.

    @raise InvalidField: naming the member at fault.
    """
    return parse_policy(json_body(body, MAX_BODY))


def reason_of(value: Any, field: str = "reason") -> str:
    """A purge's reason: 1 to L{MAX_REASON} printable characters.

    @raise InvalidField: naming C{field}.
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidField(field, "a purge needs a reason (why the version must go, e.g."
                                  " \"leaked database password\")")
    reason = value.strip()
    try:
        reason.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidField(field, "the reason must be text without lone surrogates") from None
    if len(reason) > MAX_REASON or not reason.isprintable():
        raise InvalidField(field, f"the reason must be at most {MAX_REASON} printable"
                                  " characters, without control characters")
    return reason


def purge_body(body: bytes, allowed: tuple[str, ...] = ("reason",)) -> dict[str, Any]:
    """A purge request: a JSON object with a C{reason} (and only the
    C{allowed} members).  @return: its members, the reason checked.

    @raise InvalidField: naming the member at fault.
    """
    document = json_body(body, MAX_BODY)
    if not isinstance(document, dict):
        raise InvalidField("body", "the body must be a JSON object: {\"reason\": \"...\"}")
    only_fields(document, allowed)
    return {**document, "reason": reason_of(document.get("reason"))}


def tombstone_document(version: StateVersion) -> dict[str, Any] | None:
    """When and why a version's bytes went (None while they are stored)."""
    if version.pruned_at is None:
        return None
    return {"at": rfc3339(version.pruned_at), "reason": version.prune_reason}


def _setting_document(setting: RetentionSetting | None) -> dict[str, Any] | None:
    if setting is None:
        return None
    return {**policy_document(setting.policy), "updatedAt": rfc3339(setting.updated_at)}


async def retention_answer(store: IRetentionStore, server: RetentionPolicy, tenant: str,
                           path: str | None) -> dict[str, Any]:
    """The policy that applies to a state (or, C{path} None, the tenant's
    default), where it comes from, and each level's setting.

    @return: (awaited) the document."""
    tenant_setting = await store.get_retention(tenant, None)
    own = None if path is None else await store.get_retention(tenant, path)
    effective = effective_policy(server, None if tenant_setting is None
                                 else tenant_setting.policy,
                                 None if own is None else own.policy)
    document: dict[str, Any] = {
        "policy": policy_document(effective.policy),
        "source": effective.source,
        "tenantOverride": _setting_document(tenant_setting),
        "server": policy_document(server),
    }
    if path is not None:
        document = {"state": path, **document, "stateOverride": _setting_document(own)}
    return document
