"""The interfaces every store implements.

All methods return Deferreds.  Failures are the typed errors of
L{kilolock.core.errors}; a store never raises anything HTTP-specific beyond them and
never knows about requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from zope.interface import Attribute, Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from kilolock.core.audit import ChainHead
    from kilolock.core.events import AuditEvent
    from kilolock.core.model import (
        HeldLock,
        LockInfo,
        Principal,
        Projection,
        StateKey,
        StateSummary,
        StateUpload,
        StateVersion,
        StoreProbe,
        WriteOutcome,
    )
    from kilolock.rules.event_pages import EventPageQuery
    from kilolock.rules.listing import StateListQuery, StatePage
    from kilolock.rules.resources import ResourceMatch, ResourceQuery


class IStateStore(Interface):
    """States of many tenants: versions kept byte-for-byte, locks, projection
    rows and the audit trail.

    Every public method is one transaction: the lock check, the write, the
    projection and the audit event commit together or not at all.  The lock
    matrix and the serial rule below are decided, for every store, by
    L{kilolock.rules.locks}.
    """

    def start() -> Deferred[None]:
        """Prepare the store (connect, apply the schema).

        @return: a Deferred firing with None when the store can serve.
        """

    def stop() -> Deferred[None]:
        """Release connections.  @return: a Deferred firing with None."""

    def probe() -> Deferred[StoreProbe]:
        """Check the database within a few seconds; never fails.

        @return: a Deferred firing with a L{StoreProbe}.
        """

    def read_current(key: StateKey) -> Deferred[bytes | None]:
        """The bytes of the current version of C{key} (a L{StateKey}).

        @return: a Deferred firing with the exact bytes last written, or None
            when no version exists (also when only a lock created the row).
        """

    def write_state(key: StateKey, upload: StateUpload, lock_id: str | None,
                    principal: Principal, event_kind: str = "state_write",
                    event_detail: Mapping[str, Any] | None = None) -> Deferred[WriteOutcome]:
        """Store C{upload} (a L{StateUpload}) as the new current version.

        The lock matrix: with C{lock_id} (a str) the lock must be held with
        that ID (L{LockNotHeld} when no lock is held, L{LockConflict} 423 when
        another is); with C{lock_id} None the state must be unlocked
        (L{LockConflict} 423).  An upload whose serial and SHA-256 equal a
        stored version's is an idempotent replay (no new version, no event).
        Otherwise a serial equal to the I{current} version's serial is a
        L{SerialConflict}, and any other serial (lower ones included: C{state
        push -force}) becomes a new current version.  Writes one C{state_write}
        event (C{event_kind} names another kind, e.g. C{state_rollback}, and
        C{event_detail} adds keys to its detail, e.g. the restored version).

        @return: a Deferred firing with a L{WriteOutcome}.
        """

    def delete_state(key: StateKey, lock_id: str | None,
                     principal: Principal) -> Deferred[None]:
        """Delete the state, its versions, projection rows and lock; keep its
        events and add a C{state_delete} event.  Same lock rules as
        L{write_state}; L{StateNotFound} when there is no such state.

        @return: a Deferred firing with None.
        """

    def acquire_lock(key: StateKey, info: LockInfo, principal: Principal) -> Deferred[bool]:
        """Lock C{key} with C{info} (a L{LockInfo}), creating the state row if
        needed.  A LOCK with the holder's own ID is an idempotent success.
        L{LockConflict} (423, the holder's bytes) when someone else holds it.
        The lock records C{principal.oidc_token_digest} (see L{HeldLock}).

        @return: a Deferred firing with True when newly acquired, False for the
            idempotent replay.
        """

    def release_lock(key: StateKey, lock_id: str | None, principal: Principal,
                     event_detail: Mapping[str, Any] | None = None,
                     ) -> Deferred[HeldLock | None]:
        """Release the lock.  C{lock_id} str: owner release (idempotent when no
        lock is held; L{LockConflict} 409 when another ID holds it).
        C{lock_id} None: force release of whatever is held, audited as
        C{lock_force_release}.  C{event_detail} adds keys to the event's
        detail (the dashboard marks its force releases).

        @return: a Deferred firing with the released L{HeldLock}, or None when
            nothing was held.
        """

    def get_lock(key: StateKey) -> Deferred[HeldLock | None]:
        """@return: a Deferred firing with the L{HeldLock} on C{key} or None."""

    def get_summary(key: StateKey) -> Deferred[StateSummary | None]:
        """@return: a Deferred firing with a L{StateSummary}, or None when the
        state does not exist."""

    def list_states(tenant: str) -> Deferred[list[StateSummary]]:
        """@return: a Deferred firing with the tenant's L{StateSummary} list,
        ordered by path."""

    def list_states_page(tenant: str, query: StateListQuery) -> Deferred[StatePage]:
        """One page of the tenant's states (see L{StateListQuery}), each with
        the event that wrote its current version.

        @return: a Deferred firing with a L{StatePage}."""

    def list_versions(key: StateKey) -> Deferred[list[StateVersion]]:
        """@return: a Deferred firing with the L{StateVersion} list of C{key},
        oldest first, tombstones included (C{pruned_at} set; empty when the
        state does not exist)."""

    def read_version(key: StateKey, number: int) -> Deferred[bytes | None]:
        """@return: a Deferred firing with the bytes of version C{number}, or
        None when the state has no such version; failing with
        L{kilolock.core.errors.VersionPruned} (410) when only its tombstone is
        left (see L{kilolock.store.interfaces.retention.IRetentionStore})."""

    def get_projection(key: StateKey) -> Deferred[Projection | None]:
        """@return: a Deferred firing with the L{Projection} of the current
        version, or None when there is no current version or it was not
        projected (an encrypted envelope)."""

    def query_resources(tenant: str, query: ResourceQuery) -> Deferred[list[ResourceMatch]]:
        """The resource rows of the current versions of C{tenant}'s states that
        match C{query} (a L{ResourceQuery}), ordered by state path then state
        order, at most C{query.limit} of them.

        @return: a Deferred firing with a list of L{ResourceMatch}."""

    def list_events(tenant: str, state_path: str | None = None,
                    kinds: Iterable[str] | None = None, since: datetime | None = None,
                    until: datetime | None = None) -> Deferred[list[AuditEvent]]:
        """@return: a Deferred firing with the tenant's L{AuditEvent} list in
        chain order, filtered by state path, kinds and a time range."""

    def list_events_page(tenant: str, query: EventPageQuery) -> Deferred[list[AuditEvent]]:
        """A window of the tenant's events (L{kilolock.rules.event_pages}): at most
        C{query.limit} events that L{event_matches} C{query}, on its side of
        its cursor; in one transaction, costing what the window holds.

        @return: a Deferred firing with the events, newest first (oldest
            first when C{query.after} is set)."""

    def record_event(tenant: str, kind: str, principal: str, state_path: str | None = None,
                     detail: dict[str, Any] | None = None) -> Deferred[AuditEvent]:
        """Append a control-plane event to the tenant's chain.

        @return: a Deferred firing with the new L{AuditEvent}."""

    def chain_head(tenant: str) -> Deferred[ChainHead]:
        """The head of the tenant's chain as the store recorded it apart from
        the events (moved in the transaction of every append), so that a
        deletion of the newest events shows (L{kilolock.core.audit.verify_chain}).

        @return: a Deferred firing with the L{ChainHead} (seq 0 and the
            genesis hash for a tenant without events)."""


class IOverlappedWrites(Interface):
    """A state store that can start writing a large upload while it is
    still being parsed (see L{kilolock.store.upload_feed})."""

    def write_state_overlapped(key: StateKey, feed: Any, lock_id: str | None,
                               principal: Principal, event_kind: str = "state_write",
                               detail_of: Any = None) -> Deferred[WriteOutcome]:
        """L{IStateStore.write_state} of the upload C{feed} (an
        L{kilolock.store.upload_feed.UploadFeed}) is parsing, C{detail_of(upload)}
        adding to the event's detail.  The answers and their order are
        those of the parse, then of C{write_state}: a body the parse refuses
        is refused with the parse's error whatever the lock or the serial,
        and nothing is stored.

        @return: a Deferred firing with a L{WriteOutcome}.
        """


class IHealthCheck(Interface):
    """Something whose readiness the server reports."""

    reachable = Attribute("True when the last contact with the database worked")


