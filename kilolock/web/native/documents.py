"""The JSON documents of the native API: versions, state summaries,
resources found in the projection, and lock conflicts."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from kilolock.core.conditions import state_conditions, state_ready
from kilolock.core.errors import LockConflict
from kilolock.core.events import AuditEvent
from kilolock.core.model import HeldLock, LockInfo, StateSummary, StateVersion, rfc3339
from kilolock.core.text import clean_document, stored_document
from kilolock.rules.resources import ResourceMatch
from kilolock.server.metrics import Metrics
from kilolock.web.documents import json_response, lock_document
from kilolock.web.resource import Response, error_body
from kilolock.web.retention import tombstone_document


def version_document(version: StateVersion, current: bool | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "number": version.number,
        "serial": version.serial,
        "lineage": version.lineage,
        "sha256": version.sha256,
        "size": version.size,
        "createdAt": rfc3339(version.created_at),
        "principal": version.principal,
        "projected": version.projected,
        # A tombstone: when and why its bytes went (pruned or purged).
        "pruned": tombstone_document(version),
    }
    if current is not None:
        document["current"] = current
    return document


def summary_document(summary: StateSummary, now: datetime,
                     unlocked_since: datetime | None) -> dict[str, Any]:
    conditions = state_conditions(summary, now, unlocked_since)
    current = summary.current
    return {
        "name": summary.key.path,
        "segments": summary.key.path.split("/"),
        "serial": None if current is None else current.serial,
        "lineage": None if current is None else current.lineage,
        "size": None if current is None else current.size,
        "sha256": None if current is None else current.sha256,
        "currentVersion": None if current is None else current.number,
        "versionCount": summary.version_count,
        "resourceCount": summary.resource_count,
        "updatedAt": rfc3339(summary.updated_at),
        "lock": None if summary.lock is None else lock_document(summary.lock, now),
        "conditions": [condition.to_json() for condition in conditions],
        "ready": state_ready(conditions),
    }


def match_document(match: ResourceMatch) -> dict[str, Any]:
    row = match.resource
    return {
        "state": match.state_path,
        "version": match.version,
        "address": row.address,
        "module": row.module,
        "mode": row.mode,
        "type": row.type,
        "name": row.name,
        "provider": row.provider,
        "indexKey": None if row.index_key is None else stored_document(row.index_key),
        "deposed": row.deposed,
        "attributes": stored_document(row.attributes),
    }


def event_detail(event: AuditEvent | None) -> dict[str, Any]:
    """An event's detail as a JSON object (empty when it is not one), for
    reading its facts: text a page cannot show (NUL, an unpaired surrogate
    an older record holds) is U+FFFD.  (The event document keeps the exact
    text under C{detailText}: the hash is over that.)"""
    if event is None:
        return {}
    detail = stored_document(event.detail)
    return clean_document(detail) if isinstance(detail, dict) else {}


def locked_response(error: LockConflict, metrics: Metrics | None,
                    held: HeldLock | None = None) -> Response:
    """A lock conflict as this lane answers it (counted in C{metrics}): the
    JSON error document, with the holder's LockInfo under C{"lock"} and,
    when C{held} is the lock, the server's time of acquisition under
    C{"acquiredAt"} (what C{kl} shows as "since")."""
    if metrics is not None:
        metrics.lock_conflicts.inc()
    holder = LockInfo.stored(error.holder)
    lock = stored_document(error.holder)
    if holder.id:
        message = (f"the state is locked by {holder.who or 'another client'}"
                   f" ({holder.operation or 'an operation'}, lock ID {holder.id})")
    else:
        message = "the state is locked by another client"
    document = json.loads(error_body("locked", message))
    document["error"]["lock"] = lock
    if held is not None and held.info.raw == error.holder:
        document["error"]["acquiredAt"] = rfc3339(held.acquired_at)
    return json_response(document, error.status)
