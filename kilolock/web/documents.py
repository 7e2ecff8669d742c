"""JSON answers of the native and control APIs, and the documents both
show: a held lock and an audit event."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from kilolock.core.events import AuditEvent
from kilolock.core.model import HeldLock, rfc3339
from kilolock.core.text import stored_document
from kilolock.tfe.locks import lane_of
from kilolock.tfstate.values import compact_json
from kilolock.web.resource import JSON, Response

NO_STORE = {b"Cache-Control": b"no-store"}


def json_response(document: Any, status: int = 200) -> Response:
    """C{document} as indented JSON (L{json_bytes}), never cached."""
    return Response(status, json_bytes(document), JSON, dict(NO_STORE))


def json_bytes(document: Any, indent: int | None = 2) -> bytes:
    """C{document} as UTF-8 JSON, indented and with a final newline (or
    compact, with C{indent=None}), whatever a store handed back: an
    unpaired surrogate in a string is written as its JSON escape
    (C{\\ud800}), never raised on; a document too deep for the indenting
    encoder, or holding a number beyond a double's range, is written compact
    (L{compact_json}: such numbers as text)."""
    try:
        text = json.dumps(document, indent=indent, ensure_ascii=False, allow_nan=False)
    except (RecursionError, ValueError):
        text = compact_json(document)
    return text.encode("utf-8", "backslashreplace") + (b"" if indent is None else b"\n")


def lock_document(lock: HeldLock, now: datetime) -> dict[str, Any]:
    """A held lock: its LockInfo's fields, when and by whom it was taken
    (the server's time: C{acquiredAt}, C{ageSeconds}), and the LockInfo
    itself (null when it cannot be shown as JSON)."""
    info = stored_document(lock.info.raw)
    return {
        "id": lock.info.id,
        "operation": lock.info.operation,
        "who": lock.info.who,
        "version": lock.info.version,
        "created": None if lock.info.created is None else rfc3339(lock.info.created),
        "acquiredAt": rfc3339(lock.acquired_at),
        "ageSeconds": max(0, int((now - lock.acquired_at).total_seconds())),
        "principal": lock.principal,
        # Which lane took it: "http" (a LOCK), "tfe" (actions/lock) or
        # "operation" (a state operation of the native lane).
        "lane": lane_of(lock.info),
        "info": info,
    }


def event_document(event: AuditEvent) -> dict[str, Any]:
    """An event with its detail decoded (null when it cannot be shown as
    JSON) and the exact text that was hashed."""
    detail = stored_document(event.detail)
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
