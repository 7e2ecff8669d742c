"""The store contract: one suite, run against every L{IStateStore}.

The memory store is the reference; the PostgreSQL store runs the very same
tests against a fresh database on the session's embedded PostgreSQL (see
C{fixtures_postgres.py}).  The sections at the end hold what only PostgreSQL
has: several processes on one database, the schema upgrader, the embedded
server's life cycle, and behaviour while the database is down.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from typing import Any

import psutil
import psycopg2
import pytest
import pytest_twisted
from twisted.internet.defer import Deferred, DeferredList, gatherResults
from zope.interface.verify import verifyObject

from kilolock.core.audit import GENESIS, event_hash, first_broken_link
from kilolock.core.errors import (
    BadRequest,
    LockConflict,
    LockNotHeld,
    SerialConflict,
    ServiceUnavailable,
    StateNotFound,
)
from kilolock.core.events import (
    LOCK_ACQUIRE,
    LOCK_FORCE_RELEASE,
    LOCK_RELEASE,
    STATE_DELETE,
    STATE_ROLLBACK,
    STATE_WRITE,
)
from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey, StateUpload
from kilolock.rules.resources import MAX_LIMIT, ResourceQuery
from kilolock.store.interfaces.states import IStateStore
from kilolock.tfstate.parse import parse_state
from tests.support.awaiting import failure_of
from tests.support.fixtures_postgres import embedded_postgres_in_temporary_directory
from tests.support.log_events import CANNOT_CONNECT, DEADLINE_EXCEEDED, logged
from tests.support.paths import SAMPLE_STATES
from tests.support.stores import (
    ALICE,
    BOB,
    ENVELOPE,
    KEY,
    FakeClock,
    kinds_of_events,
    lock,
    postgres_store,
    upload,
    write,
)
from tests.support.stub_client import state_body

DATA = SAMPLE_STATES


# -- interface and basic reads/writes --------------------------------------


@pytest_twisted.ensureDeferred
async def test_provides_istatestore(store: Any) -> None:
    """The store provides every method of IStateStore with matching signatures."""
    assert verifyObject(IStateStore, store)


@pytest_twisted.ensureDeferred
async def test_probe_reports_a_reachable_current_store(store: Any) -> None:
    """probe() says the store answers and its schema (if it has one) is current."""
    probe = await store.probe()
    assert probe.reachable is True
    assert probe.schema_current is True


@pytest_twisted.ensureDeferred
async def test_read_of_missing_state_is_none(store: Any) -> None:
    """Reading a state never written gives None, and nothing else exists for it."""
    assert await store.read_current(KEY) is None
    assert await store.get_summary(KEY) is None
    assert await store.list_versions(KEY) == []
    assert await store.read_version(KEY, 1) is None
    assert await store.get_projection(KEY) is None
    assert await store.get_lock(KEY) is None


@pytest_twisted.ensureDeferred
async def test_write_then_read_is_byte_for_byte(store: Any, clock: FakeClock) -> None:
    """A write is answered with version 1 and read back with the exact bytes."""
    pretty = state_body(7, outputs={"greeting": {"value": "h\u00e9llo", "type": "string"}})
    raw = pretty.replace(b"  ", b"\t").replace(b"\\u00e9", "\u00e9".encode())
    assert "\u00e9".encode() in raw
    outcome = await write(store, raw)
    assert outcome.created is True
    version = outcome.version
    assert (version.number, version.serial, version.size) == (1, 7, len(raw))
    assert version.sha256 == hashlib.sha256(raw).hexdigest()
    assert version.lineage == "7b1d5c1e-0000-4000-8000-000000000001"
    assert (version.created_at, version.principal, version.projected) == (clock.now, "alice", True)
    assert await store.read_current(KEY) == raw
    assert await store.read_version(KEY, 1) == raw


@pytest_twisted.ensureDeferred
async def test_any_bytes_round_trip(store: Any) -> None:
    """Quotes, backslashes, NUL and bytes that are not UTF-8 are stored and read back exactly."""
    quoted = state_body(1, outputs={"q": {"value": "it's \\'; DROP TABLE states; --",
                                          "type": "string"}})
    await write(store, quoted)
    assert await store.read_current(KEY) == quoted
    odd = b"\xff\xfe'\x00\\x00" + bytes(range(256))
    parsed = parse_state(ENVELOPE)
    await store.write_state(KEY, StateUpload(odd, hashlib.sha256(odd).hexdigest(), parsed),
                            None, ALICE)
    assert await store.read_current(KEY) == odd
    assert await store.read_version(KEY, 1) == quoted


@pytest_twisted.ensureDeferred
async def test_large_state_round_trip(store: Any) -> None:
    """A multi-megabyte state (prepared and decoded in threads) keeps its bytes and projection."""
    resources = [{
        "mode": "managed", "type": "terraform_data", "name": f"r{index}",
        "provider": 'provider["terraform.io/builtin/terraform"]',
        "instances": [{"attributes": {"id": f"{index}", "input": "it's " + "x" * 2000},
                       "dependencies": [f"terraform_data.r{index - 1}"] if index else []}],
    } for index in range(1500)]
    raw = state_body(1, resources=resources)
    assert len(raw) > 3_000_000
    await write(store, raw)
    assert await store.read_current(KEY) == raw
    assert await store.get_projection(KEY) == parse_state(raw).projection


# -- the lock matrix: writes ----------------------------------------------


@pytest_twisted.ensureDeferred
async def test_write_with_lock_id_when_unlocked_is_lock_not_held(store: Any) -> None:
    """POST ?ID=x on an unlocked state fails with LockNotHeld and stores nothing."""
    error = await failure_of(store.write_state(KEY, upload(state_body(1)), "x", ALICE),
                             LockNotHeld)
    assert (error.status, error.code) == (409, "lock_not_held")
    assert await store.get_summary(KEY) is None
    assert await store.list_events(DEFAULT_TENANT) == []


@pytest_twisted.ensureDeferred
async def test_write_with_lock_id_after_force_unlock_is_lock_not_held(store: Any) -> None:
    """A writer whose lock was force-released cannot write with its stale ID."""
    await write(store, state_body(1))
    await store.acquire_lock(KEY, lock("mine"), ALICE)
    await store.release_lock(KEY, None, BOB)
    await failure_of(store.write_state(KEY, upload(state_body(2)), "mine", ALICE), LockNotHeld)
    assert await store.read_current(KEY) == state_body(1)


@pytest_twisted.ensureDeferred
async def test_write_with_matching_lock_id_is_accepted(store: Any) -> None:
    """POST ?ID=H while H holds the lock writes, and the lock stays held."""
    await store.acquire_lock(KEY, lock("held"), ALICE)
    outcome = await write(store, state_body(1), lock_id="held")
    assert outcome.created is True
    assert await store.read_current(KEY) == state_body(1)
    held = await store.get_lock(KEY)
    assert held is not None and held.info.id == "held"
    events = await store.list_events(DEFAULT_TENANT)
    assert [(event.kind, event.lock_id) for event in events] == [
        (LOCK_ACQUIRE, "held"), (STATE_WRITE, "held")]


@pytest_twisted.ensureDeferred
async def test_write_with_other_lock_id_is_423_with_holder_bytes(store: Any) -> None:
    """POST ?ID=y while H holds the lock fails 423 with H's LockInfo bytes."""
    info = lock("held", who="bob@ci")
    await store.acquire_lock(KEY, info, BOB)
    error = await failure_of(store.write_state(KEY, upload(state_body(1)), "other", ALICE),
                             LockConflict)
    assert error.status == 423
    assert error.holder == info.raw
    assert await store.read_current(KEY) is None


