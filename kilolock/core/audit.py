"""The per-tenant hash chain of audit events, shared by every store."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from attrs import evolve, frozen

from kilolock.core.events import LOCK_FORCE_RELEASE, AuditEvent
from kilolock.core.model import LockInfo, Principal, rfc3339

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


@frozen
class ChainHead:
    """A tenant's chain head: the seq and hash of its newest event (seq 0
    and L{GENESIS} before the first).  Each store records it apart from the
    events, moved in the transaction that appends one; an operator may pin
    it outside Kilolock.  Written and read as C{SEQ:HASH}."""

    seq: int
    hash: str

    def __str__(self) -> str:
        return f"{self.seq}:{self.hash}"

    @classmethod
    def parse(cls, text: str) -> ChainHead:
        """C{SEQ:HASH} as a head.  @raise ValueError: it is not one."""
        seq, separator, hash_ = text.strip().partition(":")
        if (not separator or not seq.isascii() or not seq.isdigit() or len(seq) > 10
                or not _HASH.fullmatch(hash_)):
            raise ValueError("a chain head is SEQ:HASH, e.g. 42:" + "0" * 64)
        return cls(int(seq), hash_)


_HASH = re.compile("[0-9a-f]{64}")

#: The head of a chain without events.
GENESIS_HEAD = ChainHead(0, GENESIS)

#: The ways a chain can break, as L{ChainBreak.problem} names them.
MISSING = "missing"
NOT_GENESIS = "not_genesis"
UNLINKED = "unlinked"
ALTERED = "altered"
#: The chain ends before a head it must reach: its newest events are gone.
TRUNCATED = "truncated"
#: The event at a head's seq is not the one the head names: the chain was
#: rewritten up to there.
HEAD_MISMATCH = "head_mismatch"


@frozen
class ChainBreak:
    """Where and why a chain of audit events stops verifying.

    C{event} is the first event that does not verify (for L{TRUNCATED}: the
    last event there is, None when there is none); C{expected_seq} is the
    seq that should have stood there (it differs from C{event.seq} when
    events are missing before it; for L{TRUNCATED}, the first missing seq).
    C{head} is the head that was not reached or not matched, if that is
    what broke."""

    event: AuditEvent | None
    problem: str
    expected_seq: int
    head: ChainHead | None = None

    @property
    def seq(self) -> int:
        """The seq the break is reported at: the event's, or (truncation) the
        first missing one."""
        if self.problem == TRUNCATED or self.event is None:
            return self.expected_seq
        return self.event.seq

    def reason(self) -> str:
        """The break in a sentence (names seqs and hashes, never content)."""
        if self.problem == TRUNCATED:
            assert self.head is not None
            last = self.expected_seq - 1
            return (f"the chain ends at event seq {last} but its head is seq {self.head.seq}:"
                    f" the events after seq {last} are missing (truncated)")
        if self.problem == HEAD_MISMATCH:
            assert self.head is not None
            return (f"event seq {self.head.seq} is not the head recorded for it"
                    f" ({self.head.hash[:16]}...): the chain was rewritten")
        assert self.event is not None
        if self.problem == MISSING:
            return f"expected event seq {self.expected_seq} here, found seq {self.event.seq}"
        if self.problem == NOT_GENESIS:
            return "the first event does not start from the genesis hash"
        if self.problem == UNLINKED:
            return "its prev_hash is not the hash of the event before it"
        return "its contents do not match its hash (the event was altered)"


def verify_chain(events: Iterable[AuditEvent], *, complete: bool = True,
                 heads: Iterable[ChainHead] = ()) -> ChainBreak | None:
    """Walk events in C{seq} order and return the first break, or None when
    every event verifies.

    C{complete}: the events are a tenant's whole chain, so the first must
    start from L{GENESIS} with seq 1 and no seq may be missing.  Otherwise
    (a filtered selection) each event's own hash is checked, and its link
    wherever its predecessor is in the selection too.

    C{heads}: heads the chain must pass through -- the one the store
    recorded, one pinned outside Kilolock: the event at each head's seq has
    the head's hash (else L{HEAD_MISMATCH}), and the chain reaches every
    head (else L{TRUNCATED}).  Events after a head are fine (appended
    since).  Only a whole chain (C{complete}) can be checked against heads.
    """
    wanted = {head.seq: head for head in heads}
    previous: AuditEvent | None = None
    for event in events:
        expected = 1 if previous is None else previous.seq + 1
        follows = previous is not None and event.seq == expected
        if complete and event.seq != expected:
            return ChainBreak(event, MISSING, expected)
        if complete and previous is None and event.prev_hash != GENESIS:
            return ChainBreak(event, NOT_GENESIS, expected)
        if follows and previous is not None and event.prev_hash != previous.hash:
            return ChainBreak(event, UNLINKED, expected)
        if event_hash(event) != event.hash:
            return ChainBreak(event, ALTERED, event.seq)
        head = wanted.get(event.seq)
        if head is not None and head.hash != event.hash:
            return ChainBreak(event, HEAD_MISMATCH, event.seq, head)
        previous = event
    last = 0 if previous is None else previous.seq
    for seq in sorted(wanted):
        head = wanted[seq]
        if seq > last:
            return ChainBreak(previous, TRUNCATED, last + 1, head)
        if seq == 0 and head.hash != GENESIS:
            return ChainBreak(previous, HEAD_MISMATCH, 0, head)
    return None


def first_broken_link(events: Iterable[AuditEvent]) -> AuditEvent | None:
    """The first event of a tenant's whole chain that does not verify, or
    None when the chain holds (L{verify_chain} says why)."""
    broken = verify_chain(events)
    return None if broken is None else broken.event


# -- what each state-lane event records (the same in every store) ---------------


def _client(principal: Principal) -> dict[str, Any]:
    detail: dict[str, Any] = {"client": principal.address} if principal.address else {}
    if principal.token_id:  # hosted mode: which token acted
        detail["token"] = principal.token_id
    if principal.oidc is not None:  # a CI job: issuer, sub, repository, ref, run, sha
        detail["oidc"] = principal.oidc.audit_detail()
    return detail


def write_detail(number: int, size: int, principal: Principal) -> dict[str, Any]:
    """Detail of a C{state_write} event: the version number and size."""
    return {"version": number, "size": size, **_client(principal)}


def client_version_detail(terraform_version: str | None) -> dict[str, Any]:
    """What a write event records of the version of Terraform/OpenTofu that
    wrote the state (the state's C{terraform_version}, at most 64
    characters; nothing for an encrypted state)."""
    return {"terraform_version": terraform_version[:64]} if terraform_version else {}


def delete_detail(versions: int, principal: Principal) -> dict[str, Any]:
    """Detail of a C{state_delete} event: how many versions were deleted."""
    return {"versions": versions, **_client(principal)}


def lock_detail(info: LockInfo, principal: Principal) -> dict[str, Any]:
    """Detail of lock events: the holder's Who and Operation, never the Info."""
    return {"who": info.who, "operation": info.operation, **_client(principal)}


