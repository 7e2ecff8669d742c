"""The PostgreSQL store's path for large states: transactions on a blocking
connection in a thread (kilolock.store.postgres.blocking), reads by binary COPY.

Most tests lower the size threshold so that small, fast states take that
path and meet the same lock matrix, replays and errors as on the pool."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
import pytest_twisted

from kilolock.core.errors import LockConflict, LockNotHeld, SerialConflict, ServiceUnavailable
from kilolock.core.model import DEFAULT_TENANT, LockInfo, Principal, StateKey, StateUpload
from kilolock.store.postgres import large
from kilolock.store.postgres.blocking import BlockingSession, _drive
from kilolock.store.postgres.store import PostgresStateStore
from kilolock.tfstate.parse import parse_state
from tests.support.awaiting import eventually, failure_of
from tests.support.log_events import DEADLINE_EXCEEDED, logged
from tests.support.stub_client import lock_body, state_body

ALICE = Principal(DEFAULT_TENANT, "alice")
KEY = StateKey(DEFAULT_TENANT, "bulk")


def upload(raw: bytes) -> StateUpload:
    return StateUpload(raw=raw, sha256=hashlib.sha256(raw).hexdigest(), parsed=parse_state(raw))


def big_resources(count: int, filler: int = 2000) -> list[dict[str, Any]]:
    return [{
        "mode": "managed", "type": "terraform_data", "name": f"r{index}",
        "provider": 'provider["terraform.io/builtin/terraform"]',
        "instances": [{"attributes": {"id": f"{index}", "input": "it's \\ " + "x" * filler},
                       "dependencies": [f"terraform_data.r{index - 1}"] if index else []}],
    } for index in range(count)]


@pytest.fixture
def everything_is_large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write and read of a state takes the blocking path."""
    monkeypatch.setattr(large, "LARGE_TRANSFER_BYTES", 1)


@pytest.fixture
def store(started_postgres_store: Any) -> Any:
    return started_postgres_store



@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_a_state_over_the_threshold_round_trips(store: Any) -> None:
    """A state bigger than LARGE_TRANSFER_BYTES is written and read on the
    blocking path: exact bytes (current and by number), its projection, its event."""
    raw = state_body(7, resources=big_resources(4200))
    assert len(raw) > large.LARGE_TRANSFER_BYTES
    outcome = await store.write_state(KEY, upload(raw), None, ALICE)
    assert (outcome.created, outcome.version.size) == (True, len(raw))
    assert await store.read_current(KEY) == raw
    assert await store.read_version(KEY, 1) == raw
    assert await store.get_projection(KEY) == parse_state(raw).projection
    events = await store.list_events(DEFAULT_TENANT, state_path=KEY.path)
    assert [(e.kind, e.serial, e.sha256) for e in events] == [
        ("state_write", 7, hashlib.sha256(raw).hexdigest())]


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_the_blocking_path_keeps_the_lock_matrix(store: Any,
                                                       everything_is_large: None) -> None:
    """On the blocking path a write still checks the lock (423 with the
    holder's bytes, LockNotHeld), replays idempotently and refuses a serial
    conflict; nothing of a refused write is stored."""
    holder = LockInfo.from_bytes(lock_body("held-id"))
    first = state_body(1)
    assert (await store.write_state(KEY, upload(first), None, ALICE)).created
    assert await store.acquire_lock(KEY, holder, ALICE)
    conflict = await failure_of(store.write_state(KEY, upload(state_body(2)), None, ALICE),
                                LockConflict)
    assert (conflict.status, conflict.holder) == (423, holder.raw)
    await failure_of(store.write_state(KEY, upload(state_body(2)), "other-id", ALICE),
                     LockConflict)
    assert (await store.write_state(KEY, upload(state_body(2)), "held-id", ALICE)).created
    replay = await store.write_state(KEY, upload(state_body(2)), "held-id", ALICE)
    assert replay.created is False
    changed = state_body(2, lineage="7b1d5c1e-0000-4000-8000-00000000ffff")
    await failure_of(store.write_state(KEY, upload(changed), "held-id", ALICE), SerialConflict)
    await store.release_lock(KEY, "held-id", ALICE)
    await failure_of(store.write_state(KEY, upload(state_body(3)), "held-id", ALICE),
                     LockNotHeld)
    assert [v.serial for v in await store.list_versions(KEY)] == [1, 2]
    assert await store.read_current(KEY) == state_body(2)
    assert await store.read_version(KEY, 1) == first
    assert await store.read_version(KEY, 3) is None
    assert await store.read_current(StateKey(DEFAULT_TENANT, "missing")) is None


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_any_bytes_take_the_blocking_path(store: Any, everything_is_large: None) -> None:
    """Bytes that are not UTF-8 (sent as hex), quotes and backslashes survive
    the blocking write and the binary COPY read."""
    quoted = state_body(1, outputs={"q": {"value": "it's \\'; --", "type": "string"}})
    await store.write_state(KEY, upload(quoted), None, ALICE)
    assert await store.read_current(KEY) == quoted
    odd = b"\xff\xfe'\x00\\x00" + bytes(range(256))
    envelope = parse_state(b'{"serial": 4, "lineage": "l", "encrypted_data": "x",'
                           b' "encryption_version": "v0", "meta": {}}')
    await store.write_state(KEY, StateUpload(odd, hashlib.sha256(odd).hexdigest(), envelope),
                            None, ALICE)
    assert await store.read_current(KEY) == odd
    assert await store.read_version(KEY, 1) == quoted


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_awkward_projection_rows_survive_copy(store: Any,
                                                   everything_is_large: None) -> None:
    """Projection rows written with COPY (tabs, newlines, backslashes, quotes,
    NUL and lone-surrogate escapes, nulls, sensitive outputs) read back as the
    parser made them, and replace the previous version's rows."""
    resources = [{
        "mode": "managed", "type": "null_resource", "name": "n\tam\\e", "module": "module.m[0]",
        "provider": 'provider["registry.terraform.io/hashicorp/null"]',
        "instances": [
            {"index_key": "k'ey\n\\N", "attributes": {
                "id": "1", "tab": "a\tb\r\nc", "slash": "\\.", "nul": "x\u0000y",
                "lone": "\ud800", "nested": {"b": [1, 2.5, None], "a": "x\u00e9"}},
             "dependencies": ["module.m.null_resource.a"]},
            {"index_key": 3, "attributes": {}, "deposed": "abcd1234",
             "dependencies": ["module.m.null_resource.a", "null_resource.b"]},
        ],
    }]
    outputs = {"plain": {"value": None, "type": "string"},
               "secret": {"value": "s3cr3t", "type": "string", "sensitive": True},
               "weird": {"value": ["\\N", "\t"], "type": ["tuple", ["string", "string"]]}}
    await store.write_state(KEY, upload(state_body(1, resources=big_resources(3))), None, ALICE)
    raw = state_body(2, resources=resources, outputs=outputs)
    await store.write_state(KEY, upload(raw), None, ALICE)
    projection = await store.get_projection(KEY)
    expected = parse_state(raw).projection
    assert projection is not None and expected is not None
    assert projection.dependencies == expected.dependencies
    assert projection.outputs == expected.outputs
    assert [r.address for r in projection.resources] == [r.address for r in expected.resources]
    for got, want in zip(projection.resources, expected.resources, strict=True):
        if "nul" in want.attributes:  # jsonb keeps no NUL nor lone surrogate: U+FFFD
            assert got.attributes == want.attributes.replace("\\u0000", "\\ufffd").replace(
                "\\ud800", "\\ufffd")
        else:
            assert got == want
    assert await store.read_current(KEY) == raw


