"""How the PostgreSQL store talks to the database on its pool: BEGIN and
COMMIT travel with the first and last statements, and the state lane's
transactions take few round trips (the write cycle's cost)."""

from __future__ import annotations

from typing import Any

import psycopg2
import pytest
import pytest_twisted

from kilolock.core.model import DEFAULT_TENANT, LockInfo, Principal, StateKey
from kilolock.store.postgres import statements as statements_module
from kilolock.store.postgres.store import PostgresStateStore
from kilolock.web.body import prepare_upload
from tests.support.fixtures_postgres import terminate_other_sessions
from tests.support.stub_client import lock_body, state_body

pytestmark = pytest.mark.postgres

ALICE = Principal(DEFAULT_TENANT, "alice")
KEY = StateKey(DEFAULT_TENANT, "rounds")


@pytest.fixture
def store(started_postgres_store: Any) -> Any:
    return started_postgres_store


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

    await store.runner.run_interaction(txn)
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
        await store.runner.run_interaction(txn)
    assert not tenant_exists(postgres_dsn, "t_doomed")
    await store.write_state(KEY, prepare_upload(state_body(1)), None, ALICE)
    assert await store.read_current(KEY) == state_body(1)


@pytest_twisted.ensureDeferred
async def test_the_write_cycle_takes_three_round_trips(store: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """LOCK, POST ?ID= and UNLOCK of a small state: one round trip each, as
    one statement that is its own transaction (the schema's kl_lock,
    kl_write_state and kl_unlock: no BEGIN, no COMMIT), the audit event
    included."""
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
    assert counts == [1, 1, 1]
    events = await store.list_events(DEFAULT_TENANT, state_path=KEY.path)
    assert [e.kind for e in events] == ["state_write", "lock_acquire", "state_write",
                                        "lock_release"]


def projection_row_versions(dsn: str, path: str) -> dict[str, list[tuple[int, str]]]:
    """Each projection table's (version_id, xmin) per row of a state, in order:
    which write produced each row, and whether it was rewritten since."""
    connection = psycopg2.connect(dsn, connect_timeout=10)
    try:
        with connection, connection.cursor() as cursor:
            found = {}
            for table in ("resources", "resource_dependencies", "outputs"):
                cursor.execute(
                    f"SELECT t.version_id, t.xmin::text FROM {table} t"
                    " JOIN states s ON s.id = t.state_id WHERE s.path = %s ORDER BY t.ordinal",
                    (path,))
                found[table] = cursor.fetchall()
            return found
    finally:
        connection.close()


def _resource(name: str, value: str, depends_on: list[str] | None = None) -> dict[str, Any]:
    instance: dict[str, Any] = {"schema_version": 0,
                                "attributes": {"id": name, "input": value},
                                "sensitive_attributes": []}
    if depends_on:
        instance["dependencies"] = depends_on
    return {"mode": "managed", "type": "terraform_data", "name": name,
            "provider": 'provider["terraform.io/builtin/terraform"]',
            "instances": [instance]}


@pytest_twisted.ensureDeferred
async def test_an_unchanged_projection_table_is_not_rewritten(store: Any,
                                                             postgres_dsn: str) -> None:
    """A write whose resources, dependencies or outputs are those of the
    current version leaves that table's rows alone (no delete, no insert);
    a changed table is replaced; the rows read back are always the current
    version's, and resource search reports the current version number."""
    from kilolock.rules.resources import ResourceQuery

    key = StateKey(DEFAULT_TENANT, "incremental")
    resources = [_resource("a", "1"), _resource("b", "2", ["terraform_data.a"])]
    outputs = {"o": {"value": "x", "type": "string"}}
    uploads = [
        prepare_upload(state_body(1, resources=resources, outputs=outputs)),
        # 2: only the serial changes: nothing is rewritten
        prepare_upload(state_body(2, resources=resources, outputs=outputs)),
        # 3: one output changes: only outputs are rewritten
        prepare_upload(state_body(3, resources=resources,
                                  outputs={"o": {"value": "y", "type": "string"}})),
        # 4: a resource attribute changes: resources only (dependencies equal)
        prepare_upload(state_body(4, resources=[_resource("a", "9"), resources[1]],
                                  outputs={"o": {"value": "y", "type": "string"}})),
    ]
    seen = []
    for upload in uploads:
        await store.write_state(key, upload, None, ALICE)
        assert await store.get_projection(key) == upload.parsed.projection
        seen.append(projection_row_versions(postgres_dsn, key.path))
    first, second, third, fourth = seen
    assert second == first
    assert third["resources"] == first["resources"]
    assert third["resource_dependencies"] == first["resource_dependencies"]
    assert third["outputs"] != first["outputs"]
    assert fourth["resources"] != first["resources"]
    assert fourth["resource_dependencies"] == first["resource_dependencies"]
    assert fourth["outputs"] == third["outputs"]
    matches = await store.query_resources(DEFAULT_TENANT, ResourceQuery(state_path=key.path))
    assert {match.version for match in matches} == {4}
    assert [match.resource.address for match in matches] == ["terraform_data.a", "terraform_data.b"]


@pytest_twisted.ensureDeferred
async def test_a_write_after_a_large_write_replaces_every_table(store: Any,
                                                                 postgres_dsn: str) -> None:
    """The blocking (COPY) path forgets the digests, so the next small write
    replaces the rows even when its projection equals the one before the
    large write."""
    from kilolock.store.postgres.large import LARGE_TRANSFER_BYTES

    key = StateKey(DEFAULT_TENANT, "after-large")
    small = [_resource("a", "1")]
    padding = "p" * LARGE_TRANSFER_BYTES
    await store.write_state(key, prepare_upload(state_body(1, resources=small)), None, ALICE)
    large = prepare_upload(state_body(2, resources=[_resource("big", padding)]))
    await store.write_state(key, large, None, ALICE)
    assert await store.get_projection(key) == large.parsed.projection
    again = prepare_upload(state_body(3, resources=small))
    await store.write_state(key, again, None, ALICE)
    assert await store.get_projection(key) == again.parsed.projection


async def cycle_statements(store: Any, monkeypatch: pytest.MonkeyPatch, serial: int,
                           path: str = "prepared") -> list[str]:
    """The statements a LOCK, POST ?ID= and UNLOCK send (one text per round trip)."""
    from txpostgres.txpostgres import Cursor

    sent: list[str] = []
    original = Cursor.execute

    def recording(self: Any, query: str, params: Any = None) -> Any:
        sent.append(query)
        return original(self, query, params)

    key = StateKey(DEFAULT_TENANT, path)
    warm_up = LockInfo.from_bytes(lock_body(f"warm-up-{serial}"))
    await store.acquire_lock(key, warm_up, ALICE)  # the state row exists from here on
    await store.release_lock(key, warm_up.id, ALICE)
    info = LockInfo.from_bytes(lock_body(f"id-{serial}"))
    with monkeypatch.context() as patch:
        patch.setattr(Cursor, "execute", recording)
        await store.acquire_lock(key, info, ALICE)
        await store.write_state(key, prepare_upload(state_body(serial)), info.id, ALICE)
        await store.release_lock(key, info.id, ALICE)
    assert await store.read_current(key) == state_body(serial)
    return sent


@pytest_twisted.ensureDeferred
async def test_the_write_cycle_runs_prepared_statements(store: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every statement of the write cycle is an EXECUTE of a statement the
    session prepared (no statement text is parsed and planned anew)."""
    sent = await cycle_statements(store, monkeypatch, 1)
    assert len(sent) == 3
    for text in sent:
        statement = text.removeprefix("BEGIN; ").removesuffix("; COMMIT")
        assert statement.startswith("EXECUTE kl_"), statement[:60]


@pytest_twisted.ensureDeferred
async def test_sessions_prepare_again_after_a_reconnection(
        store: Any, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions ended by the server (a restart, an administrator) come back
    by themselves and prepare the statements again before serving."""
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    await cycle_statements(store, monkeypatch, 1)
    assert terminate_other_sessions(postgres_dsn) == 2
    served = 0
    for _ in range(100):  # the dead sessions are noticed and replaced
        try:
            await store.read_current(KEY)
            served += 1
        except Exception:  # 503 while reconnecting is expected
            served = 0
        if served >= 4:
            break
        await deferLater(reactor, 0.1, lambda: None)
    assert served >= 4
    assert all(connection.prepared for connection in store.runner._pool.every_connection)
    for serial in (2, 3, 4):  # both sessions serve, prepared
        sent = await cycle_statements(store, monkeypatch, serial)
        assert all("EXECUTE kl_" in text for text in sent)


@pytest_twisted.ensureDeferred
async def test_without_prepared_statements_the_text_is_sent(
        postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """prepared_statements=False (a pooler that does not keep sessions)
    sends each statement's text and prepares nothing."""
    from twisted.internet import reactor

    plain = PostgresStateStore(postgres_dsn, reactor, pool_size=2,
                                               prepared_statements=False)
    await plain.start()
    try:
        sent = await cycle_statements(plain, monkeypatch, 1)
        assert not any("EXECUTE" in text or "PREPARE" in text for text in sent)
        assert not any(connection.prepared for connection in plain.runner._pool.every_connection)
    finally:
        await plain.stop()


def test_a_prepared_statement_numbers_its_parameters_in_order() -> None:
    """Named placeholders become $1, $2, ... in order of first appearance (a
    repeated one keeps its number); EXECUTE takes the values in that order."""
    from kilolock.store.postgres.prepared import PreparedSQL

    statement = PreparedSQL("kl_example", "SELECT %(b)s, %(a)s, %(b)s, 'x' LIKE 'x%%'")
    assert statement == "SELECT %(b)s, %(a)s, %(b)s, 'x' LIKE 'x%%'"
    assert statement.prepare == "PREPARE kl_example AS SELECT $1, $2, $1, 'x' LIKE 'x%'"
    assert statement.execute_sql == "EXECUTE kl_example(%s, %s)"
    assert statement.arguments({"a": 1, "b": 2, "unused": 3}) == [2, 1]


def test_every_prepared_statement_is_prepared_by_each_session() -> None:
    """A PreparedSQL the store runs as EXECUTE must be in the batch every
    session prepares (else EXECUTE fails: no such prepared statement)."""
    from kilolock.store.postgres.prepared import PreparedSQL

    statements = [value for value in vars(statements_module).values()
                  if isinstance(value, PreparedSQL)]
    assert len(statements) == 6
    assert len({statement.name for statement in statements}) == len(statements)
    for statement in statements:
        assert statement.prepare in statements_module.PREPARE_STATEMENTS
