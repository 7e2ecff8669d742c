"""IRetentionStore on both stores: overrides, pruning that leaves tombstones,
holds, purging one version; history, reads and the audit chain after them.

The PostgreSQL-only section at the end: deltas re-encoded when their base
is purged, bases kept while a delta needs them, and pruning that skips a
state being written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg2
import pytest
import pytest_twisted
from zope.interface.verify import verifyObject

from kilolock.core.audit import verify_chain
from kilolock.core.errors import StateNotFound, VersionIsCurrent, VersionNotFound, VersionPruned
from kilolock.core.events import (
    RETENTION_CLEAR,
    RETENTION_SET,
    STATE_WRITE,
    VERSION_PURGE,
    VERSIONS_PRUNE,
)
from kilolock.core.model import DEFAULT_TENANT, LockInfo, Principal, StateKey
from kilolock.retention.policy import RetentionPolicy
from kilolock.store.interfaces.retention import IRetentionStore
from kilolock.store.memory.store import MemoryStateStore
from kilolock.tfe.model import FINALIZED, PendingVersion
from tests.support.at_rest_support import provider, query, secret, upload
from tests.support.awaiting import failure_of
from tests.support.stub_client import lock_body, state_body

ADMIN = Principal(DEFAULT_TENANT, "admin", scope="admin")
KEY = StateKey(DEFAULT_TENANT, "prod")
OTHER = StateKey(DEFAULT_TENANT, "staging")
KEEP_ALL = RetentionPolicy()


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["memory", "postgres"])
def backend(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "memory":
        return "memory", None
    return "postgres", request.getfixturevalue("postgres_dsn")


def build(kind: str, dsn: str | None, clock: FakeClock, **options: Any) -> Any:
    if kind == "memory":
        return MemoryStateStore(clock=clock)
    from twisted.internet import reactor

    from kilolock.store.postgres.store import PostgresStateStore

    return PostgresStateStore(dsn, reactor, pool_size=2, clock=clock, **options)


@pytest_twisted.async_yield_fixture
async def store(backend: tuple[str, str | None], clock: FakeClock) -> AsyncIterator[Any]:
    built = build(*backend, clock)
    await built.start()
    yield built
    await built.stop()


def resources(serial: int, changing: range) -> list[dict[str, Any]]:
    """Thirty resources; those in C{changing} get new random-looking values
    at each serial."""
    return [{
        "mode": "managed", "type": "aws_instance", "name": f"node_{index}",
        "provider": 'provider["registry.terraform.io/hashicorp/aws"]',
        "instances": [{"schema_version": 1, "sensitive_attributes": [], "attributes": {
            "id": f"i-{index}", "etag": hashlib.sha256(
                f"{serial if index in changing else 0}/{index}".encode()).hexdigest()}}]}
        for index in range(30)]


def body(serial: int) -> bytes:
    """Every value changes at every serial: each version is a full snapshot
    on PostgreSQL too (no delta is small enough), as the memory store keeps
    them: what pruning keeps is the same on both stores."""
    return state_body(serial, resources=resources(serial, range(30)))


def similar(serial: int) -> bytes:
    """One value changes per serial: deltas on PostgreSQL."""
    return state_body(serial, resources=resources(serial, range(3, 4)))


async def daily_history(store: Any, clock: FakeClock, count: int, key: StateKey = KEY,
                        kind: Any = body) -> None:
    """Versions 1..count, one a day; the clock ends a day after the last."""
    for serial in range(1, count + 1):
        await store.write_state(key, upload(kind(serial)), None, ADMIN)
        clock.advance(days=1)


async def chain_verifies(store: Any) -> bool:
    return verify_chain(await store.list_events(DEFAULT_TENANT)) is None


@pytest_twisted.ensureDeferred
async def test_provides_iretentionstore(store: Any) -> None:
    """Both stores provide every method of IRetentionStore."""
    assert verifyObject(IRetentionStore, store)


@pytest_twisted.ensureDeferred
async def test_overrides_are_set_read_and_cleared_with_events(store: Any) -> None:
    """A tenant's and a state's override each come back as set and go when
    cleared; each change is an audit event."""
    assert await store.get_retention(DEFAULT_TENANT, None) is None
    tenant = await store.set_retention(DEFAULT_TENANT, None, RetentionPolicy(128, 28), ADMIN)
    own = await store.set_retention(DEFAULT_TENANT, KEY.path, RetentionPolicy(days=3), ADMIN)
    assert (await store.get_retention(DEFAULT_TENANT, None)).policy == tenant.policy
    assert (await store.get_retention(DEFAULT_TENANT, KEY.path)) == own
    assert (await store.clear_retention(DEFAULT_TENANT, KEY.path, ADMIN)).policy == own.policy
    assert await store.get_retention(DEFAULT_TENANT, KEY.path) is None
    assert await store.clear_retention(DEFAULT_TENANT, KEY.path, ADMIN) is None
    kinds = [event.kind for event in await store.list_events(DEFAULT_TENANT)]
    assert kinds == [RETENTION_SET, RETENTION_SET, RETENTION_CLEAR]
    assert await chain_verifies(store)


@pytest_twisted.ensureDeferred
async def test_pruning_leaves_tombstones_in_history(store: Any, clock: FakeClock) -> None:
    """The server's policy prunes what it lets go: tombstones stay in
    history with when and why, their bytes answer 410, the survivors read
    back exactly, and the audit chain still verifies."""
    await daily_history(store, clock, 6)
    outcome = await store.prune_state(KEY, RetentionPolicy(versions=2), clock(), 500)
    assert outcome.pruned == (1, 2, 3, 4) and outcome.bytes_freed > 0
    versions = await store.list_versions(KEY)
    assert [version.number for version in versions] == [1, 2, 3, 4, 5, 6]
    assert [version.pruned for version in versions] == [True] * 4 + [False] * 2
    assert versions[0].pruned_at == clock()
    assert versions[0].prune_reason == "retention: keep the newest 2 versions"
    assert versions[0].sha256 and versions[0].size == len(body(1))
    error = await failure_of(store.read_version(KEY, 2), VersionPruned)
    assert error.status == 410 and "retention: keep the newest 2 versions" in error.message
    assert await store.read_version(KEY, 5) == body(5)
    assert await store.read_current(KEY) == body(6)
    events = await store.list_events(DEFAULT_TENANT)
    assert events[-1].kind == VERSIONS_PRUNE
    assert json.loads(events[-1].detail)["pruned_versions"] == [1, 2, 3, 4]
    writes = [event.sha256 for event in events if event.kind == STATE_WRITE]
    assert writes == [version.sha256 for version in versions]
    assert await chain_verifies(store)
    again = await store.prune_state(KEY, RetentionPolicy(versions=2), clock(), 500)
    assert again.pruned == ()
    summary = await store.get_summary(KEY)
    assert summary.current.number == 6 and summary.version_count == 6


@pytest_twisted.ensureDeferred
async def test_pruning_by_age_and_a_limit_per_call(store: Any, clock: FakeClock) -> None:
    """Versions younger than D days stay; one call prunes at most its limit,
    oldest first, and the next call goes on."""
    await daily_history(store, clock, 8)
    first = await store.prune_state(KEY, RetentionPolicy(days=3), clock(), 2)
    second = await store.prune_state(KEY, RetentionPolicy(days=3), clock(), 500)
    assert (first.pruned, second.pruned) == ((1, 2), (3, 4, 5, 6))


@pytest_twisted.ensureDeferred
async def test_the_state_override_beats_the_tenant_and_the_server(store: Any,
                                                                   clock: FakeClock) -> None:
    """A state's override, else its tenant's, else the server's policy."""
    await daily_history(store, clock, 5, KEY)
    await daily_history(store, clock, 5, OTHER)
    await store.set_retention(DEFAULT_TENANT, None, RetentionPolicy(versions=3), ADMIN)
    await store.set_retention(DEFAULT_TENANT, KEY.path, KEEP_ALL, ADMIN)
    server = RetentionPolicy(versions=1)
    assert (await store.prune_state(KEY, server, clock(), 500)).pruned == ()
    assert (await store.prune_state(OTHER, server, clock(), 500)).pruned == (1, 2)


