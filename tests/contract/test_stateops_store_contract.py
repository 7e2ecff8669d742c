"""The store contract of state operations (IStateOperationsStore), on both
stores (the fixtures of tests/contract/test_store_contract.py): writes of several
states in one transaction -- all or nothing, under the lock matrix and the
serial rule, also when a failure is injected between the two writes --
operations, upload sessions and their chunks (owned: another owner finds
nothing), and versions by digest (per tenant)."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import psycopg2
import pytest
import pytest_twisted
from twisted.internet.defer import gatherResults
from zope.interface.verify import verifyObject

from kilolock.core.errors import LockConflict, LockNotHeld, SerialConflict, StateExists
from kilolock.core.events import STATE_WRITE
from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
from kilolock.stateops import chunks
from kilolock.stateops.model import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    OperationRecord,
    Owner,
    StateWrite,
    UploadSession,
)
from kilolock.store.interfaces.stateops import IStateOperationsStore
from tests.support.awaiting import failure_of
from tests.support.stores import ALICE, BOB, FakeClock, lock, upload, write
from tests.support.stub_client import state_body

FIRST = StateKey(DEFAULT_TENANT, "first")
SECOND = StateKey(DEFAULT_TENANT, "second")
ALICE_OWNS = Owner(DEFAULT_TENANT, "alice")
BOB_OWNS = Owner(DEFAULT_TENANT, "bob")


def writes(first: bytes, second: bytes, first_lock: str | None = None,
           second_lock: str | None = None) -> list[StateWrite]:
    return [StateWrite(FIRST, upload(first), first_lock, {"operation": "op_1"}),
            StateWrite(SECOND, upload(second), second_lock, {"operation": "op_1"})]


@pytest_twisted.ensureDeferred
async def test_provides_istateoperationsstore(store: Any) -> None:
    """Every method of IStateOperationsStore, with matching signatures."""
    assert verifyObject(IStateOperationsStore, store)


@pytest_twisted.ensureDeferred
async def test_two_states_are_written_together(store: Any) -> None:
    """Both new versions, projected, one event each naming the operation;
    a state that did not exist is created."""
    await write(store, state_body(3), FIRST)
    outcomes = await store.write_states(writes(state_body(4), state_body(1)), ALICE,
                                        "state_operation")
    assert [(o.version.number, o.version.serial, o.created) for o in outcomes] == [
        (2, 4, True), (1, 1, True)]
    assert await store.read_current(SECOND) == state_body(1)
    assert (await store.get_projection(SECOND)).resources
    events = [e for e in await store.list_events(DEFAULT_TENANT)
              if e.kind == "state_operation"]
    assert [(e.state_path, e.serial) for e in events] == [("first", 4), ("second", 1)]
    assert all('"operation":"op_1"' in e.detail for e in events)


@pytest_twisted.ensureDeferred
async def test_a_refused_write_writes_neither(store: Any) -> None:
    """A lock held on one state, a serial conflict on one, a lock named and
    not held: nothing is written to either state."""
    await write(store, state_body(3), FIRST)
    await write(store, state_body(5), SECOND)
    await store.acquire_lock(SECOND, lock("theirs"), BOB)
    failure = await failure_of(store.write_states(writes(state_body(4), state_body(6)),
                                                  ALICE, STATE_WRITE), LockConflict)
    assert failure.status == 423
    await store.release_lock(SECOND, None, BOB)
    await failure_of(store.write_states(writes(state_body(4), state_body(5, "x")),
                                        ALICE, STATE_WRITE), SerialConflict)
    await failure_of(store.write_states(
        writes(state_body(4), state_body(6), first_lock="mine"), ALICE, STATE_WRITE),
        LockNotHeld)
    assert [len(await store.list_versions(key)) for key in (FIRST, SECOND)] == [1, 1]
    assert await store.read_current(FIRST) == state_body(3)


@pytest_twisted.ensureDeferred
async def test_a_first_version_is_refused_once_the_state_has_one(store: Any) -> None:
    """A write marked first_version: it creates a missing state (and one
    that exists without a version); once the state has a version the whole
    write is refused (state_exists, 409) and neither state changes."""
    await write(store, state_body(3), FIRST)
    pair = [StateWrite(FIRST, upload(state_body(4)), None),
            StateWrite(SECOND, upload(state_body(1)), None, first_version=True)]
    outcomes = await store.write_states(pair, ALICE, STATE_WRITE)
    assert [o.version.number for o in outcomes] == [2, 1]
    again = [StateWrite(FIRST, upload(state_body(5)), None),
             StateWrite(SECOND, upload(state_body(2, "other")), None, first_version=True)]
    failure = await failure_of(store.write_states(again, ALICE, STATE_WRITE), StateExists)
    assert (failure.status, failure.code) == (409, "state_exists")
    assert "second" in failure.message
    assert [len(await store.list_versions(key)) for key in (FIRST, SECOND)] == [2, 1]
    assert await store.read_current(SECOND) == state_body(1)
    third = StateKey(DEFAULT_TENANT, "third")
    assert await store.acquire_lock(third, lock("terraform"), BOB) is True
    await store.release_lock(third, "terraform", BOB)
    [made] = await store.write_states([StateWrite(third, upload(state_body(1)), None,
                                                  first_version=True)], ALICE, STATE_WRITE)
    assert made.version.number == 1


@pytest_twisted.ensureDeferred
async def test_locking_only_a_state_that_exists(store: Any) -> None:
    """acquire_lock_if_exists: a missing state is not created and nothing is
    audited (None); an existing one is locked as acquire_lock locks it
    (True, then False for the same ID, 423 for another), audited the same."""
    assert await store.acquire_lock_if_exists(FIRST, lock("op-lock"), ALICE) is None
    assert await store.list_states(DEFAULT_TENANT) == []
    assert await store.get_summary(FIRST) is None
    assert await store.list_events(DEFAULT_TENANT) == []
    await write(store, state_body(3), FIRST)
    assert await store.acquire_lock_if_exists(FIRST, lock("op-lock"), ALICE) is True
    assert await store.acquire_lock_if_exists(FIRST, lock("op-lock"), ALICE) is False
    refused = await failure_of(store.acquire_lock_if_exists(FIRST, lock("other"), BOB),
                               LockConflict)
    assert refused.status == 423 and b"op-lock" in refused.holder
    held = await store.get_lock(FIRST)
    assert held is not None and held.info.id == "op-lock"
    assert [e.kind for e in await store.list_events(DEFAULT_TENANT)] == [
        STATE_WRITE, "lock_acquire"]
    assert [s.key.path for s in await store.list_states(DEFAULT_TENANT)] == ["first"]


@pytest_twisted.ensureDeferred
async def test_a_failure_between_the_two_writes_writes_neither(
        store: Any, store_backend: tuple[str, str | None],
        monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """A failure injected after the first state's version is in and before
    the second's (PostgreSQL: a trigger refusing the second insert; memory:
    the second version's preparation failing): neither is written."""
    await write(store, state_body(3), FIRST)
    await write(store, state_body(5), SECOND)
    kind, dsn = store_backend
    if kind == "postgres":
        _sql(dsn, _REFUSE_VERSIONS_OF_SECOND)
        request.addfinalizer(lambda: _sql(dsn, "DROP FUNCTION kl_test_refuse() CASCADE"))
    else:
        prepare = store._prepare_version
        seen: list[Any] = []

        def second_fails(*args: Any) -> Any:
            seen.append(args)
            if len(seen) == 2:
                raise RuntimeError("injected")
            return prepare(*args)

        monkeypatch.setattr(store, "_prepare_version", second_fails)
    await failure_of(store.write_states(writes(state_body(4), state_body(6)), ALICE,
                                        STATE_WRITE),
                     psycopg2.Error if kind == "postgres" else RuntimeError)
    assert [await store.read_current(key) for key in (FIRST, SECOND)] == [
        state_body(3), state_body(5)]
    assert [len(await store.list_versions(key)) for key in (FIRST, SECOND)] == [1, 1]
    assert [e.kind for e in await store.list_events(DEFAULT_TENANT)] == [STATE_WRITE] * 2