@pytest_twisted.ensureDeferred
async def test_write_without_id_while_locked_is_423(store: Any) -> None:
    """POST without ID on a locked state fails 423 with the holder's bytes."""
    await write(store, state_body(1))
    info = lock("held")
    await store.acquire_lock(KEY, info, BOB)
    error = await failure_of(store.write_state(KEY, upload(state_body(2)), None, ALICE),
                             LockConflict)
    assert (error.status, error.holder) == (423, info.raw)
    assert await store.read_current(KEY) == state_body(1)


@pytest_twisted.ensureDeferred
async def test_write_without_id_when_unlocked_is_accepted(store: Any) -> None:
    """POST without ID on an unlocked state (terraform -lock=false) writes."""
    await write(store, state_body(1))
    outcome = await write(store, state_body(2))
    assert (outcome.created, outcome.version.number) == (True, 2)


# -- the lock matrix: deletes ---------------------------------------------


@pytest_twisted.ensureDeferred
async def test_delete_of_missing_state_is_state_not_found(store: Any) -> None:
    """DELETE of a state that does not exist fails with StateNotFound (404)."""
    error = await failure_of(store.delete_state(KEY, None, ALICE), StateNotFound)
    assert error.status == 404
    await failure_of(store.delete_state(KEY, "x", ALICE), StateNotFound)


@pytest_twisted.ensureDeferred
async def test_delete_with_lock_id_when_unlocked_is_lock_not_held(store: Any) -> None:
    """DELETE ?ID=x of an unlocked state fails with LockNotHeld; nothing is deleted."""
    await write(store, state_body(1))
    await failure_of(store.delete_state(KEY, "x", ALICE), LockNotHeld)
    assert await store.read_current(KEY) == state_body(1)


@pytest_twisted.ensureDeferred
async def test_delete_with_matching_lock_id_deletes_state_and_lock(store: Any) -> None:
    """DELETE ?ID=H while H holds the lock deletes the state and its lock."""
    await write(store, state_body(1))
    await store.acquire_lock(KEY, lock("held"), ALICE)
    await store.delete_state(KEY, "held", ALICE)
    assert await store.get_lock(KEY) is None
    assert await store.get_summary(KEY) is None
    # The lock went with the state: a new LOCK by someone else succeeds.
    assert await store.acquire_lock(KEY, lock("next"), BOB) is True


@pytest_twisted.ensureDeferred
async def test_delete_with_other_or_no_lock_id_while_locked_is_423(store: Any) -> None:
    """DELETE with another ID, or without one, on a locked state fails 423."""
    await write(store, state_body(1))
    info = lock("held")
    await store.acquire_lock(KEY, info, BOB)
    for lock_id in ("other", None):
        error = await failure_of(store.delete_state(KEY, lock_id, ALICE), LockConflict)
        assert (error.status, error.holder) == (423, info.raw)
    assert await store.read_current(KEY) == state_body(1)


# -- the lock matrix: LOCK and UNLOCK --------------------------------------


@pytest_twisted.ensureDeferred
async def test_acquire_free_lock_creates_state_row_without_version(store: Any) -> None:
    """LOCK of an unknown state acquires (True) and creates a row with no version."""
    info = lock("first")
    assert await store.acquire_lock(KEY, info, ALICE) is True
    assert await store.read_current(KEY) is None
    summary = await store.get_summary(KEY)
    assert summary is not None
    assert (summary.current, summary.version_count, summary.resource_count) == (None, 0, 0)
    assert summary.lock is not None and summary.lock.info == info
    held = await store.get_lock(KEY)
    assert held is not None
    assert (held.info, held.principal) == (info, "alice")


@pytest_twisted.ensureDeferred
async def test_acquire_with_own_id_is_idempotent(store: Any) -> None:
    """A repeated LOCK with the holder's ID succeeds (False) and logs no event."""
    await store.acquire_lock(KEY, lock("mine"), ALICE)
    assert await store.acquire_lock(KEY, lock("mine"), ALICE) is False
    assert await kinds_of_events(store) == [LOCK_ACQUIRE]


@pytest_twisted.ensureDeferred
async def test_acquire_with_other_id_is_423_with_holder_bytes(store: Any) -> None:
    """LOCK with another ID fails 423 with the holder's LockInfo bytes verbatim."""
    info = lock("mine")
    await store.acquire_lock(KEY, info, ALICE)
    error = await failure_of(store.acquire_lock(KEY, lock("theirs"), BOB), LockConflict)
    assert (error.status, error.holder) == (423, info.raw)
    held = await store.get_lock(KEY)
    assert held is not None and held.info.id == "mine"


@pytest_twisted.ensureDeferred
async def test_owner_release_when_free_is_none(store: Any) -> None:
    """UNLOCK with an ID when no lock is held is an idempotent None, no event."""
    assert await store.release_lock(KEY, "x", ALICE) is None
    await write(store, state_body(1))
    assert await store.release_lock(KEY, "x", ALICE) is None
    assert await kinds_of_events(store) == [STATE_WRITE]