@pytest_twisted.ensureDeferred
async def test_a_locked_state_is_not_pruned(store: Any, clock: FakeClock) -> None:
    """While a lock is held nothing goes; once released the policy applies."""
    await daily_history(store, clock, 4)
    await store.acquire_lock(KEY, LockInfo.from_bytes(lock_body("op-1")), ADMIN)
    assert (await store.prune_state(KEY, RetentionPolicy(versions=1), clock(), 500)).pruned == ()
    await store.release_lock(KEY, "op-1", ADMIN)
    assert (await store.prune_state(KEY, RetentionPolicy(versions=1), clock(),
                                    500)).pruned == (1, 2, 3)


@pytest_twisted.ensureDeferred
async def test_held_versions_are_kept_until_released_or_expired(store: Any,
                                                                clock: FakeClock) -> None:
    """A hold keeps its version; released, or past its expiry, it does not."""
    await daily_history(store, clock, 5)
    policy = RetentionPolicy(versions=1)
    await store.hold_version(KEY, 2, "upload-a", clock() + timedelta(hours=1))
    await store.hold_version(KEY, 3, "upload-b", clock() + timedelta(hours=1))
    assert (await store.prune_state(KEY, policy, clock(), 500)).pruned == (1, 4)
    await store.release_version_holds(KEY, "upload-a")
    assert (await store.prune_state(KEY, policy, clock(), 500)).pruned == (2,)
    clock.advance(hours=1)
    assert (await store.prune_state(KEY, policy, clock(), 500)).pruned == (3,)
    await failure_of(store.hold_version(KEY, 1, "late", clock() + timedelta(hours=1)),
                     VersionPruned)
    await failure_of(store.hold_version(KEY, 9, "none", clock() + timedelta(hours=1)),
                     VersionNotFound)


