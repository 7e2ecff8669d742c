"""A large write on PostgreSQL overlapped with its parse
(L{kilolock.store.upload_feed}, C{write_state_overlapped}): the transaction starts
before the parse ends and streams the resource rows as they come, yet the
answers and their order are the plain path's -- the parse's error first
(whatever the lock or the serial), then the lock matrix, the serial rule, an
unreachable database -- and a refused write stores nothing."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from typing import Any

import psycopg2
import pytest
import pytest_twisted

from kilolock.core.audit import client_version_detail
from kilolock.core.errors import (
    ChecksumMismatch,
    InvalidState,
    LockConflict,
    SerialConflict,
    ServiceUnavailable,
)
from kilolock.core.model import DEFAULT_TENANT, LockInfo, Principal, StateKey, StateUpload
from kilolock.store.postgres import large
from kilolock.store.postgres.store import PostgresStateStore
from kilolock.tfstate.parse import parse_state
from kilolock.web.body import start_upload_feed
from tests.support.awaiting import failure_of
from tests.support.stub_client import lock_body, state_body

ALICE = Principal(DEFAULT_TENANT, "alice")
KEY = StateKey(DEFAULT_TENANT, "overlapped")


def resources(count: int, name: str = "r") -> list[dict[str, Any]]:
    return [{
        "mode": "managed", "type": "terraform_data", "name": f"{name}{index}",
        "provider": 'provider["terraform.io/builtin/terraform"]',
        "instances": [{"attributes": {"id": f"{index}", "input": "it's \\ " + "x" * 2000},
                       "dependencies": [f"terraform_data.{name}{index - 1}"] if index else []}],
    } for index in range(count)]


def big(serial: int, count: int = 700) -> bytes:
    """A state over 1 MB: its parse streams its resources one at a time."""
    raw = state_body(serial, resources=resources(count))
    assert len(raw) > 1 << 20
    return raw


def broken(serial: int) -> bytes:
    """A large body the parse refuses only at its end."""
    return big(serial)[:-3]


def upload(raw: bytes) -> StateUpload:
    return StateUpload(raw=raw, sha256=hashlib.sha256(raw).hexdigest(), parsed=parse_state(raw))


def md5_of(body: bytes) -> bytes:
    return base64.b64encode(hashlib.md5(body).digest())


@pytest.fixture(autouse=True)
def everything_is_large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write takes the blocking, overlapped path."""
    monkeypatch.setattr(large, "LARGE_TRANSFER_BYTES", 1)


@pytest.fixture
def store(started_postgres_store: Any) -> Any:
    return started_postgres_store


def write(store: Any, body: bytes, lock_id: str | None = None,
          content_md5: bytes | None = None) -> Any:
    from twisted.internet import reactor

    feed = start_upload_feed(body, content_md5, reactor)
    return store.write_state_overlapped(
        KEY, feed, lock_id, ALICE,
        detail_of=lambda upload: client_version_detail(upload.parsed.terraform_version))


