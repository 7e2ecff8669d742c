"""L{IStateOperationsStore}: what the stores keep for state operations and
upload sessions, and the write of several states in one transaction.

Both stores provide it next to L{kilolock.store.interfaces.states.IStateStore} (the same
object).  Every method is one transaction.  Lookups of a handle take its
L{Owner}: a record of another owner is answered exactly as a record that
does not exist (None), so the rule that handles are owned is kept by the
stores' queries themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from zope.interface import Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from kilolock.core.model import LockInfo, Principal, StateKey, WriteOutcome
    from kilolock.stateops.model import OperationRecord, Owner, StateWrite, UploadSession


class IStateOperationsStore(Interface):
    """Operations, upload sessions and their chunks; atomic writes of
    several states; the versions of a tenant that hold some bytes."""

    def write_states(writes: Sequence[StateWrite], principal: Principal,
                     event_kind: str) -> Deferred[list[WriteOutcome]]:
        """Store a new version of every state in C{writes}, all in one
        transaction: every write is checked by the lock matrix and the
        serial rule as L{kilolock.store.interfaces.states.IStateStore.write_state} checks
        one (a missing state is created), a write marked C{first_version}
        also by its state having no version yet, and either every new
        version, its projection and its C{event_kind} event (detail extended
        by the write's C{event_detail}) is committed, or nothing is.  On
        PostgreSQL the states' rows are locked in the order of their ids.

        @return: a Deferred firing with the L{WriteOutcome} of each write, in
            order; failing with the first refusal (L{kilolock.core.errors.LockConflict},
            L{kilolock.core.errors.LockNotHeld}, L{kilolock.core.errors.SerialConflict},
            L{kilolock.core.errors.StateExists}).
        """

    def acquire_lock_if_exists(key: StateKey, info: LockInfo,
                               principal: Principal) -> Deferred[bool | None]:
        """Lock C{key} as L{kilolock.store.interfaces.states.IStateStore.acquire_lock}
        does when the state exists; when it does not, change nothing (no
        state is created, no event appended).  A state operation locks the
        states it names this way, so that an operation refused or failed
        leaves no state behind: the states it creates are created by its
        write, with their first version.

        @return: a Deferred firing with True when newly acquired, False for
            the holder's own ID, None when there is no such state; failing
            with L{kilolock.core.errors.LockConflict} (423) when another ID holds it.
        """

    # -- operations -------------------------------------------------------

    def create_operation(record: OperationRecord) -> Deferred[None]:
        """Keep a new operation.  @return: a Deferred firing with None."""

    def find_operation(owner: Owner, operation_id: str) -> Deferred[OperationRecord | None]:
        """@return: a Deferred firing with the operation, or None when there is
        none with that id owned by C{owner}."""

    def update_operation(operation_id: str, changes: Mapping[str, Any],
                         ) -> Deferred[OperationRecord | None]:
        """Change fields of an operation (C{status}, C{progress}, C{result},
        C{error}, C{lease_expires_at}, C{locks}, C{updated_at}); a finished
        operation no longer changes.

        @return: a Deferred firing with the record after the change (None:
            no such operation)."""

    def request_cancel(owner: Owner, operation_id: str,
                       now: datetime) -> Deferred[OperationRecord | None]:
        """Ask a running operation of C{owner} to stop (nothing for a
        finished one).  @return: a Deferred firing with the record, or None."""

    def expired_operations(now: datetime) -> Deferred[list[OperationRecord]]:
        """@return: a Deferred firing with the running operations whose
        lease expired by C{now} (their process stopped)."""

    # -- upload sessions ----------------------------------------------------

    def open_upload(session: UploadSession, limit: int) -> Deferred[None]:
        """Keep a new upload session; sessions expired by its C{created_at}
        are dropped with their chunks in the same transaction.

        @return: a Deferred firing with None; failing with
            L{kilolock.stateops.chunks.TooManyUploads} when its owner already
            has C{limit} live sessions."""

    def find_upload(owner: Owner, upload_id: str,
                    now: datetime) -> Deferred[UploadSession | None]:
        """@return: a Deferred firing with the live session, or None (none
        with that id of C{owner}, or expired)."""

    def put_chunk(owner: Owner, upload_id: str, offset: int, data: bytes, now: datetime,
                  expires_at: datetime) -> Deferred[UploadSession]:
        """Add C{data} at C{offset} to a live session of C{owner} (see
        L{kilolock.stateops.chunks.place_chunk}: a repeated chunk is a
        replay; a committed session takes none); its expiry moves to
        C{expires_at}.

        @return: a Deferred firing with the session; failing with
            L{kilolock.stateops.chunks.UploadNotFound} or the errors of
            L{kilolock.stateops.chunks.place_chunk}."""

    def upload_bytes(owner: Owner, upload_id: str,
                     now: datetime) -> Deferred[bytes | None]:
        """@return: a Deferred firing with the received bytes of a live,
        complete, uncommitted session of C{owner} in order, or None.  On
        PostgreSQL, chunks sealed with the store's keys are opened (failing
        with the typed errors of L{kilolock.atrest.errors}, 502)."""

    def finish_upload(owner: Owner, upload_id: str, committed_version: int | None,
                      ) -> Deferred[bool]:
        """Delete a session's chunks (their rows, not only their bytes); with
        C{committed_version} keep the session (until it expires) as
        committed to that version
        (L{kilolock.stateops.model.UploadSession.committed_to}), else delete
        it too.

        @return: a Deferred firing with whether such a session was there."""

    # -- content addresses --------------------------------------------------

    def find_digest(tenant: str, sha256: str) -> Deferred[list[tuple[str, int]]]:
        """@return: a Deferred firing with the (state path, version number)
        of C{tenant}'s stored versions whose bytes have that SHA-256, newest
        first (another tenant's versions are never among them, nor a
        tombstone: its bytes are gone)."""