@pytest_twisted.ensureDeferred
async def test_owner_release_with_matching_id_releases(store: Any) -> None:
    """UNLOCK with the holder's ID releases, returns the lock, logs lock_release."""
    info = lock("mine")
    await store.acquire_lock(KEY, info, ALICE)
    released = await store.release_lock(KEY, "mine", ALICE)
    assert released is not None and released.info == info
    assert await store.get_lock(KEY) is None
    events = await store.list_events(DEFAULT_TENANT)
    assert [(event.kind, event.lock_id) for event in events] == [
        (LOCK_ACQUIRE, "mine"), (LOCK_RELEASE, "mine")]
    # The lock's Who and Operation are the acquire's; the owner's release
    # does not repeat them (a lighter event: 54 bytes less per cycle).
    assert [json.loads(event.detail) for event in events] == [
        {"who": info.who, "operation": info.operation}, {}]


@pytest_twisted.ensureDeferred
async def test_owner_release_with_other_id_is_409_with_holder_bytes(store: Any) -> None:
    """UNLOCK with another ID fails 409 with the holder's bytes; the lock stays."""
    info = lock("mine")
    await store.acquire_lock(KEY, info, ALICE)
    error = await failure_of(store.release_lock(KEY, "theirs", BOB), LockConflict)
    assert (error.status, error.holder) == (409, info.raw)
    held = await store.get_lock(KEY)
    assert held is not None and held.info.id == "mine"


@pytest_twisted.ensureDeferred
async def test_force_release_when_free_is_none(store: Any) -> None:
    """A force UNLOCK with nothing held is an idempotent None, no event."""
    assert await store.release_lock(KEY, None, ALICE) is None
    assert await store.list_events(DEFAULT_TENANT) == []


@pytest_twisted.ensureDeferred
async def test_force_release_of_held_lock_is_audited(store: Any) -> None:
    """A force UNLOCK releases anyone's lock and logs lock_force_release with its ID."""
    info = lock("theirs", who="bob@ci")
    await store.acquire_lock(KEY, info, BOB)
    released = await store.release_lock(KEY, None, ALICE)
    assert released is not None
    assert (released.info, released.principal) == (info, "bob")
    assert await store.get_lock(KEY) is None
    event = (await store.list_events(DEFAULT_TENANT))[-1]
    assert (event.kind, event.lock_id, event.principal) == (LOCK_FORCE_RELEASE, "theirs", "alice")
    assert json.loads(event.detail) == {"who": "bob@ci", "operation": "OperationTypeApply"}


# -- serials and replays ---------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_identical_replay_creates_nothing(store: Any) -> None:
    """A byte-identical replay returns the stored version, created False, no event."""
    first = await write(store, state_body(3))
    replay = await write(store, state_body(3))
    assert replay.created is False
    assert replay.version == first.version
    assert len(await store.list_versions(KEY)) == 1
    assert await kinds_of_events(store) == [STATE_WRITE]


@pytest_twisted.ensureDeferred
async def test_replay_of_an_older_version_is_idempotent(store: Any) -> None:
    """Replaying an older version's exact bytes returns that version, not a new one."""
    first = await write(store, state_body(1))
    await write(store, state_body(2))
    replay = await write(store, state_body(1))
    assert (replay.created, replay.version) == (False, first.version)
    assert await store.read_current(KEY) == state_body(2)
    assert len(await store.list_versions(KEY)) == 2


@pytest_twisted.ensureDeferred
async def test_same_serial_different_bytes_is_serial_conflict(store: Any) -> None:
    """The current serial with different bytes fails with SerialConflict (409)."""
    await write(store, state_body(5))
    other = state_body(5, lineage="7b1d5c1e-0000-4000-8000-00000000ffff")
    error = await failure_of(store.write_state(KEY, upload(other), None, ALICE), SerialConflict)
    assert (error.status, error.serial) == (409, 5)
    assert await store.read_current(KEY) == state_body(5)
    assert await kinds_of_events(store) == [STATE_WRITE]


@pytest_twisted.ensureDeferred
async def test_lower_serial_is_a_new_current_version(store: Any) -> None:
    """A lower serial (state push -force) becomes a new, current version."""
    await write(store, state_body(9))
    outcome = await write(store, state_body(4))
    assert (outcome.created, outcome.version.number, outcome.version.serial) == (True, 2, 4)
    assert await store.read_current(KEY) == state_body(4)


@pytest_twisted.ensureDeferred
async def test_new_lineage_at_serial_one_is_accepted(store: Any) -> None:
    """Migrating another state in (new lineage, serial 1) is accepted; lineage is not enforced."""
    await write(store, state_body(12))
    migrated = state_body(1, lineage="00000000-1111-4222-8333-444444444444")
    outcome = await write(store, migrated)
    assert outcome.version.lineage == "00000000-1111-4222-8333-444444444444"
    assert await store.read_current(KEY) == migrated


@pytest_twisted.ensureDeferred
async def test_serial_of_an_older_version_with_new_bytes_is_accepted(store: Any) -> None:
    """Only the current version's serial conflicts: an old serial with new bytes is new."""
    await write(store, state_body(1))
    await write(store, state_body(2))
    again = state_body(1, lineage="7b1d5c1e-0000-4000-8000-0000000000aa")
    outcome = await write(store, again)
    assert (outcome.created, outcome.version.number, outcome.version.serial) == (True, 3, 1)
    assert [v.serial for v in await store.list_versions(KEY)] == [1, 2, 1]


# -- delete semantics --------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_delete_removes_state_but_keeps_events(store: Any) -> None:
    """DELETE removes versions, projection and lock; every event survives, plus state_delete."""
    await write(store, state_body(1))
    await write(store, state_body(2))
    before = await store.list_events(DEFAULT_TENANT)
    await store.delete_state(KEY, None, BOB)
    assert await store.read_current(KEY) is None
    assert await store.get_summary(KEY) is None
    assert await store.list_versions(KEY) == []
    assert await store.read_version(KEY, 1) is None
    assert await store.get_projection(KEY) is None
    assert await store.list_states(DEFAULT_TENANT) == []
    events = await store.list_events(DEFAULT_TENANT)
    assert events[:-1] == before
    deleted = events[-1]
    assert (deleted.kind, deleted.state_path, deleted.principal) == (STATE_DELETE, "prod", "bob")
    assert json.loads(deleted.detail) == {"versions": 2}
    assert await store.list_events(DEFAULT_TENANT, state_path="prod") == events
    assert first_broken_link(events) is None


