"""Chains of deltas in the PostgreSQL store (schema 18): each version a
delta against the one before it, a full snapshot every 64 versions; reads
decode a chain from its snapshot, or from a version the process holds;
several processes writing and reading one state stay byte-exact."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_twisted

from kilolock.atrest.errors import StoredVersionUnreadable
from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
from kilolock.store.postgres.store import PostgresStateStore
from tests.support.at_rest_support import execute, provider, query, secret, upload
from tests.support.awaiting import failure_of
from tests.support.fixtures_postgres import as_kilolock_of, upgrade_schema
from tests.support.stub_client import state_body

pytestmark = pytest.mark.postgres

ADMIN = Principal(DEFAULT_TENANT, "admin", scope="admin")
KEY = StateKey(DEFAULT_TENANT, "prod/network")
KEYS = {"k1": secret()}


def version(serial: int, salt: str = "") -> bytes:
    """Forty resources; two of them change at each serial."""
    return state_body(serial, resources=[{
        "mode": "managed", "type": "aws_instance", "name": f"node_{index}",
        "provider": 'provider["registry.terraform.io/hashicorp/aws"]',
        "instances": [{"schema_version": 1, "sensitive_attributes": [], "attributes": {
            "id": f"i-{index}", "etag": hashlib.sha256(
                f"{salt}{serial if index in (serial % 40, (serial * 7) % 40) else 0}/{index}"
                .encode()).hexdigest()}}]} for index in range(40)])


def make_store(dsn: str, encrypted: bool = False) -> PostgresStateStore:
    from twisted.internet import reactor

    return PostgresStateStore(dsn, reactor, pool_size=2, key_provider=provider(
        "k1", KEYS) if encrypted else None)


@contextlib.asynccontextmanager
async def running(dsn: str, encrypted: bool = False) -> AsyncIterator[PostgresStateStore]:
    """A started store (a Kilolock process), stopped when the block ends."""
    store = make_store(dsn, encrypted)
    await store.start()
    try:
        yield store
    finally:
        await store.stop()


@pytest_twisted.async_yield_fixture
async def stores(postgres_dsn: str) -> AsyncIterator[list[PostgresStateStore]]:
    """Two stores on one database: two Kilolock processes."""
    built = [make_store(postgres_dsn), make_store(postgres_dsn)]
    for each in built:
        await each.start()
    yield built
    for each in built:
        await each.stop()


async def write(store: PostgresStateStore, serial: int, salt: str = "") -> None:
    await store.write_state(KEY, upload(version(serial, salt)), None, ADMIN)


def codecs(dsn: str) -> list[tuple[int, str, int | None]]:
    return [(number, codec, base) for number, codec, base in query(
        dsn, "SELECT number, codec, base_number FROM state_versions ORDER BY number")]


@pytest_twisted.ensureDeferred
async def test_a_history_is_one_chain_with_a_snapshot_every_64_versions(
        stores: list[PostgresStateStore], postgres_dsn: str) -> None:
    """Versions 2 to 64 are each a delta against the one before; version 65
    is a new snapshot and 66 a delta on it.  Every version reads back byte
    for byte from the process that wrote it and from one that never saw
    the state (which decodes up to 64 payloads)."""
    writer, reader = stores
    for serial in range(1, 67):
        await write(writer, serial)
    assert codecs(postgres_dsn) == [
        (1, "zstd", None), *[(n, "zstd-delta", n - 1) for n in range(2, 65)],
        (65, "zstd", None), (66, "zstd-delta", 65)]
    for number in (1, 2, 33, 64, 65, 66):
        assert await writer.read_version(KEY, number) == version(number)
    for number in (64, 1, 66):
        assert await reader.read_version(KEY, number) == version(number)
    assert await reader.read_current(KEY) == version(66)


def tiny(serial: int) -> bytes:
    """A valid state of a few dozen bytes: too short to be a zstd prefix."""
    return b'{"version":4,"serial":%d,"lineage":"l"}' % serial


@pytest_twisted.ensureDeferred
async def test_a_version_after_a_tiny_one_is_a_delta_against_the_snapshot(
        stores: list[PostgresStateStore], postgres_dsn: str) -> None:
    """A 38-byte state after a large one is a small delta on its chain; the
    versions after it cannot use 38 bytes as a base: they are deltas against
    the chain's snapshot, stored (never a 500) and read back byte for byte."""
    writer = stores[0]
    raws = [version(1), tiny(2), version(3), tiny(4), tiny(5)]
    for raw in raws:
        await writer.write_state(KEY, upload(raw), None, ADMIN)
    assert codecs(postgres_dsn) == [(1, "zstd", None), (2, "zstd-delta", 1),
                                    (3, "zstd-delta", 1), (4, "zstd-delta", 3),
                                    (5, "zstd-delta", 1)]
    for store in stores:
        for number, raw in enumerate(raws, start=1):
            assert await store.read_version(KEY, number) == raw