@pytest_twisted.ensureDeferred
async def test_a_tfe_upload_keeps_its_version(store: Any, clock: FakeClock) -> None:
    """A version a TFE lane upload finalised is kept while its pending
    record has not expired."""
    await daily_history(store, clock, 3)
    workspace = await store.tfe_find_workspace(KEY)
    await store.tfe_create_pending_version(PendingVersion(
        id="sv-pending-hold", workspace_id=workspace.id, key=KEY, serial=2, lineage="l",
        md5="0" * 32, lock_id="l", principal="alice", grant_hash="0" * 64,
        created_at=clock(), expires_at=clock() + timedelta(minutes=10), status=FINALIZED,
        version=2))
    policy = RetentionPolicy(versions=1)
    assert (await store.prune_state(KEY, policy, clock(), 500)).pruned == (1,)
    clock.advance(minutes=10)
    assert (await store.prune_state(KEY, policy, clock(), 500)).pruned == (2,)


@pytest_twisted.ensureDeferred
async def test_candidates_page_through_the_states_that_may_prune(store: Any,
                                                                 clock: FakeClock) -> None:
    """With a server policy every state with two stored versions is a
    candidate, in order, page by page; without one only states whose own or
    tenant's override exists."""
    keys = [StateKey(DEFAULT_TENANT, f"s{index}") for index in range(5)]
    for key in keys:
        await daily_history(store, clock, 2, key)
    await store.write_state(StateKey(DEFAULT_TENANT, "single"), upload(body(1)), None, ADMIN)
    first = await store.retention_candidates(None, 3, True)
    rest = await store.retention_candidates(first[-1], 3, True)
    assert first + rest == keys
    assert await store.retention_candidates(None, 10, False) == []
    await store.set_retention(DEFAULT_TENANT, "s3", KEEP_ALL, ADMIN)
    assert await store.retention_candidates(None, 10, False) == [keys[3]]
    await store.set_retention(DEFAULT_TENANT, None, RetentionPolicy(days=1), ADMIN)
    assert await store.retention_candidates(None, 10, False) == keys


