"""The lock matrix and the serial rule, decided once in L{kilolock.rules.locks}:
every cell, synchronously, without a store.  (The store contract suite checks
that both stores follow these answers end to end.)"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kilolock.core.errors import LockConflict, LockNotHeld, SerialConflict
from kilolock.core.events import LOCK_FORCE_RELEASE, LOCK_RELEASE
from kilolock.core.model import HeldLock, LockInfo, StateVersion
from kilolock.rules.locks import (
    Holder,
    NextVersion,
    Release,
    Replay,
    check_write,
    decide_lock,
    decide_unlock,
    decide_upload,
    holder_of,
    is_plain_write,
)

#: Who may hold the lock: the ID the requests below name ("mine"), another
#: one, or nobody.
MINE = Holder("mine", b'{"ID":"mine"}')
THEIRS = Holder("theirs", b'{"ID":"theirs"}')
NOTHING_HELD = None
#: A write or delete the matrix lets through.
PROCEED = "proceed"


@pytest.mark.parametrize(("lock_id", "holder", "outcome"), [
    # no ?ID=
    (None, NOTHING_HELD, PROCEED),
    (None, MINE, (LockConflict, 423, MINE.info)),
    (None, THEIRS, (LockConflict, 423, THEIRS.info)),
    # ?ID=mine
    ("mine", NOTHING_HELD, (LockNotHeld, 409, None)),
    ("mine", MINE, PROCEED),
    ("mine", THEIRS, (LockConflict, 423, THEIRS.info)),
])
def test_write_and_delete(lock_id: str | None, holder: Holder | None,
                          outcome: object) -> None:
    """A write or delete proceeds only when the lock it names is the one held
    (no ?ID= and nothing held included); otherwise 409 lock_not_held or 423
    with the holder's lock info."""
    if outcome == PROCEED:
        assert check_write(lock_id, holder) is None
        return
    assert isinstance(outcome, tuple)
    error_type, status, body = outcome
    with pytest.raises(error_type) as raised:
        check_write(lock_id, holder)
    assert raised.value.status == status
    if body is not None:
        assert raised.value.holder == body


@pytest.mark.parametrize(("holder", "acquires"), [
    (NOTHING_HELD, True),
    (MINE, False),
])
def test_lock_acquires_or_replays(holder: Holder | None, acquires: bool) -> None:
    """A LOCK acquires a free lock, and is a replay (nothing changes) when
    its own ID already holds it."""
    assert decide_lock("mine", holder) is acquires


def test_lock_held_by_another_id_conflicts() -> None:
    """A LOCK of a lock another ID holds is 423 with the holder's info."""
    with pytest.raises(LockConflict) as raised:
        decide_lock("mine", THEIRS)
    assert (raised.value.status, raised.value.holder) == (423, THEIRS.info)


@pytest.mark.parametrize(("lock_id", "holder", "release"), [
    # owner UNLOCK
    ("mine", NOTHING_HELD, Release.NOTHING),
    ("mine", MINE, Release.OWNER),
    # force UNLOCK
    (None, NOTHING_HELD, Release.NOTHING),
    (None, MINE, Release.FORCE),
    (None, THEIRS, Release.FORCE),
])
def test_unlock_releases(lock_id: str | None, holder: Holder | None,
                         release: Release) -> None:
    """An owner UNLOCK releases its own lock, a force UNLOCK whatever is
    held; with nothing held an UNLOCK releases nothing."""
    assert decide_unlock(lock_id, holder) is release


def test_owner_unlock_of_another_id_conflicts() -> None:
    """An owner UNLOCK naming another ID than the holder's is 409 with the
    holder's info."""
    with pytest.raises(LockConflict) as raised:
        decide_unlock("mine", THEIRS)
    assert (raised.value.status, raised.value.holder) == (409, THEIRS.info)


def test_each_release_has_its_event() -> None:
    """An owner release appends lock_release, a forced one lock_force_release;
    releasing nothing appends nothing."""
    assert Release.OWNER.event_kind == LOCK_RELEASE
    assert Release.FORCE.event_kind == LOCK_FORCE_RELEASE
    with pytest.raises(ValueError):
        Release.NOTHING.event_kind  # noqa: B018 - the property raises


def test_the_holder_of_a_held_lock() -> None:
    """A held lock's holder is its ID and its lock info's exact bytes."""
    raw = b'{"ID": "mine", "Who": "alice"}'
    held = HeldLock(LockInfo.from_bytes(raw), datetime(2026, 1, 1, tzinfo=UTC), "alice")
    assert holder_of(held) == Holder("mine", raw)
    assert holder_of(None) is None


def version(number: int, serial: int, sha256: str) -> StateVersion:
    return StateVersion(number=number, serial=serial, lineage="l", sha256=sha256, size=1,
                        created_at=datetime(2026, 1, 1, tzinfo=UTC), principal="p",
                        projected=True)


V1 = version(1, 5, "a")
V2 = version(2, 6, "b")
V3 = version(3, 4, "c")  # a lower serial pushed with -force


@pytest.mark.parametrize(("serial", "sha256", "candidates", "current", "outcome"), [
    # the first version of a state
    (1, "x", [], None, NextVersion(1)),
    # a higher serial
    (7, "x", [V2], V2, NextVersion(3)),
    # a lower serial (state push -force) is a new version too
    (1, "x", [V2], V2, NextVersion(3)),
    # the current version again, byte for byte: a replay
    (6, "b", [V2], V2, Replay(V2)),
    # an older version again, byte for byte: a replay of it
    (5, "a", [V1, V2], V2, Replay(V1)),
    # an older version's serial with other bytes, not the current serial
    (5, "z", [V1, V3], V3, NextVersion(4)),
])
def test_upload_replays_or_becomes_the_next_version(
        serial: int, sha256: str, candidates: list[StateVersion],
        current: StateVersion | None, outcome: Replay | NextVersion) -> None:
    """An upload repeating a stored version byte for byte is a replay of it;
    anything else but the current serial becomes the next version."""
    assert decide_upload(serial, sha256, candidates, current) == outcome


def test_upload_of_the_current_serial_with_other_bytes_conflicts() -> None:
    """The current version's serial with other bytes is a serial conflict."""
    with pytest.raises(SerialConflict) as raised:
        decide_upload(6, "other", [V2], V2)
    assert raised.value.serial == 6


_IDS = st.sampled_from([None, "mine", "theirs"])
_SERIALS = st.integers(min_value=0, max_value=4)


@given(lock_id=_IDS, holder_id=_IDS, serial=_SERIALS,
       stored=st.lists(st.tuples(_SERIALS, st.sampled_from(["a", "b"])), max_size=4),
       sha256=st.sampled_from(["a", "b"]))
def test_a_plain_write_is_what_the_rules_call_the_next_version(
        lock_id: str | None, holder_id: str | None, serial: int,
        stored: list[tuple[int, str]], sha256: str) -> None:
    """Where is_plain_write holds (what the database's kl_write_state checks
    before writing without asking), the rules let the write through and
    number it the current version's plus one; where it does not, the store
    asks the rules with the facts."""
    versions = [version(number, stored_serial, stored_sha)
                for number, (stored_serial, stored_sha) in enumerate(stored, 1)]
    holder = None if holder_id is None else Holder(holder_id, b"{}")
    plain = is_plain_write(lock_id, holder_id, any(v.serial == serial for v in versions))
    if not plain:
        return
    check_write(lock_id, holder)
    current = versions[-1] if versions else None
    assert decide_upload(serial, sha256, versions, current) == NextVersion(len(versions) + 1)