@pytest.fixture
def row_locker(postgres_dsn: str) -> Iterator[Any]:
    """C{lock(path)} holds the state row of C{path} in an open transaction of
    another session until C{release()}."""
    connection = psycopg2.connect(postgres_dsn, connect_timeout=10)

    class Locker:
        def lock(self, path: str) -> None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT id FROM states WHERE path = %s FOR UPDATE", (path,))
                assert cursor.fetchone() is not None

        def release(self) -> None:
            connection.rollback()

    try:
        yield Locker()
    finally:
        connection.close()


def busy_sessions(dsn: str) -> int:
    """The store's sessions of this database that run a statement or hold a
    transaction open."""
    with psycopg2.connect(dsn, connect_timeout=10) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'kilolock'"
                       " AND datname = current_database() AND state <> 'idle'")
        (count,) = cursor.fetchone()
    connection.close()
    return int(count)


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_a_blocked_large_write_gives_503_at_the_deadline_and_rolls_back(
        postgres_dsn: str, row_locker: Any, everything_is_large: None) -> None:
    """A blocking write stuck behind a row lock fails with 503 at the
    operation timeout; its statement is cancelled, so it never commits later."""
    from twisted.internet import reactor

    store = PostgresStateStore(postgres_dsn, reactor, pool_size=1,
                                               operation_timeout=1.0)
    await store.start()
    try:
        await store.write_state(KEY, upload(state_body(1)), None, ALICE)
        row_locker.lock(KEY.path)
        with logged(DEADLINE_EXCEEDED) as deadlines:
            await failure_of(store.write_state(KEY, upload(state_body(2)), None, ALICE),
                             ServiceUnavailable)
        assert [event["seconds"] for event in deadlines] == [1.0]
        # Cancelled, the write has left the server: nothing of it can commit later.
        await eventually(lambda: busy_sessions(postgres_dsn) == 0,
                         "the blocked write to be cancelled in PostgreSQL")
        row_locker.release()
        assert [v.serial for v in await store.list_versions(KEY)] == [1]
    finally:
        row_locker.release()
        await store.stop()


def test_a_transaction_step_that_really_waits_is_refused() -> None:
    """Driving a coroutine that awaits an unfired Deferred is a TypeError, not a hang."""
    from twisted.internet.defer import Deferred

    async def waits() -> None:
        await Deferred()

    with pytest.raises(TypeError, match="blocking cursor"):
        _drive(waits())


@pytest.mark.postgres
def test_a_session_cancelled_before_it_connects_does_not_run(postgres_dsn: str) -> None:
    """cancel() before run(): the transaction never starts."""
    session = BlockingSession(postgres_dsn, lambda connection: None)
    session.cancel()
    ran = threading.Event()

    async def txn(cursor: Any) -> None:
        ran.set()

    with pytest.raises(psycopg2.extensions.QueryCanceledError):
        session.run(txn, ())
    assert not ran.is_set()
