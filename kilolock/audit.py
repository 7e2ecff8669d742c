"""The per-tenant hash chain of audit events, shared by every store."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from attrs import evolve

from kilolock.model import AuditEvent, LockInfo, Principal, rfc3339

#: The C{prev_hash} of a tenant's first event.
GENESIS = "0" * 64


def canonical_detail(detail: Mapping[str, Any] | None) -> str:
    """An event's C{detail} as the text every store keeps and hashes:
    compact, key-sorted JSON."""
    return json.dumps(dict(detail or {}), sort_keys=True, separators=(",", ":"))


def unchained_event(tenant: str, kind: str, principal: str, state_path: str | None,
                    at: datetime, *, lock_id: str | None = None, serial: int | None = None,
                    sha256: str | None = None,
                    detail: Mapping[str, Any] | None = None) -> AuditEvent:
    """An event before it joins its tenant's chain: C{seq}, C{prev_hash} and
    C{hash} are filled in by the store that appends it."""
    return AuditEvent(seq=0, tenant=tenant, kind=kind, state_path=state_path,
                      principal=principal, at=at, lock_id=lock_id, serial=serial,
                      sha256=sha256, detail=canonical_detail(detail))


def event_hash(event: AuditEvent) -> str:
    """SHA-256 over the previous hash and the event's canonical JSON fields."""
    return hashlib.sha256((event.prev_hash + _canonical(event)).encode()).hexdigest()


def event_hash_template(event: AuditEvent) -> tuple[str, str]:
    """L{event_hash}'s input around the event's C{seq}: the hash is the
    SHA-256 of C{prev_hash + prefix + str(seq) + suffix} (ASCII), for a
    database that links and hashes an event in the statement that appends it
    (when the chain head is read there).  C{event.seq} is ignored."""
    canonical = _canonical(evolve(event, seq=0))
    prefix, suffix = canonical.split('"seq":0,', 1)  # keys are sorted: not the last
    return prefix + '"seq":', "," + suffix


def _canonical(event: AuditEvent) -> str:
    return json.dumps(
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


# -- what each state-lane event records (the same in every store) ---------------


def _client(principal: Principal) -> dict[str, Any]:
    detail: dict[str, Any] = {"client": principal.address} if principal.address else {}
    if principal.token_id:  # hosted mode: which token acted
        detail["token"] = principal.token_id
    return detail


def write_detail(number: int, size: int, principal: Principal) -> dict[str, Any]:
    """Detail of a C{state_write} event: the version number and size."""
    return {"version": number, "size": size, **_client(principal)}


def delete_detail(versions: int, principal: Principal) -> dict[str, Any]:
    """Detail of a C{state_delete} event: how many versions were deleted."""
    return {"versions": versions, **_client(principal)}


def lock_detail(info: LockInfo, principal: Principal) -> dict[str, Any]:
    """Detail of lock events: the holder's Who and Operation, never the Info."""
    return {"who": info.who, "operation": info.operation, **_client(principal)}


def control_detail(principal: Principal, **fields: Any) -> dict[str, Any]:
    """Detail of a control-plane event (C{tenant_create}, C{token_revoke},
    ...): what changed (ids and names, never a token's secret or hash) and
    who asked."""
    return {**fields, **_client(principal)}
