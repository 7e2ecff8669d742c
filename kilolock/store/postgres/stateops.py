"""Operations, upload sessions and content addresses in PostgreSQL
(C{009_state_operations.sql}): the L{IStateOperationsStore} methods but
L{write_states} (L{kilolock.store.postgres.multi_write}).

Every lookup of a handle filters on its owner's tenant and principal, so a
handle of another owner is not found, exactly like an unknown id.  Chunks
go in with a binary COPY and come out as one binary result, on the blocking
path (L{kilolock.store.postgres.blocking}): no SQL literal of megabytes.

With encryption keys, a chunk is sealed before it goes in (with the same
keys and AES-GCM as versions, bound to its session and offset:
L{kilolock.atrest.chunks}) and opened when the session is committed; a
committed or abandoned session's chunk rows are deleted.  So the state's
bytes on their way in are never in the database in clear, and what
PostgreSQL keeps of deleted rows (until VACUUM, and in its WAL) is sealed
too.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from attrs import evolve
from twisted.internet.defer import Deferred, ensureDeferred

from kilolock.atrest.chunks import ChunkCodec, StoredChunk
from kilolock.atrest.envelope import ChunkIdentity
from kilolock.stateops import chunks
from kilolock.stateops.model import Chunk, OperationRecord, Owner, UploadSession
from kilolock.store.postgres.blocking import binary_copy
from kilolock.store.postgres.part import StorePart
from kilolock.store.postgres.rows import utc
from kilolock.store.postgres.runner import TransactionRunner

__all__ = ["PostgresStateOps"]

_OPERATION_COLUMNS = (
    "id, tenant_id, principal, kind, request, status, created_at, updated_at, runner,"
    " lease_expires_at, progress, result, error, cancel_requested, locks")
_INSERT_OPERATION = (
    f"INSERT INTO state_operations ({_OPERATION_COLUMNS}) VALUES (%(id)s, %(tenant)s,"  # noqa: S608 - constant columns
    " %(principal)s, %(kind)s, %(request)s, %(status)s, %(created_at)s, %(updated_at)s,"
    " %(runner)s, %(lease_expires_at)s, %(progress)s, %(result)s, %(error)s,"
    " %(cancel_requested)s, %(locks)s)")
_FIND_OPERATION = (f"SELECT {_OPERATION_COLUMNS} FROM state_operations"  # noqa: S608 - constant columns
                   " WHERE id = %s AND tenant_id = %s AND principal = %s")
_OPERATION_BY_ID = f"SELECT {_OPERATION_COLUMNS} FROM state_operations WHERE id = %s"  # noqa: S608 - constant columns
_CANCEL_OPERATION = (
    "UPDATE state_operations SET cancel_requested = true, updated_at = %s"
    " WHERE id = %s AND tenant_id = %s AND principal = %s AND status = 'running'")
_EXPIRED_OPERATIONS = (f"SELECT {_OPERATION_COLUMNS} FROM state_operations"  # noqa: S608 - constant columns
                       " WHERE status = 'running' AND lease_expires_at <= %s ORDER BY id")
#: The columns L{PostgresStateOps.update_operation} may set.
_CHANGEABLE = ("status", "progress", "result", "error", "lease_expires_at", "locks",
               "updated_at")

_SESSION_COLUMNS = ("id, tenant_id, principal, state_path, size, sha256, created_at,"
                    " expires_at, committed_version")
_DROP_EXPIRED_UPLOADS = "DELETE FROM upload_sessions WHERE expires_at <= %s"
_COUNT_OPEN_UPLOADS = ("SELECT count(*) FROM upload_sessions WHERE tenant_id = %s"
                       " AND principal = %s AND committed_version IS NULL")
_INSERT_UPLOAD = (f"INSERT INTO upload_sessions ({_SESSION_COLUMNS})"  # noqa: S608 - constant columns
                  " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, NULL)")
_FIND_UPLOAD = (f"SELECT {_SESSION_COLUMNS} FROM upload_sessions WHERE id = %s"  # noqa: S608 - constant columns
                " AND tenant_id = %s AND principal = %s AND expires_at > %s")
_CHUNKS = ('SELECT "offset", length, sha256 FROM upload_chunks WHERE session_id = %s'
           ' ORDER BY "offset"')
_COPY_CHUNK = ('COPY upload_chunks (session_id, "offset", length, sha256, data, data_key,'
               " kek_id) FROM STDIN (FORMAT binary)")
_EXTEND_UPLOAD = "UPDATE upload_sessions SET expires_at = %s WHERE id = %s"
# Every chunk of a session as one binary value, in order, each a record of
# its own (_chunk_records): its offset, length and sha256, its wrapped data
# key (length -1: none) and its data.  One statement, so the records agree
# with each other even while a kilolock-migrate job seals or opens chunks.
_CHUNK_RECORDS = (
    'SELECT string_agg(int8send("offset") || int8send(length) || convert_to(sha256, \'UTF8\')'
    " || int4send(coalesce(octet_length(data_key), -1)) || coalesce(data_key, ''::bytea)"
    " || int8send(octet_length(data)) || data, ''::bytea ORDER BY \"offset\")"
    " FROM upload_chunks WHERE session_id = %s")
_DROP_CHUNKS = "DELETE FROM upload_chunks WHERE session_id = %s"
_COMMIT_UPLOAD = ("UPDATE upload_sessions SET committed_version = %s WHERE id = %s"
                  " AND tenant_id = %s AND principal = %s")
_DROP_UPLOAD = "DELETE FROM upload_sessions WHERE id = %s AND tenant_id = %s AND principal = %s"

_FIND_DIGEST = (
    "SELECT s.path, v.number FROM state_versions v JOIN states s ON s.id = v.state_id"
    " WHERE s.tenant_id = %s AND v.sha256 = %s AND v.pruned_at IS NULL"
    " ORDER BY v.created_at DESC, v.id DESC")


def _operation(row: Any) -> OperationRecord:
    (id_, tenant, principal, kind, request, status, created_at, updated_at, runner, lease,
     progress, result, error, cancel_requested, locks) = row
    return OperationRecord(
        id=id_, owner=Owner(tenant, principal), kind=kind, request=request, status=status,
        created_at=utc(created_at), updated_at=utc(updated_at), runner=runner,
        lease_expires_at=None if lease is None else utc(lease), progress=progress,
        result=result, error=error, cancel_requested=bool(cancel_requested),
        locks=tuple((str(path), str(lock_id)) for path, lock_id in json.loads(locks)))


def _session(row: Any, found: list[Any]) -> UploadSession:
    id_, tenant, principal, path, size, sha256, created_at, expires_at, committed = row
    session = UploadSession(
        id=id_, owner=Owner(tenant, principal), state_path=path, size=int(size), sha256=sha256,
        created_at=utc(created_at), expires_at=utc(expires_at),
        chunks=tuple(Chunk(int(offset), int(length), digest) for offset, length, digest in found))
    return session if committed is None else session.committed_to(int(committed))


class PostgresStateOps(StorePart):
    """Operations, upload sessions and digests, run by C{runner}; chunks
    sealed and opened by C{chunk_codec}."""

    def __init__(self, runner: TransactionRunner, clock: Callable[[], datetime],
                 chunk_codec: ChunkCodec) -> None:
        super().__init__(runner, clock)
        self._chunks = chunk_codec

    # -- operations -------------------------------------------------------

    def create_operation(self, record: OperationRecord) -> Deferred[None]:
        async def create(cursor: Any) -> None:
            await cursor.execute(_INSERT_OPERATION, {
                "id": record.id, "tenant": record.owner.tenant,
                "principal": record.owner.principal, "kind": record.kind,
                "request": record.request, "status": record.status,
                "created_at": record.created_at, "updated_at": record.updated_at,
                "runner": record.runner, "lease_expires_at": record.lease_expires_at,
                "progress": record.progress, "result": record.result, "error": record.error,
                "cancel_requested": record.cancel_requested,
                "locks": json.dumps([list(pair) for pair in record.locks])})

        return self._runner.run_interaction(create)

    def find_operation(self, owner: Owner, operation_id: str) -> Deferred[OperationRecord | None]:
        async def find(cursor: Any) -> OperationRecord | None:
            await cursor.execute(_FIND_OPERATION, (operation_id, owner.tenant, owner.principal))
            row = cursor.fetchone()
            return None if row is None else _operation(row)

        return self._runner.run_interaction(find)

    def update_operation(self, operation_id: str,
                         changes: Mapping[str, Any]) -> Deferred[OperationRecord | None]:
        unknown = set(changes) - set(_CHANGEABLE)
        if unknown:
            raise ValueError(f"not changeable: {sorted(unknown)}")
        values = {name: (json.dumps([list(pair) for pair in value]) if name == "locks"
                         else value) for name, value in changes.items()}
        assignments = ", ".join(f"{name} = %({name})s" for name in _CHANGEABLE
                                if name in values)

        async def update(cursor: Any) -> OperationRecord | None:
            if assignments:
                await cursor.execute(
                    f"UPDATE state_operations SET {assignments}"  # noqa: S608 - constant names
                    " WHERE id = %(id)s AND status = 'running'", {**values, "id": operation_id})
            await cursor.execute(_OPERATION_BY_ID, (operation_id,))
            row = cursor.fetchone()
            return None if row is None else _operation(row)

        return self._runner.run_interaction(update)

    def request_cancel(self, owner: Owner, operation_id: str,
                       now: datetime) -> Deferred[OperationRecord | None]:
        async def cancel(cursor: Any) -> OperationRecord | None:
            await cursor.execute(_CANCEL_OPERATION,
                                 (now, operation_id, owner.tenant, owner.principal))
            await cursor.execute(_FIND_OPERATION, (operation_id, owner.tenant, owner.principal))
            row = cursor.fetchone()
            return None if row is None else _operation(row)

        return self._runner.run_interaction(cancel)

    def expired_operations(self, now: datetime) -> Deferred[list[OperationRecord]]:
        async def expired(cursor: Any) -> list[OperationRecord]:
            await cursor.execute(_EXPIRED_OPERATIONS, (now,))
            return [_operation(row) for row in cursor.fetchall()]

        return self._runner.run_interaction(expired)

    # -- upload sessions ----------------------------------------------------

    def open_upload(self, session: UploadSession, limit: int) -> Deferred[None]:
        async def open_(cursor: Any) -> None:
            owner = session.owner
            await cursor.execute(_DROP_EXPIRED_UPLOADS, (session.created_at,))
            await cursor.execute(_COUNT_OPEN_UPLOADS, (owner.tenant, owner.principal))
            (live,) = cursor.fetchone()
            if live >= limit:
                raise chunks.TooManyUploads(
                    f"at most {limit} upload sessions may be open at once; commit or abandon"
                    " one first")
            await cursor.execute(_INSERT_UPLOAD, (
                session.id, owner.tenant, owner.principal, session.state_path, session.size,
                session.sha256, session.created_at, session.expires_at))

        return self._runner.run_interaction(open_)

    async def _live_txn(self, cursor: Any, owner: Owner, upload_id: str, now: datetime,
                        lock: bool = False) -> UploadSession | None:
        await cursor.execute(_FIND_UPLOAD + (" FOR UPDATE" if lock else ""),
                             (upload_id, owner.tenant, owner.principal, now))
        row = cursor.fetchone()
        if row is None:
            return None
        await cursor.execute(_CHUNKS, (upload_id,))
        return _session(row, cursor.fetchall())

    def find_upload(self, owner: Owner, upload_id: str,
                    now: datetime) -> Deferred[UploadSession | None]:
        return self._runner.run_interaction(self._live_txn, owner, upload_id, now)

    def put_chunk(self, owner: Owner, upload_id: str, offset: int, data: bytes,
                  now: datetime, expires_at: datetime) -> Deferred[UploadSession]:
        chunk = chunks.chunk_of(offset, data)
        identity = ChunkIdentity(upload_id, owner.tenant, owner.principal, chunk.offset,
                                 chunk.length, chunk.sha256)

        async def put_txn(cursor: Any, stored: StoredChunk) -> UploadSession:
            session = await self._live_txn(cursor, owner, upload_id, now, lock=True)
            if session is None:
                raise chunks.UploadNotFound()
            if chunks.place_chunk(session, chunk) is chunks.Placement.ADD:
                cursor.copy_in(_COPY_CHUNK, binary_copy([(
                    ("text", upload_id), ("int8", chunk.offset), ("int8", chunk.length),
                    ("text", chunk.sha256), ("bytea", stored.data),
                    ("bytea", stored.data_key), ("text", stored.key_id))]))
                session = _with_chunk(session, chunk)
            await cursor.execute(_EXTEND_UPLOAD, (expires_at, upload_id))
            return evolve(session, expires_at=expires_at)

        async def put() -> UploadSession:
            stored = await self._chunks.seal(data, identity)
            session: UploadSession = await self._runner.run_interaction(
                put_txn, stored, blocking=True)
            return session

        return ensureDeferred(put())

    def upload_bytes(self, owner: Owner, upload_id: str,
                     now: datetime) -> Deferred[bytes | None]:
        async def read_records(cursor: Any) -> bytes | None:
            found: bytes | None = cursor.select_bytea(_CHUNK_RECORDS, (upload_id,))
            return found

        async def read() -> bytes | None:
            session = await self.find_upload(owner, upload_id, now)
            if session is None or not session.ready:
                return None
            records = await self._runner.run_interaction(read_records, blocking=True)
            found = _chunk_records(records or b"", session)
            if found is None:
                return None
            return await self._chunks.open(found)

        return ensureDeferred(read())

    def finish_upload(self, owner: Owner, upload_id: str,
                      committed_version: int | None) -> Deferred[bool]:
        async def finish(cursor: Any) -> bool:
            if committed_version is None:
                await cursor.execute(_DROP_UPLOAD, (upload_id, owner.tenant, owner.principal))
                return bool(cursor.rowcount)
            await cursor.execute(_COMMIT_UPLOAD,
                                 (committed_version, upload_id, owner.tenant, owner.principal))
            if not cursor.rowcount:
                return False
            await cursor.execute(_DROP_CHUNKS, (upload_id,))
            return True

        return self._runner.run_interaction(finish)

    # -- content addresses --------------------------------------------------

    def find_digest(self, tenant: str, sha256: str) -> Deferred[list[tuple[str, int]]]:
        async def find(cursor: Any) -> list[tuple[str, int]]:
            await cursor.execute(_FIND_DIGEST, (tenant, sha256))
            return [(str(path), int(number)) for path, number in cursor.fetchall()]

        return self._runner.run_interaction(find)



#: A chunk record's fixed fields: offset, length, sha256 (64 hex digits),
#: the wrapped data key's length.
_RECORD_HEAD = struct.Struct(">qq64si")
_DATA_LENGTH = struct.Struct(">q")


def _chunk_records(records: bytes, session: UploadSession,
                   ) -> list[tuple[StoredChunk, ChunkIdentity]] | None:
    """The stored chunks of C{session} (as L{_CHUNK_RECORDS} selects them, the
    data as views of C{records}) with what each is bound to; None when they
    are not its chunks from its first byte to its last, one after another
    (chunks dropped meanwhile: the session was abandoned or expired)."""
    view, found, at, expected = memoryview(records), [], 0, 0
    owner = session.owner
    while at < len(view):
        if at + _RECORD_HEAD.size > len(view):
            return None
        offset, length, sha256, key_length = _RECORD_HEAD.unpack_from(view, at)
        at += _RECORD_HEAD.size
        data_key = None
        if key_length >= 0:
            data_key, at = bytes(view[at:at + key_length]), at + key_length
        if at + _DATA_LENGTH.size > len(view):
            return None
        (data_length,) = _DATA_LENGTH.unpack_from(view, at)
        at += _DATA_LENGTH.size
        data, at = view[at:at + data_length], at + data_length
        if offset != expected or len(data) != data_length:
            return None
        expected = offset + length
        found.append((StoredChunk(data, data_key), ChunkIdentity(
            session.id, owner.tenant, owner.principal, offset, length, sha256.decode())))
    return found if expected == session.size else None


def _with_chunk(session: UploadSession, chunk: Chunk) -> UploadSession:
    return evolve(session, chunks=tuple(sorted((*session.chunks, chunk),
                                               key=lambda c: c.offset)))