@pytest_twisted.ensureDeferred
async def test_a_read_of_the_current_version_lets_the_next_write_be_a_delta(
        stores: list[PostgresStateStore], postgres_dsn: str) -> None:
    """A process that has not written the state writes a full snapshot; once
    it has read the current version, its write is the next link of the
    chain it read (the read left the chain's ends in its cache)."""
    first, second = stores
    for serial in range(1, 4):
        await write(first, serial)
    await write(second, 4)
    assert codecs(postgres_dsn)[3] == (4, "zstd", None)
    assert await second.read_current(KEY) == version(4)
    await write(first, 5)
    assert codecs(postgres_dsn)[4] == (5, "zstd-delta", 3)
    assert await second.read_current(KEY) == version(5)
    await write(second, 6)
    assert codecs(postgres_dsn)[5] == (6, "zstd-delta", 5)
    for store in stores:
        for number in range(1, 7):
            assert await store.read_version(KEY, number) == version(number)


@pytest_twisted.ensureDeferred
async def test_a_read_decodes_only_the_links_after_a_version_it_holds(
        stores: list[PostgresStateStore]) -> None:
    """The chain a read selects stops at a delta whose base the process
    holds: after another process wrote two versions, a read fetches their
    two rows only, and afterwards the current version's own row only."""
    first, second = stores
    for serial in range(1, 4):
        await write(first, serial)
    await second.read_current(KEY)
    await write(second, 4)
    await write(second, 5)
    selected: list[int] = []
    payload_read = first._reads._payload_read

    async def counting(columns: Any) -> Any:
        selected.append(columns.serial)
        return await payload_read(columns)

    first._reads._payload_read = counting  # type: ignore[method-assign]
    assert await first.read_current(KEY) == version(5)
    assert selected == [4, 5]
    selected.clear()
    assert await first.read_current(KEY) == version(5)
    assert selected == [5]


@pytest_twisted.ensureDeferred
async def test_a_state_deleted_and_written_again_elsewhere_is_not_read_from_the_cache(
        stores: list[PostgresStateStore]) -> None:
    """The process that holds the bytes of version 2 of a state another
    process deleted and wrote again (its version 2 different bytes) reads
    the new bytes: the base's sha256 does not match what it holds."""
    first, second = stores
    for serial in (1, 2):
        await write(first, serial)
    await second.delete_state(KEY, None, ADMIN)
    for serial in (1, 2, 3):
        await write(second, serial, salt="again")
    assert await first.read_current(KEY) == version(3, salt="again")
    assert await first.read_version(KEY, 2) == version(2, salt="again")


