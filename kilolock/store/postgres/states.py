"""The state lane's mutations in PostgreSQL: writes, deletes, LOCK and UNLOCK.

LOCK, UNLOCK and a write below the large-transfer threshold are each one
statement, one round trip and one transaction: a function of the schema
(C{kl_lock}, C{kl_unlock}, C{kl_write_state}, C{006_write_path.sql}) that
locks rows in the one order every mutation follows (the state row, its lock
row, its versions, the tenant's chain head last), does the usual case and
otherwise returns the facts.  The rules are decided in
L{kilolock.rules.locks} only: a function does what the rules always answer
for the facts it checks (take a free lock; release the lock the request
names with the info it was taken with; write when
L{locks.is_plain_write}), and for anything else the facts come back,
the rules decide, and the call is repeated with the decision, which the
function checks still holds.  What PostgreSQL adds is correctness across
processes sharing one database:

  - A write locks its state row (created first when missing) so writers of
    one state are serialised, then reads the lock with a fresh snapshot: a
    LOCK cannot slip in between, because inserting a lock row needs a
    key-share lock on the state row.  Lock check, serial check, the version,
    its projection and the audit event commit together.
  - Locks are taken and released with single statements; there are no
    advisory locks.  The current version of a state is its highest-numbered
    one.

A state of L{large.LARGE_TRANSFER_BYTES} or more is written on the blocking
path (L{kilolock.store.postgres.large}) by a transaction of several
statements in the same lock order.  Version bytes are compressed
(L{kilolock.store.postgres.payloads}).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.python.failure import Failure

from kilolock.atrest.envelope import DataKey, VersionIdentity
from kilolock.atrest.stored import StoredPayload
from kilolock.atrest.versions import VersionCodec
from kilolock.core.audit import delete_detail, lock_detail, release_detail, write_detail
from kilolock.core.errors import ServiceUnavailable, StateNotFound
from kilolock.core.events import LOCK_ACQUIRE, LOCK_RELEASE, STATE_DELETE, STATE_WRITE
from kilolock.core.model import (
    HeldLock,
    LockInfo,
    Principal,
    Projection,
    StateKey,
    StateUpload,
    StateVersion,
    WriteOutcome,
)
from kilolock.rules import locks
from kilolock.rules.locks import Holder, Replay
from kilolock.store.postgres import large, rows, statements
from kilolock.store.postgres.codecs import WriteParameters
from kilolock.store.postgres.events import (
    append_event_and_commit_txn,
    append_event_txn,
    event_parameters,
    numbered_event_parameters,
)
from kilolock.store.postgres.payloads import ChainCache, write_columns
from kilolock.store.postgres.runner import TransactionRunner
from kilolock.store.upload_feed import UploadFeed

__all__ = ["PostgresStates"]

#: What the event of a write adds to its detail, given the parsed upload.
DetailOf = Callable[[StateUpload], Mapping[str, Any]]


def _detail(detail_of: DetailOf | None, upload: StateUpload) -> Mapping[str, Any]:
    return {} if detail_of is None else detail_of(upload)


def _abandoning(feed: UploadFeed) -> Callable[[Failure], Failure]:
    def abandon(failure: Failure) -> Failure:
        feed.abandon()
        return failure
    return abandon


class _Encoding:
    """C{encode()} in a thread of its own (not the reactor's pool: the
    transaction waiting for it holds a thread of that pool)."""

    def __init__(self, encode: Callable[[], StoredPayload]) -> None:
        self._encode = encode
        self._stored: StoredPayload | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kilolock-encode", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._stored = self._encode()
        except BaseException as error:  # handed to the transaction's thread
            self._error = error

    def join(self) -> None:
        self._thread.join()

    def result(self) -> StoredPayload:
        """The payload, once encoded; or raise the encoding's error."""
        self.join()
        if self._error is not None:
            raise self._error
        assert self._stored is not None
        return self._stored


class _Replayed(Exception):
    """An overlapped write turned out to be a replay: roll back, answer it."""

    def __init__(self, outcome: WriteOutcome) -> None:
        super().__init__("a replay")
        self.outcome = outcome

