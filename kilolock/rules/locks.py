"""The rules of a state's lock and serial, decided once for both stores.

Pure: no Twisted, no I/O.  A store fetches what a rule needs -- who holds
the state's lock, the stored versions an upload could repeat -- inside its
transaction, asks the rule, and carries out the answer (or lets the typed
error the rule raised end the transaction).

The lock matrix.  C{lock_id} is the lock ID a request names (C{?ID=} of a
write or delete, the ID of a LOCK or of an owner UNLOCK; None for a write or
delete without C{?ID=} and for a force UNLOCK):

  =====================  ============  ===================  ====================
  request                nothing held  held with lock_id    held with another ID
  =====================  ============  ===================  ====================
  write/delete, no ?ID=  proceed       -                    423 (the holder)
  write/delete, ?ID=     LockNotHeld   proceed              423 (the holder)
  LOCK                   acquire       replay (no event)    423 (the holder)
  owner UNLOCK           nothing       release              409 (the holder)
  force UNLOCK           nothing       release (forced)     release (forced)
  =====================  ============  ===================  ====================

The serial rule, for an upload allowed by the matrix: an upload whose serial
and SHA-256 equal a stored version's is a replay of that version (no new
version, no event); otherwise one with the current version's serial is a
L{SerialConflict}; any other serial, lower ones included (C{state push
-force}), becomes the next version, numbered from 1.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from attrs import frozen

from kilolock.core.errors import LockConflict, LockNotHeld, SerialConflict
from kilolock.core.events import LOCK_FORCE_RELEASE, LOCK_RELEASE
from kilolock.core.model import HeldLock, StateVersion

__all__ = [
    "Holder",
    "NextVersion",
    "Release",
    "Replay",
    "check_write",
    "decide_lock",
    "decide_unlock",
    "decide_upload",
    "holder_of",
    "is_plain_write",
]


@frozen
class Holder:
    """Who holds a state's lock: the lock's ID, and the lock info it was
    taken with (the body of a conflict response)."""

    id: str
    info: bytes


def holder_of(held: HeldLock | None) -> Holder | None:
    """The L{Holder} of a held lock (None for none)."""
    return None if held is None else Holder(held.info.id, held.info.raw)


def check_write(lock_id: str | None, holder: Holder | None) -> None:
    """May a write or delete naming C{lock_id} (C{?ID=}, or None) proceed
    while C{holder} holds the state?  Returns when it may.

    @raise LockNotHeld: C{?ID=} names a lock and none is held.
    @raise LockConflict: (423) another ID holds the lock, or a lock is held
        and the request names none.
    """
    if holder is None:
        if lock_id is not None:
            raise LockNotHeld()
        return
    if lock_id != holder.id:
        raise LockConflict(holder.info, status=423)


def decide_lock(lock_id: str, holder: Holder | None) -> bool:
    """Does a LOCK with C{lock_id} acquire the lock C{holder} holds (or
    nobody)?

    @return: True to acquire it (nothing held), False for a replay of the
        holder's own LOCK (nothing changes, no event).
    @raise LockConflict: (423) another ID holds the lock.
    """
    if holder is None:
        return True
    if holder.id == lock_id:
        return False
    raise LockConflict(holder.info, status=423)


class Release(enum.Enum):
    """What an UNLOCK releases."""

    #: Nothing is held: nothing to release (an UNLOCK is idempotent).
    NOTHING = "nothing"
    #: The owner's UNLOCK (it named the holder's ID).
    OWNER = "owner"
    #: A force UNLOCK: whatever is held, whoever holds it.
    FORCE = "force"

    @property
    def event_kind(self) -> str:
        """The audit event a release appends (not for L{NOTHING})."""
        if self is Release.NOTHING:
            raise ValueError("releasing nothing appends no event")
        return LOCK_RELEASE if self is Release.OWNER else LOCK_FORCE_RELEASE


def decide_unlock(lock_id: str | None, holder: Holder | None) -> Release:
    """What does an UNLOCK naming C{lock_id} (None: a force UNLOCK) release
    while C{holder} holds the state?

    @raise LockConflict: (409) an owner UNLOCK names another ID than the
        holder's.
    """
    if holder is None:
        return Release.NOTHING
    if lock_id is None:
        return Release.FORCE
    if lock_id == holder.id:
        return Release.OWNER
    raise LockConflict(holder.info, status=409)


@frozen
class Replay:
    """The upload repeats a stored version: answer with it, store nothing."""

    version: StateVersion


@frozen
class NextVersion:
    """The upload becomes a new current version with this number."""

    number: int


def decide_upload(serial: int, sha256: str, candidates: Iterable[StateVersion],
                  current: StateVersion | None) -> Replay | NextVersion:
    """Is an upload of C{serial} with digest C{sha256} a replay, a new
    version or a serial conflict?

    @param candidates: stored versions of the state among which a replay is
        looked for: at least every version with C{serial} (more do no harm).
    @param current: the state's current version (None: it has none).
    @raise SerialConflict: not a replay, and C{serial} is the current
        version's.
    """
    for version in candidates:
        if version.serial == serial and version.sha256 == sha256:
            return Replay(version)
    if current is None:
        return NextVersion(1)
    if current.serial == serial:
        raise SerialConflict(serial)
    return NextVersion(current.number + 1)


def is_plain_write(lock_id: str | None, holder_id: str | None, serial_stored: bool) -> bool:
    """Whether a write may be stored without asking L{check_write} and
    L{decide_upload}: the lock it names is the one held (no lock named and
    none held included) and no stored version has its serial.  The rules
    then always answer "the next version" (a store that checks only this,
    e.g. in one database statement, numbers it the current one's plus one)
    and otherwise must be asked with the facts."""
    return lock_id == holder_id and not serial_stored
