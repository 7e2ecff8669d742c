"""How the PostgreSQL store talks to the database on its pool: BEGIN and
COMMIT travel with the first and last statements, and the state lane's
transactions take few round trips (the write cycle's cost)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg2
import pytest
import pytest_twisted
from stub_client import lock_body, state_body

from kilolock.model import DEFAULT_TENANT, LockInfo, Principal, StateKey
from kilolock.store import postgres as postgres_module
from kilolock.web.body import prepare_upload

pytestmark = pytest.mark.postgres

ALICE = Principal(DEFAULT_TENANT, "alice")
KEY = StateKey(DEFAULT_TENANT, "rounds")


@pytest_twisted.async_yield_fixture
async def store(postgres_dsn: str) -> AsyncIterator[Any]:
    from twisted.internet import reactor

    built = postgres_module.PostgresStateStore(postgres_dsn, reactor, pool_size=2)
    await built.start()
    yield built
    await built.stop()


def tenant_exists(dsn: str, tenant: str) -> bool:
    connection = psycopg2.connect(dsn, connect_timeout=10)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM tenants WHERE id = %s", (tenant,))
            return cursor.fetchone() is not None
    finally:
        connection.close()


@pytest_twisted.ensureDeferred
async def test_commit_with_the_last_statement_commits(store: Any, postgres_dsn: str) -> None:
    """A statement sent with commit=True commits the transaction in the same
    round trip; a statement after it is refused."""
    refused: list[Exception] = []

    async def txn(cursor: Any) -> None:
        await cursor.execute("INSERT INTO tenants (id) VALUES ('t_first')")
        await cursor.execute("INSERT INTO tenants (id) VALUES ('t_last')", commit=True)
        try:
            cursor.execute("SELECT 1")
        except RuntimeError as error:
            refused.append(error)

    await store._transaction(txn)
    assert tenant_exists(postgres_dsn, "t_first") and tenant_exists(postgres_dsn, "t_last")
    assert len(refused) == 1


@pytest_twisted.ensureDeferred
async def test_a_failing_last_statement_rolls_everything_back(store: Any,
                                                             postgres_dsn: str) -> None:
    """When the statement that carries the COMMIT fails, PostgreSQL skips the
    COMMIT and the transaction is rolled back; the connection serves on."""

    async def txn(cursor: Any) -> None:
        await cursor.execute("INSERT INTO tenants (id) VALUES ('t_doomed')")
        await cursor.execute("SELECT 1 / 0", commit=True)

    with pytest.raises(psycopg2.errors.DivisionByZero):
        await store._transaction(txn)
    assert not tenant_exists(postgres_dsn, "t_doomed")
    await store.write_state(KEY, prepare_upload(state_body(1)), None, ALICE)
    assert await store.read_current(KEY) == state_body(1)


@pytest_twisted.ensureDeferred
async def test_the_write_cycle_takes_seven_round_trips(store: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """LOCK, POST ?ID= and UNLOCK of a small state: two, three and two
    statements, BEGIN and COMMIT included (the audit event, the projection
    and the version share one statement)."""
    from txpostgres.txpostgres import Cursor

    sent: list[str] = []
    original = Cursor.execute

    def counting(self: Any, query: str, params: Any = None) -> Any:
        sent.append(query)
        return original(self, query, params)

    monkeypatch.setattr(Cursor, "execute", counting)  # every round trip, COMMIT included
    await store.write_state(KEY, prepare_upload(state_body(1)), None, ALICE)
    info = LockInfo.from_bytes(lock_body("cycle-id"))
    counts = []
    for step in (lambda: store.acquire_lock(KEY, info, ALICE),
                 lambda: store.write_state(KEY, prepare_upload(state_body(2)), "cycle-id",
                                           ALICE),
                 lambda: store.release_lock(KEY, "cycle-id", ALICE)):
        sent.clear()
        await step()
        counts.append(len(sent))
    assert counts == [2, 3, 2]
    events = await store.list_events(DEFAULT_TENANT, state_path=KEY.path)
    assert [e.kind for e in events] == ["state_write", "lock_acquire", "state_write",
                                        "lock_release"]