@pytest_twisted.ensureDeferred
async def test_write_after_delete_starts_again_at_version_one(store: Any) -> None:
    """A state written again after DELETE starts a new history at version 1."""
    await write(store, state_body(8))
    await store.delete_state(KEY, None, ALICE)
    outcome = await write(store, state_body(8))
    assert (outcome.created, outcome.version.number) == (True, 1)


@pytest_twisted.ensureDeferred
async def test_delete_of_lock_only_state(store: Any) -> None:
    """A state that only a LOCK created can be deleted by its lock holder."""
    await store.acquire_lock(KEY, lock("held"), ALICE)
    await store.delete_state(KEY, "held", ALICE)
    assert await store.get_summary(KEY) is None
    event = (await store.list_events(DEFAULT_TENANT))[-1]
    assert (event.kind, event.lock_id, json.loads(event.detail)) == (
        STATE_DELETE, "held", {"versions": 0})


# -- projection --------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_projection_rows_of_a_real_state(store: Any) -> None:
    """The projection of the current version is the parser's, row for row, in order."""
    raw = (DATA / "full.tfstate").read_bytes()
    expected = parse_state(raw).projection
    assert expected is not None
    outcome = await write(store, raw)
    assert outcome.version.projected is True
    projection = await store.get_projection(KEY)
    assert projection == expected
    addresses = (DATA / "full.addresses.txt").read_text("utf-8").splitlines()
    assert sorted({row.address for row in projection.resources}) == sorted(addresses)
    assert not any("hunter2" in (row.value or "") for row in projection.outputs)
    summary = await store.get_summary(KEY)
    assert summary.resource_count == len(expected.resources)


@pytest_twisted.ensureDeferred
async def test_projection_follows_the_current_version(store: Any) -> None:
    """A new version replaces the projection; a replay leaves it alone."""
    await write(store, (DATA / "full.tfstate").read_bytes())
    deposed = (DATA / "deposed.tfstate").read_bytes()
    await write(store, deposed)
    expected = parse_state(deposed).projection
    assert await store.get_projection(KEY) == expected
    assert any(row.deposed for row in expected.resources)
    destroyed = (DATA / "destroyed.tfstate").read_bytes()
    await write(store, destroyed)
    projection = await store.get_projection(KEY)
    assert projection is not None
    assert (projection.resources, projection.dependencies) == ((), ())
    assert (await store.get_summary(KEY)).resource_count == 0


@pytest_twisted.ensureDeferred
async def test_projection_of_awkward_values(store: Any) -> None:
    """Keys, dependencies, nulls and sensitive outputs project as the parser says."""
    resources = [{
        "mode": "managed", "type": "null_resource", "name": "n", "module": "module.m[0]",
        "provider": 'provider["registry.terraform.io/hashicorp/null"]',
        "instances": [
            {"index_key": "k'ey", "attributes": {"id": "1", "nested": {"b": [1, 2.5, None],
             "a": "x\u00e9"}}, "dependencies": ["module.m.null_resource.a"]},
            {"index_key": 3, "attributes": {}, "deposed": "abcd1234",
             "dependencies": ["module.m.null_resource.a", "null_resource.b"]},
        ],
    }]
    outputs = {"plain": {"value": None, "type": "string"},
               "secret": {"value": "s3cr3t", "type": "string", "sensitive": True},
               "untyped": {"value": [1, "two"]}}
    raw = state_body(2, resources=resources, outputs=outputs)
    await write(store, raw)
    assert await store.get_projection(KEY) == parse_state(raw).projection


@pytest_twisted.ensureDeferred
async def test_encrypted_envelope_is_stored_but_not_projected(store: Any) -> None:
    """An OpenTofu encrypted state is kept byte-for-byte with no projection."""
    await write(store, (DATA / "full.tfstate").read_bytes())
    outcome = await write(store, ENVELOPE)
    assert (outcome.version.projected, outcome.version.serial) == (False, 4)
    assert await store.read_current(KEY) == ENVELOPE
    assert await store.get_projection(KEY) is None
    summary = await store.get_summary(KEY)
    assert (summary.resource_count, summary.current.projected) == (0, False)


# -- audit events -------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_events_record_every_mutation_and_chain(store: Any, clock: FakeClock) -> None:
    """Each mutation logs one event with who/what/when, hash-chained from genesis."""
    await store.acquire_lock(KEY, lock("L1"), ALICE)
    clock.advance(1)
    outcome = await write(store, state_body(1), lock_id="L1")
    clock.advance(1)
    await store.release_lock(KEY, "L1", ALICE)
    clock.advance(1)
    await store.delete_state(KEY, None, BOB)
    events = await store.list_events(DEFAULT_TENANT)
    assert [event.kind for event in events] == [LOCK_ACQUIRE, STATE_WRITE, LOCK_RELEASE,
                                                STATE_DELETE]
    assert [event.seq for event in events] == [1, 2, 3, 4]
    written = events[1]
    assert (written.serial, written.sha256, written.lock_id, written.principal) == (
        1, outcome.version.sha256, "L1", "alice")
    assert json.loads(written.detail) == {"version": 1, "size": outcome.version.size}
    assert written.at == outcome.version.created_at
    assert events[0].prev_hash == GENESIS
    assert all(event.hash == event_hash(event) for event in events)
    assert first_broken_link(events) is None
    assert all(event.tenant == DEFAULT_TENANT and event.state_path == "prod"
               for event in events)


@pytest_twisted.ensureDeferred
async def test_event_filters(store: Any, clock: FakeClock) -> None:
    """list_events filters by state path, kinds and the half-open range [since, until)."""
    start = clock.now
    await write(store, state_body(1))
    clock.advance(10)
    await write(store, state_body(1), key=StateKey(DEFAULT_TENANT, "other"))
    clock.advance(10)
    await store.acquire_lock(KEY, lock("L"), ALICE)
    assert [e.state_path for e in await store.list_events(DEFAULT_TENANT, "other")] == ["other"]
    locks = await store.list_events(DEFAULT_TENANT, kinds=[LOCK_ACQUIRE])
    assert [e.kind for e in locks] == [LOCK_ACQUIRE]
    assert await store.list_events(DEFAULT_TENANT, kinds=[]) == []
    middle = await store.list_events(DEFAULT_TENANT, since=start + timedelta(seconds=10),
                                     until=start + timedelta(seconds=20))
    assert [e.state_path for e in middle] == ["other"]
    assert len(await store.list_events(DEFAULT_TENANT, since=start)) == 3
    assert await store.list_events(DEFAULT_TENANT, until=start) == []


