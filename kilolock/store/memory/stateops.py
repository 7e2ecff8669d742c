"""Operations, upload sessions and content addresses in memory: the
L{IStateOperationsStore} half of L{kilolock.store.memory.store.MemoryStateStore}
(which writes several states itself: L{MemoryStateStore.write_states}).

Each method runs synchronously and completes or raises before changing
anything, like one database transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from attrs import define, evolve, field
from twisted.internet.defer import Deferred, maybeDeferred, succeed

from kilolock.core.model import StateKey
from kilolock.stateops import chunks
from kilolock.stateops.model import OperationRecord, Owner, UploadSession
from kilolock.store.memory.part import MemoryPart

if TYPE_CHECKING:
    from kilolock.store.memory.states import StoredState

#: The fields of an operation L{MemoryStateOps.update_operation} changes.
_CHANGEABLE = frozenset({"status", "progress", "result", "error", "lease_expires_at", "locks",
                         "updated_at"})


@define
class MemoryStateOps(MemoryPart):
    """Operations by id, upload sessions by id with their chunks' bytes.

    @ivar _states: the store's states (read only here).
    """

    _states: dict[StateKey, StoredState]
    clock: Callable[[], datetime]
    _operations: dict[str, OperationRecord] = field(factory=dict, init=False)
    _uploads: dict[str, UploadSession] = field(factory=dict, init=False)
    _chunk_bytes: dict[str, dict[int, bytes]] = field(factory=dict, init=False)

    # -- operations -------------------------------------------------------

    def create_operation(self, record: OperationRecord) -> Deferred[None]:
        self._operations[record.id] = record
        return succeed(None)

    def find_operation(self, owner: Owner, operation_id: str) -> Deferred[OperationRecord | None]:
        found = self._operations.get(operation_id)
        return succeed(found if found is not None and found.owner == owner else None)

    def update_operation(self, operation_id: str,
                         changes: Mapping[str, Any]) -> Deferred[OperationRecord | None]:
        unknown = set(changes) - _CHANGEABLE
        if unknown:
            raise ValueError(f"not changeable: {sorted(unknown)}")

        def update() -> OperationRecord | None:
            found = self._operations.get(operation_id)
            if found is None or found.finished:
                return found
            updated = self._operations[operation_id] = evolve(found, **changes)
            return updated

        return maybeDeferred(update)

    def request_cancel(self, owner: Owner, operation_id: str,
                       now: datetime) -> Deferred[OperationRecord | None]:
        found = self._operations.get(operation_id)
        if found is None or found.owner != owner:
            return succeed(None)
        if not found.finished:
            found = self._operations[operation_id] = evolve(found, cancel_requested=True,
                                                            updated_at=now)
        return succeed(found)

    def expired_operations(self, now: datetime) -> Deferred[list[OperationRecord]]:
        return succeed([record for record in self._operations.values() if record.expired(now)])

    # -- upload sessions ----------------------------------------------------

    def open_upload(self, session: UploadSession, limit: int) -> Deferred[None]:
        def open_() -> None:
            for old in [s for s in self._uploads.values()
                        if s.expires_at <= session.created_at]:
                del self._uploads[old.id]
                self._chunk_bytes.pop(old.id, None)
            live = sum(1 for s in self._uploads.values()
                       if s.owner == session.owner and s.committed_version is None)
            if live >= limit:
                raise chunks.TooManyUploads(
                    f"at most {limit} upload sessions may be open at once; commit or abandon"
                    " one first")
            self._uploads[session.id] = session
            self._chunk_bytes[session.id] = {}

        return maybeDeferred(open_)

    def _live(self, owner: Owner, upload_id: str, now: datetime) -> UploadSession | None:
        found = self._uploads.get(upload_id)
        if found is None or found.owner != owner or found.expires_at <= now:
            return None
        return found

    def find_upload(self, owner: Owner, upload_id: str,
                    now: datetime) -> Deferred[UploadSession | None]:
        return succeed(self._live(owner, upload_id, now))

    def put_chunk(self, owner: Owner, upload_id: str, offset: int, data: bytes,
                  now: datetime, expires_at: datetime) -> Deferred[UploadSession]:
        def put() -> UploadSession:
            session = self._live(owner, upload_id, now)
            if session is None:
                raise chunks.UploadNotFound()
            chunk = chunks.chunk_of(offset, data)
            placement = chunks.place_chunk(session, chunk)
            if placement is chunks.Placement.ADD:
                self._chunk_bytes[upload_id][offset] = bytes(data)
                session = evolve(session, chunks=tuple(sorted(
                    (*session.chunks, chunk), key=lambda c: c.offset)))
            session = self._uploads[upload_id] = evolve(session, expires_at=expires_at)
            return session

        return maybeDeferred(put)

    def upload_bytes(self, owner: Owner, upload_id: str,
                     now: datetime) -> Deferred[bytes | None]:
        session = self._live(owner, upload_id, now)
        if session is None or not session.ready:
            return succeed(None)
        pieces = self._chunk_bytes[upload_id]
        return succeed(b"".join(pieces[offset] for offset in sorted(pieces)))

    def finish_upload(self, owner: Owner, upload_id: str,
                      committed_version: int | None) -> Deferred[bool]:
        found = self._uploads.get(upload_id)
        if found is None or found.owner != owner:
            return succeed(False)
        self._chunk_bytes.pop(upload_id, None)
        if committed_version is None:
            del self._uploads[upload_id]
        else:
            self._uploads[upload_id] = found.committed_to(committed_version)
        return succeed(True)

    # -- content addresses --------------------------------------------------

    def find_digest(self, tenant: str, sha256: str) -> Deferred[list[tuple[str, int]]]:
        found = [(stored.meta.created_at, key.path, stored.meta.number)
                 for key, state in self._states.items() if key.tenant == tenant
                 for stored in state.versions
                 if stored.meta.sha256 == sha256 and stored.raw is not None]
        found.sort(key=lambda item: (item[0], item[1], item[2]), reverse=True)
        return succeed([(path, number) for _, path, number in found])