#: A trigger refusing new versions of the state "second" (the database is
#: the session's, emptied for each test: the test drops it when done).
_REFUSE_VERSIONS_OF_SECOND = """
CREATE FUNCTION kl_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT path FROM states WHERE id = NEW.state_id) = 'second' THEN
        RAISE EXCEPTION 'injected failure';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER kl_test_refuse BEFORE INSERT ON state_versions
    FOR EACH ROW EXECUTE FUNCTION kl_test_refuse();
"""


def _sql(dsn: str | None, statement: str) -> None:
    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(statement)
    finally:
        connection.close()


@pytest_twisted.ensureDeferred
async def test_crossing_writes_of_the_same_states_all_commit(store: Any) -> None:
    """Writes of (first, second) and (second, first) at once, with single
    writes in between: every one commits (rows are locked in one order:
    no deadlock), each state's versions numbered without gaps."""
    await write(store, state_body(1), FIRST)
    await write(store, state_body(1), SECOND)
    calls = []
    for serial in range(2, 8):
        pair = writes(state_body(serial, f"a{serial}"), state_body(serial, f"b{serial}"))
        calls.append(store.write_states(pair if serial % 2 else pair[::-1], ALICE,
                                        STATE_WRITE))
        calls.append(store.write_state(FIRST, upload(state_body(100 + serial)), None, BOB))
    await gatherResults(calls)
    for key in (FIRST, SECOND):
        numbers = [version.number for version in await store.list_versions(key)]
        assert numbers == list(range(1, len(numbers) + 1))
    assert len(await store.list_versions(FIRST)) == 13