@pytest_twisted.ensureDeferred
async def test_record_event_extends_the_tenant_chain(store: Any) -> None:
    """Control-plane events join the same per-tenant chain, for any tenant."""
    await write(store, state_body(1))
    recorded = await store.record_event(DEFAULT_TENANT, "token_create", "admin",
                                        detail={"token": "kl_abc1"})
    assert (recorded.seq, recorded.kind, recorded.state_path) == (2, "token_create", None)
    assert json.loads(recorded.detail) == {"token": "kl_abc1"}
    fresh = await store.record_event("acme", "tenant_create", "admin")
    assert (fresh.seq, fresh.prev_hash, fresh.detail) == (1, GENESIS, "{}")
    events = await store.list_events(DEFAULT_TENANT)
    assert events[-1] == recorded
    assert first_broken_link(events) is None


# -- tenants and listings -------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_tenants_are_isolated(store: Any) -> None:
    """Two tenants' states named 'prod' are independent: data, locks, events, listings."""
    acme, globex = StateKey("acme", "prod"), StateKey("globex", "prod")
    acme_user, globex_user = Principal("acme", "ann"), Principal("globex", "gus")
    await write(store, state_body(1), key=acme, principal=acme_user)
    await write(store, state_body(5), key=globex, principal=globex_user)
    info = lock("acme-lock")
    await store.acquire_lock(acme, info, acme_user)
    # globex's state is not locked by acme's lock, and the reverse.
    await write(store, state_body(6), key=globex, principal=globex_user)
    assert await store.get_lock(globex) is None
    await failure_of(store.write_state(acme, upload(state_body(2)), None, acme_user),
                     LockConflict)
    assert await store.read_current(acme) == state_body(1)
    assert await store.read_current(globex) == state_body(6)
    assert await store.read_current(KEY) is None
    assert [s.key for s in await store.list_states("acme")] == [acme]
    assert [s.key for s in await store.list_states("globex")] == [globex]
    assert await store.list_states(DEFAULT_TENANT) == []
    assert await kinds_of_events(store, "acme") == [STATE_WRITE, LOCK_ACQUIRE]
    assert await kinds_of_events(store, "globex") == [STATE_WRITE, STATE_WRITE]
    assert await store.list_events(DEFAULT_TENANT) == []
    await store.delete_state(globex, None, globex_user)
    assert await store.read_current(acme) == state_body(1)
    for tenant in ("acme", "globex"):
        events = await store.list_events(tenant)
        assert events[0].seq == 1 and first_broken_link(events) is None


@pytest_twisted.ensureDeferred
async def test_list_states_and_summaries(store: Any, clock: FakeClock) -> None:
    """list_states orders by path (code points) and summarises versions, locks, resources."""
    for path in ("b", "\u00e9t\u00e9", "A", "ws/env/a"):
        await write(store, state_body(1), key=StateKey(DEFAULT_TENANT, path))
    clock.advance(5)
    await write(store, (DATA / "full.tfstate").read_bytes(), key=StateKey(DEFAULT_TENANT, "b"))
    await store.acquire_lock(StateKey(DEFAULT_TENANT, "locked-only"), lock("L"), ALICE)
    summaries = await store.list_states(DEFAULT_TENANT)
    assert [s.key.path for s in summaries] == ["A", "b", "locked-only", "ws/env/a",
                                               "\u00e9t\u00e9"]
    by_path = {s.key.path: s for s in summaries}
    b = by_path["b"]
    assert (b.version_count, b.current.number, b.current.serial, b.resource_count) == (2, 2, 15, 15)
    assert b.updated_at == clock.now and b.lock is None
    only = by_path["locked-only"]
    assert (only.current, only.version_count, only.lock.info.id) == (None, 0, "L")
    assert await store.get_summary(StateKey(DEFAULT_TENANT, "b")) == b


@pytest_twisted.ensureDeferred
async def test_list_versions_and_read_version(store: Any, clock: FakeClock) -> None:
    """Versions are listed oldest first with their metadata; each reads back exactly."""
    bodies = [state_body(serial) for serial in (1, 2, 3)]
    for raw in bodies:
        await write(store, raw, principal=BOB)
        clock.advance(1)
    versions = await store.list_versions(KEY)
    assert [(v.number, v.serial, v.principal) for v in versions] == [
        (1, 1, "bob"), (2, 2, "bob"), (3, 3, "bob")]
    assert [v.size for v in versions] == [len(raw) for raw in bodies]
    assert versions[1].created_at == versions[0].created_at + timedelta(seconds=1)
    for number, raw in enumerate(bodies, start=1):
        assert await store.read_version(KEY, number) == raw
    assert await store.read_version(KEY, 4) is None
    assert await store.read_version(StateKey("acme", "prod"), 1) is None


# -- concurrency ---------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_concurrent_writes_to_one_state_are_serialised(store: Any) -> None:
    """Ten writes fired at once all land, as ten distinct versions numbered 1..10."""
    pending = [store.write_state(KEY, upload(state_body(serial)), None, ALICE)
               for serial in range(1, 11)]
    outcomes = await gatherResults(pending)
    assert all(outcome.created for outcome in outcomes)
    versions = await store.list_versions(KEY)
    assert [v.number for v in versions] == list(range(1, 11))
    assert sorted(v.serial for v in versions) == list(range(1, 11))
    events = await store.list_events(DEFAULT_TENANT)
    assert len(events) == 10 and first_broken_link(events) is None


@pytest_twisted.ensureDeferred
async def test_concurrent_locks_have_exactly_one_winner(store: Any) -> None:
    """Twenty LOCKs with different IDs fired at once: one acquires, nineteen get 423."""
    results = await DeferredList(
        [store.acquire_lock(KEY, lock(f"id-{n}"), ALICE) for n in range(20)],
        consumeErrors=True)
    wins = [value for ok, value in results if ok]
    conflicts = [value for ok, value in results if not ok]
    assert wins == [True]
    assert len(conflicts) == 19
    assert all(failure.check(LockConflict) for failure in conflicts)
    assert all(failure.value.status == 423 for failure in conflicts)
    assert await kinds_of_events(store) == [LOCK_ACQUIRE]


