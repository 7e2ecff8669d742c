"""The index of resources by type (schema 15: a btree of hashtext(type)),
on real PostgreSQL: the search by type answers with exactly the resources
of that type even when another type has the same hash, it is answered from
the index, a type longer than any btree entry is stored and found, and a
database at schema 14 upgrades to the new index with its rows found as
before."""

from __future__ import annotations

import json
from typing import Any

import psycopg2
import pytest
import pytest_twisted

from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
from kilolock.rules.resources import ResourceQuery
from kilolock.store.postgres import statements
from kilolock.store.postgres.store import PostgresStateStore
from kilolock.web.body import prepare_upload
from tests.support.at_rest_support import execute, query
from tests.support.fixtures_postgres import as_kilolock_of, upgrade_schema

pytestmark = pytest.mark.postgres

ALICE = Principal(DEFAULT_TENANT, "alice")


def state(serial: int, types: list[str]) -> bytes:
    """A state with one resource of each of C{types}, in order."""
    return json.dumps({
        "version": 4, "terraform_version": "1.15.5", "serial": serial,
        "lineage": "5a1c7e4d-0000-4000-8000-000000000015", "outputs": {},
        "resources": [{
            "mode": "managed", "type": kind, "name": f"r{index}",
            "provider": 'provider["registry.terraform.io/hashicorp/aws"]',
            "instances": [{"schema_version": 0, "attributes": {"id": f"id-{index}"},
                           "sensitive_attributes": []}]}
            for index, kind in enumerate(types)]}).encode()


def colliding_types(dsn: str) -> tuple[str, str]:
    """Two different resource type names with the same hashtext (found by
    PostgreSQL itself among generated names: a 32-bit hash collides within
    a few hundred thousand names)."""
    ((first, second),) = query(
        dsn, "SELECT min(name), max(name) FROM (SELECT 'aws_type_' || n AS name"
             " FROM generate_series(1, 400000) n) names GROUP BY hashtext(name)"
             " HAVING count(*) > 1 ORDER BY 1 LIMIT 1")
    assert first != second
    ((same,),) = query(dsn, "SELECT hashtext(%s) = hashtext(%s)", (first, second))
    assert same
    return str(first), str(second)


async def found(store: PostgresStateStore, kind: str) -> list[tuple[str, str]]:
    """(state path, address) of every resource the search by C{kind} finds."""
    matches = await store.query_resources(DEFAULT_TENANT, ResourceQuery(type=kind))
    return [(match.state_path, match.resource.address) for match in matches]


@pytest_twisted.ensureDeferred
async def test_a_type_search_never_confuses_two_types_with_the_same_hash(
        started_postgres_store: PostgresStateStore, postgres_dsn: str) -> None:
    first, second = colliding_types(postgres_dsn)
    store = started_postgres_store
    await store.write_state(StateKey(DEFAULT_TENANT, "one"),
                            prepare_upload(state(1, [first, second, first])), None, ALICE)
    await store.write_state(StateKey(DEFAULT_TENANT, "two"),
                            prepare_upload(state(1, [second])), None, ALICE)
    assert await found(store, first) == [("one", f"{first}.r0"), ("one", f"{first}.r2")]
    assert await found(store, second) == [("one", f"{second}.r1"), ("two", f"{second}.r0")]
    assert await found(store, "aws_type_none") == []


def plan_of(dsn: str, kind: str) -> str:
    """The plan of the resource search by C{kind}, sequential scans off (a
    small table is otherwise read whole, index or not)."""
    statement, params = statements.select_matches(ResourceQuery(type=kind))
    params = {**params, "tenant": DEFAULT_TENANT}
    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute("SET enable_seqscan = off")
            cursor.execute("EXPLAIN " + statement, params)
            return "\n".join(str(line) for (line,) in cursor.fetchall())
    finally:
        connection.close()


@pytest_twisted.ensureDeferred
async def test_the_type_search_is_answered_from_the_index(
        started_postgres_store: PostgresStateStore, postgres_dsn: str) -> None:
    await started_postgres_store.write_state(
        StateKey(DEFAULT_TENANT, "indexed"),
        prepare_upload(state(1, ["aws_instance", "aws_s3_bucket"])), None, ALICE)
    execute(postgres_dsn, "ANALYZE resources")
    assert "resources_type" in plan_of(postgres_dsn, "aws_instance")


@pytest_twisted.ensureDeferred
async def test_a_type_longer_than_a_btree_entry_is_stored_and_found(
        started_postgres_store: PostgresStateStore) -> None:
    long_type = "aws_" + "".join(f"{index:07d}" for index in range(1500))  # 10,504 chars
    store = started_postgres_store
    await store.write_state(StateKey(DEFAULT_TENANT, "long"),
                            prepare_upload(state(1, [long_type, "aws_instance"])), None, ALICE)
    assert await found(store, long_type) == [("long", f"{long_type}.r0")]


def index_definition(dsn: str) -> Any:
    ((definition,),) = query(dsn, "SELECT indexdef FROM pg_indexes"
                                  " WHERE indexname = 'resources_type'")
    return definition


@pytest.mark.parametrize("database_at_schema", [14], indirect=True)
@pytest_twisted.ensureDeferred
async def test_an_upgrade_from_schema_14_indexes_the_rows_it_finds(
        database_at_schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from twisted.internet import reactor

    dsn = database_at_schema
    assert "USING hash" in index_definition(dsn)
    as_kilolock_of(monkeypatch, 14)
    store = PostgresStateStore(dsn, reactor, pool_size=1)
    await store.start()
    try:
        await store.write_state(StateKey(DEFAULT_TENANT, "old"),
                                prepare_upload(state(1, ["aws_instance", "aws_vpc"])), None,
                                ALICE)
    finally:
        await store.stop()
    monkeypatch.undo()
    upgrade_schema(dsn)
    assert "hashtext(type)" in index_definition(dsn)
    store = PostgresStateStore(dsn, reactor, pool_size=1)
    await store.start()
    try:
        assert await found(store, "aws_vpc") == [("old", "aws_vpc.r1")]
        await store.write_state(StateKey(DEFAULT_TENANT, "new"),
                                prepare_upload(state(1, ["aws_vpc"])), None, ALICE)
        assert await found(store, "aws_vpc") == [("new", "aws_vpc.r0"), ("old", "aws_vpc.r1")]
    finally:
        await store.stop()