def record(operation_id: str, owner: Owner, clock: FakeClock,
           lease: float | None = 60) -> OperationRecord:
    now = clock()
    return OperationRecord(id=operation_id, owner=owner, kind="mv", request='{"kind":"mv"}',
                           status=RUNNING, created_at=now, updated_at=now, runner="here",
                           lease_expires_at=None if lease is None else now + timedelta(
                               seconds=lease), locks=(("first", "lock-1"),))


@pytest_twisted.ensureDeferred
async def test_operations_are_found_only_by_their_owner(store: Any, clock: FakeClock) -> None:
    """An operation is found by its owner; another principal or tenant finds
    nothing; updates stop once it finished; a cancel is recorded."""
    await store.create_operation(record("op_a", ALICE_OWNS, clock))
    found = await store.find_operation(ALICE_OWNS, "op_a")
    assert found is not None and found.locks == (("first", "lock-1"),)
    assert await store.find_operation(BOB_OWNS, "op_a") is None
    assert await store.find_operation(Owner("other", "alice"), "op_a") is None
    assert await store.request_cancel(BOB_OWNS, "op_a", clock()) is None
    cancelled = await store.request_cancel(ALICE_OWNS, "op_a", clock())
    assert cancelled.cancel_requested is True
    done = await store.update_operation("op_a", {"status": SUCCEEDED, "result": '{"x": 1}',
                                                 "updated_at": clock()})
    assert (done.status, done.result) == (SUCCEEDED, '{"x": 1}')
    after = await store.update_operation("op_a", {"status": FAILED})
    assert after.status == SUCCEEDED
    with pytest.raises(ValueError):
        await store.update_operation("op_a", {"owner": BOB_OWNS})


@pytest_twisted.ensureDeferred
async def test_expired_operations(store: Any, clock: FakeClock) -> None:
    """Running operations whose lease ended are expired; others are not."""
    await store.create_operation(record("op_old", ALICE_OWNS, clock, lease=10))
    await store.create_operation(record("op_new", ALICE_OWNS, clock, lease=100))
    await store.create_operation(record("op_none", ALICE_OWNS, clock, lease=None))
    clock.advance(50)
    assert [r.id for r in await store.expired_operations(clock())] == ["op_old"]


def session(clock: FakeClock, raw: bytes, owner: Owner = ALICE_OWNS,
            upload_id: str = "up_1", ttl: float = 60) -> UploadSession:
    return UploadSession(id=upload_id, owner=owner, state_path="first", size=len(raw),
                         sha256=hashlib.sha256(raw).hexdigest(), created_at=clock(),
                         expires_at=clock() + timedelta(seconds=ttl))


