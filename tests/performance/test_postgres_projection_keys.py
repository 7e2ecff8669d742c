"""Dependency and output rows keyed by (state_id, ordinal) (schema 16), on
real PostgreSQL: the key is each table's only index, a database at schema
15 upgrades with its rows as they were, and after the upgrade writes on
the small and the large path replace a state's rows with its new
projection's, read back in order."""

from __future__ import annotations

import json
from typing import Any

import pytest
import pytest_twisted

from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
from kilolock.store.postgres import large
from kilolock.store.postgres.store import PostgresStateStore
from kilolock.tfstate.parse import parse_state
from kilolock.web.body import prepare_upload
from tests.support.at_rest_support import query
from tests.support.fixtures_postgres import as_kilolock_of, upgrade_schema

pytestmark = pytest.mark.postgres

ALICE = Principal(DEFAULT_TENANT, "alice")
KEY = StateKey(DEFAULT_TENANT, "keyed")


def state(serial: int, names: list[str], outputs: dict[str, str]) -> bytes:
    """A state whose resources C{names} each depend on the one before, and
    with string C{outputs}."""
    return json.dumps({
        "version": 4, "terraform_version": "1.15.5", "serial": serial,
        "lineage": "5a1c7e4d-0000-4000-8000-000000000016",
        "outputs": {name: {"value": value, "type": "string"} for name, value in outputs.items()},
        "resources": [{
            "mode": "managed", "type": "terraform_data", "name": name,
            "provider": 'provider["terraform.io/builtin/terraform"]',
            "instances": [{"schema_version": 0, "attributes": {"id": name},
                           "sensitive_attributes": [],
                           "dependencies": [f"terraform_data.{names[index - 1]}"]
                           if index else []}]}
            for index, name in enumerate(names)]}).encode()


def stored_rows(dsn: str) -> tuple[list[Any], list[Any]]:
    """The state's dependency rows and output rows, in order."""
    dependencies = query(dsn, "SELECT d.ordinal, d.address, d.depends_on FROM"
                              " resource_dependencies d JOIN states s ON s.id = d.state_id"
                              " WHERE s.path = %s ORDER BY d.ordinal", (KEY.path,))
    outputs = query(dsn, "SELECT o.ordinal, o.name, o.value::text FROM outputs o"
                         " JOIN states s ON s.id = o.state_id WHERE s.path = %s"
                         " ORDER BY o.ordinal", (KEY.path,))
    return dependencies, outputs


def expected_rows(raw: bytes) -> tuple[list[Any], list[Any]]:
    """What L{stored_rows} holds once C{raw} is the current version."""
    projection = parse_state(raw).projection
    assert projection is not None
    return ([(ordinal, row.address, row.depends_on)
             for ordinal, row in enumerate(projection.dependencies, 1)],
            [(ordinal, row.name, row.value)
             for ordinal, row in enumerate(projection.outputs, 1)])


def indexes(dsn: str, table: str) -> list[str]:
    return sorted(str(definition) for (definition,) in query(
        dsn, "SELECT indexdef FROM pg_indexes WHERE tablename = %s", (table,)))


@pytest.mark.parametrize("database_at_schema", [15], indirect=True)
@pytest_twisted.ensureDeferred
async def test_an_upgrade_keeps_the_rows_and_writes_replace_them(
        database_at_schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from twisted.internet import reactor

    dsn = database_at_schema
    as_kilolock_of(monkeypatch, 15)
    store = PostgresStateStore(dsn, reactor, pool_size=1)
    await store.start()
    old = state(1, ["a", "b", "c"], {"x": "1", "y": "2"})
    try:
        await store.write_state(KEY, prepare_upload(old), None, ALICE)
    finally:
        await store.stop()
    monkeypatch.undo()
    before = stored_rows(dsn)
    assert before == expected_rows(old)
    upgrade_schema(dsn)
    assert stored_rows(dsn) == before
    for table in ("resource_dependencies", "outputs"):
        assert indexes(dsn, table) == [
            f"CREATE UNIQUE INDEX {table}_pkey ON public.{table} USING btree"
            " (state_id, ordinal)"]
    store = PostgresStateStore(dsn, reactor, pool_size=1)
    await store.start()
    try:
        serial = 2
        for blocking, names, outputs in (
                (False, ["a", "b", "c", "d"], {"x": "1", "y": "3", "z": "4"}),
                (True, ["d", "c", "b", "a"], {"y": "5"}),
                (False, ["b", "a"], {"x": "6", "y": "5"}),
                (True, ["a", "b", "c", "d", "e"], {}),
                (False, [], {"w": "7"})):
            raw = state(serial, names, outputs)
            monkeypatch.setattr(large, "LARGE_TRANSFER_BYTES", 1 if blocking else 8 << 20)
            await store.write_state(KEY, prepare_upload(raw), None, ALICE)
            assert stored_rows(dsn) == expected_rows(raw)
            projection = await store.get_projection(KEY)
            assert projection == parse_state(raw).projection
            serial += 1
    finally:
        await store.stop()
