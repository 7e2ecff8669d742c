"""Running state operations: locks, progress, cancellation, leases.

An operation runs in the Kilolock process that created it; its record lives
in the store, so any process sharing the database answers for it, and
cancelling it there reaches it (L{OperationRunner.start}):

  1. the record is created (C{running}), then the operation takes the lock
     of every state it names that exists, in the order of their paths, with
     a LockInfo Terraform can print (L{operation_lock}: the C{Operation}
     and C{Info} name the operation).  When any is held -- by Terraform or
     anyone -- the locks taken are released, the operation fails and the
     caller is answered 423 with the holder.  A state that does not exist
     is not locked, and so not created: only the operation's write creates
     states, with their first version, so an operation refused or failed
     leaves no empty state behind (nor a lock event of one);
  2. the rest runs in the background, step by step (L{STEPS}, the
     C{progress}): read the states' current versions; plan the new ones
     (L{kilolock.stateops.plans}, in a thread); write them, through the
     state lane's own write path and rules, under the operation's locks (a
     write of several states is one transaction).  A version planned from
     a state without one must be that state's first: if anyone wrote one
     meanwhile, or holds the lock of a state created meanwhile, the whole
     write is refused (C{state_exists}, C{locked}).  Then release the locks;
  3. before each step it checks whether cancelling was asked for.  The last
     check is just before the write: a cancelled operation has written
     nothing; once the write has begun it completes (it is one
     transaction, never half done) and cancelling comes too late.

Every version written is audited as C{state_operation} with the operation's
id and kind; the lock events name it too (through its LockInfo).

Leases: while it runs, the process renews the operation's lease every
L{RENEW_SECONDS} (it lasts L{LEASE_SECONDS}).  A running operation whose
lease expired was abandoned by a process that stopped; the next process to
look at it (a read of it, or the start of any operation: L{sweep}) marks it
failed (C{operation_abandoned}) and releases the locks it held.  Its write,
if it had begun, was one transaction: committed whole (its versions name
the operation) or not at all.  A process that was only slow finds its locks
gone, and its write is refused by the lock it names.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from attrs import define, evolve, field
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger

import kilolock
from kilolock.core.errors import KilolockError, LockConflict
from kilolock.core.events import STATE_OPERATION
from kilolock.core.model import LockInfo, Principal, StateKey, StateUpload, rfc3339, utcnow
from kilolock.stateops.model import (
    CANCELLED,
    FAILED,
    RUNNING,
    SUCCEEDED,
    OperationRecord,
    Owner,
    StateWrite,
    new_operation_id,
    operation_lock_operation,
)
from kilolock.stateops.plans import Planned
from kilolock.store.interfaces.stateops import IStateOperationsStore
from kilolock.store.interfaces.states import IStateStore
from kilolock.tfstate.parse import parse_state

__all__ = ["LEASE_SECONDS", "RENEW_SECONDS", "STEPS", "OperationLocked", "OperationRunner",
           "Pause", "operation_lock"]

log = Logger()

T = TypeVar("T")

#: How long a running operation's lease lasts, and how often it is renewed.
LEASE_SECONDS = 60.0
RENEW_SECONDS = 20.0
#: The steps of an operation, as its progress names them.
STEPS = ("locking", "reading", "planning", "writing", "unlocking")

#: What an operation does to its states: from their current bytes, in a thread.
Plan = Callable[[dict[StateKey, bytes | None]], Planned]
#: Called before each step with the operation's id and the step (tests hold
#: an operation there).
Pause = Callable[[str, str], Awaitable[None]]


class Store(IStateStore, IStateOperationsStore):
    """What the runner uses of a store (both interfaces: the same object)."""


class OperationLocked(LockConflict):
    """A state of a new operation is locked (423, the holder's bytes); the
    operation C{operation_id} was recorded as failed."""

    def __init__(self, holder: bytes, operation_id: str) -> None:
        super().__init__(holder, status=423)
        self.operation_id = operation_id


class _Cancelled(Exception):
    """Cancelling was asked for before the write began."""


def operation_lock(operation_id: str, kind: str, principal: Principal,
                   now: datetime) -> LockInfo:
    """The lock an operation takes on each of its states: a LockInfo
    Terraform prints (ID, Operation, Who, Version, Created with a Z, Info)
    naming the operation."""
    raw = json.dumps({
        "ID": str(uuid.uuid4()),
        "Operation": operation_lock_operation(kind, operation_id),
        "Info": f"Kilolock operation {operation_id}: GET /v1/native/operations/{operation_id}",
        "Who": f"{principal.name}@kilolock",
        "Version": kilolock.__version__,
        "Created": rfc3339(now),
        "Path": "",
    }).encode()
    return LockInfo.from_bytes(raw)


@define(eq=False)
class _Running:
    """An operation this process runs."""

    record: OperationRecord
    principal: Principal
    cancel_requested: bool = False
    work: Deferred[None] | None = field(default=None, repr=False)


class OperationRunner:
    """Runs operations of one process on C{store}.

    @param reactor: runs planning in its thread pool (None: inline, for
        in-memory tests).
    @param clock: schedules lease renewals (default: C{reactor}; None: no
        leases, for in-memory tests).
    @param now: the time records and leases are written with.
    @param pause: awaited before each step (see L{Pause}).
    """

    def __init__(self, store: Any, reactor: Any = None, clock: Any = None,
                 now: Callable[[], datetime] = utcnow, pause: Pause | None = None) -> None:
        self.store: Store = store
        self.reactor = reactor
        self.clock = clock if clock is not None else reactor
        self.now = now
        self.pause = pause
        #: This process, as the records name the runner of an operation.
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._running: dict[str, _Running] = {}

    # -- starting ---------------------------------------------------------

    async def start(self, principal: Principal, kind: str, request: dict[str, Any],
                    keys: Sequence[StateKey], plan: Plan) -> OperationRecord:
        """Create an operation, take its locks and start it in the background.

        @param request: what the record shows of the request (no state bytes).
        @return: (awaited) the record, running.
        @raise LockConflict: (423) a state is locked; the operation is
            recorded as failed, naming the holder.
        """
        await self.sweep()
        now = self.now()
        record = OperationRecord(
            id=new_operation_id(), owner=Owner.of(principal), kind=kind,
            request=json.dumps(request, ensure_ascii=False), status=RUNNING, created_at=now,
            updated_at=now, runner=self.id, lease_expires_at=self._lease_end(now),
            progress=_progress("locking"))
        await self.store.create_operation(record)
        named = sorted(set(keys), key=lambda k: k.path)
        locks = await self._lock(record, principal, named)
        record = await self._update(record, locks=tuple((key.path, lock_id)
                                                         for key, lock_id in locks.items()))
        running = self._running[record.id] = _Running(record, principal)
        running.work = ensureDeferred(self._run(running, named, locks, plan))
        latest = await self.store.find_operation(record.owner, record.id)
        return latest if latest is not None else running.record

    async def _lock(self, record: OperationRecord, principal: Principal,
                    keys: list[StateKey]) -> dict[StateKey, str]:
        """Lock the states of C{keys} that exist.  @return: (awaited) the
        lock ID of each state locked."""
        taken: dict[StateKey, str] = {}
        try:
            for key in keys:
                info = operation_lock(record.id, record.kind, principal, self.now())
                if await self.store.acquire_lock_if_exists(key, info, principal) is not None:
                    taken[key] = info.id
        except BaseException as error:
            await self._unlock(taken, principal)
            await self._finish(record, FAILED, error=_error_of(error))
            if isinstance(error, LockConflict):
                raise OperationLocked(error.holder, record.id) from None
            raise
        return taken

    # -- running ----------------------------------------------------------

    async def _run(self, running: _Running, keys: list[StateKey], locks: dict[StateKey, str],
                   plan: Plan) -> None:
        renewing = self._renew_lease(running)
        status, result, error = FAILED, None, None
        principal = running.principal
        try:
            await self._step(running, "reading")
            current = {key: await self.store.read_current(key) for key in keys}
            await self._step(running, "planning")
            planned = await self._in_thread(plan, current)
            uploads = [(key, await self._in_thread(_upload_of, raw))
                       for key, raw in planned.writes]
            await self._step(running, "writing")
            detail = {"operation": running.record.id, "operation_kind": running.record.kind}
            writes = [StateWrite(key, upload, locks.get(key), detail,
                                 first_version=current[key] is None)
                      for key, upload in uploads]
            if len(writes) == 1 and not writes[0].first_version:
                (one,) = writes
                outcomes = [await self.store.write_state(one.key, one.upload, one.lock_id,
                                                         principal, STATE_OPERATION, detail)]
            else:
                outcomes = await self.store.write_states(writes, principal, STATE_OPERATION)
            status = SUCCEEDED
            result = {**planned.result, "versions": [
                {"state": key.path, "number": outcome.version.number,
                 "serial": outcome.version.serial, "lineage": outcome.version.lineage,
                 "sha256": outcome.version.sha256, "size": outcome.version.size,
                 "created": outcome.created}
                for (key, _), outcome in zip(uploads, outcomes, strict=True)]}
        except _Cancelled:
            status = CANCELLED
        except Exception as failure:
            error = _error_of(failure)
        finally:
            if renewing is not None and renewing.running:
                renewing.stop()
            try:
                await self._progress(running, "unlocking")
                await self._unlock(locks, principal)
                await self._finish(running.record, status, result=result, error=error)
            except Exception:
                # Its lease is not renewed any more: once expired, the next
                # sweep fails the operation and releases its locks.
                log.failure("could not finish operation {id}", id=running.record.id)
            finally:
                self._running.pop(running.record.id, None)

    async def _step(self, running: _Running, step: str) -> None:
        """Before a step: the pause, then the check for a cancel."""
        if self.pause is not None:
            await self.pause(running.record.id, step)
        if running.cancel_requested:
            raise _Cancelled()
        found = await self.store.find_operation(running.record.owner, running.record.id)
        if found is not None and found.cancel_requested:
            raise _Cancelled()
        await self._progress(running, step)

    async def _progress(self, running: _Running, step: str) -> None:
        running.record = await self._update(running.record, progress=_progress(step))

    async def _in_thread(self, function: Callable[..., T], *args: Any) -> T:
        if self.reactor is None:
            return function(*args)
        result: T = await deferToThreadPool(self.reactor, self.reactor.getThreadPool(),
                                            function, *args)
        return result

    def _renew_lease(self, running: _Running) -> LoopingCall | None:
        if self.clock is None:
            return None

        def renew() -> Deferred[Any]:
            now = self.now()
            return ensureDeferred(self._update(running.record, lease_expires_at=self._lease_end(
                now))).addCallbacks(lambda record: setattr(running, "record", record),
                                    lambda failure: log.warn(
                                        "could not renew the lease of operation {id}",
                                        id=running.record.id))

        loop = LoopingCall(renew)
        loop.clock = self.clock
        loop.start(RENEW_SECONDS, now=False)
        return loop

    # -- cancelling and abandoned operations --------------------------------

    async def cancel(self, owner: Owner, operation_id: str) -> OperationRecord | None:
        """Ask an operation of C{owner} to stop.

        @return: (awaited) its record, or None when it has no such operation."""
        record = await self.store.request_cancel(owner, operation_id, self.now())
        running = self._running.get(operation_id)
        if record is not None and running is not None:
            running.cancel_requested = True
        return record

    async def sweep(self) -> None:
        """Fail the operations whose lease expired (their process stopped),
        releasing the locks they held."""
        now = self.now()
        for record in await self.store.expired_operations(now):
            if record.id in self._running:
                continue  # this process runs it: a renewal is late, nothing more
            principal = Principal(record.owner.tenant, f"kilolock (abandoned {record.id})")
            await self._unlock({StateKey(record.owner.tenant, path): lock_id
                                for path, lock_id in record.locks}, principal)
            await self._finish(record, FAILED, error={
                "code": "operation_abandoned",
                "message": "the Kilolock process running this operation stopped; its locks"
                           " were released.  If its write had begun it was committed whole"
                           " (the states' versions name this operation) or not at all"})

    def wait(self, operation_id: str) -> Deferred[None]:
        """@return: a Deferred firing with None when this process has
        finished running the operation (at once when it does not run it)."""
        running = self._running.get(operation_id)
        done: Deferred[None] = Deferred()
        if running is None or running.work is None:
            done.callback(None)
            return done

        def finished(result: Any) -> Any:
            done.callback(None)
            return result

        running.work.addBoth(finished)
        return done

    # -- helpers ------------------------------------------------------------

    def _lease_end(self, now: datetime) -> datetime | None:
        return None if self.clock is None else now + timedelta(seconds=LEASE_SECONDS)

    async def _unlock(self, locks: dict[StateKey, str], principal: Principal) -> None:
        for key, lock_id in locks.items():
            try:
                await self.store.release_lock(key, lock_id, principal)
            except Exception:
                log.failure("could not release an operation's lock on a state")

    async def _update(self, record: OperationRecord, **changes: Any) -> OperationRecord:
        updated = await self.store.update_operation(
            record.id, {**changes, "updated_at": self.now()})
        return updated if updated is not None else evolve(record, **changes)

    async def _finish(self, record: OperationRecord, status: str,
                      result: dict[str, Any] | None = None,
                      error: dict[str, Any] | None = None) -> None:
        await self._update(record, status=status, progress=_progress(
            "done" if status == SUCCEEDED else status),
            result=None if result is None else json.dumps(result, ensure_ascii=False),
            error=None if error is None else json.dumps(error, ensure_ascii=False),
            lease_expires_at=None)


def _upload_of(raw: bytes) -> StateUpload:
    """A planned state's bytes, hashed and parsed as a write parses a body."""
    return StateUpload(raw=raw, sha256=hashlib.sha256(raw).hexdigest(), parsed=parse_state(raw))


def _progress(step: str) -> str:
    done = STEPS.index(step) if step in STEPS else len(STEPS)
    return json.dumps({"step": step, "stepsDone": done, "steps": len(STEPS)})


def _error_of(error: BaseException) -> dict[str, Any]:
    """What a failed operation shows of its failure: a lock conflict (when
    it locks, or when it writes a state someone locked meanwhile) with the
    holder's LockInfo; an unexpected one is logged, by kind only, and shown
    as an internal error."""
    if isinstance(error, KilolockError):
        document: dict[str, Any] = {"code": error.code, "message": error.message,
                                    **error.details()}
        if isinstance(error, LockConflict):
            document["message"] = "a state is locked by another client"
            try:
                document["lock"] = json.loads(error.holder)
            except ValueError:
                document["lock"] = None
        return document
    log.error("operation failed unexpectedly: {kind}", kind=type(error).__qualname__)
    return {"code": "internal_error", "message": "the operation failed unexpectedly; see the"
                                                 " server log"}