@pytest_twisted.ensureDeferred
async def test_a_damaged_link_fails_the_reads_through_it_and_only_those(
        postgres_dsn: str) -> None:
    """A link whose payload was altered: reading any version after it, from
    a process that holds none of the chain, is the typed 502; the versions
    before it still read."""
    async with running(postgres_dsn, encrypted=True) as writer:
        for serial in range(1, 7):
            await write(writer, serial)
    execute(postgres_dsn, "UPDATE state_versions SET payload = substring(payload, 1,"
                          " octet_length(payload) - 1) || '\\x00'::bytea WHERE number = 4")
    async with running(postgres_dsn, encrypted=True) as reader:
        for number in (4, 5, 6):
            error = await failure_of(reader.read_version(KEY, number), StoredVersionUnreadable)
            assert error.status == 502
        await failure_of(reader.read_current(KEY), StoredVersionUnreadable)
        for number in (1, 2, 3):
            assert await reader.read_version(KEY, number) == version(number)


@pytest_twisted.ensureDeferred
async def test_a_write_whose_base_was_purged_elsewhere_is_a_full_snapshot(
        stores: list[PostgresStateStore], postgres_dsn: str) -> None:
    """The base a process holds was purged by another process: the database
    refuses the delta (kl_write_state's 'no base') and the write is stored
    as a full snapshot, in the same call."""
    first, second = stores
    for serial in range(1, 4):
        await write(first, serial)
    assert await second.read_current(KEY) == version(3)
    await write(first, 4)
    await first.purge_version(KEY, 3, "leak", ADMIN)
    await write(second, 5)
    assert codecs(postgres_dsn)[2:] == [(3, "pruned", None), (4, "zstd", None),
                                        (5, "zstd", None)]
    for store in stores:
        assert await store.read_current(KEY) == version(5)
        assert await store.read_version(KEY, 4) == version(4)


@pytest.mark.parametrize("database_at_schema", [17], indirect=True)
@pytest_twisted.ensureDeferred
async def test_a_database_at_schema_17_takes_chains_once_upgraded(
        database_at_schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before schema 18 the database accepts a delta only against a full
    snapshot: a chain link comes back 'no base' and is written as a
    snapshot.  Upgraded, the history written before reads back and the
    next writes are links of a chain."""
    dsn = database_at_schema
    as_kilolock_of(monkeypatch, 17)
    async with running(dsn) as old:
        for serial in range(1, 5):
            await write(old, serial)
    monkeypatch.undo()
    assert codecs(dsn) == [(1, "zstd", None), (2, "zstd-delta", 1), (3, "zstd", None),
                           (4, "zstd-delta", 3)]
    assert query(dsn, "SELECT count(*) FROM pg_constraint WHERE conname = 'state_versions_base'"
                      ) == [(1,)]
    upgrade_schema(dsn)
    # The base's key and index went: a delta's base is checked by the write.
    assert query(dsn, "SELECT count(*) FROM pg_constraint WHERE conname = 'state_versions_base'"
                      ) == [(0,)]
    assert query(dsn, "SELECT to_regclass('state_versions_base') IS NULL") == [(True,)]
    async with running(dsn) as store:
        assert await store.read_current(KEY) == version(4)
        for serial in range(5, 8):
            await write(store, serial)
        for number in range(1, 8):
            assert await store.read_version(KEY, number) == version(number)
    assert codecs(dsn)[4:] == [(5, "zstd-delta", 4), (6, "zstd-delta", 5),
                               (7, "zstd-delta", 6)]


@pytest_twisted.ensureDeferred
async def test_a_base_number_that_loops_is_a_typed_error(
        stores: list[PostgresStateStore], postgres_dsn: str) -> None:
    """A row whose base_number was altered to name a later version (a loop
    back through the chain) fails the read with the typed 502: the walk
    follows only earlier versions."""
    writer, reader = stores
    for serial in range(1, 6):
        await write(writer, serial)
    execute(postgres_dsn, "UPDATE state_versions SET base_number = 5 WHERE number = 3")
    error = await failure_of(reader.read_version(KEY, 5), StoredVersionUnreadable)
    assert error.status == 502
    assert await reader.read_version(KEY, 2) == version(2)