@pytest_twisted.ensureDeferred
async def test_purging_a_version_leaves_a_tombstone_and_an_event(store: Any,
                                                                 clock: FakeClock) -> None:
    """A purge drops the bytes of one version, keeps its tombstone with the
    reason, appends version_purge naming it by sha256, and the chain and
    the other versions are untouched."""
    await daily_history(store, clock, 4)
    before = await store.list_versions(KEY)
    tombstone = await store.purge_version(KEY, 2, "leaked a database password", ADMIN)
    assert tombstone.number == 2 and tombstone.sha256 == before[1].sha256
    assert tombstone.prune_reason == "leaked a database password" and tombstone.pruned
    versions = await store.list_versions(KEY)
    assert [version.pruned for version in versions] == [False, True, False, False]
    await failure_of(store.read_version(KEY, 2), VersionPruned)
    for number in (1, 3, 4):
        assert await store.read_version(KEY, number) == body(number)
    event = (await store.list_events(DEFAULT_TENANT))[-1]
    assert (event.kind, event.sha256, event.principal) == (VERSION_PURGE, before[1].sha256,
                                                           "admin")
    detail = json.loads(event.detail)
    assert detail["purged_version"] == 2 and detail["reason"] == "leaked a database password"
    assert await chain_verifies(store)


@pytest_twisted.ensureDeferred
async def test_a_purged_version_is_no_longer_found_by_its_digest(store: Any,
                                                                 clock: FakeClock) -> None:
    """The native lane's blobs find a version by its sha256: a tombstone's
    bytes are gone, so its digest leads nowhere (404), while the versions
    still stored are found."""
    await daily_history(store, clock, 3)
    before = await store.list_versions(KEY)
    assert await store.find_digest(DEFAULT_TENANT, before[0].sha256) == [(KEY.path, 1)]
    await store.purge_version(KEY, 1, "leaked a database password", ADMIN)
    assert await store.find_digest(DEFAULT_TENANT, before[0].sha256) == []
    assert await store.find_digest(DEFAULT_TENANT, before[1].sha256) == [(KEY.path, 2)]


@pytest_twisted.ensureDeferred
async def test_what_cannot_be_purged(store: Any, clock: FakeClock) -> None:
    """The current version (409: roll back first), a tombstone (410), a
    version or state that does not exist (404)."""
    await daily_history(store, clock, 2)
    error = await failure_of(store.purge_version(KEY, 2, "r", ADMIN), VersionIsCurrent)
    assert error.status == 409 and "roll back" in error.message
    await store.purge_version(KEY, 1, "r", ADMIN)
    await failure_of(store.purge_version(KEY, 1, "r", ADMIN), VersionPruned)
    await failure_of(store.purge_version(KEY, 7, "r", ADMIN), VersionNotFound)
    await failure_of(store.purge_version(OTHER, 1, "r", ADMIN), StateNotFound)
    assert await store.read_current(KEY) == body(2)


@pytest_twisted.ensureDeferred
async def test_a_replay_of_a_purged_version_stores_nothing(store: Any,
                                                           clock: FakeClock) -> None:
    """Writing the purged bytes again is an idempotent replay (same serial
    and sha256): the secret is not stored again."""
    await daily_history(store, clock, 3)
    await store.purge_version(KEY, 1, "leak", ADMIN)
    outcome = await store.write_state(KEY, upload(body(1)), None, ADMIN)
    assert not outcome.created
    assert [version.pruned for version in await store.list_versions(KEY)] == [
        True, False, False]


# -- PostgreSQL: deltas, bases, concurrent writers --------------------------

pg = pytest.mark.postgres


@pytest_twisted.async_yield_fixture
async def pg_store(postgres_dsn: str, clock: FakeClock) -> AsyncIterator[Any]:
    built = build("postgres", postgres_dsn, clock, key_provider=provider("k1", {"k1": secret()}))
    await built.start()
    yield built
    await built.stop()


def codecs(dsn: str) -> list[tuple[int, str, int | None]]:
    return [(number, codec, base) for number, codec, base in query(
        dsn, "SELECT number, codec, base_number FROM state_versions ORDER BY number")]