# -- the KL-native lane: rollback events and resource queries -----------------


def resource(type_: str, name: str, instances: list[dict[str, Any]],
             module: str | None = None, mode: str = "managed") -> dict[str, Any]:
    doc: dict[str, Any] = {"mode": mode, "type": type_, "name": name,
                           "provider": 'provider["terraform.io/builtin/terraform"]',
                           "instances": instances}
    if module is not None:
        doc["module"] = module
    return doc


def instance(attributes: dict[str, Any], index_key: Any = None,
             sensitive: list[str] = ()) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema_version": 0, "attributes": attributes,
                           "sensitive_attributes": [[{"type": "get_attr", "value": name}]
                                                    for name in sensitive]}
    if index_key is not None:
        doc["index_key"] = index_key
    return doc


#: A state with root, module, data, counted and keyed resources.
QUERY_STATE = state_body(3, resources=[
    resource("terraform_data", "web", [
        instance({"id": "w0", "input": "blue", "tags": {"Name": "web-0"}, "port": 80,
                  "on": True, "list": ["a", "b"]}, index_key=0),
        instance({"id": "w1", "input": "green", "tags": {"Name": "web-1"}, "port": 81,
                  "on": False, "list": []}, index_key=1),
    ]),
    resource("terraform_data", "keyed", [
        instance({"id": "k1"}, index_key="a_b"),
        instance({"id": "k2"}, index_key="aXb"),
        instance({"id": "k3"}, index_key="100%"),
    ]),
    resource("vpc", "main", [instance({"id": "vpc-1", "cidr": "10.0.0.0/16",
                                       "password": "s3cret"}, sensitive=["password"])],
             module="module.net"),
    resource("terraform_remote_state", "other", [instance({"backend": "http"})], mode="data"),
])


async def addresses_of(store: Any, tenant: str = DEFAULT_TENANT, **criteria: Any) -> list[str]:
    matches = await store.query_resources(tenant, ResourceQuery(**criteria))
    return [f"{match.state_path}:{match.resource.address}" for match in matches]


@pytest_twisted.ensureDeferred
async def test_write_with_an_event_kind_records_that_kind(store: Any) -> None:
    """write_state's event_kind and event_detail name the event (e.g. a rollback);
    the default stays state_write and the chain still verifies."""
    await write(store, state_body(1))
    restored = upload(state_body(2))
    outcome = await store.write_state(KEY, restored, None, BOB, event_kind=STATE_ROLLBACK,
                                      event_detail={"restored_version": 1})
    assert outcome.created and outcome.version.number == 2
    events = await store.list_events(DEFAULT_TENANT)
    assert [event.kind for event in events] == [STATE_WRITE, STATE_ROLLBACK]
    assert (events[1].serial, events[1].sha256, events[1].principal) == (
        2, restored.sha256, "bob")
    assert json.loads(events[1].detail) == {"version": 2, "size": len(restored.raw),
                                            "restored_version": 1}
    assert first_broken_link(events) is None
    assert await store.read_current(KEY) == state_body(2)


@pytest_twisted.ensureDeferred
async def test_query_resources_by_type_module_address_and_attribute(store: Any) -> None:
    """query_resources matches type, module, '*' address patterns (brackets, '_'
    and '%' literal) and scalar attribute values at dotted paths."""
    await write(store, QUERY_STATE)
    everything = await addresses_of(store)
    assert everything == [
        "prod:terraform_data.web[0]", "prod:terraform_data.web[1]",
        'prod:terraform_data.keyed["a_b"]', 'prod:terraform_data.keyed["aXb"]',
        'prod:terraform_data.keyed["100%"]', "prod:module.net.vpc.main",
        "prod:data.terraform_remote_state.other"]
    assert await addresses_of(store, type="vpc") == ["prod:module.net.vpc.main"]
    assert await addresses_of(store, module="module.net") == ["prod:module.net.vpc.main"]
    assert len(await addresses_of(store, module="")) == 6
    assert await addresses_of(store, address='terraform_data.keyed["a_b"]') == [
        'prod:terraform_data.keyed["a_b"]']
    assert await addresses_of(store, address='*["100%"]') == [
        'prod:terraform_data.keyed["100%"]']
    assert await addresses_of(store, address="terraform_data.web*") == [
        "prod:terraform_data.web[0]", "prod:terraform_data.web[1]"]
    assert await addresses_of(store, address="data.*") == [
        "prod:data.terraform_remote_state.other"]
    assert await addresses_of(store, address="web") == []
    assert await addresses_of(store, attribute=("tags.Name", "web-1")) == [
        "prod:terraform_data.web[1]"]
    assert await addresses_of(store, attribute=("port", "80")) == ["prod:terraform_data.web[0]"]
    assert await addresses_of(store, attribute=("on", "false")) == [
        "prod:terraform_data.web[1]"]
    assert await addresses_of(store, attribute=("list.1", "b")) == [
        "prod:terraform_data.web[0]"]
    assert await addresses_of(store, attribute=("tags", '{"Name":"web-0"}')) == []
    assert await addresses_of(store, type="terraform_data", attribute=("input", "blue"),
                              address="*[0]") == ["prod:terraform_data.web[0]"]
    matches = await store.query_resources(DEFAULT_TENANT, ResourceQuery(type="vpc"))
    (match,) = matches
    assert (match.version, match.resource.module, match.resource.mode) == (1, "module.net",
                                                                            "managed")
    assert match.resource == next(row for row in parse_state(QUERY_STATE).projection.resources
                                  if row.type == "vpc")


@pytest_twisted.ensureDeferred
async def test_query_resources_never_finds_a_secret_by_its_value(store: Any) -> None:
    """Sensitive attributes are matched in their redacted form only."""
    await write(store, QUERY_STATE)
    assert await addresses_of(store, attribute=("password", "s3cret")) == []
    assert await addresses_of(store, attribute=("password", "(sensitive)")) == [
        "prod:module.net.vpc.main"]
    (match,) = await store.query_resources(DEFAULT_TENANT, ResourceQuery(type="vpc"))
    assert "s3cret" not in match.resource.attributes