async def stored(store: Any) -> tuple[bytes | None, list[int], list[str], Any]:
    """What the store holds of KEY: current bytes, serials, event kinds, projection."""
    events = await store.list_events(DEFAULT_TENANT, state_path=KEY.path)
    return (await store.read_current(KEY), [v.serial for v in await store.list_versions(KEY)],
            [e.kind for e in events], await store.get_projection(KEY))


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_an_overlapped_write_stores_what_the_plain_one_does(store: Any) -> None:
    raw = big(5)
    outcome = await write(store, raw, content_md5=md5_of(raw))
    assert (outcome.created, outcome.version.number, outcome.version.size) == (True, 1, len(raw))
    assert await store.read_current(KEY) == raw
    assert await store.get_projection(KEY) == parse_state(raw).projection
    events = await store.list_events(DEFAULT_TENANT, state_path=KEY.path)
    assert [(e.kind, e.serial, e.sha256, json.loads(e.detail).get("terraform_version"))
            for e in events] \
        == [("state_write", 5, hashlib.sha256(raw).hexdigest(), "1.15.5")]
    # A second write replaces the projection; the same bytes again are a replay.
    second = state_body(6, resources=resources(600, "s"))
    assert (await write(store, second)).version.number == 2
    replay = await write(store, second)
    assert (replay.created, replay.version.number) == (False, 2)
    assert await stored(store) == (second, [5, 6], ["state_write", "state_write"],
                                   parse_state(second).projection)


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_a_parse_error_comes_before_a_held_lock(store: Any) -> None:
    """A body the parse refuses answers the parse's 400 even though another
    holds the lock; the transaction that started meanwhile rolls back."""
    await store.write_state(KEY, upload(big(1)), None, ALICE)
    await store.acquire_lock(KEY, LockInfo.from_bytes(lock_body("holder")), ALICE)
    before = await stored(store)
    for lock_id in (None, "not-the-holder", "holder"):
        error = await failure_of(write(store, broken(2), lock_id), InvalidState)
        assert "not valid JSON" in str(error)
    # A wrong Content-MD5 comes first of all.
    await failure_of(write(store, big(2), "not-the-holder", md5_of(b"other")), ChecksumMismatch)
    assert await stored(store) == before
    assert store.runner.reachable  # the rollbacks are no database failure


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_a_valid_body_meets_the_lock_and_the_serial_rule(store: Any) -> None:
    await store.write_state(KEY, upload(big(1)), None, ALICE)
    await store.acquire_lock(KEY, LockInfo.from_bytes(lock_body("holder")), ALICE)
    before = await stored(store)
    await failure_of(write(store, big(2)), LockConflict)
    await failure_of(write(store, big(2), "not-the-holder"), LockConflict)
    # The serial of the current version with other bytes: 409.
    await failure_of(write(store, state_body(1, resources=resources(600, "s")), "holder"),
                     SerialConflict)
    assert await stored(store) == before
    assert (await write(store, big(2), "holder")).version.number == 2


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_a_database_failure_mid_copy_is_a_503_and_stores_nothing(
        store: Any, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The write's connection is terminated while its resource rows stream
    in: 503, nothing stored -- unless the body is refused, which comes first."""
    await store.write_state(KEY, upload(big(1)), None, ALICE)
    before = await stored(store)
    real_copy = large.copy_resources

    def copy_then_fail(cursor: Any, state_id: int, version_id: int,
                       rows: Iterable[Any], first: int = 1) -> None:
        some = iter(rows)
        started = [next(some)]
        with psycopg2.connect(postgres_dsn) as other, other.cursor() as killer:
            killer.execute("SELECT pg_terminate_backend(%s)",
                           (cursor.connection.get_backend_pid(),))
        other.close()
        real_copy(cursor, state_id, version_id, [*started, *some], first)

    monkeypatch.setattr(large, "copy_resources", copy_then_fail)
    await failure_of(write(store, big(2)), ServiceUnavailable)
    await failure_of(write(store, broken(2)), InvalidState)
    monkeypatch.setattr(large, "copy_resources", real_copy)
    assert await stored(store) == before


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_rows_the_parse_starts_over_are_replaced(store: Any) -> None:
    """A repeated C{resources} key (the last wins) after rows were streamed,
    and C{resources} before C{version} (not streamed): the projection is the
    parse's."""
    first = json.dumps(resources(600, "a"))
    last = json.dumps(resources(300, "b"))
    repeated = ('{"version": 4, "terraform_version": "1.15.5", "serial": 3, "lineage": "l",'
                f' "resources": {first}, "outputs": {{}}, "resources": {last}}}').encode()
    await write(store, repeated)
    assert await store.get_projection(KEY) == parse_state(repeated).projection
    assert len((await store.get_projection(KEY)).resources) == 300
    unstreamed = (f'{{"resources": {first}, "version": 4, "serial": 4, "lineage": "l",'
                  ' "outputs": {}}').encode()
    await write(store, unstreamed)
    assert await store.get_projection(KEY) == parse_state(unstreamed).projection
    assert await store.read_current(KEY) == unstreamed


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_an_overlapped_write_is_compressed_then_encrypted(postgres_dsn: str) -> None:
    from twisted.internet import reactor

    from tests.support.at_rest_support import provider, secret, version_rows

    keyed = PostgresStateStore(postgres_dsn, reactor, pool_size=2,
                               key_provider=provider("2026-12", {"2026-12": secret()}))
    await keyed.start()
    try:
        raw = big(1)
        await write(keyed, raw)
        assert await keyed.read_current(KEY) == raw
        [(_, codec, payload, data_key, kek_id)] = version_rows(postgres_dsn)
        assert (codec, kek_id) == ("zstd", "2026-12") and data_key is not None
        assert b"terraform_data" not in payload
    finally:
        await keyed.stop()


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_concurrent_writes_do_not_starve_a_small_thread_pool(store: Any) -> None:
    """Each write's transaction holds a thread of the reactor's pool while it
    waits for its parse; it waits for nothing queued behind it, so three
    writes on a pool of two threads all complete."""
    from twisted.internet import reactor
    from twisted.internet.defer import gatherResults

    pool = reactor.getThreadPool()
    before = (pool.min, pool.max)
    pool.adjustPoolsize(1, 2)
    try:
        keys = [StateKey(DEFAULT_TENANT, f"starve-{index}") for index in range(3)]
        bodies = [big(index + 1) for index in range(3)]
        feeds = [start_upload_feed(body, None, reactor) for body in bodies]
        outcomes = await gatherResults([
            store.write_state_overlapped(each, feed, None, ALICE)
            for each, feed in zip(keys, feeds, strict=True)])
    finally:
        pool.adjustPoolsize(*before)
    assert [outcome.version.serial for outcome in outcomes] == [1, 2, 3]
    assert [await store.read_current(each) for each in keys] == bodies