@pg
@pytest_twisted.ensureDeferred
async def test_purging_a_snapshot_re_encodes_its_deltas(pg_store: Any, postgres_dsn: str,
                                                        clock: FakeClock) -> None:
    """Each version is a delta against the one before it (a chain); the
    delta made against a purged snapshot is re-encoded in the same
    transaction as a snapshot, the versions after it keep their payloads,
    each reads back exactly, and no delta points at a tombstone."""
    await daily_history(pg_store, clock, 6, kind=similar)
    assert codecs(postgres_dsn) == [(1, "zstd", None), *[
        (number, "zstd-delta", number - 1) for number in range(2, 7)]]
    await pg_store.purge_version(KEY, 1, "leak", ADMIN)
    assert codecs(postgres_dsn) == [(1, "pruned", None), (2, "zstd", None),
                                    *[(number, "zstd-delta", number - 1)
                                      for number in range(3, 7)]]
    for number in range(2, 7):
        assert await pg_store.read_version(KEY, number) == similar(number)
    detail = json.loads((await pg_store.list_events(DEFAULT_TENANT))[-1].detail)
    assert detail["reencoded"] == [2]
    await pg_store.write_state(KEY, upload(similar(7)), None, ADMIN)
    assert await pg_store.read_current(KEY) == similar(7)
    assert [kek for (kek,) in query(postgres_dsn, "SELECT kek_id FROM state_versions"
                                                  " ORDER BY number")] == [None] + ["k1"] * 6


@pg
@pytest_twisted.ensureDeferred
async def test_purging_a_link_of_a_chain_re_encodes_the_next_version(
        pg_store: Any, postgres_dsn: str, clock: FakeClock) -> None:
    """Purging a version in the middle of a chain makes the version after
    it a snapshot; the versions before and after read back exactly, the
    purged one answers its tombstone."""
    await daily_history(pg_store, clock, 6, kind=similar)
    await pg_store.purge_version(KEY, 3, "leak", ADMIN)
    assert codecs(postgres_dsn) == [(1, "zstd", None), (2, "zstd-delta", 1), (3, "pruned", None),
                                    (4, "zstd", None), (5, "zstd-delta", 4),
                                    (6, "zstd-delta", 5)]
    for number in (1, 2, 4, 5, 6):
        assert await pg_store.read_version(KEY, number) == similar(number)
    await failure_of(pg_store.read_version(KEY, 3), VersionPruned)
    detail = json.loads((await pg_store.list_events(DEFAULT_TENANT))[-1].detail)
    assert detail["reencoded"] == [4]


@pg
@pytest_twisted.ensureDeferred
async def test_pruning_makes_the_oldest_kept_delta_a_snapshot(
        pg_store: Any, postgres_dsn: str, clock: FakeClock) -> None:
    """What the policy lets go goes, though kept versions were deltas on
    it: the oldest kept one is re-encoded as a snapshot in the same
    transaction, every kept version reads back, the event names it."""
    await daily_history(pg_store, clock, 5, kind=similar)
    outcome = await pg_store.prune_state(KEY, RetentionPolicy(versions=2), clock(), 500)
    assert outcome.pruned == (1, 2, 3)
    assert codecs(postgres_dsn) == [(1, "pruned", None), (2, "pruned", None),
                                    (3, "pruned", None), (4, "zstd", None), (5, "zstd-delta", 4)]
    for number in (4, 5):
        assert await pg_store.read_version(KEY, number) == similar(number)
    detail = json.loads((await pg_store.list_events(DEFAULT_TENANT))[-1].detail)
    assert detail == {"pruned_versions": [1, 2, 3], "reencoded": [4],
                      "reason": "retention: keep the newest 2 versions"}


@pg
@pytest_twisted.ensureDeferred
async def test_pruning_skips_a_state_being_written(pg_store: Any, postgres_dsn: str,
                                                   clock: FakeClock) -> None:
    """A state whose row a writer holds is skipped at once (no waiting);
    the next call prunes it."""
    await daily_history(pg_store, clock, 3)
    writer = psycopg2.connect(postgres_dsn)
    try:
        with writer.cursor() as cursor:
            cursor.execute("SELECT id FROM states WHERE path = 'prod' FOR UPDATE")
            skipped = await pg_store.prune_state(KEY, RetentionPolicy(versions=1), clock(), 500)
            assert skipped.pruned == ()
        writer.rollback()
    finally:
        writer.close()
    done = await pg_store.prune_state(KEY, RetentionPolicy(versions=1), clock(), 500)
    assert done.pruned == (1, 2)
