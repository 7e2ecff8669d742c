"""The PostgreSQL store's read of a large state: a binary result on a
short-lived psycopg 3 connection in a thread (kilolock.store.postgres.binary_read).

The store tests lower LARGE_TRANSFER_BYTES so that small states take that
path; they check the exact bytes, the overall deadline (the statement is
cancelled) and that a database gone mid-read, or not answering at all, is the
same 503 as on every other path."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import psycopg2
import psycopg2.extensions
import pytest
import pytest_twisted

from kilolock.core.errors import ServiceUnavailable
from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey, StateUpload
from kilolock.store.postgres import binary_read, large
from kilolock.store.postgres.blocking import BlockingSession
from kilolock.store.postgres.dsn import connection_string
from kilolock.store.postgres.runner import RETRY_AFTER
from kilolock.store.postgres.store import PostgresStateStore
from kilolock.tfstate.parse import parse_state
from tests.support.awaiting import eventually, failure_of
from tests.support.fixtures_server import poll_until
from tests.support.log_events import DEADLINE_EXCEEDED, logged
from tests.support.stub_client import state_body

ALICE = Principal(DEFAULT_TENANT, "alice")
KEY = StateKey(DEFAULT_TENANT, "large-read")
#: A large read that waits (so that the deadline, or an outage, meets it
#: while its statement runs).
SLOW_READ = "SELECT payload FROM state_versions, pg_sleep(30) WHERE id = %s"


def upload(raw: bytes) -> StateUpload:
    return StateUpload(raw=raw, sha256=hashlib.sha256(raw).hexdigest(), parsed=parse_state(raw))


@pytest.fixture
def everything_is_large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write and read of a state takes the blocking path."""
    monkeypatch.setattr(large, "LARGE_TRANSFER_BYTES", 1)


@pytest.fixture
def slow_large_reads(monkeypatch: pytest.MonkeyPatch, everything_is_large: None) -> None:
    """The store's large reads sleep 30 s in the server before answering."""

    async def slow_txn(cursor: Any, version_id: int) -> bytes | None:
        raw: bytes | None = cursor.select_bytea(SLOW_READ, (version_id,))
        return raw

    monkeypatch.setattr(large, "read_payload_txn", slow_txn)


async def started_store(dsn: str, **options: Any) -> Any:
    from twisted.internet import reactor

    store = PostgresStateStore(dsn, reactor, pool_size=2, **options)
    await store.start()
    return store


@pytest_twisted.async_yield_fixture
async def store(postgres_dsn: str) -> AsyncIterator[Any]:
    built = await started_store(postgres_dsn)
    yield built
    await built.stop()



def sleeping_reads(dsn: str) -> list[int]:
    """The backends now running L{SLOW_READ}."""
    with psycopg2.connect(dsn, connect_timeout=10) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE state = 'active'"
                       " AND datname = current_database() AND query LIKE %s"
                       " AND pid <> pg_backend_pid()", ("%pg_sleep(30)%",))
        pids = [row[0] for row in cursor.fetchall()]
    connection.close()
    return pids


# -- the store ----------------------------------------------------------------


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_large_reads_select_the_exact_bytes_with_psycopg_3(
        store: Any, everything_is_large: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Current and by-number reads of large versions go through select_bytea
    and return the exact bytes (NUL, quotes, backslashes, not UTF-8) as bytes;
    a missing version or state is None."""
    selected: list[str] = []
    original = BlockingSession.select_bytea

    def counting(self: BlockingSession, query: str, params: Any = None) -> bytes | None:
        selected.append(query)
        return original(self, query, params)

    monkeypatch.setattr(BlockingSession, "select_bytea", counting)
    first = state_body(1, outputs={"q": {"value": "it's \\'; --\u00e9", "type": "string"}})
    await store.write_state(KEY, upload(first), None, ALICE)
    odd = b"\xff\xfe'\x00\\x00" + bytes(range(256)) * 64
    envelope = parse_state(b'{"serial": 2, "lineage": "l", "encrypted_data": "x",'
                           b' "encryption_version": "v0", "meta": {}}')
    await store.write_state(KEY, StateUpload(odd, hashlib.sha256(odd).hexdigest(), envelope),
                            None, ALICE)
    current = await store.read_current(KEY)
    assert type(current) is bytes and current == odd
    assert await store.read_version(KEY, 1) == first
    assert len(selected) == 2
    assert await store.read_version(KEY, 3) is None
    assert await store.read_current(StateKey(DEFAULT_TENANT, "missing")) is None


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_a_large_read_past_the_deadline_is_503_and_its_statement_is_cancelled(
        postgres_dsn: str, slow_large_reads: None) -> None:
    """A large read still running at the operation timeout fails with 503;
    the statement is cancelled in the server (it does not sleep on)."""
    store = await started_store(postgres_dsn, operation_timeout=1.0)
    try:
        await store.write_state(KEY, upload(state_body(1)), None, ALICE)
        with logged(DEADLINE_EXCEEDED) as deadlines:
            await failure_of(store.read_current(KEY), ServiceUnavailable)
        assert [event["seconds"] for event in deadlines] == [1.0]
        await eventually(lambda: not sleeping_reads(postgres_dsn),
                         "the read's statement to be cancelled")
    finally:
        await store.stop()


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_a_database_gone_mid_read_is_503(postgres_dsn: str, slow_large_reads: None) -> None:
    """The large read's backend terminated while it runs (the database
    restarting): the same 503 as on the pool's path, and the store notes the
    database as unreachable."""
    store = await started_store(postgres_dsn)
    try:
        await store.write_state(KEY, upload(state_body(1)), None, ALICE)
        reading = store.read_current(KEY)
        pids = await eventually(lambda: sleeping_reads(postgres_dsn), "the read to run")
        assert len(pids) == 1
        with psycopg2.connect(postgres_dsn) as admin, admin.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", (pids[0],))
        admin.close()
        error = await failure_of(reading, ServiceUnavailable)
        assert error.retry_after == RETRY_AFTER
        assert store.reachable is False
    finally:
        await store.stop()


@pytest.mark.postgres
@pytest_twisted.ensureDeferred
async def test_a_large_read_that_cannot_connect_is_503(
        store: Any, everything_is_large: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read's own connection refused (nothing listens): 503."""
    await store.write_state(KEY, upload(state_body(1)), None, ALICE)
    nowhere = connection_string("host=127.0.0.1 port=1 dbname=x")
    original = binary_read.open_read_connection
    monkeypatch.setattr(binary_read, "open_read_connection", lambda dsn: original(nowhere))
    error = await failure_of(store.read_current(KEY), ServiceUnavailable)
    assert error.retry_after == RETRY_AFTER


