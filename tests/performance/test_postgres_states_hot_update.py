"""A write's update of its state's row (schema 17), on real PostgreSQL: no
index covers a column the write changes, so PostgreSQL updates the row in
place (a heap-only tuple, no new index entries).  The dashboard's listing
sorted by update time, which used the index dropped, is held to its order
by tests/contract/test_dashboard_store.py."""

from __future__ import annotations

import psycopg2
import pytest
import pytest_twisted

from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
from kilolock.store.postgres.store import PostgresStateStore
from kilolock.web.body import prepare_upload
from tests.support.at_rest_support import query
from tests.support.stub_client import state_body

pytestmark = pytest.mark.postgres

ALICE = Principal(DEFAULT_TENANT, "alice")

#: The columns every write sets on its state's row (kl_write_state).
WRITTEN_COLUMNS = ("updated_at", "projection_digests")


def test_no_index_covers_a_column_a_write_sets(postgres_dsn: str) -> None:
    indexed = {str(name) for (name,) in query(
        postgres_dsn,
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
        " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'states'::regclass")}
    assert indexed and not indexed & set(WRITTEN_COLUMNS)


@pytest_twisted.ensureDeferred
async def test_a_write_s_update_of_its_state_is_heap_only(
        started_postgres_store: PostgresStateStore, postgres_dsn: str) -> None:
    """The update the write makes, run in a transaction that then asks
    PostgreSQL how many of its updates of C{states} were heap-only."""
    key = StateKey(DEFAULT_TENANT, "hot")
    await started_postgres_store.write_state(key, prepare_upload(state_body(1)), None, ALICE)
    connection = psycopg2.connect(postgres_dsn)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE states SET updated_at = updated_at + interval '1 second',"
                " projection_digests = ARRAY['a', 'b', 'c'] WHERE path = %s", (key.path,))
            assert cursor.rowcount == 1
            cursor.execute("SELECT pg_stat_get_xact_tuples_hot_updated('states'::regclass)")
            assert cursor.fetchone() == (1,)
        connection.rollback()
    finally:
        connection.close()