@pytest_twisted.ensureDeferred
async def test_query_resources_scopes_to_tenant_current_versions_and_paths(
        store: Any) -> None:
    """Only the tenant's current, projected versions are searched; path prefix,
    state path and limit narrow the result; deleted states are gone."""
    await write(store, QUERY_STATE, key=StateKey(DEFAULT_TENANT, "ws1/env1/app"))
    await write(store, QUERY_STATE, key=StateKey(DEFAULT_TENANT, "ws2/env1/app"))
    await write(store, QUERY_STATE, key=StateKey("acme", "prod"),
                principal=Principal("acme", "ann"))
    await write(store, QUERY_STATE)
    await write(store, state_body(4))  # prod's current version: one terraform_data.example
    await write(store, QUERY_STATE, key=StateKey(DEFAULT_TENANT, "sealed"))
    await write(store, ENVELOPE, key=StateKey(DEFAULT_TENANT, "sealed"))
    assert await addresses_of(store, type="vpc") == [
        "ws1/env1/app:module.net.vpc.main", "ws2/env1/app:module.net.vpc.main"]
    assert await addresses_of(store, "acme", type="vpc") == ["prod:module.net.vpc.main"]
    assert await addresses_of(store, type="vpc", path_prefix="ws2/env1/") == [
        "ws2/env1/app:module.net.vpc.main"]
    assert await addresses_of(store, type="vpc", state_path="ws1/env1/app") == [
        "ws1/env1/app:module.net.vpc.main"]
    assert await addresses_of(store, state_path="prod") == ["prod:terraform_data.example"]
    (current,) = await store.query_resources(DEFAULT_TENANT, ResourceQuery(state_path="prod"))
    assert current.version == 2
    assert len(await addresses_of(store, type="terraform_data", limit=3)) == 3
    assert await addresses_of(store, "nobody") == []
    await store.delete_state(StateKey(DEFAULT_TENANT, "ws1/env1/app"), None, ALICE)
    assert await addresses_of(store, type="vpc") == ["ws2/env1/app:module.net.vpc.main"]


@pytest_twisted.ensureDeferred
async def test_query_resources_refuses_unusable_queries(store: Any) -> None:
    """A limit out of range or an empty attribute path step is a 400, not a scan."""
    for query in (ResourceQuery(limit=0), ResourceQuery(limit=MAX_LIMIT + 1),
                  ResourceQuery(attribute=("tags..Name", "x"))):
        await failure_of(store.query_resources(DEFAULT_TENANT, query), BadRequest)


# -- PostgreSQL only: several processes on one database ---------------------


@pytest_twisted.async_yield_fixture
async def two_stores(postgres_dsn: str) -> AsyncIterator[tuple[Any, Any]]:
    """Two PostgreSQL stores (two pools, as two processes would have) on one database."""
    first, second = postgres_store(postgres_dsn), postgres_store(postgres_dsn)
    await first.start()
    await second.start()
    yield first, second
    await first.stop()
    await second.stop()


@pytest_twisted.ensureDeferred
async def test_lock_taken_through_one_process_holds_for_another(
        two_stores: tuple[Any, Any]) -> None:
    """A lock taken through one store is seen and enforced by another on the same database."""
    first, second = two_stores
    info = lock("P1")
    assert await first.acquire_lock(KEY, info, ALICE) is True
    held = await second.get_lock(KEY)
    assert held is not None and held.info == info
    error = await failure_of(second.write_state(KEY, upload(state_body(1)), None, BOB),
                             LockConflict)
    assert error.holder == info.raw
    await failure_of(second.acquire_lock(KEY, lock("P2"), BOB), LockConflict)
    assert await second.acquire_lock(KEY, lock("P1"), ALICE) is False
    await write(second, state_body(1), lock_id="P1")
    assert await first.read_current(KEY) == state_body(1)


@pytest_twisted.ensureDeferred
async def test_concurrent_locks_across_two_processes_have_one_winner(
        two_stores: tuple[Any, Any]) -> None:
    """Twenty LOCKs split across two stores on one database: exactly one acquires."""
    first, second = two_stores
    pending = [(first if n % 2 else second).acquire_lock(KEY, lock(f"id-{n}"), ALICE)
               for n in range(20)]
    results = await DeferredList(pending, consumeErrors=True)
    assert [value for ok, value in results if ok] == [True]
    assert all(failure.check(LockConflict) for ok, failure in results if not ok)
    events = await first.list_events(DEFAULT_TENANT)
    assert [event.kind for event in events] == [LOCK_ACQUIRE]


@pytest_twisted.ensureDeferred
async def test_concurrent_writes_across_two_processes_chain_events(
        two_stores: tuple[Any, Any]) -> None:
    """Writes to many states through two stores keep one unbroken per-tenant chain."""
    first, second = two_stores
    pending = [(first if n % 2 else second).write_state(
        StateKey(DEFAULT_TENANT, f"s{n % 4}"), upload(state_body(n)), None, ALICE)
        for n in range(1, 25)]
    await gatherResults(pending)
    events = await second.list_events(DEFAULT_TENANT)
    assert len(events) == 24 and first_broken_link(events) is None
    assert sum(s.version_count for s in await first.list_states(DEFAULT_TENANT)) == 24


# -- PostgreSQL only: schema -------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_start_upgrades_a_blank_database_once(blank_postgres_dsn: str) -> None:
    """Starting on an empty database applies the schema; the next start finds it current."""
    from kilolock.store.schema.upgrade import SCHEMA_VERSION

    store = postgres_store(blank_postgres_dsn)
    await store.start()
    assert store.schema_upgrade == (0, SCHEMA_VERSION)
    await write(store, state_body(1))
    await store.stop()
    again = postgres_store(blank_postgres_dsn)
    await again.start()
    assert again.schema_upgrade == (SCHEMA_VERSION, SCHEMA_VERSION)
    assert await again.read_current(KEY) == state_body(1)
    await again.stop()
    connection = psycopg2.connect(blank_postgres_dsn)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM tenants ORDER BY id")
            assert cursor.fetchall() == [(DEFAULT_TENANT,)]
            cursor.execute("SELECT version FROM schema_version ORDER BY version")
            assert cursor.fetchall() == [(n,) for n in range(1, SCHEMA_VERSION + 1)]
    finally:
        connection.close()