def release_detail(kind: str, info: LockInfo, principal: Principal) -> dict[str, Any]:
    """Detail of a release event of C{kind}: who released the lock.  A forced
    release (C{lock_force_release}: another holder's lock) also names the
    lock's Who and Operation; an owner's release (C{lock_release}) does not
    repeat them: they are its C{lock_acquire} event's, the event with the
    same lock ID."""
    if kind == LOCK_FORCE_RELEASE:
        return lock_detail(info, principal)
    return _client(principal)


def control_detail(principal: Principal, **fields: Any) -> dict[str, Any]:
    """Detail of a control-plane event (C{tenant_create}, C{token_revoke},
    ...): what changed (ids and names, never a token's secret or hash) and
    who asked."""
    return {**fields, **_client(principal)}


def oidc_policy_detail(document: str, principal: Principal) -> dict[str, Any]:
    """Detail of an C{oidc_policy_set} event: the issuers trusted (name and
    URL), the rules' names, and the SHA-256 of the stored document (the
    document itself is read through the control API)."""
    try:
        parsed = json.loads(document)
    except ValueError:
        parsed = {}
    issuers = parsed.get("issuers", []) if isinstance(parsed, dict) else []
    rules = parsed.get("rules", []) if isinstance(parsed, dict) else []
    return {
        "issuers": [{"name": issuer.get("name"), "url": issuer.get("url")}
                    for issuer in issuers if isinstance(issuer, dict)],
        "rules": [rule.get("name") for rule in rules if isinstance(rule, dict)],
        "sha256": hashlib.sha256(document.encode()).hexdigest(),
        **_client(principal),
    }