#: Calls of a mutation's function before giving up (the facts can change
#: between two calls when other clients act on the same state meanwhile).
_CALL_ATTEMPTS = 10
#: Locks taken by this process whose info an UNLOCK can name at once.
_HELD_LOCKS_REMEMBERED = 10_000


class PostgresStates:
    """Writes, deletes and locks of states, run by C{runner}; version bytes
    are compressed by C{codec} (against the versions C{chains} keeps)."""

    def __init__(self, runner: TransactionRunner, clock: Callable[[], datetime],
                 codec: VersionCodec, chains: ChainCache | None = None) -> None:
        self._runner = runner
        self._clock = clock
        self._codec = codec
        self._chains = chains if chains is not None else ChainCache()
        #: (state, lock ID) -> the info bytes of locks this process took.
        self._held: OrderedDict[tuple[StateKey, str], bytes] = OrderedDict()

    # -- LOCK -----------------------------------------------------------

    def acquire_lock(self, key: StateKey, info: LockInfo,
                     principal: Principal) -> Deferred[bool]:
        """Lock C{key}, creating its state row if needed.

        @return: a Deferred firing with True when newly acquired, False when
            C{info.id} already held it; failing with
            L{kilolock.core.errors.LockConflict} (423, the holder's bytes) when
            another ID holds it.
        """
        async def acquire() -> bool:
            taken, holder_id, holder_info = await self._runner.run_interaction(
                self._lock_txn, key, info, principal)
            if taken is None:
                raise ServiceUnavailable("the lock kept changing hands; retry", retry_after=1)
            if taken:
                self._remember(key, info.id, info.raw)
                return True
            return locks.decide_lock(info.id, rows.holder((holder_id, holder_info)))

        return ensureDeferred(acquire())

    def acquire_lock_if_exists(self, key: StateKey, info: LockInfo,
                               principal: Principal) -> Deferred[bool | None]:
        """Lock C{key} as L{acquire_lock} does when its state exists.  The
        state's row is locked FOR SHARE first (a delete waits), so the LOCK
        never finds it missing and creates it.

        @return: a Deferred firing with True, False (see L{acquire_lock}) or
            None (no such state; nothing changed)."""
        async def acquire() -> bool | None:
            found = await self._runner.run_interaction(self._lock_existing_txn, key, info,
                                                       principal)
            if found is None:
                return None
            taken, holder_id, holder_info = found
            if taken is None:
                raise ServiceUnavailable("the lock kept changing hands; retry", retry_after=1)
            if taken:
                self._remember(key, info.id, info.raw)
                return True
            return locks.decide_lock(info.id, rows.holder((holder_id, holder_info)))

        return ensureDeferred(acquire())

    async def _lock_txn(self, cursor: Any, key: StateKey, info: LockInfo,
                        principal: Principal, *,
                        commit: bool = True) -> tuple[bool | None, str | None, str | None]:
        now = self._clock()
        _, params = event_parameters(key.tenant, LOCK_ACQUIRE, principal.name, key.path, now,
                                     lock_id=info.id, detail=lock_detail(info, principal))
        await cursor.execute(statements.LOCK, {**params, "info": info.raw,
                                               "token_digest": principal.oidc_token_digest},
                             commit=commit)
        taken, holder_id, holder_info = cursor.fetchone()
        return taken, holder_id, holder_info

    async def _lock_existing_txn(self, cursor: Any, key: StateKey, info: LockInfo,
                                 principal: Principal,
                                 ) -> tuple[bool | None, str | None, str | None] | None:
        await cursor.execute(statements.SHARE_STATE_ROW,
                             {"tenant": key.tenant, "path": key.path})
        if cursor.fetchone() is None:
            return None
        # Not committed with the statement: its row is the answer.
        return await self._lock_txn(cursor, key, info, principal, commit=False)

    def _remember(self, key: StateKey, lock_id: str, info: bytes) -> None:
        self._held[(key, lock_id)] = info
        if len(self._held) > _HELD_LOCKS_REMEMBERED:
            self._held.popitem(last=False)

    # -- a write --------------------------------------------------------

    def write_state(self, key: StateKey, upload: StateUpload, lock_id: str | None,
                    principal: Principal, event_kind: str = STATE_WRITE,
                    event_detail: Mapping[str, Any] | None = None) -> Deferred[WriteOutcome]:
        """Store C{upload} as the new current version (see
        L{kilolock.store.interfaces.states.IStateStore}); the event is C{event_kind}, its
        detail extended by C{event_detail}.  A state of at least
        L{large.LARGE_TRANSFER_BYTES} takes the blocking path.

        @return: a Deferred firing with a L{WriteOutcome}; failing with
            L{kilolock.core.errors.LockNotHeld}, L{kilolock.core.errors.LockConflict}
            (423) or L{kilolock.core.errors.SerialConflict}.
        """

        async def write() -> WriteOutcome:
            size = len(upload.raw)
            identity = VersionIdentity(key.tenant, key.path, upload.parsed.serial,
                                       upload.sha256, size)
            if size >= large.LARGE_TRANSFER_BYTES:
                await self._runner.ready_pool()
                stored = await self._codec.encode(upload.raw, identity, None)
                return await self._runner.run_interaction(
                    self._large_write_txn, key, upload, lock_id, principal,
                    large.BulkWrite.of(upload, stored), event_kind, event_detail,
                    blocking=True)
            if size >= large.LARGE_UPLOAD_BYTES:
                prepared = await self._runner.in_thread(WriteParameters.of, upload)
            else:
                prepared = WriteParameters.of(upload)
            return await self._write(key, upload, identity, lock_id, principal, prepared,
                                     event_kind, event_detail)

        return ensureDeferred(write())

    async def _write(self, key: StateKey, upload: StateUpload, identity: VersionIdentity,
                     lock_id: str | None, principal: Principal, prepared: WriteParameters,
                     event_kind: str, event_detail: Mapping[str, Any] | None) -> WriteOutcome:
        """The small write: C{kl_write_state}, called again with the rules'
        decision when it returns the facts, or with a full snapshot when the
        base of a delta is gone."""
        cached = self._chains.get(key)
        stored = await self._codec.encode(upload.raw, identity,
                                          None if cached is None else cached.snapshot,
                                          None if cached is None else cached.newest)
        number: int | None = None
        for _attempt in range(_CALL_ATTEMPTS):
            now = self._clock()
            found = await self._runner.run_interaction(
                self._write_txn, key, upload, lock_id, principal, prepared, stored,
                None if cached is None else cached.base_number(stored), number, now,
                event_kind, event_detail)
            outcome = found[0][0]
            if outcome == "written":
                version = StateVersion.of_upload(upload, found[0][3], now, principal.name)
                self._chains.written(key, version.number, upload.raw, upload.sha256, stored,
                                     cached)
                return WriteOutcome(version=version, created=True)
            if outcome == "no base":
                self._chains.forget(key)
                cached = None
                stored = await self._codec.encode(upload.raw, identity, None)
                continue
            holder = rows.holder(found[0][1:3])
            candidates = [rows.version(row[3:]) for row in found if row[3] is not None]
            locks.check_write(lock_id, holder)
            decision = locks.decide_upload(upload.parsed.serial, upload.sha256,
                                                 candidates,
                                                 candidates[-1] if candidates else None)
            if isinstance(decision, Replay):
                return WriteOutcome(version=decision.version, created=False)
            number = decision.number
        raise ServiceUnavailable("the state kept changing; retry", retry_after=1)

    async def _write_txn(self, cursor: Any, key: StateKey, upload: StateUpload,
                         lock_id: str | None, principal: Principal,
                         prepared: WriteParameters, stored: StoredPayload,
                         base_number: int | None, number: int | None, now: datetime,
                         event_kind: str, event_detail: Mapping[str, Any] | None) -> list[Any]:
        size = len(upload.raw)
        params = numbered_event_parameters(
            key.tenant, event_kind, principal.name, key.path, now,
            lambda version: {**write_detail(version, size, principal), **(event_detail or {})},
            lock_id=lock_id, serial=upload.parsed.serial, sha256=upload.sha256)
        await cursor.execute(statements.WRITE_STATE, {
            **params, "number": number, "lineage": upload.parsed.lineage, "size": size,
            "projected": upload.parsed.projection is not None,
            "resource_count": prepared.resource_count, **write_columns(stored),
            "base_number": base_number,
            "base_sha256": stored.base_sha256, **prepared.projection_parameters()},
            commit=True)
        found: list[Any] = cursor.fetchall()
        return found

    async def _large_write_txn(self, cursor: Any, key: StateKey, upload: StateUpload,
                               lock_id: str | None, principal: Principal,
                               prepared: large.BulkWrite, event_kind: str = STATE_WRITE,
                               event_detail: Mapping[str, Any] | None = None) -> WriteOutcome:
        """A large write on the blocking path: the same checks and lock
        order as C{kl_write_state}, in several statements, with COPY."""
        now = self._clock()
        state_id = await self._lock_state_row_txn(cursor, key, now, create=True)
        assert state_id is not None
        serial = upload.parsed.serial
        holder, candidates = await self._lock_and_candidates_txn(cursor, state_id, serial)
        locks.check_write(lock_id, holder)
        decision = locks.decide_upload(serial, upload.sha256, candidates,
                                             candidates[-1] if candidates else None)
        if isinstance(decision, Replay):
            return WriteOutcome(version=decision.version, created=False)
        version = StateVersion.of_upload(upload, decision.number, now, principal.name)
        detail = {**write_detail(version.number, version.size, principal), **(event_detail or {})}
        version_id = await large.copy_version_txn(cursor, state_id, version, prepared)
        await large.copy_projection_txn(cursor, state_id, version_id, prepared)
        await append_event_txn(cursor, key.tenant, event_kind, principal.name, key.path,
                               now, lock_id=lock_id, serial=serial, sha256=upload.sha256,
                               detail=detail)
        return WriteOutcome(version=version, created=True)

    # -- a large write overlapped with its parse ---------------------------

    def write_state_overlapped(self, key: StateKey, feed: UploadFeed, lock_id: str | None,
                               principal: Principal, event_kind: str = STATE_WRITE,
                               detail_of: DetailOf | None = None) -> Deferred[WriteOutcome]:
        """L{write_state} of the upload C{feed} is still parsing, with the
        same answers in the same order (see L{IOverlappedWrites}).  A state
        of at least L{large.LARGE_TRANSFER_BYTES} is written by a blocking
        transaction started at once: it locks the state's row and streams the
        resource rows into the database as the parse produces them, then
        decides as L{_large_write_txn} does; anything smaller waits for the
        parse and takes L{write_state}.

        @return: a Deferred firing with a L{WriteOutcome}; failing with the
            parse's error first, then as L{write_state}."""

        async def write() -> WriteOutcome:
            if feed.size < large.LARGE_TRANSFER_BYTES:
                upload = await feed.parsed()
                return await self.write_state(key, upload, lock_id, principal, event_kind,
                                              _detail(detail_of, upload))
            try:
                return await self._overlapped(key, feed, lock_id, principal, event_kind,
                                              detail_of)
            except BaseException:
                feed.abandon()
                await feed.parsed()  # the parse's error comes first
                raise

        return ensureDeferred(write())

    async def _overlapped(self, key: StateKey, feed: UploadFeed, lock_id: str | None,
                          principal: Principal, event_kind: str,
                          detail_of: DetailOf | None) -> WriteOutcome:
        """The transaction waits for nothing but the parse, which was queued
        in the reactor's thread pool before it (so a full pool cannot hold
        every transaction waiting on work queued behind them): the data key
        is fetched first, the payload encoded in the transaction's thread."""
        await self._runner.ready_pool()
        data_key = await self._codec.data_key()
        writing = self._runner.run_interaction(
            self._overlapped_write_txn, key, feed, data_key, lock_id, principal, event_kind,
            detail_of, blocking=True)
        # Once the call has failed (its deadline) a transaction still waiting
        # for the parse must not go on: abandoning the feed rolls it back.
        writing.addErrback(_abandoning(feed))
        try:
            await feed.parsed()
        except BaseException:
            await writing.addErrback(lambda _: None)
            raise
        try:
            outcome: WriteOutcome = await writing
        except _Replayed as replayed:
            return replayed.outcome
        return outcome

    async def _overlapped_write_txn(self, cursor: Any, key: StateKey, feed: UploadFeed,
                                    data_key: DataKey | None, lock_id: str | None,
                                    principal: Principal, event_kind: str,
                                    detail_of: DetailOf | None) -> WriteOutcome:
        """The transaction of L{write_state_overlapped}: the state's row
        locked, its projection rows replaced by the rows streamed from the
        parse, then, once the parse has ended, the checks of
        L{_large_write_txn} (the lock row and versions come after the
        projection rows here: only writers holding the state's row touch
        those, so no wait can cycle through them).  The payload is encoded
        beside the checks; its error comes first, as on the plain path.  A
        replay or a refusal raises: the transaction rolls back."""
        now = self._clock()
        state_id = await self._lock_state_row_txn(cursor, key, now, create=True)
        assert state_id is not None
        version_id = await large.next_version_id_txn(cursor, state_id, now)
        await cursor.execute(statements.DROP_PROJECTION, {"state": state_id})
        stream = feed.stream()
        large.copy_resources(cursor, state_id, version_id, stream)
        upload = feed.wait_parsed()
        serial = upload.parsed.serial
        encoding = _Encoding(lambda: self._codec.encode_with(
            upload.raw, VersionIdentity(key.tenant, key.path, serial, upload.sha256,
                                        len(upload.raw)), data_key))
        try:
            projection = upload.parsed.projection or Projection()
            if stream.is_prefix_of(projection.resources):
                large.copy_resources(cursor, state_id, version_id,
                                     projection.resources[stream.sent:], stream.sent + 1)
            else:
                await cursor.execute(statements.DROP_PROJECTION, {"state": state_id})
                large.copy_resources(cursor, state_id, version_id, projection.resources)
            holder, candidates = await self._lock_and_candidates_txn(cursor, state_id, serial)
            try:
                locks.check_write(lock_id, holder)
                decision = locks.decide_upload(serial, upload.sha256, candidates,
                                                     candidates[-1] if candidates else None)
            except BaseException:
                encoding.result()  # an encoding error comes first
                raise
            if isinstance(decision, Replay):
                encoding.result()
                raise _Replayed(WriteOutcome(version=decision.version, created=False))
            large.copy_dependencies_and_outputs(cursor, state_id, version_id, projection)
            stored = encoding.result()
        finally:
            encoding.join()
        version = StateVersion.of_upload(upload, decision.number, now, principal.name)
        large.copy_version_row(cursor, version_id, state_id, version,
                               large.BulkWrite.of(upload, stored))
        detail = {**write_detail(version.number, version.size, principal),
                  **_detail(detail_of, upload)}
        await append_event_txn(cursor, key.tenant, event_kind, principal.name, key.path,
                               now, lock_id=lock_id, serial=serial, sha256=upload.sha256,
                               detail=detail)
        return WriteOutcome(version=version, created=True)

    async def _lock_state_row_txn(self, cursor: Any, key: StateKey, now: datetime, *,
                                  create: bool) -> int | None:
        """Lock the state's row until the transaction ends, creating it (and
        its tenant) first when C{create}.  @return: its id, or None."""
        params = {"tenant": key.tenant, "path": key.path, "now": now}
        await cursor.execute(statements.LOCK_STATE_ROW, params)
        row = cursor.fetchone()
        if row is None and create:
            await cursor.execute(statements.CREATE_STATE_ROW, params)
            await cursor.execute(statements.LOCK_STATE_ROW, params)
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    async def _lock_and_candidates_txn(
            self, cursor: Any, state_id: int, serial: int,
    ) -> tuple[Holder | None, list[StateVersion]]:
        """What a large write checks, in one statement, on a state row this
        transaction has locked: the holder of the lock (FOR SHARE: an UNLOCK
        waits for the write) and the versions with C{serial} plus the current
        one, oldest first (so the current version, if any, is last)."""
        await cursor.execute(statements.LOCK_AND_CANDIDATES,
                             {"state": state_id, "serial": serial})
        found = cursor.fetchall()
        return (rows.holder(found[0][:2]),
                [rows.version(row[2:]) for row in found if row[2] is not None])

    # -- UNLOCK ---------------------------------------------------------

    def release_lock(self, key: StateKey, lock_id: str | None, principal: Principal,
                     event_detail: Mapping[str, Any] | None = None,
                     ) -> Deferred[HeldLock | None]:
        """Owner release (C{lock_id} a str) or force release (None).

        @return: a Deferred firing with the released L{HeldLock}, or None when
            nothing was held; failing with L{kilolock.core.errors.LockConflict}
            (409, the holder's bytes) when an owner release names another ID.
        """

        async def release() -> HeldLock | None:
            # A lock this process took: release it with the info it was taken
            # with (what the rules allow an owner's UNLOCK) in one call.
            info = None if lock_id is None else self._held.pop((key, lock_id), None)
            target, kind = lock_id, LOCK_RELEASE
            for _attempt in range(_CALL_ATTEMPTS):
                released, holder_info, acquired_at, holder_principal, holder_digest = \
                    await self._runner.run_interaction(self._unlock_txn, key, target, info,
                                                       kind, principal, event_detail)
                if holder_info is None:
                    return None  # nothing is held: nothing to release
                held = rows.held_lock((holder_info, acquired_at, holder_principal,
                                       holder_digest))
                if released:
                    return held
                decision = locks.decide_unlock(lock_id, locks.holder_of(held))
                target, info, kind = held.info.id, held.info.raw, decision.event_kind
            raise ServiceUnavailable("the lock kept changing hands; retry", retry_after=1)

        return ensureDeferred(release())

    async def _unlock_txn(self, cursor: Any, key: StateKey, lock_id: str | None,
                          info: bytes | None, kind: str, principal: Principal,
                          event_detail: Mapping[str, Any] | None) -> Any:
        detail = {} if info is None else {
            **release_detail(kind, LockInfo.stored(info), principal), **(event_detail or {})}
        _, params = event_parameters(key.tenant, kind, principal.name, key.path, self._clock(),
                                     lock_id=lock_id, detail=detail)
        await cursor.execute(statements.UNLOCK, {**params, "info": info}, commit=True)
        return cursor.fetchone()

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
            L{kilolock.core.errors.LockNotHeld} or L{kilolock.core.errors.LockConflict}
            (423).
        """
        return self._runner.run_interaction(self._delete_txn, key, lock_id, principal)

    async def _delete_txn(self, cursor: Any, key: StateKey, lock_id: str | None,
                          principal: Principal) -> None:
        now = self._clock()
        state_id = await self._lock_state_row_txn(cursor, key, now, create=False)
        if state_id is None:
            raise StateNotFound("no such state")
        self._chains.forget(key)
        # The lock, on the row this transaction has locked (so no lock can
        # be taken until it ends).
        await cursor.execute(statements.HELD_LOCK, (state_id,))
        locks.check_write(lock_id, rows.holder(cursor.fetchone()))
        await cursor.execute(statements.COUNT_VERSIONS, (state_id,))
        (version_count,) = cursor.fetchone()
        await cursor.execute(statements.DELETE_STATE, (state_id,))
        await append_event_and_commit_txn(cursor, key.tenant, STATE_DELETE, principal.name,
                                          key.path, now, lock_id=lock_id,
                                          detail=delete_detail(version_count, principal))
