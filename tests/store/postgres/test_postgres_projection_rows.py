"""Schema version 11: the projection tables of the PostgreSQL store carry
no foreign keys (each key checked every inserted row); a state's projection
rows go with the state, by a trigger, on every path that deletes states; the
index of versions by sha256 is a hash index; events have no id column."""

from __future__ import annotations

from typing import Any

import psycopg2
import pytest
import pytest_twisted

from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
from kilolock.web.body import prepare_upload
from tests.support.stub_client import state_body

pytestmark = pytest.mark.postgres

ALICE = Principal(DEFAULT_TENANT, "alice")
TABLES = ("resources", "resource_dependencies", "outputs")


@pytest.fixture
def store(started_postgres_store: Any) -> Any:
    return started_postgres_store


def _query(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    connection = psycopg2.connect(dsn, connect_timeout=10)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []
    finally:
        connection.close()


def _rows_per_table(dsn: str) -> dict[str, int]:
    """How many projection rows each table holds, all states together."""
    return {table: _query(dsn, f"SELECT count(*) FROM {table}")[0][0]
            for table in TABLES}


def _body(serial: int, name: str) -> bytes:
    resource = {"mode": "managed", "type": "terraform_data", "name": name,
                "provider": 'provider["terraform.io/builtin/terraform"]',
                "instances": [{"schema_version": 0, "attributes": {"id": name},
                               "sensitive_attributes": [],
                               "dependencies": ["terraform_data.other"]}]}
    return state_body(serial, resources=[resource],
                      outputs={"o": {"value": name, "type": "string"}})


async def _write(store: Any, path: str) -> StateKey:
    key = StateKey(DEFAULT_TENANT, path)
    await store.write_state(key, prepare_upload(_body(1, path.replace("/", "_"))), None, ALICE)
    return key


def test_the_projection_tables_have_no_foreign_keys(postgres_dsn: str) -> None:
    """Schema version 11 dropped the six keys; nothing else references them."""
    found = _query(postgres_dsn,
                   "SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f'"
                   " AND conrelid::regclass::text = ANY(%s)", (list(TABLES),))
    assert found == []


@pytest_twisted.ensureDeferred
async def test_deleting_a_state_deletes_its_projection_rows(store: Any,
                                                             postgres_dsn: str) -> None:
    """DELETE of a state removes its rows from each projection table and
    leaves another state's alone."""
    kept = await _write(store, "kept")
    gone = await _write(store, "gone")
    assert _rows_per_table(postgres_dsn) == dict.fromkeys(TABLES, 2)
    await store.delete_state(gone, None, ALICE)
    assert _rows_per_table(postgres_dsn) == dict.fromkeys(TABLES, 1)
    projection = await store.get_projection(kept)
    assert [row.address for row in projection.resources] == ["terraform_data.kept"]
    assert [row.name for row in projection.outputs] == ["o"]


@pytest_twisted.ensureDeferred
async def test_deleting_many_states_at_once_deletes_all_their_rows(store: Any,
                                                                   postgres_dsn: str) -> None:
    """A statement deleting several states (what deleting a tenant with its
    states runs) removes every one's rows."""
    for path in ("a", "b", "c"):
        await _write(store, path)
    assert _rows_per_table(postgres_dsn) == dict.fromkeys(TABLES, 3)
    _query(postgres_dsn, "DELETE FROM states WHERE tenant_id = %s", (DEFAULT_TENANT,))
    assert _rows_per_table(postgres_dsn) == dict.fromkeys(TABLES, 0)


def test_versions_are_indexed_by_sha256_with_a_hash_index(postgres_dsn: str) -> None:
    """Schema version 11: the blobs lookup's index stores hashes, not keys."""
    found = _query(postgres_dsn,
                   "SELECT am.amname FROM pg_class c JOIN pg_am am ON am.oid = c.relam"
                   " WHERE c.relname = 'state_versions_sha256'")
    assert found == [("hash",)]


def test_events_have_no_id_and_are_identified_by_tenant_and_seq(postgres_dsn: str) -> None:
    """Schema version 11: the unused events.id is gone; (tenant_id, seq)
    stays unique and identifies a row for replication."""
    columns = _query(postgres_dsn, "SELECT column_name FROM information_schema.columns"
                                   " WHERE table_name = 'events' AND column_name = 'id'")
    assert columns == []
    identity = _query(postgres_dsn, "SELECT c.relname FROM pg_index i"
                                    " JOIN pg_class c ON c.oid = i.indexrelid"
                                    " WHERE i.indrelid = 'events'::regclass"
                                    " AND i.indisreplident AND i.indisunique")
    assert identity == [("events_tenant_seq",)]
