"""The state lane's mutations in PostgreSQL: writes, deletes, LOCK and UNLOCK.

Each call is one transaction of small C{_x_txn} steps.  The transactions
fetch what L{kilolock.state_rules} needs -- the holder of the lock, the
versions an upload could repeat -- in the statements they run anyway, ask
it, and carry out its answer; the rules themselves are decided there only.
What PostgreSQL adds is correctness across processes sharing one database:

  - A write locks its state row (C{SELECT ... FOR UPDATE}, after creating it
    with C{INSERT ... ON CONFLICT DO NOTHING}) so writers of one state are
    serialised, then reads the lock with a fresh snapshot: a LOCK cannot slip
    in between, because inserting a lock row needs a key-share lock on the
    state row.  Lock check, serial check, the raw bytes, the projection (one
    statement for all three tables, rows passed as one JSON document) and the
    audit event commit together.
  - Locks are taken and released with single statements
    (C{INSERT ... ON CONFLICT (state_id) DO NOTHING RETURNING},
    C{DELETE ... RETURNING}); there are no advisory locks.
  - The current version of a state is its highest-numbered one.

The SQL is L{kilolock.store.postgres.statements}, in this module's order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred

from kilolock import state_rules
from kilolock.audit import delete_detail, lock_detail, write_detail
from kilolock.errors import ServiceUnavailable, StateNotFound
from kilolock.model import (
    LOCK_ACQUIRE,
    STATE_DELETE,
    STATE_WRITE,
    HeldLock,
    LockInfo,
    Principal,
    StateKey,
    StateUpload,
    StateVersion,
    WriteOutcome,
)
from kilolock.state_rules import Holder, Replay
from kilolock.store.postgres import large, rows, statements
from kilolock.store.postgres.codecs import WriteParameters
from kilolock.store.postgres.events import (
    append_event_and_commit_txn,
    append_event_txn,
    event_parameters,
)
from kilolock.store.postgres.runner import TransactionRunner

__all__ = ["PostgresStates"]

#: Rounds of "take the lock, else read the holder" before giving up (the
#: holder can release between the two statements).
_ACQUIRE_ATTEMPTS = 10


class PostgresStates:
    """Writes, deletes and locks of states, run by C{runner}."""

    def __init__(self, runner: TransactionRunner, clock: Callable[[], datetime]) -> None:
        self._runner = runner
        self._clock = clock

    # -- LOCK -----------------------------------------------------------

    def acquire_lock(self, key: StateKey, info: LockInfo,
                     principal: Principal) -> Deferred[bool]:
        """Lock C{key}, creating its state row if needed.

        @return: a Deferred firing with True when newly acquired, False when
            C{info.id} already held it; failing with
            L{kilolock.errors.LockConflict} (423, the holder's bytes) when
            another ID holds it.
        """
        async def acquire() -> bool:
            if await self._runner.run_interaction(self._take_lock_at_once_txn, key, info,
                                                  principal):
                return True
            return await self._runner.run_interaction(self._acquire_txn, key, info, principal)

        return ensureDeferred(acquire())

    async def _take_lock_at_once_txn(self, cursor: Any, key: StateKey, info: LockInfo,
                                     principal: Principal) -> bool:
        """The usual LOCK (the state exists and is unlocked) in one statement
        and one round trip: the lock row and its audit event.  @return:
        whether the lock was taken (if not, nothing was written)."""
        now = self._clock()
        _, params = event_parameters(key.tenant, LOCK_ACQUIRE, principal.name, key.path, now,
                                     lock_id=info.id, detail=lock_detail(info, principal))
        await cursor.execute(statements.TAKE_LOCK_AND_RECORD,
                             {**params, "info": info.raw, "now": now,
                              "token_digest": principal.oidc_token_digest}, commit=True)
        return cursor.fetchone() is not None

    async def _acquire_txn(self, cursor: Any, key: StateKey, info: LockInfo,
                           principal: Principal) -> bool:
        now = self._clock()
        for _attempt in range(_ACQUIRE_ATTEMPTS):
            await cursor.execute(statements.TAKE_LOCK, {
                "tenant": key.tenant, "path": key.path, "lock_id": info.id,
                "info": info.raw, "now": now, "principal": principal.name,
                "token_digest": principal.oidc_token_digest,
            })
            if cursor.fetchone() is not None:
                await append_event_and_commit_txn(cursor, key.tenant, LOCK_ACQUIRE,
                                                  principal.name, key.path, now,
                                                  lock_id=info.id,
                                                  detail=lock_detail(info, principal))
                return True
            # Not taken: the state does not exist yet, or a lock is held (or
            # was, and has just been released: then simply try again).
            await cursor.execute(statements.STATE_AND_LOCK, (key.tenant, key.path))
            row = cursor.fetchone()
            holder = None if row is None else rows.holder(row[1:])
            if not state_rules.decide_lock(info.id, holder):
                return False
            if row is None:
                await self._create_state_row_txn(cursor, key, now)
        raise ServiceUnavailable("the lock kept changing hands; retry", retry_after=1)

    # -- a write --------------------------------------------------------

    def write_state(self, key: StateKey, upload: StateUpload, lock_id: str | None,
                    principal: Principal, event_kind: str = STATE_WRITE,
                    event_detail: Mapping[str, Any] | None = None) -> Deferred[WriteOutcome]:
        """Store C{upload} as the new current version (see
        L{kilolock.interfaces.IStateStore}); the event is C{event_kind}, its
        detail extended by C{event_detail}.  A state of at least
        L{large.LARGE_TRANSFER_BYTES} takes the blocking path.

        @return: a Deferred firing with a L{WriteOutcome}; failing with
            L{kilolock.errors.LockNotHeld}, L{kilolock.errors.LockConflict}
            (423) or L{kilolock.errors.SerialConflict}.
        """

        async def write() -> WriteOutcome:
            await self._runner.ready_pool()  # learns whether the database is UTF-8
            size = len(upload.raw)
            prepared: WriteParameters | large.BulkWrite
            if size >= large.LARGE_TRANSFER_BYTES:
                prepared = large.BulkWrite.of(upload)
            elif size >= large.LARGE_UPLOAD_BYTES:
                prepared = await self._runner.in_thread(WriteParameters.of, upload,
                                                        self._runner.utf8_database)
            else:
                prepared = WriteParameters.of(upload, self._runner.utf8_database)
            return await self._runner.run_interaction(
                self._write_txn, key, upload, lock_id, principal, prepared, event_kind,
                event_detail, blocking=isinstance(prepared, large.BulkWrite))

        return ensureDeferred(write())

    async def _write_txn(self, cursor: Any, key: StateKey, upload: StateUpload,
                         lock_id: str | None, principal: Principal,
                         prepared: WriteParameters | large.BulkWrite,
                         event_kind: str = STATE_WRITE,
                         event_detail: Mapping[str, Any] | None = None) -> WriteOutcome:
        now = self._clock()
        state_id = await self._lock_state_row_txn(cursor, key, now, create=True)
        assert state_id is not None
        serial = upload.parsed.serial
        holder, candidates, digests = await self._lock_and_candidates_txn(cursor, state_id,
                                                                            serial)
        state_rules.check_write(lock_id, holder)
        decision = state_rules.decide_upload(serial, upload.sha256, candidates,
                                             candidates[-1] if candidates else None)
        if isinstance(decision, Replay):
            return WriteOutcome(version=decision.version, created=False)
        version = StateVersion.of_upload(upload, decision.number, now, principal.name)
        detail = {**write_detail(version.number, version.size, principal), **(event_detail or {})}
        if isinstance(prepared, large.BulkWrite):
            version_id = await large.copy_version_txn(cursor, state_id, version, prepared)
            await large.copy_projection_txn(cursor, state_id, version_id, prepared)
            await append_event_txn(cursor, key.tenant, event_kind, principal.name, key.path,
                                   now, lock_id=lock_id, serial=serial, sha256=upload.sha256,
                                   detail=detail)
        else:
            _, params = event_parameters(key.tenant, event_kind, principal.name, key.path, now,
                                         lock_id=lock_id, serial=serial, sha256=upload.sha256,
                                         detail=detail)
            # The event's statement locks the tenant's chain head until the
            # COMMIT: it comes last, so that the version and projection are
            # written before that lock is taken (writes of other states of
            # the tenant wait only for an append and a commit).
            await cursor.execute((statements.WRITE_VERSION, statements.APPEND_EVENT), {
                **params, "state": state_id, "number": version.number,
                "lineage": version.lineage, "size": version.size, "raw": prepared.raw_state,
                "projected": version.projected, "resource_count": prepared.resource_count,
                **prepared.projection_parameters(digests)}, commit=True)
        return WriteOutcome(version=version, created=True)

    async def _lock_state_row_txn(self, cursor: Any, key: StateKey, now: datetime, *,
                                  create: bool) -> int | None:
        """Lock the state's row until the transaction ends, creating it (and
        its tenant) first when C{create}.  @return: its id, or None."""
        params = {"tenant": key.tenant, "path": key.path}
        await cursor.execute(statements.LOCK_STATE_ROW, params)
        row = cursor.fetchone()
        if row is None and create:
            await self._create_state_row_txn(cursor, key, now)
            await cursor.execute(statements.LOCK_STATE_ROW, params)
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    async def _create_state_row_txn(self, cursor: Any, key: StateKey, now: datetime) -> None:
        await cursor.execute(statements.CREATE_STATE_ROW,
                             {"tenant": key.tenant, "path": key.path, "now": now})

    async def _lock_and_candidates_txn(
            self, cursor: Any, state_id: int, serial: int,
    ) -> tuple[Holder | None, list[StateVersion], list[str | None] | None]:
        """What a write checks, in one statement, on a state row this
        transaction has locked: the holder of the lock (FOR SHARE: an UNLOCK
        waits for the write), the versions with C{serial} plus the current
        one, oldest first (so the current version, if any, is last), and the
        digests of the state's projection rows (or None)."""
        await cursor.execute(statements.LOCK_AND_CANDIDATES,
                             {"state": state_id, "serial": serial})
        found = cursor.fetchall()
        return (rows.holder(found[0][:2]),
                [rows.version(row[3:]) for row in found if row[3] is not None],
                found[0][2])

    # -- UNLOCK ---------------------------------------------------------

    def release_lock(self, key: StateKey, lock_id: str | None, principal: Principal,
                     event_detail: Mapping[str, Any] | None = None,
                     ) -> Deferred[HeldLock | None]:
        """Owner release (C{lock_id} a str) or force release (None).

        @return: a Deferred firing with the released L{HeldLock}, or None when
            nothing was held; failing with L{kilolock.errors.LockConflict}
            (409, the holder's bytes) when an owner release names another ID.
        """
        return self._runner.run_interaction(self._release_txn, key, lock_id, principal,
                                            event_detail)

    async def _release_txn(self, cursor: Any, key: StateKey, lock_id: str | None,
                           principal: Principal,
                           event_detail: Mapping[str, Any] | None) -> HeldLock | None:
        # The release the rules allow, in one statement: the owner's lock,
        # or (force) whatever is held.
        await cursor.execute(statements.RELEASE_LOCK,
                             {"tenant": key.tenant, "path": key.path, "lock_id": lock_id})
        row = cursor.fetchone()
        if row is None:
            # Nothing released: nothing was held, or (an owner release)
            # another ID holds the lock, which the rules answer with 409.
            if lock_id is not None:
                held = await self._lock_holder_txn(cursor, key)
                if held is not None:
                    state_rules.decide_unlock(lock_id, state_rules.holder_of(held))
            return None
        released = rows.held_lock(row)
        decision = state_rules.decide_unlock(lock_id, state_rules.holder_of(released))
        await append_event_and_commit_txn(cursor, key.tenant, decision.event_kind,
                                          principal.name, key.path, self._clock(),
                                          lock_id=released.info.id,
                                          detail={**lock_detail(released.info, principal),
                                                  **(event_detail or {})})
        return released

    def get_lock(self, key: StateKey) -> Deferred[HeldLock | None]:
        """@return: a Deferred firing with the L{HeldLock} on C{key} or None."""
        return self._runner.run_interaction(self._lock_holder_txn, key)

    async def _lock_holder_txn(self, cursor: Any, key: StateKey) -> HeldLock | None:
        await cursor.execute(statements.LOCK_HOLDER, (key.tenant, key.path))
        row = cursor.fetchone()
        return None if row is None else rows.held_lock(row)

    # -- DELETE ---------------------------------------------------------

    def delete_state(self, key: StateKey, lock_id: str | None,
                     principal: Principal) -> Deferred[None]:
        """Delete the state, its versions, projection and lock; keep its events
        and add a C{state_delete} event.

        @return: a Deferred firing with None; failing with L{StateNotFound},
            L{kilolock.errors.LockNotHeld} or L{kilolock.errors.LockConflict}
            (423).
        """
        return self._runner.run_interaction(self._delete_txn, key, lock_id, principal)

    async def _delete_txn(self, cursor: Any, key: StateKey, lock_id: str | None,
                          principal: Principal) -> None:
        now = self._clock()
        state_id = await self._lock_state_row_txn(cursor, key, now, create=False)
        if state_id is None:
            raise StateNotFound("no such state")
        # The lock, on the row this transaction has locked (so no lock can
        # be taken until it ends).
        await cursor.execute(statements.HELD_LOCK, (state_id,))
        state_rules.check_write(lock_id, rows.holder(cursor.fetchone()))
        await cursor.execute(statements.COUNT_VERSIONS, (state_id,))
        (version_count,) = cursor.fetchone()
        await cursor.execute(statements.DELETE_STATE, (state_id,))
        await append_event_and_commit_txn(cursor, key.tenant, STATE_DELETE, principal.name,
                                          key.path, now, lock_id=lock_id,
                                          detail=delete_detail(version_count, principal))
