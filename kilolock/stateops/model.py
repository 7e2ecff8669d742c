"""The records of state operations and upload sessions, and who owns them."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from attrs import evolve, field, frozen

from kilolock.core.errors import StateExists
from kilolock.core.model import Principal, StateKey, StateUpload

__all__ = ["CANCELLED", "FAILED", "FINISHED", "RUNNING", "SUCCEEDED",
           "Chunk", "OperationRecord", "Owner", "StateWrite", "UploadSession",
           "new_operation_id", "new_upload_id", "version_appeared"]

#: An operation's status: running (its process works on it), then one of
#: the finished ones.
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
FINISHED = (SUCCEEDED, FAILED, CANCELLED)


def new_operation_id() -> str:
    """C{op_} and 24 random hex digits."""
    return "op_" + secrets.token_hex(12)


def new_upload_id() -> str:
    """C{up_} and 24 random hex digits."""
    return "up_" + secrets.token_hex(12)


@frozen
class Owner:
    """Who owns a handle: the tenant and the principal that created it.
    Another tenant, or another principal of the same tenant, is answered
    as if the handle did not exist (a 404 byte for byte like an unknown id).

    The principal is its token's id when it has one (hosted mode: two
    tokens of one tenant are two owners, whatever their names), else its
    name (a CI job's identity, the static token, the open mode's anonymous
    caller)."""

    tenant: str
    principal: str

    @classmethod
    def of(cls, principal: Principal) -> Owner:
        return cls(principal.tenant,
                   f"token:{principal.token_id}" if principal.token_id else principal.name)


@frozen
class OperationRecord:
    """An operation as the store keeps it.  C{request}, C{progress},
    C{result} and C{error} are JSON texts; C{locks} the (state path, lock
    ID) pairs it holds; C{runner} the process running it, whose lease on
    it lasts until C{lease_expires_at}."""

    id: str
    owner: Owner
    kind: str
    request: str
    status: str
    created_at: datetime
    updated_at: datetime
    runner: str
    lease_expires_at: datetime | None = None
    progress: str = "{}"
    result: str | None = None
    error: str | None = None
    cancel_requested: bool = False
    locks: tuple[tuple[str, str], ...] = ()

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def expired(self, now: datetime) -> bool:
        """Running, but its process stopped renewing its lease."""
        return (self.status == RUNNING and self.lease_expires_at is not None
                and self.lease_expires_at <= now)

    def document(self) -> dict[str, Any]:
        """The parts a client sees (besides times): JSON values."""
        return {"request": json.loads(self.request), "progress": json.loads(self.progress),
                "result": None if self.result is None else json.loads(self.result),
                "error": None if self.error is None else json.loads(self.error)}


@frozen
class Chunk:
    """A piece of an upload: C{length} bytes at C{offset}, with their SHA-256."""

    offset: int
    length: int
    sha256: str

    @property
    def end(self) -> int:
        return self.offset + self.length


@frozen
class UploadSession:
    """An upload of a state's bytes in chunks: the declared size and SHA-256
    of the whole, the chunks received (by offset), and, once committed, the
    version it became (see L{committed_to})."""

    id: str
    owner: Owner
    state_path: str
    size: int
    sha256: str
    created_at: datetime
    expires_at: datetime
    chunks: tuple[Chunk, ...] = ()
    committed_version: int | None = None

    @property
    def received(self) -> int:
        return sum(chunk.length for chunk in self.chunks)

    @property
    def complete(self) -> bool:
        return self.received == self.size

    @property
    def ready(self) -> bool:
        """Every byte received, and not committed yet: what a commit or an
        import reads."""
        return self.complete and self.committed_version is None

    def committed_to(self, version: int) -> UploadSession:
        """This session once committed to C{version}: the bytes of its chunks
        are gone, and it counts as having received every byte (one range)."""
        return evolve(self, chunks=(Chunk(0, self.size, self.sha256),),
                      committed_version=version)


@frozen
class StateWrite:
    """One state's new version in a write of several states (see
    L{kilolock.store.interfaces.stateops.IStateOperationsStore.write_states}).

    @ivar first_version: the version must be the state's first: the writer
        planned it from a state without a version, so a version written by
        anyone meanwhile refuses the whole write
        (L{kilolock.core.errors.StateExists}) instead of being overwritten.
    """

    key: StateKey
    upload: StateUpload
    lock_id: str | None
    event_detail: Mapping[str, Any] = field(factory=dict)
    first_version: bool = False


def version_appeared(key: StateKey) -> StateExists:
    """The refusal of a L{StateWrite} marked C{first_version} whose state
    has a version by now (both stores word it so)."""
    return StateExists(f"{key.path} got a version while the operation ran (written by"
                       " someone else); nothing was written")


#: The C{Operation} of the lock a state operation takes: how the lanes'
#: lock views recognise it (L{kilolock.tfe.locks.lane_of}).
OPERATION_LOCK = re.compile(r"kl state [a-z]+ \(op_[0-9a-f]+\)")


def operation_lock_operation(kind: str, operation_id: str) -> str:
    """The C{Operation} of an operation's lock: C{kl state mv (op_...)}."""
    return f"kl state {kind} ({operation_id})"