@pytest_twisted.ensureDeferred
async def test_upload_sessions_and_their_chunks(store: Any, clock: FakeClock) -> None:
    """Chunks in any order, a replay, an overlap refused; the bytes in order
    once complete; owned; committed sessions keep no chunk (they received
    every byte, whose bytes are gone); abandoned ones go."""
    raw = state_body(9) * 3
    await store.open_upload(session(clock, raw), 4)
    later = clock() + timedelta(seconds=60)
    await store.put_chunk(ALICE_OWNS, "up_1", 100, raw[100:], clock(), later)
    assert await store.upload_bytes(ALICE_OWNS, "up_1", clock()) is None
    replay = await store.put_chunk(ALICE_OWNS, "up_1", 100, raw[100:], clock(), later)
    assert [(c.offset, c.length) for c in replay.chunks] == [(100, len(raw) - 100)]
    await failure_of(store.put_chunk(ALICE_OWNS, "up_1", 50, raw[50:150], clock(), later),
                     chunks.ChunkConflict)
    await failure_of(store.put_chunk(BOB_OWNS, "up_1", 0, raw[:100], clock(), later),
                     chunks.UploadNotFound)
    complete = await store.put_chunk(ALICE_OWNS, "up_1", 0, raw[:100], clock(), later)
    assert complete.complete and complete.expires_at == later
    assert await store.upload_bytes(ALICE_OWNS, "up_1", clock()) == raw
    assert await store.upload_bytes(BOB_OWNS, "up_1", clock()) is None
    assert await store.find_upload(BOB_OWNS, "up_1", clock()) is None
    assert await store.finish_upload(BOB_OWNS, "up_1", 3) is False
    assert await store.finish_upload(ALICE_OWNS, "up_1", 3) is True
    committed = await store.find_upload(ALICE_OWNS, "up_1", clock())
    assert committed.committed_version == 3 and committed.complete
    assert [(c.offset, c.length) for c in committed.chunks] == [(0, len(raw))]
    assert await store.upload_bytes(ALICE_OWNS, "up_1", clock()) is None
    await failure_of(store.put_chunk(ALICE_OWNS, "up_1", 0, raw[:100], clock(), later),
                     chunks.ChunkConflict)
    await store.open_upload(session(clock, raw, upload_id="up_2"), 4)
    assert await store.finish_upload(ALICE_OWNS, "up_2", None) is True
    assert await store.find_upload(ALICE_OWNS, "up_2", clock()) is None


@pytest_twisted.ensureDeferred
async def test_upload_sessions_expire_and_are_limited(store: Any, clock: FakeClock) -> None:
    """An expired session is gone (dropped when the next one opens); an owner
    has at most the limit of open sessions."""
    await store.open_upload(session(clock, b"abc", ttl=10), 2)
    await store.open_upload(session(clock, b"abc", upload_id="up_2"), 2)
    await failure_of(store.open_upload(session(clock, b"abc", upload_id="up_3"), 2),
                     chunks.TooManyUploads)
    await store.open_upload(session(clock, b"abc", owner=BOB_OWNS, upload_id="up_b"), 2)
    clock.advance(10)
    assert await store.find_upload(ALICE_OWNS, "up_1", clock()) is None
    await store.open_upload(session(clock, b"abc", upload_id="up_3"), 2)
    assert await store.find_upload(ALICE_OWNS, "up_3", clock()) is not None


@pytest_twisted.ensureDeferred
async def test_digests_are_found_per_tenant(store: Any, clock: FakeClock) -> None:
    """A tenant's versions with some bytes, newest first; another tenant's
    identical bytes are not among them."""
    raw = state_body(11)
    digest = hashlib.sha256(raw).hexdigest()
    await write(store, raw, FIRST)
    clock.advance(1)
    await write(store, raw, SECOND)
    other = Principal("other", "olga")
    await store.write_state(StateKey("other", "theirs"), upload(raw), None, other)
    assert await store.find_digest(DEFAULT_TENANT, digest) == [("second", 1), ("first", 1)]
    assert await store.find_digest("other", digest) == [("theirs", 1)]
    assert await store.find_digest("nobody", digest) == []