# -- the session ----------------------------------------------------------------


@pytest.mark.postgres
def test_select_bytea_alone_opens_no_psycopg2_connection(
        postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction that only selects a bytea never connects with psycopg2;
    no row is None; psycopg 3's connection is closed afterwards."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("psycopg2 connected")

    monkeypatch.setattr(psycopg2, "connect", refuse)
    opened: list[psycopg.Connection[Any]] = []
    original = binary_read.open_read_connection

    def open_and_keep(dsn: str) -> psycopg.Connection[Any]:
        opened.append(original(dsn))
        return opened[-1]

    monkeypatch.setattr(binary_read, "open_read_connection", open_and_keep)

    async def txn(cursor: Any, value: bytes) -> tuple[bytes | None, bytes | None]:
        return (cursor.select_bytea("SELECT %s::bytea", (value,)),
                cursor.select_bytea("SELECT NULL::bytea WHERE false"))

    session = BlockingSession(postgres_dsn, lambda connection: None)
    assert session.run(txn, (b"\x00\xff",)) == (b"\x00\xff", None)
    assert len(opened) == 2 and all(connection.closed for connection in opened)


@pytest.mark.postgres
def test_cancel_stops_a_running_select_bytea(postgres_dsn: str) -> None:
    """cancel() from another thread ends the running binary select with
    psycopg2's QueryCanceledError (what the old COPY read raised)."""
    session = BlockingSession(postgres_dsn, lambda connection: None)

    async def txn(cursor: Any) -> bytes | None:
        raw: bytes | None = cursor.select_bytea("SELECT 'x'::bytea FROM pg_sleep(30)")
        return raw

    def cancel_once_running() -> None:
        poll_until(lambda: sleeping_reads(postgres_dsn), 30, "the select to run")
        session.cancel()

    canceller = threading.Thread(target=cancel_once_running, daemon=True)
    canceller.start()
    try:
        with pytest.raises(psycopg2.extensions.QueryCanceledError,
                           match=r"^canceling statement due to user request"):
            session.run(txn, ())
    finally:
        canceller.join(30)


@pytest.mark.postgres
def test_the_statement_timeout_of_the_store_applies(postgres_dsn: str) -> None:
    """The read's connection gets the store's connection string: its
    statement timeout ends a statement that runs too long, as
    QueryCanceledError (mapped to 503 by the store)."""
    dsn = connection_string(postgres_dsn, statement_timeout=0.2)
    session = BlockingSession(dsn, lambda connection: None)

    async def txn(cursor: Any) -> bytes | None:
        raw: bytes | None = cursor.select_bytea("SELECT 'x'::bytea FROM pg_sleep(5)")
        return raw

    with pytest.raises(psycopg2.extensions.QueryCanceledError):
        session.run(txn, ())


def test_psycopg_3_errors_are_raised_as_psycopg2_errors() -> None:
    """Cancellation, connection and interface errors change class (the
    message's first line kept); other errors pass unchanged."""
    cases: list[tuple[Exception, type[Exception]]] = [
        (psycopg.errors.QueryCanceled("canceling statement\nDETAIL"),
         psycopg2.extensions.QueryCanceledError),
        (psycopg.OperationalError("connection refused"), psycopg2.OperationalError),
        (psycopg.InterfaceError("the connection is closed"), psycopg2.InterfaceError),
    ]
    for raised, expected in cases:
        with pytest.raises(expected) as caught, binary_read.psycopg2_errors():
            raise raised
        assert str(caught.value) == str(raised).splitlines()[0]
    with pytest.raises(psycopg.errors.UndefinedTable), binary_read.psycopg2_errors():
        raise psycopg.errors.UndefinedTable("no table")
