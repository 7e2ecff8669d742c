"""JSON answers of the native and control APIs, and the documents both
show: a held lock and an audit event."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from kilolock.model import AuditEvent, HeldLock, rfc3339
from kilolock.tfe.locks import lane_of
from kilolock.web._base import JSON, Response

NO_STORE = {b"Cache-Control": b"no-store"}


def json_response(document: Any, status: int = 200) -> Response:
    """C{document} as indented JSON, never cached."""
    body = json.dumps(document, indent=2, ensure_ascii=False).encode("utf-8") + b"\n"
    return Response(status, body, JSON, dict(NO_STORE))


def lock_document(lock: HeldLock, now: datetime) -> dict[str, Any]:
    try:
        info: Any = json.loads(lock.info.raw)
    except ValueError:
        info = None
    return {
        "id": lock.info.id,
        "operation": lock.info.operation,
        "who": lock.info.who,
        "version": lock.info.version,
        "created": None if lock.info.created is None else rfc3339(lock.info.created),
        "acquiredAt": rfc3339(lock.acquired_at),
        "ageSeconds": max(0, int((now - lock.acquired_at).total_seconds())),
        "principal": lock.principal,
        # Which lane took it: "http" (a LOCK) or "tfe" (actions/lock).
        "lane": lane_of(lock.info),
        "info": info,
    }


def event_document(event: AuditEvent) -> dict[str, Any]:
    try:
        detail: Any = json.loads(event.detail)
    except ValueError:
        detail = None
    return {
        "seq": event.seq,
        "tenant": event.tenant,
        "kind": event.kind,
        "state": event.state_path,
        "principal": event.principal,
        "at": rfc3339(event.at),
        "lockId": event.lock_id,
        "serial": event.serial,
        "sha256": event.sha256,
        "detail": detail,
        # The exact text that was hashed, so a client can check the chain.
        "detailText": event.detail,
        "prevHash": event.prev_hash,
        "hash": event.hash,
    }
