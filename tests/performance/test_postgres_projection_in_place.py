"""The projection's resources updated in place (schema 14), on real
PostgreSQL: whatever sequence of writes a state gets -- resources changed,
added, removed, reordered, a type changed, the small path, the blocking
(COPY) path and the overlapped one in any order -- its rows are exactly the
projection of its current bytes, numbered 1, 2, ..., found by the search;
a small write leaves an unchanged row untouched and gives a changed one the
new version's id.  A database at schema 13 with projections upgrades with
its rows as they were, and is written and read as a new one."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted

from kilolock.core.model import DEFAULT_TENANT, Principal, Projection, StateKey
from kilolock.rules.resources import ResourceQuery
from kilolock.store.postgres import large
from kilolock.store.postgres.store import PostgresStateStore
from kilolock.tfstate.parse import parse_state
from kilolock.web.body import prepare_upload, start_upload_feed
from tests.support.at_rest_support import query
from tests.support.fixtures_postgres import as_kilolock_of, upgrade_schema
from tests.support.stub_client import state_body

pytestmark = pytest.mark.postgres

ALICE = Principal(DEFAULT_TENANT, "alice")
KEY = StateKey(DEFAULT_TENANT, "in-place")
SMALL, LARGE, OVERLAPPED = "small", "large", "overlapped"

#: A row as the test compares it: ordinal, address, type, attributes text.
Row = tuple[int, str, str, str]


def resource(name: str, value: str, kind: str = "terraform_data", count: int = 1,
             deposed: bool = False) -> dict[str, Any]:
    """A resource of C{count} instances (counted ones have index keys 0,
    1, ...), each holding C{value}; with C{deposed}, one more deposed
    instance of the first."""
    instances: list[dict[str, Any]] = [
        {"schema_version": 0, "attributes": {"id": f"{name}-{index}", "input": value},
         "sensitive_attributes": [], **({"index_key": index} if count > 1 else {})}
        for index in range(count)]
    if deposed:
        instances.append({**instances[0], "deposed": "00000001"})
    return {"mode": "managed", "type": kind, "name": name,
            "provider": 'provider["terraform.io/builtin/terraform"]', "instances": instances}


A, B, C, D = (resource(name, "1") for name in "abcd")

#: Writes of one state, each a path and its resources: every kind of change
#: on the small path, then the blocking paths between small writes.
SEQUENCE: list[tuple[str, list[dict[str, Any]]]] = [
    (SMALL, [A, B, C, D]),
    (SMALL, [A, resource("b", "2"), C, D]),  # one changed
    (SMALL, [A, resource("b", "2"), C, D, resource("e", "1")]),  # one added
    (SMALL, [A, C, D, resource("e", "1")]),  # one removed: the rows after it move up
    (SMALL, [resource("e", "1"), D, C, A]),  # reordered
    (SMALL, [resource("e", "1"), D, resource("c", "1", "null_resource"), A]),  # type
    (SMALL, [resource("e", "1"), D, resource("c", "1", "null_resource"), A]),  # same rows
    (LARGE, [A, B, resource("f", "3", count=3)]),
    (SMALL, [A, B, resource("f", "3", count=3)]),  # the rows the large write left
    (SMALL, [A, resource("b", "4"), resource("f", "3", count=2, deposed=True)]),
    (OVERLAPPED, [resource("g", "5", "null_resource"), A]),
    (SMALL, [resource("g", "6", "null_resource"), A, B, C, D]),
    (OVERLAPPED, [resource("g", "6", "null_resource"), A, B, C, D]),
    (LARGE, []),
    (SMALL, [B]),
    (SMALL, []),
    (SMALL, [C, D]),
]


def rows_of(dsn: str, path: str) -> list[tuple[Row, int, str]]:
    """The state's resource rows in order: each as L{Row}, with its
    version_id and xmin (which write last touched it)."""
    return [((ordinal, address, kind, attributes), version_id, xmin)
            for ordinal, address, kind, attributes, version_id, xmin in query(
                dsn, "SELECT r.ordinal, r.address, r.type, r.attributes::text, r.version_id,"
                     " r.xmin::text FROM resources r JOIN states s ON s.id = r.state_id"
                     " WHERE s.path = %s ORDER BY r.ordinal", (path,))]


def current_version_id(dsn: str, path: str) -> int:
    ((found,),) = query(dsn, "SELECT max(v.id) FROM state_versions v JOIN states s"
                             " ON s.id = v.state_id WHERE s.path = %s", (path,))
    return int(found)


def projection_of(raw: bytes) -> Projection:
    """The projection of state bytes, as a write makes it."""
    projection = parse_state(raw).projection
    assert projection is not None
    return projection


async def write(store: PostgresStateStore, monkeypatch: pytest.MonkeyPatch, key: StateKey,
                path: str, raw: bytes) -> None:
    """Write C{raw} on the small, the blocking or the overlapped path."""
    from twisted.internet import reactor

    monkeypatch.setattr(large, "LARGE_TRANSFER_BYTES", 8 << 20 if path == SMALL else 1)
    if path == OVERLAPPED:
        outcome = await store.write_state_overlapped(
            key, start_upload_feed(raw, None, reactor), None, ALICE)
    else:
        outcome = await store.write_state(key, prepare_upload(raw), None, ALICE)
    assert outcome.created


async def check_projection(store: PostgresStateStore, key: StateKey, raw: bytes,
                           types: set[str]) -> None:
    """The state's projection is its current bytes' (C{raw}'s), and the
    search by type (the index of types) finds exactly its resources of each of
    C{types} (the ones it has and any it had), in order."""
    assert await store.read_current(key) == raw
    fresh = projection_of(raw)
    assert await store.get_projection(key) == fresh
    for kind in types:
        matches = await store.query_resources(key.tenant,
                                              ResourceQuery(type=kind, state_path=key.path))
        assert [match.resource for match in matches] == [
            row for row in fresh.resources if row.type == kind]


@pytest_twisted.ensureDeferred
async def test_the_rows_are_always_the_current_projection(
        started_postgres_store: PostgresStateStore, postgres_dsn: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = started_postgres_store
    before: list[tuple[Row, int, str]] = []
    types: set[str] = set()
    for serial, (path, resources) in enumerate(SEQUENCE, 1):
        raw = state_body(serial, resources=resources)
        await write(store, monkeypatch, KEY, path, raw)
        types |= {row.type for row in projection_of(raw).resources}
        await check_projection(store, KEY, raw, types)
        after = rows_of(postgres_dsn, KEY.path)
        assert [row[0] for row, _, _ in after] == list(range(1, len(after) + 1))
        written = current_version_id(postgres_dsn, KEY.path)
        if path == SMALL:
            # Row by row: an identical row untouched (even one a blocking
            # write left), any other one written.
            old = {row[0]: (row, version_id, xmin) for row, version_id, xmin in before}
            for row, version_id, xmin in after:
                if row[0] in old and old[row[0]][0] == row:
                    assert (version_id, xmin) == old[row[0]][1:]
                else:
                    assert version_id == written
                    assert row[0] not in old or xmin != old[row[0]][2]
        else:
            # The blocking paths write every row.
            assert {version_id for _, version_id, _ in after} <= {written}
            assert not {xmin for _, _, xmin in after} & {xmin for _, _, xmin in before}
        before = after


def test_the_key_is_the_state_and_the_ordinal(postgres_dsn: str) -> None:
    """resources_pkey is (state_id, ordinal), resources_state (the state's
    rows, which the key finds) is gone, and the table keeps room on its
    pages for the rows' new versions."""
    assert query(postgres_dsn, "SELECT pg_get_indexdef('resources_pkey'::regclass)") == [
        ("CREATE UNIQUE INDEX resources_pkey ON public.resources USING btree"
         " (state_id, ordinal)",)]
    assert query(postgres_dsn, "SELECT to_regclass('resources_state')") == [(None,)]
    assert query(postgres_dsn, "SELECT reloptions FROM pg_class WHERE relname = 'resources'"
                 ) == [(["fillfactor=70"],)]


@pytest.mark.parametrize("database_at_schema", [13], indirect=True)
@pytest_twisted.ensureDeferred
async def test_an_upgrade_keeps_the_rows_and_then_updates_them(
        database_at_schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """States written at schema 13 (small and blocking writes, a changed
    resource) keep every row as it was through the upgrade, read the same,
    and are then written in place like any other."""
    from twisted.internet import reactor

    dsn = database_at_schema
    small, blocking = StateKey(DEFAULT_TENANT, "small"), StateKey(DEFAULT_TENANT, "blocking")
    first = [A, B, resource("c", "1", count=2)]
    old = {small: state_body(2, resources=[A, resource("b", "2"), first[2]]),
           blocking: state_body(1, resources=[C, D])}

    async def store_at(upgrading: bool) -> PostgresStateStore:
        if not upgrading:
            as_kilolock_of(monkeypatch, 13)
        else:
            monkeypatch.undo()
        store = PostgresStateStore(dsn, reactor, pool_size=2)
        await store.start()
        return store

    store = await store_at(upgrading=False)
    try:
        await write(store, monkeypatch, small, SMALL, state_body(1, resources=first))
        await write(store, monkeypatch, small, SMALL, old[small])
        await write(store, monkeypatch, blocking, LARGE, old[blocking])
    finally:
        await store.stop()
    rows = {key: rows_of(dsn, key.path) for key in old}
    assert query(dsn, "SELECT max(version) FROM schema_version") == [(13,)]
    upgrade_schema(dsn)
    assert {key: rows_of(dsn, key.path) for key in old} == rows
    types = {"terraform_data"}
    store = await store_at(upgrading=True)
    try:
        for key, raw in old.items():
            await check_projection(store, key, raw, types)
        new = {small: state_body(3, resources=[A, resource("b", "5"), C]),
               blocking: state_body(2, resources=[D, C, resource("e", "1", "null_resource")])}
        for key, raw in new.items():
            await write(store, monkeypatch, key, SMALL, raw)
            await check_projection(store, key, raw, types | {"null_resource"})
        # The small state's unchanged first row is the one written at schema 13.
        assert rows_of(dsn, small.path)[0] == rows[small][0]
        assert rows_of(dsn, small.path)[1][1] == current_version_id(dsn, small.path)
    finally:
        await store.stop()