async def migrate(dsn: str) -> tuple[int, int] | None:
    """Upgrade the database at C{dsn} as a store's start does, with one
    connection; the (version found, version now) of the upgrade."""
    store = postgres_store(dsn, pool_size=1)
    await store.start()
    try:
        upgrade: tuple[int, int] | None = store.schema_upgrade
        return upgrade
    finally:
        await store.stop()


@pytest_twisted.ensureDeferred
async def test_migrate_command_and_newer_schema(blank_postgres_dsn: str) -> None:
    """Starting a store upgrades and is idempotent; a database newer than the
    code is refused."""
    from kilolock.store.schema.upgrade import SCHEMA_VERSION, SchemaTooNew

    assert await migrate(blank_postgres_dsn) == (0, SCHEMA_VERSION)
    assert await migrate(blank_postgres_dsn) == (SCHEMA_VERSION, SCHEMA_VERSION)
    connection = psycopg2.connect(blank_postgres_dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute("INSERT INTO schema_version (version, name) VALUES (%s, 'future')",
                           (SCHEMA_VERSION + 1,))
    finally:
        connection.close()
    store = postgres_store(blank_postgres_dsn)
    error = await failure_of(store.start(), SchemaTooNew)
    assert error.found == SCHEMA_VERSION + 1
    await store.stop()


# -- PostgreSQL only: the embedded server and resilience ----------------------


@pytest.fixture
def private_postgres() -> Iterator[Any]:
    """An embedded PostgreSQL of this test's own (not started), which it may
    stop and restart."""
    if os.environ.get("KL_TEST_POSTGRES_URL"):
        pytest.skip("stops and restarts an embedded PostgreSQL; not with an external server")
    with embedded_postgres_in_temporary_directory() as server:
        yield server


def postmaster_pid(server: Any) -> int | None:
    pid_file = server.pgdata / "postmaster.pid"
    if not pid_file.exists():
        return None
    pid = int(pid_file.read_text().split()[0])
    return pid if psutil.pid_exists(pid) else None


async def until(check: Callable[[], Deferred[Any]], seconds: float) -> Any:
    """Call C{check} every 0.2 s until it succeeds; fail after C{seconds}
    (one call that takes longer fails with C{TimeoutError})."""
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    deadline = time.monotonic() + seconds
    while True:
        try:
            return await check().addTimeout(seconds, reactor)
        except ServiceUnavailable:
            if time.monotonic() > deadline:
                raise
        await deferLater(reactor, 0.2, lambda: None)


@pytest_twisted.ensureDeferred
async def test_embedded_server_stops_with_the_store_and_keeps_data(
        private_postgres: Any) -> None:
    """The embedded server starts with the store, stops with it, and data survives."""
    from twisted.internet import reactor

    from kilolock.server.tap import Settings
    from kilolock.store.postgres.store import postgres_store_from_settings

    settings = Settings(database_url=None, data_dir=str(private_postgres.data_dir))
    store = postgres_store_from_settings(settings, reactor)
    store.runner.embedded = private_postgres  # the fixture cleans up after a failure
    await store.start()
    pid = postmaster_pid(private_postgres)
    assert pid is not None
    await write(store, state_body(3))
    await store.stop()
    assert not running(pid)
    await failure_of(store.read_current(KEY), ServiceUnavailable)
    await store.start()
    assert await store.read_current(KEY) == state_body(3)
    pid = postmaster_pid(private_postgres)
    await store.stop()
    assert not running(pid)


def running(pid: int | None) -> bool:
    """Whether process C{pid} runs (a zombie waiting for its parent does not)."""
    if pid is None or not psutil.pid_exists(pid):
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest_twisted.ensureDeferred
async def test_database_restart_gives_503_then_recovers(private_postgres: Any) -> None:
    """With PostgreSQL down, calls fail fast with 503; after a restart the same store serves."""
    from twisted.internet import reactor
    from twisted.internet.threads import deferToThread

    dsn = await deferToThread(private_postgres.start_blocking)
    # The store's own deadline is an hour away: a 503 cannot come from it.
    store = postgres_store(dsn, operation_timeout=3600.0)
    await store.start()
    await write(store, state_body(1))

    await deferToThread(private_postgres.stop_blocking)
    error = await failure_of(store.read_current(KEY).addTimeout(30, reactor),
                             ServiceUnavailable)
    assert (error.status, error.headers()) == (503, {b"Retry-After": b"5"})
    assert store.reachable is False
    probe = await store.probe()
    assert (probe.reachable, probe.schema_version) == (False, None)

    # A store whose pool cannot start now is rebuilt by its first call later.
    late = postgres_store(dsn)
    with logged(CANNOT_CONNECT) as refusals:
        await failure_of(late.start(), ServiceUnavailable)
    # Refused at once (nothing listens), not abandoned at the connect timeout.
    assert [event["kind"] for event in refusals] == ["OperationalError"]

    await deferToThread(private_postgres.start_blocking)
    assert await until(lambda: store.read_current(KEY), 15) == state_body(1)
    await write(store, state_body(2))
    assert await until(lambda: late.read_current(KEY), 15) == state_body(2)
    assert store.reachable is True
    assert (await late.probe()).reachable is True
    await store.stop()
    await late.stop()
    del reactor


@pytest_twisted.ensureDeferred
async def test_hung_database_gives_503_within_the_deadline(private_postgres: Any) -> None:
    """A database that stops answering (SIGSTOP) fails calls by the deadline, then recovers."""
    from twisted.internet.threads import deferToThread

    dsn = await deferToThread(private_postgres.start_blocking)
    store = postgres_store(dsn, operation_timeout=2.0, pool_size=2)
    await store.start()
    await write(store, state_body(1))
    postmaster = psutil.Process(postmaster_pid(private_postgres))
    frozen = [postmaster, *postmaster.children(recursive=True)]
    for process in frozen:
        process.send_signal(signal.SIGSTOP)
    try:
        # The database is frozen: only the store's deadline can end the call.
        with logged(DEADLINE_EXCEEDED) as deadlines:
            error = await failure_of(store.read_current(KEY), ServiceUnavailable)
        assert error.retry_after == 5
        assert [event["seconds"] for event in deadlines] == [2.0]
    finally:
        for process in frozen:
            process.send_signal(signal.SIGCONT)
    assert await until(lambda: store.read_current(KEY), 15) == state_body(1)
    await store.stop()
