"""The per-tenant hash chain of audit events, shared by every store."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from kilolock.model import AuditEvent, rfc3339

#: The C{prev_hash} of a tenant's first event.
GENESIS = "0" * 64


def event_hash(event: AuditEvent) -> str:
    """SHA-256 over the previous hash and the event's canonical JSON fields."""
    canonical = json.dumps(
        {
            "seq": event.seq,
            "tenant": event.tenant,
            "kind": event.kind,
            "state_path": event.state_path,
            "principal": event.principal,
            "at": rfc3339(event.at),
            "lock_id": event.lock_id,
            "serial": event.serial,
            "sha256": event.sha256,
            "detail": event.detail,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256((event.prev_hash + canonical).encode()).hexdigest()


def first_broken_link(events: Iterable[AuditEvent]) -> AuditEvent | None:
    """Walk a tenant's events in C{seq} order; return the first whose link or
    hash does not verify, or None when the whole chain holds."""
    previous = GENESIS
    expected_seq = 1
    for event in events:
        if event.seq != expected_seq or event.prev_hash != previous:
            return event
        if event_hash(event) != event.hash:
            return event
        previous = event.hash
        expected_seq += 1
    return None
